package tests

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/internal/pattern"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// The calls a group may hold, beyond the kspace collectives.
const (
	kindColl = iota
	kindAllToAll
	kindGather
	kindScatter
	kindSendRecv
)

// call is one call that every rank of a communicator makes in one group.
// Its data comes from internal/pattern under seed: bytes unique to (seed,
// rank, index) for the data-moving calls, small non-periodic integers for
// the reductions.
type call struct {
	kind    int
	coll    kspace.Coll // kindColl
	ty      kspace.Type
	o       op
	count   int
	inPlace bool
	root    int
	shift   int  // kindSendRecv: rank r sends to r+shift
	mis     bool // misaligned buffers (offsetFor)
	seed    uint64
}

func (c call) String() string {
	name := map[int]string{kindAllToAll: "AllToAll", kindGather: "Gather", kindScatter: "Scatter", kindSendRecv: "SendRecv"}[c.kind]
	if c.kind == kindColl {
		name = c.coll.String()
	}
	s := fmt.Sprintf("%s %s count=%d", name, c.ty, c.count)
	if c.kind == kindColl && c.coll.HasRedOp() {
		s += " op=" + c.o.name
	}
	switch {
	case c.kind == kindSendRecv:
		s += fmt.Sprintf(" shift=%d", c.shift)
	case c.kind == kindGather || c.kind == kindScatter || c.kind == kindColl && (c.coll == kspace.Broadcast || c.coll == kspace.Reduce):
		s += fmt.Sprintf(" root=%d", c.root)
	}
	if c.inPlace {
		s += " in-place"
	}
	if c.mis {
		s += " misaligned"
	}
	return s
}

// patternOp maps a suite op onto the patterns' op and scalar.
func patternOp(o op) (pattern.Op, float64) {
	switch o.name {
	case "prod":
		return pattern.Prod, 1
	case "max":
		return pattern.Max, 1
	case "min":
		return pattern.Min, 1
	case "avg":
		return pattern.Avg, 1
	case "premulsum":
		return pattern.Sum, o.scalar
	}
	return pattern.Sum, 1
}

// output is what one call should leave at byte at of one rank's arena.
type output struct {
	at     int
	want   []byte
	ty     kspace.Type
	approx *pattern.Approx // nil: bit for bit; else the intervals of a float Avg
	what   string
}

// arena lays out the calls of a group in each rank's buffer, Guard bytes
// (at least) apart.
type arena struct{ end int }

func (a *arena) take(n int, mis uint64) int {
	at := (a.end+pattern.Guard+255)/256*256 + int(mis)
	a.end = at + n
	return at
}

// groupRun is one group, laid out and with its expected results.
type groupRun struct {
	calls  []call
	n      int
	before [][]byte   // per rank: the arena up to end before the group
	after  [][]byte   // per rank: what it must hold after
	outs   [][]output // per rank
	send   [][]int    // per call, per rank: byte offsets
	recv   [][]int
}

