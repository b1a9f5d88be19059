package comm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/residency"
)

// residencyState is a rank's part in the residency ledger (package
// runtime/residency): the communicator's lease, how many launches the rank
// made (its sequence number there), its latest launch's event (a launch
// on another stream waits for it, so that the rank's kernels run one at a
// time) and the communicator's timeout, which bounds admission and
// Destroy.
type residencyState struct {
	lease   *residency.Lease
	seq     uint64
	last    *cuda.Event
	timeout time.Duration
}

// colocated lists, per lease, the ranks of its communicator in this
// process, so that a Destroy that times out can abort them all: their
// kernels wait on each other, and aborting one rank leaves the others
// spinning (and freeing device memory waits for every kernel of the
// device). A rank leaves the list before it frees anything, under mu, so
// that nobody aborts a rank whose flags are gone.
var colocated = struct {
	sync.Mutex
	m map[*residency.Lease][]*Engine
}{m: map[*residency.Lease][]*Engine{}}

func (c *Engine) addColocated() {
	colocated.Lock()
	defer colocated.Unlock()
	colocated.m[c.res.lease] = append(colocated.m[c.res.lease], c)
}

// leaveResidency takes c off the ledger and the colocated list; the
// ledger keeps counting a launch of c that still runs.
func (c *Engine) leaveResidency() {
	c.mu.Lock() // request reads the lease under mu, from a Group.End
	s := c.res.lease
	c.res.lease = nil
	c.mu.Unlock()
	if s == nil {
		return
	}
	colocated.Lock()
	l := slices.DeleteFunc(colocated.m[s], func(p *Engine) bool { return p == c })
	if len(l) == 0 {
		delete(colocated.m, s)
	} else {
		colocated.m[s] = l
	}
	colocated.Unlock()
	s.Leave(c.rank)
}

// abortColocated aborts every rank of c's communicator in this process
// that is not being freed, c included: their kernels and their bootstrap
// waits, but not a bootstrap network that Split children's views still
// use (bootstrap.AbortShared): those are other communicators.
func (c *Engine) abortColocated() {
	c.Abort()
	c.mu.Lock()
	s := c.res.lease
	c.mu.Unlock()
	if s == nil {
		return
	}
	colocated.Lock()
	ranks := append([]*Engine(nil), colocated.m[s]...)
	colocated.Unlock()
	for _, p := range ranks { // Abort may talk to peers: not under the lock
		if p != c {
			p.Abort()
		}
	}
}

// residencyInfo is what ranks tell each other to find their lease.
type residencyInfo struct {
	Key    string
	PID    int
	Host   string
	Device int
	BusID  string
}

// joinResidency puts c on the process's residency ledger: every rank says
// where it runs, rank 0's random key names the communicator, and each
// counts the communicator's ranks in this process per GPU. blocksPerSM is
// the occupancy of the widest kernel.
func (c *Engine) joinResidency(ctx context.Context, blocksPerSM int) error {
	c.res.timeout = c.s.Timeout()
	var key [16]byte
	_, _ = rand.Read(key[:])
	me := residencyInfo{Key: hex.EncodeToString(key[:]), PID: os.Getpid(), Host: hostID(c.s.Config), Device: c.device, BusID: c.gpu.BusID}
	b, _ := json.Marshal(me)
	all, err := c.net.AllGather(ctx, b)
	if err != nil {
		return fmt.Errorf("residency: exchanging where ranks run: %w", err)
	}
	local := map[string]int{}
	var key0 string
	for r, raw := range all {
		var p residencyInfo
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("residency: rank %d's description: %w", r, err)
		}
		if r == 0 {
			key0 = p.Key
		}
		if p.PID == me.PID && p.Host == me.Host {
			local[gpuName(p)]++
		}
	}
	// c.gpu.SMCount is already the process's share (topo.SMShareOf).
	budget, err := residency.Budget(c.gpu.SMCount, blocksPerSM, "")
	if err != nil {
		return err
	}
	if c.res.lease, err = residency.Default().Join(key0, gpuName(me), budget, local, c.nChannels); err != nil {
		return fmt.Errorf("%w (set NCCL_MAX_NCHANNELS lower, or give this process a larger %s share)", err, residency.EnvMPSPercent)
	}
	c.addColocated()
	return nil
}

