package ncclgo

import (
	"fmt"
	"sync"

	"github.com/ncclgo/ncclgo/runtime/comm"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
)

// Group collects calls and launches them together, like NCCL's
// ncclGroupStart/ncclGroupEnd, but as an explicit value instead of
// thread-local state:
//
//	g := ncclgo.NewGroup()
//	g.Send(comm, buf, n, ncclgo.Float32, peer, stream)
//	g.Recv(comm, buf2, n, ncclgo.Float32, peer, stream)
//	err := g.End()
//
// Nothing launches until the outermost End: Start nests. A group may hold
// calls of several communicators (the ranks of one process, for instance),
// each with one stream; at End the calls of each communicator become as few
// kernel launches as possible. Point-to-point calls of one group are
// matched as a whole, so sends and receives between the same ranks may come
// in any order within the group. A Group must not be used after its
// outermost End; it is safe for concurrent use.
type Group struct {
	mu    sync.Mutex
	depth int
	ended bool
	calls *groupCalls // nil until the first call, and after the end
}

// groupCalls is a group's calls and the memory its End plans them in,
// kept in groupCallsPool between groups so that a repeated group
// allocates none of it.
type groupCalls struct {
	entries []groupEntry // per communicator, in the order of their first calls
	ls      []comm.Launch
	plans   []enqueue.Plan // their memory is reused by the next group's plans
}

type groupEntry struct {
	comm   *Comm
	stream *cuda.Stream
	tasks  []enqueue.Task
}

var groupCallsPool = sync.Pool{New: func() any { return new(groupCalls) }}

// release clears what gc points at (communicators, streams, launches)
// and puts it back in groupCallsPool; the plans keep their memory.
func (gc *groupCalls) release() {
	all := gc.entries[:cap(gc.entries)]
	for i := range all {
		e := &all[i]
		e.comm, e.stream = nil, nil
		clear(e.tasks[:cap(e.tasks)])
		e.tasks = e.tasks[:0]
	}
	gc.entries = gc.entries[:0]
	clear(gc.ls[:cap(gc.ls)])
	groupCallsPool.Put(gc)
}

// errNilGroup is the error of a method called on a nil *Group.
func errNilGroup(op string) error {
	return &ArgError{Op: op, Arg: "group", Value: "nil", Want: "a group from NewGroup"}
}

// NewGroup starts a group (depth 1).
func NewGroup() *Group { return &Group{depth: 1} }

// Start opens a nested level; only the outermost End launches.
func (g *Group) Start() error {
	if g == nil {
		return errNilGroup("Group.Start")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended {
		return fmt.Errorf("ncclgo: Group.Start: %w: the group has ended", ErrInvalidUsage)
	}
	g.depth++
	return nil
}

// End closes a level; the outermost End plans and launches every call of
// the group. It fails, launching nothing, when any communicator's calls
// cannot be planned; it fails with ErrInvalidUsage when the group has
// already ended.
func (g *Group) End() error {
	if g == nil {
		return errNilGroup("Group.End")
	}
	g.mu.Lock()
	if g.ended || g.depth == 0 {
		g.mu.Unlock()
		return fmt.Errorf("ncclgo: Group.End: %w: the group has already ended", ErrInvalidUsage)
	}
	g.depth--
	if g.depth > 0 {
		g.mu.Unlock()
		return nil
	}
	g.ended = true
	calls := g.calls
	g.calls = nil
	g.mu.Unlock()
	if calls == nil {
		return nil
	}
	err := calls.launch()
	calls.release()
	return err
}

// Discard ends the group without launching anything.
func (g *Group) Discard() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.ended = true
	calls := g.calls
	g.calls = nil
	g.mu.Unlock()
	if calls != nil {
		calls.release()
	}
}