// plan lays out calls for n ranks and works out every expected byte.
func planGroup(calls []call, n int, seed uint64) (*groupRun, error) {
	g := &groupRun{calls: calls, n: n}
	var a arena
	for _, c := range calls {
		es := c.ty.Size()
		cb := c.count * es
		var mis uint64
		if c.mis {
			mis = offsetFor(c.ty)
		}
		sendB, recvB := cb, cb
		switch {
		case c.kind == kindColl && c.coll == kspace.AllGather:
			recvB = n * cb
		case c.kind == kindColl && c.coll == kspace.ReduceScatter:
			sendB = n * cb
		case c.kind == kindAllToAll:
			sendB, recvB = n*cb, n*cb
		case c.kind == kindGather:
			recvB = n * cb
		case c.kind == kindScatter:
			sendB = n * cb
		}
		s, r := make([]int, n), make([]int, n)
		if c.inPlace {
			at := a.take(max(sendB, recvB), mis)
			for k := range n {
				s[k], r[k] = at, at
				switch {
				case c.kind == kindColl && c.coll == kspace.AllGather:
					s[k] = at + k*cb
				case c.kind == kindColl && c.coll == kspace.ReduceScatter:
					r[k] = at + k*cb
				}
			}
		} else {
			sa := a.take(sendB, mis)
			ra := a.take(recvB, mis)
			for k := range n {
				s[k], r[k] = sa, ra
			}
		}
		g.send, g.recv = append(g.send, s), append(g.recv, r)
	}
	end := a.end + pattern.Guard
	g.before = make([][]byte, n)
	g.after = make([][]byte, n)
	g.outs = make([][]output, n)
	// The results shared by every rank, then each rank's data in parallel.
	shared := make([]result, len(calls))
	for ci, c := range calls {
		if c.kind > kindSendRecv || c.kind == kindColl && !(c.coll == kspace.AllReduce || c.coll == kspace.Reduce ||
			c.coll == kspace.ReduceScatter || c.coll == kspace.AllGather || c.coll == kspace.Broadcast) {
			return nil, fmt.Errorf("call %d: %s is not a call the suite knows", ci, c)
		}
		if c.kind == kindColl && (c.coll == kspace.AllReduce || c.coll == kspace.Reduce) {
			shared[ci] = c.results(n, 0)
		}
	}
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { g.rankData(r, seed, end, shared) })
	}
	wg.Wait()
	return g, nil
}

// result is a reduction's expected output: its bytes, and its intervals
// where it is not exact.
type result struct {
	want   []byte
	approx *pattern.Approx
}

// results is the expected output of reduction c over n ranks, c.count
// elements from element off: exact (pattern.Results) where the patterns
// make it so, else intervals (pattern.Bounds).
func (c call) results(n int, off uint64) result {
	pop, scalar := patternOp(c.o)
	if pattern.Exact(c.ty, pop, n) {
		return result{want: pattern.Results(c.seed, c.ty, pop, n, scalar, off, c.count)}
	}
	a := pattern.Bounds(c.seed, c.ty, pop, n, scalar, off, c.count)
	return result{want: a.Encoded(c.ty), approx: &a}
}

// rankData fills rank r's arena before the group and its expected outputs.
func (g *groupRun) rankData(r int, seed uint64, end int, shared []result) {
	n := g.n
	// What the previous group left does not matter: every byte the group
	// may touch, and its surroundings, get fresh poison.
	g.before[r] = pattern.Bytes(pattern.Mix(seed, 0xbad), r, 0, end)
	put := func(at int, b []byte) { copy(g.before[r][at:], b) }
	for ci, c := range g.calls {
		es := c.ty.Size()
		cb := c.count * es
		pop, _ := patternOp(c.o)
		out := func(at int, b []byte, what string) {
			g.outs[r] = append(g.outs[r], output{at: at, want: b, ty: c.ty, what: fmt.Sprintf("call %d (%s): %s", ci, c, what)})
		}
		outResult := func(at int, res result, what string) {
			g.outs[r] = append(g.outs[r], output{at: at, want: res.want, ty: c.ty, approx: res.approx, what: fmt.Sprintf("call %d (%s): %s", ci, c, what)})
		}
		gathered := func(off uint64) []byte {
			all := make([]byte, 0, n*cb)
			for k := range n {
				all = append(all, pattern.Bytes(c.seed, k, off, cb)...)
			}
			return all
		}
		s, d := g.send[ci][r], g.recv[ci][r]
		switch {
		case c.kind == kindColl && c.coll == kspace.AllReduce:
			put(s, pattern.Encoded(c.seed, c.ty, pop, n, r, 0, c.count))
			outResult(d, shared[ci], fmt.Sprintf("rank %d", r))
		case c.kind == kindColl && c.coll == kspace.Reduce:
			put(s, pattern.Encoded(c.seed, c.ty, pop, n, r, 0, c.count))
			if r == c.root {
				outResult(d, shared[ci], fmt.Sprintf("root %d", r))
			}
		case c.kind == kindColl && c.coll == kspace.ReduceScatter:
			put(s, pattern.Encoded(c.seed, c.ty, pop, n, r, 0, n*c.count))
			outResult(d, c.results(n, uint64(r*c.count)), fmt.Sprintf("rank %d", r))
		case c.kind == kindColl && c.coll == kspace.AllGather:
			put(s, pattern.Bytes(c.seed, r, 0, cb))
			out(d, gathered(0), fmt.Sprintf("rank %d", r))
		case c.kind == kindColl && c.coll == kspace.Broadcast:
			if r == c.root {
				put(s, pattern.Bytes(c.seed, r, 0, cb))
			}
			out(d, pattern.Bytes(c.seed, c.root, 0, cb), fmt.Sprintf("rank %d", r))
		case c.kind == kindAllToAll:
			put(s, pattern.Bytes(c.seed, r, 0, n*cb))
			out(d, gathered(uint64(r*cb)), fmt.Sprintf("rank %d", r))
		case c.kind == kindGather:
			put(s, pattern.Bytes(c.seed, r, 0, cb))
			if r == c.root {
				out(d, gathered(0), fmt.Sprintf("root %d", r))
			}
		case c.kind == kindScatter:
			if r == c.root {
				put(s, pattern.Bytes(c.seed, r, 0, n*cb))
			}
			out(d, pattern.Bytes(c.seed, c.root, uint64(r*cb), cb), fmt.Sprintf("rank %d", r))
		case c.kind == kindSendRecv:
			put(s, pattern.Bytes(c.seed, r, 0, cb))
			from := ((r-c.shift)%n + n) % n
			out(d, pattern.Bytes(c.seed, from, 0, cb), fmt.Sprintf("rank %d from %d", r, from))
		}
	}
	g.after[r] = bytes.Clone(g.before[r])
	for _, o := range g.outs[r] {
		copy(g.after[r][o.at:], o.want)
	}
}

