package main

/*
#include "nccl.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// tgroup is the group state of one C thread.
type tgroup struct {
	depth int
	g     *ncclgo.Group
	inits []pendingInit
}

type pendingInit struct {
	c     *comm
	start func()
}

var (
	groupsMu sync.Mutex
	groups   = map[uint64]*tgroup{} // by threadID
	// nGroups is len(groups), kept apart so that a call finds without a
	// lock that no thread has a group open (the common case).
	nGroups atomic.Int64
)

// threadGroup returns the calling thread's open group, nil if none (and
// create is false). The goroutine of a cgo callback is locked to the
// calling C thread, so the thread is the same for the whole call.
func threadGroup(create bool) *tgroup {
	if !create && nGroups.Load() == 0 {
		return nil
	}
	tid := threadID()
	groupsMu.Lock()
	defer groupsMu.Unlock()
	g := groups[tid]
	if g == nil && create {
		g = &tgroup{g: ncclgo.NewGroup()}
		groups[tid] = g
		nGroups.Store(int64(len(groups)))
	}
	return g
}

func endThreadGroup() {
	groupsMu.Lock()
	delete(groups, threadID())
	nGroups.Store(int64(len(groups)))
	groupsMu.Unlock()
}

//export ncclGroupStart
func ncclGroupStart() (res result) {
	defer guard("GroupStart", &res)
	threadGroup(true).depth++
	return C.ncclSuccess
}

//export ncclGroupEnd
func ncclGroupEnd() (res result) {
	defer guard("GroupEnd", &res)
	const op = "GroupEnd"
	tg := threadGroup(false)
	if tg == nil {
		return fail(op, fmt.Errorf("%w: ncclGroupEnd without ncclGroupStart on this thread", ncclgo.ErrInvalidUsage))
	}
	if tg.depth--; tg.depth > 0 {
		return C.ncclSuccess
	}
	endThreadGroup()
	// Inits: all ranks at once (they wait for each other).
	for _, p := range tg.inits {
		p.start()
	}
	res, inProgress := result(C.ncclSuccess), false
	for _, p := range tg.inits {
		switch r := p.c.wait(p.c.op); {
		case r == C.ncclInProgress:
			inProgress = true
		case r != C.ncclSuccess && res == C.ncclSuccess:
			res = r
		}
	}
	if r := keepContext(func() result { return fail(op, tg.g.End()) }); r != C.ncclSuccess && res == C.ncclSuccess {
		res = r
	}
	if res == C.ncclSuccess && inProgress {
		res = C.ncclInProgress
	}
	return res
}

//export ncclGroupSimulateEnd
func ncclGroupSimulateEnd(info *C.ncclSimInfo_t) (res result) {
	defer guard("GroupSimulateEnd", &res)
	const op = "GroupSimulateEnd"
	if info == nil {
		return argError(op, "simInfo", "NULL", "a pointer to an ncclSimInfo_t from NCCL_SIM_INFO_INITIALIZER")
	}
	return notImplemented(op, "simulating a group")
}

// call is one collective or point-to-point call, converted: the group it
// joins (nil outside a group: it runs at once, through the Comm method),
// its communicator and stream, and its count and type.
type call struct {
	group  *ncclgo.Group
	comm   *ncclgo.Comm
	stream *cuda.Stream
	n      int
	t      ncclgo.DataType
}

// collective runs one call of count elements of dt (checked here first):
// add queues it into the thread's open group, or, outside a group, runs it
// at once (k.group is nil then), keeping the thread's current context
// unless sc says the C entry keeps it (scope.c).
func collective(op string, sc C.int, h C.ncclComm_t, stream unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, add func(call) error) result {
	n, t, r := args(op, count, dt)
	if r != C.ncclSuccess {
		return r
	}
	c, gc, r := lookupReady(op, h)
	if r != C.ncclSuccess {
		return r
	}
	k := call{comm: gc, stream: c.wrap(uintptr(stream)), n: n, t: t}
	if tg := threadGroup(false); tg != nil {
		k.group = tg.g
		return fail(op, add(k))
	}
	if sc != 0 {
		return fail(op, add(k))
	}
	return keepContextOf(gc.Context(), func() result { return fail(op, add(k)) })
}

// wrap returns the caller's stream h of c: the one of c's latest call when
// it is the same, so that a stream is made once per stream, not per call.
func (c *comm) wrap(h uintptr) *cuda.Stream {
	if s := c.stream.Load(); s != nil && s.Handle() == h {
		return s
	}
	s := cuda.WrapStream(c.cctx, h)
	c.stream.Store(s)
	return s
}

func ptr(p unsafe.Pointer) cuda.DevicePtr { return cuda.DevicePtr(uintptr(p)) }

// args converts the count, type and op of a call.
func args(op string, count C.size_t, dt C.ncclDataType_t) (int, ncclgo.DataType, result) {
	n, r := countArg(op, "count", count)
	if r != C.ncclSuccess {
		return 0, 0, r
	}
	if uint32(dt) >= C.ncclNumTypes {
		return 0, 0, argError(op, "datatype", int32(dt), "ncclInt8 .. ncclFloat8e5m2 (0..11)")
	}
	return n, ncclgo.DataType(dt), C.ncclSuccess
}

func redOp(o C.ncclRedOp_t) ncclgo.RedOp { return ncclgo.RedOp(int32(o)) }

//export capiAllReduce
func capiAllReduce(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, o C.ncclRedOp_t, h C.ncclComm_t, stream unsafe.Pointer, sc C.int) (res result) {
	defer guard("AllReduce", &res)
	return collective("AllReduce", sc, h, stream, count, dt, func(k call) error {
		if k.group == nil {
			return k.comm.AllReduce(ptr(send), ptr(recv), k.n, k.t, redOp(o), k.stream)
		}
		return k.group.AllReduce(k.comm, ptr(send), ptr(recv), k.n, k.t, redOp(o), k.stream)
	})
}

//export capiReduce
func capiReduce(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, o C.ncclRedOp_t, root C.int, h C.ncclComm_t, stream unsafe.Pointer, sc C.int) (res result) {
	defer guard("Reduce", &res)
	return collective("Reduce", sc, h, stream, count, dt, func(k call) error {
		if k.group == nil {
			return k.comm.Reduce(ptr(send), ptr(recv), k.n, k.t, redOp(o), int(root), k.stream)
		}
		return k.group.Reduce(k.comm, ptr(send), ptr(recv), k.n, k.t, redOp(o), int(root), k.stream)
	})
}

//export capiReduceScatter
func capiReduceScatter(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, o C.ncclRedOp_t, h C.ncclComm_t, stream unsafe.Pointer, sc C.int) (res result) {
	defer guard("ReduceScatter", &res)
	return collective("ReduceScatter", sc, h, stream, count, dt, func(k call) error {
		if k.group == nil {
			return k.comm.ReduceScatter(ptr(send), ptr(recv), k.n, k.t, redOp(o), k.stream)
		}
		return k.group.ReduceScatter(k.comm, ptr(send), ptr(recv), k.n, k.t, redOp(o), k.stream)
	})
}

//export capiAllGather
func capiAllGather(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, h C.ncclComm_t, stream unsafe.Pointer, sc C.int) (res result) {
	defer guard("AllGather", &res)
	return collective("AllGather", sc, h, stream, count, dt, func(k call) error {
		if k.group == nil {
			return k.comm.AllGather(ptr(send), ptr(recv), k.n, k.t, k.stream)
		}
		return k.group.AllGather(k.comm, ptr(send), ptr(recv), k.n, k.t, k.stream)
	})
}

//export capiBroadcast
func capiBroadcast(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, stream unsafe.Pointer, sc C.int) (res result) {
	defer guard("Broadcast", &res)
	return collective("Broadcast", sc, h, stream, count, dt, func(k call) error {
		if k.group == nil {
			return k.comm.Broadcast(ptr(send), ptr(recv), k.n, k.t, int(root), k.stream)
		}
		return k.group.Broadcast(k.comm, ptr(send), ptr(recv), k.n, k.t, int(root), k.stream)
	})
}

//export capiBcast
func capiBcast(buf unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, stream unsafe.Pointer, sc C.int) (res result) {
	defer guard("Bcast", &res)
	return capiBroadcast(buf, buf, count, dt, root, h, stream, sc)
}

//export capiAlltoAll
func capiAlltoAll(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, h C.ncclComm_t, stream unsafe.Pointer, sc C.int) (res result) {
	defer guard("AlltoAll", &res)
	return collective("AlltoAll", sc, h, stream, count, dt, func(k call) error {
		if k.group == nil {
			return k.comm.AllToAll(ptr(send), ptr(recv), k.n, k.t, k.stream)
		}
		return k.group.AllToAll(k.comm, ptr(send), ptr(recv), k.n, k.t, k.stream)
	})
}

//export capiGather
func capiGather(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, stream unsafe.Pointer, sc C.int) (res result) {
	defer guard("Gather", &res)
	return collective("Gather", sc, h, stream, count, dt, func(k call) error {
		if k.group == nil {
			return k.comm.Gather(ptr(send), ptr(recv), k.n, k.t, int(root), k.stream)
		}
		return k.group.Gather(k.comm, ptr(send), ptr(recv), k.n, k.t, int(root), k.stream)
	})
}

//export capiScatter
func capiScatter(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, stream unsafe.Pointer, sc C.int) (res result) {
	defer guard("Scatter", &res)
	return collective("Scatter", sc, h, stream, count, dt, func(k call) error {
		if k.group == nil {
			return k.comm.Scatter(ptr(send), ptr(recv), k.n, k.t, int(root), k.stream)
		}
		return k.group.Scatter(k.comm, ptr(send), ptr(recv), k.n, k.t, int(root), k.stream)
	})
}

//export capiSend
func capiSend(send unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, peer C.int, h C.ncclComm_t, stream unsafe.Pointer, sc C.int) (res result) {
	defer guard("Send", &res)
	return collective("Send", sc, h, stream, count, dt, func(k call) error {
		if k.group == nil {
			return k.comm.Send(ptr(send), k.n, k.t, int(peer), k.stream)
		}
		return k.group.Send(k.comm, ptr(send), k.n, k.t, int(peer), k.stream)
	})
}

//export capiRecv
func capiRecv(recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, peer C.int, h C.ncclComm_t, stream unsafe.Pointer, sc C.int) (res result) {
	defer guard("Recv", &res)
	return collective("Recv", sc, h, stream, count, dt, func(k call) error {
		if k.group == nil {
			return k.comm.Recv(ptr(recv), k.n, k.t, int(peer), k.stream)
		}
		return k.group.Recv(k.comm, ptr(recv), k.n, k.t, int(peer), k.stream)
	})
}

//export ncclRedOpCreatePreMulSum
func ncclRedOpCreatePreMulSum(out *C.ncclRedOp_t, scalar unsafe.Pointer, dt C.ncclDataType_t, residence C.ncclScalarResidence_t, h C.ncclComm_t) (res result) {
	defer guard("RedOpCreatePreMulSum", &res)
	const op = "RedOpCreatePreMulSum"
	if out == nil {
		return argError(op, "op", "NULL", "a pointer to an ncclRedOp_t")
	}
	if scalar == nil {
		return argError(op, "scalar", "NULL", "a pointer to one element of datatype")
	}
	if _, _, r := args(op, 0, dt); r != C.ncclSuccess {
		return r
	}
	_, gc, r := lookupReady(op, h)
	if r != C.ncclSuccess {
		return r
	}
	t := ncclgo.DataType(dt)
	var v any
	switch residence {
	case C.ncclScalarDevice:
		v = ptr(scalar)
	case C.ncclScalarHostImmediate:
		v = hostScalar(scalar, t)
	default:
		return argError(op, "residence", int32(residence), "ncclScalarDevice (0) or ncclScalarHostImmediate (1)")
	}
	o, err := gc.NewPreMulSum(v, t)
	if err != nil {
		return fail(op, err)
	}
	*out = C.ncclRedOp_t(o)
	return C.ncclSuccess
}

//export ncclRedOpDestroy
func ncclRedOpDestroy(o C.ncclRedOp_t, h C.ncclComm_t) (res result) {
	defer guard("RedOpDestroy", &res)
	const op = "RedOpDestroy"
	_, gc, r := lookupReady(op, h)
	if r != C.ncclSuccess {
		return r
	}
	if int32(o) >= 0 && int32(o) < C.ncclNumOps {
		return argError(op, "op", int32(o), "an op from ncclRedOpCreatePreMulSum (built-in ops are not destroyed)")
	}
	return fail(op, gc.DestroyRedOp(redOp(o)))
}