// gpuName names a GPU on the ledger: its PCI bus id, else its ordinal.
func gpuName(p residencyInfo) string {
	if p.BusID != "" {
		return p.BusID
	}
	return strconv.Itoa(p.Device)
}

// request is the ledger request for c's next launch of p: the most blocks
// a kernel of p uses, or c's channel count when p holds point-to-point
// work (whose blocks differ between ranks, while a lagging rank must fit
// in the grant its peers took). ok is false when c is not on a ledger.
func (c *Engine) request(p *enqueue.Plan, tasks []enqueue.Task) (r residency.Request, ok bool) {
	r, ok, _ = c.admission(&Launch{Engine: c, Plan: p, Tasks: tasks}, false)
	return r, ok
}

// admission is request for l (of c) and, when merging, l's merge
// candidate (Launch.candidate), under one lock.
func (c *Engine) admission(l *Launch, merging bool) (r residency.Request, ok bool, cand mergeCand) {
	p, tasks := l.Plan, l.Tasks
	blocks := 0
	for i := range p.Launches {
		blocks = max(blocks, p.Launches[i].NBlocks())
	}
	if blocks > 0 && slices.ContainsFunc(tasks, func(t enqueue.Task) bool { return t.Coll == kspace.SendRecv }) {
		blocks = c.nChannels
	}
	merging = merging && l.mergeable()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.destroyed && c.launcher != nil && c.launcher.TriggersEarly(blocks) {
		// The kernel lets the next one start while it runs: both can be
		// resident (point-to-point plans ask for nChannels, at least twice
		// what an early-starting kernel has).
		blocks *= 2
	}
	if merging {
		cand = l.candidateLocked()
	}
	return residency.Request{Lease: c.res.lease, Rank: c.rank, Seq: c.res.seq, Blocks: blocks}, c.res.lease != nil, cand
}

// Launch is one communicator's part of a group: its plan, on its stream.
type Launch struct {
	Engine *Engine
	Plan   *enqueue.Plan
	Tasks  []enqueue.Task // what the plan was built from
	Stream *cuda.Stream
	// Usable reports whether the communicator can still take calls; a
	// wait for room on the GPU ends with its error.
	Usable func() error
}

// AdmitAndRun launches the plans of a group through the residency ledger:
// every communicator's launch runs as soon as it is admitted, lowest index
// first, so a rank its peers already spin on is never held back behind
// another communicator. Waits are bounded by the smallest timeout of the
// group's communicators, and end when one of them is no longer usable
// (aborted or destroyed, say).
func AdmitAndRun(ls []Launch) error {
	a := admissionPool.Get().(*admission)
	defer a.release()
	return a.admitAndRun(ls)
}

