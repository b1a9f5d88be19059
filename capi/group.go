package main

/*
#include "nccl.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"syscall"
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
	groups   = map[int]*tgroup{} // by OS thread id
)

// threadGroup returns the calling thread's open group, nil if none (and
// create is false). The goroutine of a cgo callback is locked to the
// calling C thread, so the thread id is stable for the call.
func threadGroup(create bool) *tgroup {
	tid := syscall.Gettid()
	groupsMu.Lock()
	defer groupsMu.Unlock()
	g := groups[tid]
	if g == nil && create {
		g = &tgroup{g: ncclgo.NewGroup()}
		groups[tid] = g
	}
	return g
}

func endThreadGroup() {
	groupsMu.Lock()
	delete(groups, syscall.Gettid())
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
		switch r := p.c.wait("CommInitRank"); {
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

// enqueue runs one call: into the thread's open group, or on its own.
func enqueue(op string, h C.ncclComm_t, stream unsafe.Pointer, add func(g *ncclgo.Group, gc *ncclgo.Comm, s *cuda.Stream) error) result {
	c, r := lookup(op, h)
	if r != C.ncclSuccess {
		return r
	}
	gc, r := c.ready(op)
	if r != C.ncclSuccess {
		return r
	}
	s := cuda.WrapStream(c.cctx, uintptr(stream))
	if tg := threadGroup(false); tg != nil {
		return fail(op, add(tg.g, gc, s))
	}
	return keepContext(func() result {
		g := ncclgo.NewGroup()
		if err := add(g, gc, s); err != nil {
			g.Discard()
			return fail(op, err)
		}
		return fail(op, g.End())
	})
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

//export ncclAllReduce
func ncclAllReduce(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, o C.ncclRedOp_t, h C.ncclComm_t, stream unsafe.Pointer) (res result) {
	defer guard("AllReduce", &res)
	const op = "AllReduce"
	n, t, r := args(op, count, dt)
	if r != C.ncclSuccess {
		return r
	}
	return enqueue(op, h, stream, func(g *ncclgo.Group, gc *ncclgo.Comm, s *cuda.Stream) error {
		return g.AllReduce(gc, ptr(send), ptr(recv), n, t, redOp(o), s)
	})
}

//export ncclReduce
func ncclReduce(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, o C.ncclRedOp_t, root C.int, h C.ncclComm_t, stream unsafe.Pointer) (res result) {
	defer guard("Reduce", &res)
	const op = "Reduce"
	n, t, r := args(op, count, dt)
	if r != C.ncclSuccess {
		return r
	}
	return enqueue(op, h, stream, func(g *ncclgo.Group, gc *ncclgo.Comm, s *cuda.Stream) error {
		return g.Reduce(gc, ptr(send), ptr(recv), n, t, redOp(o), int(root), s)
	})
}

//export ncclReduceScatter
func ncclReduceScatter(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, o C.ncclRedOp_t, h C.ncclComm_t, stream unsafe.Pointer) (res result) {
	defer guard("ReduceScatter", &res)
	const op = "ReduceScatter"
	n, t, r := args(op, count, dt)
	if r != C.ncclSuccess {
		return r
	}
	return enqueue(op, h, stream, func(g *ncclgo.Group, gc *ncclgo.Comm, s *cuda.Stream) error {
		return g.ReduceScatter(gc, ptr(send), ptr(recv), n, t, redOp(o), s)
	})
}

//export ncclAllGather
func ncclAllGather(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, h C.ncclComm_t, stream unsafe.Pointer) (res result) {
	defer guard("AllGather", &res)
	const op = "AllGather"
	n, t, r := args(op, count, dt)
	if r != C.ncclSuccess {
		return r
	}
	return enqueue(op, h, stream, func(g *ncclgo.Group, gc *ncclgo.Comm, s *cuda.Stream) error {
		return g.AllGather(gc, ptr(send), ptr(recv), n, t, s)
	})
}

//export ncclBroadcast
func ncclBroadcast(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, stream unsafe.Pointer) (res result) {
	defer guard("Broadcast", &res)
	const op = "Broadcast"
	n, t, r := args(op, count, dt)
	if r != C.ncclSuccess {
		return r
	}
	return enqueue(op, h, stream, func(g *ncclgo.Group, gc *ncclgo.Comm, s *cuda.Stream) error {
		return g.Broadcast(gc, ptr(send), ptr(recv), n, t, int(root), s)
	})
}

//export ncclBcast
func ncclBcast(buf unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, stream unsafe.Pointer) (res result) {
	defer guard("Bcast", &res)
	return ncclBroadcast(buf, buf, count, dt, root, h, stream)
}

//export ncclAlltoAll
func ncclAlltoAll(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, h C.ncclComm_t, stream unsafe.Pointer) (res result) {
	defer guard("AlltoAll", &res)
	const op = "AlltoAll"
	n, t, r := args(op, count, dt)
	if r != C.ncclSuccess {
		return r
	}
	return enqueue(op, h, stream, func(g *ncclgo.Group, gc *ncclgo.Comm, s *cuda.Stream) error {
		return g.AllToAll(gc, ptr(send), ptr(recv), n, t, s)
	})
}

//export ncclGather
func ncclGather(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, stream unsafe.Pointer) (res result) {
	defer guard("Gather", &res)
	const op = "Gather"
	n, t, r := args(op, count, dt)
	if r != C.ncclSuccess {
		return r
	}
	return enqueue(op, h, stream, func(g *ncclgo.Group, gc *ncclgo.Comm, s *cuda.Stream) error {
		return g.Gather(gc, ptr(send), ptr(recv), n, t, int(root), s)
	})
}

//export ncclScatter
func ncclScatter(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, h C.ncclComm_t, stream unsafe.Pointer) (res result) {
	defer guard("Scatter", &res)
	const op = "Scatter"
	n, t, r := args(op, count, dt)
	if r != C.ncclSuccess {
		return r
	}
	return enqueue(op, h, stream, func(g *ncclgo.Group, gc *ncclgo.Comm, s *cuda.Stream) error {
		return g.Scatter(gc, ptr(send), ptr(recv), n, t, int(root), s)
	})
}

//export ncclSend
func ncclSend(send unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, peer C.int, h C.ncclComm_t, stream unsafe.Pointer) (res result) {
	defer guard("Send", &res)
	const op = "Send"
	n, t, r := args(op, count, dt)
	if r != C.ncclSuccess {
		return r
	}
	return enqueue(op, h, stream, func(g *ncclgo.Group, gc *ncclgo.Comm, s *cuda.Stream) error {
		return g.Send(gc, ptr(send), n, t, int(peer), s)
	})
}

//export ncclRecv
func ncclRecv(recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, peer C.int, h C.ncclComm_t, stream unsafe.Pointer) (res result) {
	defer guard("Recv", &res)
	const op = "Recv"
	n, t, r := args(op, count, dt)
	if r != C.ncclSuccess {
		return r
	}
	return enqueue(op, h, stream, func(g *ncclgo.Group, gc *ncclgo.Comm, s *cuda.Stream) error {
		return g.Recv(gc, ptr(recv), n, t, int(peer), s)
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
	c, r := lookup(op, h)
	if r != C.ncclSuccess {
		return r
	}
	gc, r := c.ready(op)
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
	c, r := lookup(op, h)
	if r != C.ncclSuccess {
		return r
	}
	gc, r := c.ready(op)
	if r != C.ncclSuccess {
		return r
	}
	if int32(o) >= 0 && int32(o) < C.ncclNumOps {
		return argError(op, "op", int32(o), "an op from ncclRedOpCreatePreMulSum (built-in ops are not destroyed)")
	}
	return fail(op, gc.DestroyRedOp(redOp(o)))
}
