package ncclgo

import (
	"fmt"
	"math"

	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
)

// checker validates the arguments of one call.
type checker struct {
	op  string
	c   *Comm
	err error
}

func (k *checker) fail(arg string, v any, want string) {
	if k.err == nil {
		k.err = &ArgError{Op: k.op, Arg: arg, Value: v, Want: want}
	}
}

func (k *checker) count(arg string, n int, dt DataType, mult int) {
	if n < 0 {
		k.fail(arg, n, "a count >= 0")
		return
	}
	if es := dt.Size(); es > 0 && n > 0 && uint64(n) > uint64(math.MaxInt64)/uint64(es)/uint64(max(mult, 1)) {
		k.fail(arg, n, fmt.Sprintf("a count whose bytes (× %d ranks) fit in int64", mult))
	}
}

func (k *checker) dtype(dt DataType) {
	if !dt.valid() {
		k.fail("datatype", int(dt), validDataTypes())
	}
}

func (k *checker) buf(arg string, p cuda.DevicePtr, n int) {
	if p == 0 && n > 0 {
		k.fail(arg, "0 (null)", "a device address (the count is not 0)")
	}
}

func (k *checker) rank(arg string, r int) {
	if r < 0 || r >= k.c.nRanks {
		k.fail(arg, r, fmt.Sprintf("a rank in 0..%d", k.c.nRanks-1))
	}
}

func (k *checker) stream(s *cuda.Stream) {
	switch {
	case s == nil:
		k.fail("stream", "nil", "a stream of device "+fmt.Sprint(k.c.device))
	case s.Context() == nil:
		k.fail("stream", "a stream without context", "a stream of device "+fmt.Sprint(k.c.device))
	case int(s.Context().Device()) != k.c.device:
		k.fail("stream", fmt.Sprintf("a stream of device %d", int(s.Context().Device())), fmt.Sprintf("a stream of rank %d's device %d", k.c.rank, k.c.device))
	case k.c.cctx != nil && s.Context().Handle() != k.c.cctx.Handle():
		k.fail("stream", fmt.Sprintf("a stream of context %#x", s.Context().Handle()), fmt.Sprintf("a stream of rank %d's context %#x (Options.Contexts)", k.c.rank, k.c.cctx.Handle()))
	}
}

// redOp resolves a reduction op for dt.
func (k *checker) redOp(op RedOp, dt DataType) devOp {
	if k.err != nil {
		return devOp{}
	}
	switch op {
	case Sum:
		return devOp{op: kspace.Sum}
	case Prod:
		return devOp{op: kspace.Prod}
	case Max, Min:
		// Bit 0 picks min; bit 63 asks for a signed comparison, since
		// signed MinMax runs the unsigned function (kspace.Primary;
		// devicesrc/ng_reduce.h ngOpMinMax).
		var arg uint64
		if op == Min {
			arg = 1
		}
		if dt.kspace().IsSigned() {
			arg |= 1 << 63
		}
		return devOp{op: kspace.MinMax, arg: arg}
	case Avg:
		if dt.IsFloat() {
			return devOp{op: kspace.PreMulSum, arg: scalarBits(1/float64(k.c.nRanks), dt)}
		}
		// The device divides in the element type, so the divisor must fit it.
		if dt.Size() == 1 && k.c.nRanks > math.MaxInt8 && (dt == Int8 || k.c.nRanks > math.MaxUint8) {
			k.fail("op", "Avg", fmt.Sprintf("Sum, or a wider type: Avg of %s over %d ranks needs a divisor %s cannot hold", dt, k.c.nRanks, dt))
			return devOp{}
		}
		// Bit 63: divide as signed (signed types run the unsigned function).
		arg := uint64(k.c.nRanks)
		if dt.kspace().IsSigned() {
			arg |= 1 << 63
		}
		return devOp{op: kspace.SumPostDiv, arg: arg}
	}
	k.c.mu.Lock()
	d, ok := k.c.userOps[op]
	udt := k.c.userTypes[op]
	k.c.mu.Unlock()
	if !ok {
		k.fail("op", op, builtinRedOps()+" or a PreMulSum op of this communicator (Comm.NewPreMulSum)")
		return devOp{}
	}
	if udt != dt {
		k.fail("op", op, fmt.Sprintf("an op made for %s (it was made for %s)", dt, udt))
	}
	return d
}