// admitAndRun is AdmitAndRun in a's memory.
func (a *admission) admitAndRun(ls []Launch) error {
	if perThread(ls) {
		// Every driver call of the group on the per-thread default stream
		// (lane joins, a multi-rank launch's joins) must name one thread's
		// stream: the goroutine may not move while it waits for room.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	err := a.admit(ls)
	// After every rank of the group has entered its lane (run), so that no
	// rank's Enter on a shared default stream comes after another's Leave.
	if lerr := leaveLanes(ls); lerr != nil {
		return errors.Join(err, lerr)
	}
	return err
}

// admission is the memory of a group's admission (AdmitAndRun), kept in
// admissionPool between groups so that a repeated group allocates none of
// it: the group's requests on the ledger, its ticket, and the launch of
// AdmitAndRunOne.
type admission struct {
	idx    []int       // request → index in the group's launches
	ks     []int       // requests admitted together (Ticket.TryNextAll)
	cands  []mergeCand // per request, its merge candidate when merging
	reqs   []residency.Request
	usable []func() error // the requests' Launch.Usable
	// interrupted is check, the ticket's interruption poll, made once.
	interrupted func() error
	tk          residency.Ticket
	errs        []error
	// AdmitAndRunOne's group of one: its launch, a copy of its plan and
	// of its tasks (the caller's may live on its stack).
	one   [1]Launch
	plan  enqueue.Plan
	tasks []enqueue.Task
}

var admissionPool = sync.Pool{New: func() any {
	a := new(admission)
	a.interrupted = a.check
	return a
}}

// check reports the first error of the group's Usable functions.
func (a *admission) check() error {
	for _, u := range a.usable {
		if u != nil {
			if err := u(); err != nil {
				return err
			}
		}
	}
	return nil
}

// release clears what a points at (launches, plans, engines, leases) and
// puts it back in admissionPool. Its ticket is closed.
func (a *admission) release() {
	a.tk.Close()
	a.idx = a.idx[:0]
	clear(a.reqs[:cap(a.reqs)])
	a.reqs = a.reqs[:0]
	clear(a.cands[:cap(a.cands)])
	a.cands = a.cands[:0]
	clear(a.usable[:cap(a.usable)])
	a.usable = a.usable[:0]
	clear(a.errs[:cap(a.errs)])
	a.errs = a.errs[:0]
	a.one[0] = Launch{}
	a.plan = enqueue.Plan{}
	clear(a.tasks[:cap(a.tasks)])
	a.tasks = a.tasks[:0]
	admissionPool.Put(a)
}

// AdmitAndRunOne is AdmitAndRun of a group of one launch, {e, p, tasks,
// stream, usable} (a call outside any group; separate arguments, so that
// the plan may live on the caller's stack). A plan that launches no
// kernel (the copy of a one-rank call) would ask the ledger for no room,
// which it always grants at once: it runs without asking, and without a
// ticket. The run and the leaving of the rank's lane take e.mu once: with
// one launch, no other rank's entry can come between them.
func AdmitAndRunOne(e *Engine, p *enqueue.Plan, tasks []enqueue.Task, stream *cuda.Stream, usable func() error) error {
	if p.Empty() {
		return nil
	}
	if len(p.Launches) > 0 {
		if r, ok := e.request(p, tasks); ok && r.Blocks > 0 {
			a := admissionPool.Get().(*admission)
			defer a.release()
			a.plan = *p
			a.tasks = append(a.tasks[:0], tasks...)
			a.one[0] = Launch{Engine: e, Plan: &a.plan, Tasks: a.tasks, Stream: stream, Usable: usable}
			return a.admitAndRun(a.one[:])
		}
	}
	// Not on a ledger (destroyed meanwhile: run reports it), or admitted
	// at once: a request for no blocks always is (residency.Ledger).
	if stream.Handle() == cuda.StreamPerThread {
		runtime.LockOSThread() // as AdmitAndRun
		defer runtime.UnlockOSThread()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, err := e.runLocked(p, stream, captureUnknown)
	return errors.Join(err, e.leaveLaneLocked(nil))
}

// perThread reports whether a launch of ls is on the per-thread default
// stream (cuda.StreamPerThread), which names the calling OS thread's own
// stream: a goroutine that moves to another thread between two driver
// calls would join one thread's stream to a launch and leave another's.
// Only a caller that stays on one thread (runtime.LockOSThread, or a C
// caller of capi) means one stream by it.
func perThread(ls []Launch) bool {
	for _, l := range ls {
		if l.Stream != nil && l.Stream.Handle() == cuda.StreamPerThread {
			return true
		}
	}
	return false
}

// admit admits and runs the launches of ls (admitAndRun, before the lanes
// are left).
func (a *admission) admit(ls []Launch) error {
	errs := a.errs[:0]
	defer func() { a.errs = errs }()
	timeout := time.Duration(0)
	merging := len(ls) > 1
	for i := range ls {
		l := &ls[i]
		if l.Plan.Empty() {
			continue
		}
		r, ok, cand := l.Engine.admission(l, merging)
		if !ok {
			// Not on a ledger (destroyed meanwhile): run reports it.
			if _, err := l.Engine.run(l.Plan, l.Stream); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		a.idx = append(a.idx, i)
		a.reqs = append(a.reqs, r)
		a.cands = append(a.cands, cand)
		// The ticket keeps the interruption check (a.check): it reads the
		// launches' Usable functions, not ls.
		a.usable = append(a.usable, l.Usable)
		if t := l.Engine.res.timeout; timeout == 0 || (t > 0 && t < timeout) {
			timeout = t
		}
	}
	if len(a.reqs) == 0 {
		return errors.Join(errs...)
	}
	tk := &a.tk
	if err := residency.Default().AcquireInto(tk, a.reqs, a.interrupted); err != nil {
		return errors.Join(append(errs, fmt.Errorf("ncclgo: Group.End: %w", err))...)
	}
	defer tk.Close()
	if timeout <= 0 {
		timeout = bootstrap.DefaultTimeout
	}
	var cands []mergeCand
	if merging {
		cands = a.cands
	}
	m := newMergerOf(ls, a.idx, cands)
	defer m.release()
	// The bound on waiting for room starts with the first wait; a group
	// whose requests are admitted at once makes no context.
	var ctx context.Context
	for taken := 0; taken < len(a.reqs); {
		ks := tk.TryNextAll(a.ks[:0])
		if len(ks) == 0 {
			// Nothing admitted waits behind a wait for room: launches held
			// for a multi-rank launch whose other ranks are not admitted
			// yet run on their own now.
			errs = m.flush(tk, errs)
			if ctx == nil {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(context.Background(), timeout)
				defer cancel()
			}
			k, err := tk.Next(ctx)
			if err != nil {
				errs = append(errs, fmt.Errorf("ncclgo: Group.End: waiting for room on the GPU: %w", err))
				break
			}
			ks = append(ks, k)
		}
		a.ks = ks
		taken += len(ks)
		for _, k := range ks {
			var err error
			if m.hold(k) {
				err = m.admitted(k, tk)
			} else {
				err = runAlone(ls[a.idx[k]], k, tk)
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	errs = m.flush(tk, errs)
	return errors.Join(errs...)
}

// runAlone runs l, the launch of request k of tk, on its own.
func runAlone(l Launch, k int, tk *residency.Ticket) error {
	ev, err := l.Engine.run(l.Plan, l.Stream)
	if ev != nil {
		tk.Done(k, ev)
	} else {
		tk.Done(k, nil)
	}
	return err
}

// awaitEvents polls evs until every one has completed or failed, or d
// has passed. It returns the indexes of those that had not completed
// (pending) and of those whose query failed (failed: whether that work
// finished is unknown), and the queries' errors.
func awaitEvents(evs []residency.Completion, d time.Duration) (pending, failed []int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var errs []error
	left := make([]int, len(evs))
	for i := range left {
		left[i] = i
	}
	_ = poll(ctx, func() (bool, error) {
		left = slices.DeleteFunc(left, func(i int) bool {
			done, err := evs[i].Query()
			if err != nil {
				errs = append(errs, err)
				failed = append(failed, i)
			}
			return done || err != nil
		})
		return len(left) == 0, nil
	})
	return left, failed, errors.Join(errs...)
}

// poll calls step until it reports done or an error, or ctx ends (then it
// returns ctx's cause), sleeping between calls from 10 µs, doubling up to
// 1 ms: the one wait loop of the engine (Wait, Destroy).
func poll(ctx context.Context, step func() (done bool, err error)) error {
	delay := 10 * time.Microsecond
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		done, err := step()
		if err != nil || done {
			return err
		}
		t.Reset(delay)
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
		delay = min(2*delay, time.Millisecond)
	}
}
