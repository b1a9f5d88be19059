package enqueue

import (
	"sync"
	"sync/atomic"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
)

// planCacheSize is the number of shapes a PlanCache remembers: a program
// alternates between few (a training step's gradient buckets, a
// benchmark's one size).
const planCacheSize = 8

// PlanCache remembers the plans of one-collective calls by their shape, so
// that a call repeated with other buffers costs a copy of its plan instead
// of a Build. The shape is everything Build reads of the call but the
// buffer addresses: the Comm, the Chooser, the task's collective, size,
// type, op and its argument, root, window rows and window Chooser, and
// whether it runs in place. A hit copies the plan and writes the call's
// addresses into its works and copy, which is all that Build derives from
// them (storeable checks it of every plan it keeps).
//
// A cached plan is right only while its Chooser answers as it did and the
// FuncLookup maps functions as it did: a tune.Tuner is immutable, and a
// communicator's kernel set fixed until it is destroyed. Whatever changes
// either must call Reset. Plans of several tasks and of point-to-point
// calls are built every time.
//
// The zero PlanCache is empty and ready; it is safe for concurrent use. A
// hit takes no lock: the entries are an immutable array that a miss
// replaces whole.
type PlanCache struct {
	ents atomic.Pointer[planEntries]
	mu   sync.Mutex // orders the misses' replacements
	next int        // the entry the next miss replaces; mu
}

// planEntries is a PlanCache's plans; nil entries are empty. Neither the
// array nor a plan it points to changes once published.
type planEntries [planCacheSize]*cachedPlan

// planKey is a call's shape: the task without its buffers.
type planKey struct {
	c       Comm
	choose  Chooser
	t       Task // Send and Recv zero
	inPlace bool
}

type cachedPlan struct {
	key  planKey
	plan Plan // with the buffers of the call that built it
}

// lookup returns the cached plan of shape k, or nil.
func (pc *PlanCache) lookup(k *planKey) *cachedPlan {
	es := pc.ents.Load()
	if es == nil {
		return nil
	}
	for _, e := range es {
		if e != nil && e.key == *k {
			return e
		}
	}
	return nil
}

// store caches p, the plan of shape k.
func (pc *PlanCache) store(k planKey, p Plan) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	var es planEntries
	if old := pc.ents.Load(); old != nil {
		es = *old
	}
	es[pc.next] = &cachedPlan{key: k, plan: p}
	pc.next = (pc.next + 1) % planCacheSize
	pc.ents.Store(&es)
}

// keyOf returns the shape of tasks, or false when a plan of them is not
// cached. The Choosers must be comparable (a *tune.Tuner is).
func keyOf(c Comm, tasks []Task, choose Chooser) (planKey, bool) {
	if len(tasks) != 1 || tasks[0].Coll == kspace.SendRecv {
		return planKey{}, false
	}
	t := tasks[0]
	k := planKey{c: c, choose: choose, inPlace: t.Send == t.Recv}
	t.Send, t.Recv = 0, 0
	k.t = t
	return k, true
}

// Build returns Build(c, tasks, choose, lookup), from the cache when a
// call of the same shape was planned before. The plan's Decisions may be
// shared with other calls' plans: do not modify them.
func (pc *PlanCache) Build(c Comm, tasks []Task, choose Chooser, lookup FuncLookup) (Plan, error) {
	k, ok := keyOf(c, tasks, choose)
	if !ok {
		return Build(c, tasks, choose, lookup)
	}
	send, recv := tasks[0].Send, tasks[0].Recv
	if e := pc.lookup(&k); e != nil {
		return e.plan.patched(send, recv), nil
	}
	p, err := Build(c, tasks, choose, lookup)
	if err != nil || !storeable(&p, send, recv) {
		return p, err
	}
	pc.store(k, p.patched(send, recv)) // the cache's own copy
	return p, nil
}

// BuildInto is Build into *dst, reusing the memory of the plan dst held
// (its copies, launches and works) on a hit: a caller that plans the same
// shape again into the same Plan allocates nothing. What dst held before
// is overwritten; nothing may still use it.
func (pc *PlanCache) BuildInto(dst *Plan, c Comm, tasks []Task, choose Chooser, lookup FuncLookup) error {
	k, ok := keyOf(c, tasks, choose)
	if ok {
		if e := pc.lookup(&k); e != nil {
			e.plan.patchInto(dst, tasks[0].Send, tasks[0].Recv)
			return nil
		}
	}
	p, err := pc.Build(c, tasks, choose, lookup)
	*dst = p
	return err
}

// Reset forgets every plan.
func (pc *PlanCache) Reset() {
	pc.mu.Lock()
	pc.ents.Store(nil)
	pc.next = 0
	pc.mu.Unlock()
}

// storeable reports whether p, a plan of one collective task with buffers
// send and recv, uses them only as whole buffers: every work's Sendbuff
// and Recvbuff, and every copy's source and destination, are the task's.
// Then patched makes the plan of another call of the same shape.
func storeable(p *Plan, send, recv uint64) bool {
	for _, cp := range p.Copies {
		if cp.Src != send || cp.Dst != recv {
			return false
		}
	}
	for _, l := range p.Launches {
		for _, w := range l.Works {
			if w.Sendbuff != send || w.Recvbuff != recv {
				return false
			}
		}
	}
	return true
}

// patchInto is patched into q, reusing q's slices (and the works of its
// launches) where they are large enough.
func (p *Plan) patchInto(q *Plan, send, recv uint64) {
	q.Decisions = p.Decisions
	q.Copies = q.Copies[:0]
	for _, cp := range p.Copies {
		cp.Src, cp.Dst = send, recv
		q.Copies = append(q.Copies, cp)
	}
	n := len(p.Launches)
	if cap(q.Launches) < n {
		ls := make([]Launch, n)
		copy(ls, q.Launches[:cap(q.Launches)]) // their works' memory
		q.Launches = ls
	}
	q.Launches = q.Launches[:n]
	for i := range p.Launches {
		l := &q.Launches[i]
		works := l.Works[:0]
		*l = p.Launches[i]
		for _, w := range p.Launches[i].Works {
			w.Sendbuff, w.Recvbuff = send, recv
			works = append(works, w)
		}
		l.Works = works
	}
}

// patched returns a copy of p (its own copies, launches and works; the
// decisions shared) with the buffers send and recv.
func (p *Plan) patched(send, recv uint64) Plan {
	q := Plan{Decisions: p.Decisions}
	if len(p.Copies) > 0 {
		q.Copies = make([]Copy, len(p.Copies))
		for i, cp := range p.Copies {
			cp.Src, cp.Dst = send, recv
			q.Copies[i] = cp
		}
	}
	if len(p.Launches) > 0 {
		q.Launches = make([]Launch, len(p.Launches))
		for i := range p.Launches {
			l := &q.Launches[i]
			*l = p.Launches[i]
			l.Works = make([]generated.DevWork, len(l.Works))
			for j, w := range p.Launches[i].Works {
				w.Sendbuff, w.Recvbuff = send, recv
				l.Works[j] = w
			}
		}
	}
	return q
}