// begin starts validating a call of c. The checker is a value, so that a
// call's validation allocates nothing unless it fails.
func begin(op string, c *Comm) (checker, error) {
	if err := c.usable(op); err != nil {
		return checker{}, err
	}
	return checker{op: op, c: c}, nil
}

// NewPreMulSum creates a reduction op that multiplies every input by
// scalar before summing (NCCL's ncclRedOpCreatePreMulSum), for data type
// dt. scalar is a Go number (converted to dt) or a cuda.DevicePtr to one
// element of dt in device memory, read when the kernel runs. The op belongs
// to c; free it with DestroyRedOp.
func (c *Comm) NewPreMulSum(scalar any, dt DataType) (RedOp, error) {
	k, err := begin("NewPreMulSum", c)
	if err != nil {
		return 0, err
	}
	k.dtype(dt)
	var d devOp
	switch v := scalar.(type) {
	case cuda.DevicePtr:
		if v == 0 {
			k.fail("scalar", "0 (null)", "a device address or a Go number")
		}
		d = devOp{op: kspace.PreMulSum, arg: uint64(v), isPtr: true}
	default:
		f, ok := toFloat64(scalar)
		if !ok {
			k.fail("scalar", fmt.Sprintf("%T", scalar), "a Go number or a cuda.DevicePtr")
		}
		d = devOp{op: kspace.PreMulSum, arg: scalarBits(f, dt)}
	}
	if k.err != nil {
		return 0, k.err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	op := c.nextOp
	c.nextOp++
	c.userOps[op] = d
	c.userTypes[op] = dt
	return op, nil
}

// DestroyRedOp frees an op from NewPreMulSum.
func (c *Comm) DestroyRedOp(op RedOp) error {
	if err := c.usable("DestroyRedOp"); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.userOps[op]; !ok {
		return &ArgError{Op: "DestroyRedOp", Arg: "op", Value: op, Want: "a PreMulSum op of this communicator"}
	}
	delete(c.userOps, op)
	delete(c.userTypes, op)
	return nil
}

// collTask is the task of a collective over count elements of dt (the
// whole buffer, or one rank's chunk for AllGather and ReduceScatter).
func collTask(coll kspace.Coll, send, recv cuda.DevicePtr, count int, dt DataType, d devOp, root int) enqueue.Task {
	return enqueue.Task{Coll: coll, Send: uint64(send), Recv: uint64(recv), Bytes: uint64(count) * uint64(dt.Size()), Type: dt.kspace(),
		Op: d.op, OpArg: d.arg, OpArgPtr: d.isPtr, Root: root}
}

// reduceTask validates a reducing collective. count is its count argument:
// for ReduceScatter one rank's block, whose send holds nRanks of them
// (kspace.Coll.Blocks).
func reduceTask(op string, coll kspace.Coll, c *Comm, send, recv cuda.DevicePtr, count int, dt DataType, rop RedOp, root int, stream *cuda.Stream) (enqueue.Task, error) {
	k, err := begin(op, c)
	if err != nil {
		return enqueue.Task{}, err
	}
	k.count("count", count, dt, max(coll.Blocks(c.nRanks)))
	k.dtype(dt)
	k.buf("sendbuff", send, count)
	if coll != kspace.Reduce || c.rank == root {
		k.buf("recvbuff", recv, count)
	}
	if coll == kspace.Reduce {
		k.rank("root", root)
	}
	d := k.redOp(rop, dt)
	k.stream(stream)
	if k.err != nil {
		return enqueue.Task{}, k.err
	}
	return collTask(coll, send, recv, count, dt, d, root), nil
}

// AllReduce queues an all-reduce of count elements of dt from send into recv
// (in place when equal) on every rank of c.
func (g *Group) AllReduce(c *Comm, send, recv cuda.DevicePtr, count int, dt DataType, op RedOp, stream *cuda.Stream) error {
	t, err := reduceTask("AllReduce", kspace.AllReduce, c, send, recv, count, dt, op, 0, stream)
	if err != nil {
		return err
	}
	return g.add("AllReduce", c, stream, t)
}

// Reduce queues a reduction of count elements into root's recv.
func (g *Group) Reduce(c *Comm, send, recv cuda.DevicePtr, count int, dt DataType, op RedOp, root int, stream *cuda.Stream) error {
	t, err := reduceTask("Reduce", kspace.Reduce, c, send, recv, count, dt, op, root, stream)
	if err != nil {
		return err
	}
	return g.add("Reduce", c, stream, t)
}

// ReduceScatter queues a reduce-scatter: send holds nRanks × recvCount
// elements, recv gets this rank's reduced block of recvCount.
func (g *Group) ReduceScatter(c *Comm, send, recv cuda.DevicePtr, recvCount int, dt DataType, op RedOp, stream *cuda.Stream) error {
	t, err := reduceTask("ReduceScatter", kspace.ReduceScatter, c, send, recv, recvCount, dt, op, 0, stream)
	if err != nil {
		return err
	}
	return g.add("ReduceScatter", c, stream, t)
}

// checkEvery validates an AllGather or an AllToAll: every rank's send and
// recv hold count elements per rank (countArg names count).
func checkEvery(op, countArg string, c *Comm, send, recv cuda.DevicePtr, count int, dt DataType, stream *cuda.Stream) error {
	k, err := begin(op, c)
	if err != nil {
		return err
	}
	k.count(countArg, count, dt, c.nRanks)
	k.dtype(dt)
	k.buf("sendbuff", send, count)
	k.buf("recvbuff", recv, count)
	k.stream(stream)
	return k.err
}

// AllGather queues an all-gather: every rank's sendCount elements land in
// recv (nRanks × sendCount) at rank × sendCount.
func (g *Group) AllGather(c *Comm, send, recv cuda.DevicePtr, sendCount int, dt DataType, stream *cuda.Stream) error {
	if err := checkEvery("AllGather", "sendcount", c, send, recv, sendCount, dt, stream); err != nil {
		return err
	}
	return g.add("AllGather", c, stream, collTask(kspace.AllGather, send, recv, sendCount, dt, devOp{}, 0))
}

// Broadcast queues a broadcast of count elements from root's send to every
// rank's recv.
func (g *Group) Broadcast(c *Comm, send, recv cuda.DevicePtr, count int, dt DataType, root int, stream *cuda.Stream) error {
	t, err := broadcastTask(c, send, recv, count, dt, root, stream)
	if err != nil {
		return err
	}
	return g.add("Broadcast", c, stream, t)
}

// broadcastTask validates a Broadcast.
func broadcastTask(c *Comm, send, recv cuda.DevicePtr, count int, dt DataType, root int, stream *cuda.Stream) (enqueue.Task, error) {
	k, err := begin("Broadcast", c)
	if err != nil {
		return enqueue.Task{}, err
	}
	k.count("count", count, dt, 1)
	k.dtype(dt)
	k.rank("root", root)
	if k.err == nil && c.rank == root {
		k.buf("sendbuff", send, count)
	}
	k.buf("recvbuff", recv, count)
	k.stream(stream)
	if k.err != nil {
		return enqueue.Task{}, k.err
	}
	return collTask(kspace.Broadcast, send, recv, count, dt, devOp{}, root), nil
}

// p2pTask is the task of a send (or receive) of count elements of dt.
func p2pTask(send bool, buf cuda.DevicePtr, count int, dt DataType, peer int) enqueue.Task {
	t := enqueue.Task{Coll: kspace.SendRecv, Bytes: uint64(count) * uint64(dt.Size()), Peer: peer, IsSend: send, Type: dt.kspace(), Root: -1}
	if send {
		t.Send = uint64(buf)
	} else {
		t.Recv = uint64(buf)
	}
	return t
}

// blockTasks are one send (or receive) per rank p of the p-th block of
// count elements of buf: the per-peer half of AllToAll, Gather and Scatter.
func blockTasks(send bool, buf cuda.DevicePtr, count int, dt DataType, nRanks int) []enqueue.Task {
	bs := cuda.DevicePtr(count * dt.Size())
	ts := make([]enqueue.Task, 0, nRanks)
	for p := range nRanks {
		ts = append(ts, p2pTask(send, buf+cuda.DevicePtr(p)*bs, count, dt, p))
	}
	return ts
}

// checkP2P validates a Send or a Recv and returns its task.
func checkP2P(op string, send bool, c *Comm, buf cuda.DevicePtr, count int, dt DataType, peer int, stream *cuda.Stream) (enqueue.Task, error) {
	k, err := begin(op, c)
	if err != nil {
		return enqueue.Task{}, err
	}
	k.count("count", count, dt, 1)
	k.dtype(dt)
	k.buf("buff", buf, count)
	k.rank("peer", peer)
	k.stream(stream)
	if k.err != nil {
		return enqueue.Task{}, k.err
	}
	return p2pTask(send, buf, count, dt, peer), nil
}

func (g *Group) p2p(op string, send bool, c *Comm, buf cuda.DevicePtr, count int, dt DataType, peer int, stream *cuda.Stream) error {
	t, err := checkP2P(op, send, c, buf, count, dt, peer, stream)
	if err != nil {
		return err
	}
	return g.add(op, c, stream, t)
}

// Send queues sending count elements of buf to peer, which must post a
// matching Recv.
func (g *Group) Send(c *Comm, buf cuda.DevicePtr, count int, dt DataType, peer int, stream *cuda.Stream) error {
	return g.p2p("Send", true, c, buf, count, dt, peer, stream)
}

// Recv queues receiving count elements from peer into buf.
func (g *Group) Recv(c *Comm, buf cuda.DevicePtr, count int, dt DataType, peer int, stream *cuda.Stream) error {
	return g.p2p("Recv", false, c, buf, count, dt, peer, stream)
}

// AllToAll queues an all-to-all of count elements per pair: block p of
// send goes to rank p, block p of recv comes from rank p.
func (g *Group) AllToAll(c *Comm, send, recv cuda.DevicePtr, count int, dt DataType, stream *cuda.Stream) error {
	if err := checkEvery("AllToAll", "count", c, send, recv, count, dt, stream); err != nil {
		return err
	}
	sends, recvs := blockTasks(true, send, count, dt, c.nRanks), blockTasks(false, recv, count, dt, c.nRanks)
	ts := make([]enqueue.Task, 0, 2*c.nRanks)
	for p := range c.nRanks {
		ts = append(ts, sends[p], recvs[p])
	}
	return g.add("AllToAll", c, stream, ts...)
}

// checkRooted validates a Gather or a Scatter: rootBuf ("recvbuff" of
// Gather, "sendbuff" of Scatter) holds nRanks blocks at the root and is
// checked only there; the other buffer is every rank's own block.
func checkRooted(op string, c *Comm, send, recv cuda.DevicePtr, count int, dt DataType, root int, stream *cuda.Stream, rootBuf string) error {
	k, err := begin(op, c)
	if err != nil {
		return err
	}
	k.count("count", count, dt, c.nRanks)
	k.dtype(dt)
	k.rank("root", root)
	for _, b := range []struct {
		arg string
		p   cuda.DevicePtr
	}{{"sendbuff", send}, {"recvbuff", recv}} {
		if b.arg != rootBuf || k.err == nil && c.rank == root {
			k.buf(b.arg, b.p, count)
		}
	}
	k.stream(stream)
	return k.err
}

// Gather queues a gather of every rank's count elements into root's recv
// (nRanks × count, by rank).
func (g *Group) Gather(c *Comm, send, recv cuda.DevicePtr, count int, dt DataType, root int, stream *cuda.Stream) error {
	if err := checkRooted("Gather", c, send, recv, count, dt, root, stream, "recvbuff"); err != nil {
		return err
	}
	ts := []enqueue.Task{p2pTask(true, send, count, dt, root)}
	if c.rank == root {
		ts = append(ts, blockTasks(false, recv, count, dt, c.nRanks)...)
	}
	return g.add("Gather", c, stream, ts...)
}

// Scatter queues a scatter of root's send (nRanks × count, by rank): every
// rank receives its block into recv.
func (g *Group) Scatter(c *Comm, send, recv cuda.DevicePtr, count int, dt DataType, root int, stream *cuda.Stream) error {
	if err := checkRooted("Scatter", c, send, recv, count, dt, root, stream, "sendbuff"); err != nil {
		return err
	}
	var ts []enqueue.Task
	if c.rank == root {
		ts = blockTasks(true, send, count, dt, c.nRanks)
	}
	ts = append(ts, p2pTask(false, recv, count, dt, root))
	return g.add("Scatter", c, stream, ts...)
}

// The Comm methods below run one call outside any group: they validate it
// as the Group method does, then plan and launch it as a group of that one
// call would at End (runNow), without making the group.

// AllReduce runs an all-reduce now (see Group.AllReduce): asynchronous on
// stream.
func (c *Comm) AllReduce(send, recv cuda.DevicePtr, count int, dt DataType, op RedOp, stream *cuda.Stream) error {
	t, err := reduceTask("AllReduce", kspace.AllReduce, c, send, recv, count, dt, op, 0, stream)
	if err != nil {
		return err
	}
	return c.runNow(stream, t)
}

// Reduce runs a reduction into root now (see Group.Reduce).
func (c *Comm) Reduce(send, recv cuda.DevicePtr, count int, dt DataType, op RedOp, root int, stream *cuda.Stream) error {
	t, err := reduceTask("Reduce", kspace.Reduce, c, send, recv, count, dt, op, root, stream)
	if err != nil {
		return err
	}
	return c.runNow(stream, t)
}

// ReduceScatter runs a reduce-scatter now (see Group.ReduceScatter).
func (c *Comm) ReduceScatter(send, recv cuda.DevicePtr, recvCount int, dt DataType, op RedOp, stream *cuda.Stream) error {
	t, err := reduceTask("ReduceScatter", kspace.ReduceScatter, c, send, recv, recvCount, dt, op, 0, stream)
	if err != nil {
		return err
	}
	return c.runNow(stream, t)
}

// AllGather runs an all-gather now (see Group.AllGather).
func (c *Comm) AllGather(send, recv cuda.DevicePtr, sendCount int, dt DataType, stream *cuda.Stream) error {
	if err := checkEvery("AllGather", "sendcount", c, send, recv, sendCount, dt, stream); err != nil {
		return err
	}
	return c.runNow(stream, collTask(kspace.AllGather, send, recv, sendCount, dt, devOp{}, 0))
}

// Broadcast runs a broadcast from root now (see Group.Broadcast).
func (c *Comm) Broadcast(send, recv cuda.DevicePtr, count int, dt DataType, root int, stream *cuda.Stream) error {
	t, err := broadcastTask(c, send, recv, count, dt, root, stream)
	if err != nil {
		return err
	}
	return c.runNow(stream, t)
}

// Send sends now (see Group.Send). Outside a group a send to another rank
// only completes once that rank's matching Recv runs.
func (c *Comm) Send(buf cuda.DevicePtr, count int, dt DataType, peer int, stream *cuda.Stream) error {
	t, err := checkP2P("Send", true, c, buf, count, dt, peer, stream)
	if err != nil {
		return err
	}
	return c.runNow(stream, t)
}

// Recv receives now (see Group.Recv).
func (c *Comm) Recv(buf cuda.DevicePtr, count int, dt DataType, peer int, stream *cuda.Stream) error {
	t, err := checkP2P("Recv", false, c, buf, count, dt, peer, stream)
	if err != nil {
		return err
	}
	return c.runNow(stream, t)
}

// AllToAll runs an all-to-all now (see Group.AllToAll).
func (c *Comm) AllToAll(send, recv cuda.DevicePtr, count int, dt DataType, stream *cuda.Stream) error {
	return c.group("AllToAll", func(g *Group) error { return g.AllToAll(c, send, recv, count, dt, stream) })
}

// Gather runs a gather into root now (see Group.Gather).
func (c *Comm) Gather(send, recv cuda.DevicePtr, count int, dt DataType, root int, stream *cuda.Stream) error {
	return c.group("Gather", func(g *Group) error { return g.Gather(c, send, recv, count, dt, root, stream) })
}

// Scatter runs a scatter from root now (see Group.Scatter).
func (c *Comm) Scatter(send, recv cuda.DevicePtr, count int, dt DataType, root int, stream *cuda.Stream) error {
	return c.group("Scatter", func(g *Group) error { return g.Scatter(c, send, recv, count, dt, root, stream) })
}