// enqueue adds rank r's part of call ci to grp; ops collects PreMulSum ops
// to destroy once the group is done.
func (g *groupRun) enqueue(w *world, grp *ncclgo.Group, r, ci int, ops *[]func() error) error {
	c := g.calls[ci]
	comm, st := w.comms[r], w.streams[r]
	base := w.send[r]
	s, d := base+cuda.DevicePtr(g.send[ci][r]), base+cuda.DevicePtr(g.recv[ci][r])
	dt := ncclgo.DataType(c.ty)
	red := c.o.red
	if c.kind == kindColl && c.coll.HasRedOp() && c.o.scalar != 0 {
		var err error
		if red, err = w.newPreMulSum(comm, c.o, c.ty); err != nil {
			return err
		}
		*ops = append(*ops, func() error { return comm.DestroyRedOp(red) })
	}
	switch c.kind {
	case kindColl:
		switch c.coll {
		case kspace.AllReduce:
			return grp.AllReduce(comm, s, d, c.count, dt, red, st)
		case kspace.Reduce:
			return grp.Reduce(comm, s, d, c.count, dt, red, c.root, st)
		case kspace.ReduceScatter:
			return grp.ReduceScatter(comm, s, d, c.count, dt, red, st)
		case kspace.AllGather:
			return grp.AllGather(comm, s, d, c.count, dt, st)
		case kspace.Broadcast:
			return grp.Broadcast(comm, s, d, c.count, dt, c.root, st)
		default: // AllGatherV and SendRecv are no kindColl call: reported below
		}
	case kindAllToAll:
		return grp.AllToAll(comm, s, d, c.count, dt, st)
	case kindGather:
		return grp.Gather(comm, s, d, c.count, dt, c.root, st)
	case kindScatter:
		return grp.Scatter(comm, s, d, c.count, dt, c.root, st)
	case kindSendRecv:
		n := g.n
		if err := grp.Send(comm, s, c.count, dt, (r+c.shift)%n, st); err != nil {
			return err
		}
		return grp.Recv(comm, d, c.count, dt, ((r-c.shift)%n+n)%n, st)
	}
	return fmt.Errorf("call %d: %s is not a call the suite knows", ci, c)
}