// add queues tasks of c on stream.
func (g *Group) add(op string, c *Comm, stream *cuda.Stream, tasks ...enqueue.Task) error {
	if g == nil {
		return errNilGroup(op)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended {
		return fmt.Errorf("ncclgo: %s: %w: the group has ended", op, ErrInvalidUsage)
	}
	if g.calls == nil {
		g.calls = groupCallsPool.Get().(*groupCalls)
	}
	gc := g.calls
	for i := range gc.entries {
		e := &gc.entries[i]
		if e.comm != c {
			continue
		}
		if e.stream.Handle() != stream.Handle() {
			return &ArgError{Op: op, Arg: "stream", Value: fmt.Sprintf("%#x", stream.Handle()),
				Want: fmt.Sprintf("the stream of rank %d's earlier calls in this group (%#x)", c.rank, e.stream.Handle())}
		}
		e.tasks = append(e.tasks, tasks...)
		return nil
	}
	n := len(gc.entries)
	if n < cap(gc.entries) {
		gc.entries = gc.entries[:n+1] // an earlier group's entry: its tasks' memory
	} else {
		gc.entries = append(gc.entries, groupEntry{})
	}
	e := &gc.entries[n]
	e.comm, e.stream = c, stream
	e.tasks = append(e.tasks[:0], tasks...)
	return nil
}

// launch plans every entry, then launches each as the residency ledger
// admits it (in entry order unless one must wait for room on its GPU).
func (gc *groupCalls) launch() error {
	entries := gc.entries
	n := len(entries)
	if cap(gc.plans) < n {
		plans := make([]enqueue.Plan, n)
		copy(plans, gc.plans[:cap(gc.plans)]) // their memory
		gc.plans = plans
	}
	plans := gc.plans[:n]
	if n == 1 {
		e := &entries[0]
		if err := e.comm.usable("Group.End"); err != nil {
			return err
		}
		return e.comm.runInto(&plans[0], e.stream, e.tasks)
	}
	if cap(gc.ls) < n {
		gc.ls = make([]comm.Launch, n)
	}
	ls := gc.ls[:n]
	for i := range entries {
		e := &entries[i]
		if err := e.comm.usable("Group.End"); err != nil {
			return err
		}
		eng := e.comm.engine()
		if err := eng.PlanInto(&plans[i], e.tasks); err != nil {
			return err
		}
		ls[i] = comm.Launch{Engine: eng, Plan: &plans[i], Tasks: e.tasks, Stream: e.stream, Usable: e.comm.usableAtEnd()}
	}
	return comm.AdmitAndRun(ls)
}

// runNow plans and launches the tasks of c on stream, c having just been
// found usable: what the End of a group holding only them does, without
// the group (a call outside any group, Comm.AllReduce say, takes this
// path, its validation having checked c). It allocates nothing on its own
// when the plan needs no kernel (a one-rank call).
func (c *Comm) runNow(stream *cuda.Stream, tasks ...enqueue.Task) error {
	var p enqueue.Plan
	return c.runInto(&p, stream, tasks)
}

// runInto is runNow planning into p (Engine.PlanInto: reusing its memory).
// One collective of a one-rank communicator needs no plan when it is a
// copy or nothing (enqueue.OneRankCopy, Engine.RunOneRankCopy).
func (c *Comm) runInto(p *enqueue.Plan, stream *cuda.Stream, tasks []enqueue.Task) error {
	e := c.engine()
	if c.nRanks == 1 && len(tasks) == 1 {
		if cp, ok := enqueue.OneRankCopy(tasks[0]); ok {
			if done, err := e.RunOneRankCopy(cp, stream); done {
				return err
			}
		}
	}
	if err := e.PlanInto(p, tasks); err != nil {
		return err
	}
	return comm.AdmitAndRunOne(e, p, tasks, stream, c.usableAtEnd())
}

// usableAtEnd is the Launch.Usable of c's launches: c.usable for
// Group.End. Communicators from newComm keep one, made once.
func (c *Comm) usableAtEnd() func() error {
	if c.endUsable != nil {
		return c.endUsable
	}
	return func() error { return c.usable("Group.End") }
}

// Group runs fn with a new group and ends it: every call fn makes on g
// launches together when fn returns. When fn fails nothing launches.
func (c *Comm) Group(fn func(g *Group) error) error {
	return c.group("Group", fn)
}

// group is Group for the call op (a one-call group of Comm.AllReduce, say).
func (c *Comm) group(op string, fn func(g *Group) error) error {
	if c == nil {
		return errNilComm(op)
	}
	if fn == nil {
		return &ArgError{Op: op, Arg: "fn", Value: "nil", Want: "a function"}
	}
	g := NewGroup()
	if err := fn(g); err != nil {
		g.Discard()
		return err
	}
	return g.End()
}