// run uploads the group's inputs, enqueues it (one group for every rank, or
// one group per rank ended in rank order), waits at most NCCLGO_TEST_WAIT
// (waitAll: on a hang it prints where the group is stuck and marks the
// world hung), and checks every byte of every rank's arena. It returns
// every problem found.
func (g *groupRun) run(w *world, perRank bool) []error {
	n := g.n
	wd := watch(fmt.Sprintf("group of %d calls on %d ranks", len(g.calls), n), w.comms, "upload")
	defer wd.stop()
	for r := range n {
		if len(g.before[r]) > int(w.size) {
			return []error{fmt.Errorf("the group needs %d bytes per rank, the buffers hold %d", len(g.before[r]), w.size)}
		}
		if err := w.ctxs[r].MemcpyHtoD(w.send[r], unsafe.Pointer(&g.before[r][0]), uint64(len(g.before[r]))); err != nil {
			return []error{fmt.Errorf("rank %d: upload: %w", r, err)}
		}
	}
	for _, ctx := range w.ctxs {
		if err := ctx.Synchronize(); err != nil {
			return []error{err}
		}
	}
	var ops []func() error
	wd.at("enqueue and Group.End")
	if perRank {
		for r := range n {
			grp := ncclgo.NewGroup()
			for ci := range g.calls {
				if err := g.enqueue(w, grp, r, ci, &ops); err != nil {
					grp.Discard()
					return []error{fmt.Errorf("rank %d: %w", r, err)}
				}
			}
			if err := grp.End(); err != nil {
				return []error{fmt.Errorf("rank %d: Group.End: %w", r, err)}
			}
		}
	} else {
		grp := ncclgo.NewGroup()
		for r := range n {
			for ci := range g.calls {
				if err := g.enqueue(w, grp, r, ci, &ops); err != nil {
					grp.Discard()
					return []error{fmt.Errorf("rank %d: %w", r, err)}
				}
			}
		}
		if err := grp.End(); err != nil {
			return []error{fmt.Errorf("Group.End: %w", err)}
		}
	}
	wd.at("Wait")
	werrs, hang := waitAll(fmt.Sprintf("group of %d calls on %d ranks:%s", len(g.calls), n, describe(g.calls)), w.comms)
	if hang != nil {
		w.hung = true
		return []error{hang}
	}
	var errs []error
	for r, err := range werrs {
		if err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", r, err))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	wd.at("DestroyRedOp and read back")
	for _, f := range ops {
		if err := f(); err != nil {
			errs = append(errs, err)
		}
	}
	// Read back and check every rank at once.
	var mu sync.Mutex
	w.eachRank(func(r int) {
		got := make([]byte, len(g.after[r]))
		if err := w.ctxs[r].MemcpyDtoH(unsafe.Pointer(&got[0]), w.send[r], uint64(len(got))); err != nil {
			mu.Lock()
			errs = append(errs, fmt.Errorf("rank %d: read back: %w", r, err))
			mu.Unlock()
			return
		}
		rerrs := g.check(r, got)
		mu.Lock()
		errs = append(errs, rerrs...)
		mu.Unlock()
	})
	return errs
}

// check compares rank r's arena with the expectation: each output with
// its guard bytes, then every other byte (a write anywhere else in the
// arena is caught too).
func (g *groupRun) check(r int, got []byte) []error {
	var errs []error
	want := bytes.Clone(g.after[r])
	for _, o := range g.outs[r] {
		lo, hi := o.at-pattern.Guard, o.at+len(o.want)+pattern.Guard
		win := pattern.Expect(g.after[r], o.at, o.want)
		var err error
		if o.approx != nil {
			err = pattern.CompareApprox(o.what, o.ty, got[lo:hi], win, *o.approx)
			copy(want[o.at:o.at+len(o.want)], got[o.at:o.at+len(o.want)]) // judged just above
		} else {
			err = pattern.Compare(o.what, got[lo:hi], win, o.ty.Size())
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 && !bytes.Equal(got, want) {
		i := 0
		for got[i] == want[i] {
			i++
		}
		errs = append(errs, fmt.Errorf("rank %d: byte %d of the arena, outside every output, is %#02x, want %#02x (a stray write)", r, i, got[i], want[i]))
	}
	return errs
}

// describe lists a group's calls, one per line.
func describe(calls []call) string {
	var b strings.Builder
	for i, c := range calls {
		fmt.Fprintf(&b, "\n  %d: %s", i, c)
	}
	return b.String()
}
