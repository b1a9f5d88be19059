package comm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/graph"
	"github.com/ncclgo/ncclgo/runtime/kernels"
	"github.com/ncclgo/ncclgo/runtime/residency"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/transport"
	"github.com/ncclgo/ncclgo/runtime/transport/ipc"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// Engine is one rank of a communicator. Its methods may be called from
// any goroutine.
type Engine struct {
	rank, nRanks, device int
	s                    Settings
	log                  *slog.Logger
	net                  bootstrap.Network
	hostOnly             bool // NewHostOnly: no device

	cctx      *cuda.Context
	peers     *cudaPeers // peer contexts this rank enabled access to
	kset      *kernels.Set
	tuner     *tune.Tuner
	layout    topo.Layout
	gpu       topo.GPU
	nChannels int
	rings     [][]int
	trees     []graph.Tree
	conns     *transport.Set
	devMem    cuda.DevicePtr // DevComm, channels, peers, ring user ranks
	directMem cuda.DevicePtr // this rank's DIRECT mailboxes (direct.go), or 0
	// DIRECT across processes (direct.go, window.go): the driver's IPC
	// calls, the peers' mailboxes mapped here, the tuner of calls on
	// windows (nil unless DIRECT runs across processes) and the windows.
	ipc         ipcMemory
	directPeers []cuda.DevicePtr
	winTuner    *tune.Tuner
	procs       []transport.Peer // every rank's process and device
	winMu       sync.Mutex       // orders registrations; guards win
	win         windowState
	// flags is host-mapped memory the kernels read and write. Abort and
	// ErrorCode may run while Destroy frees it: they read it under flagsMu
	// (read-locked), Destroy clears it under the write lock first.
	flags    *hostFlags
	flagsMu  sync.RWMutex
	flagsDev cuda.DevicePtr
	flagsSeg *ipc.Segment // the flags' shared page, when shared (peerabort.go)
	// orphans are the flag pages of the ranks of other processes of this
	// machine, whose kernels c ends when their process dies (peerabort.go).
	orphans  atomic.Pointer[peerPages]
	launcher *enqueue.Launcher
	plan     enqueue.Comm
	// plans remembers the plans of repeated calls (Plan); the tuners and
	// the kernel set it plans with are fixed from setup to free, which
	// resets it.
	plans  enqueue.PlanCache
	watch  *ipc.Watcher             // liveness of other processes' ranks (nil within one process)
	lost   atomic.Pointer[PeerLost] // the first rank whose process died
	netErr atomic.Pointer[error]    // the first NET connection the proxy lost while a launch ran (aborted)
	// netIdle is the first NET connection the proxy lost while no launch
	// ran: kept for the next launch, which it fails (liveness.go).
	netIdle  atomic.Pointer[error]
	netWatch *netWatch // polls for work on c while netIdle is set (liveness.go); guarded by mu

	mu        sync.Mutex
	destroyed bool
	finalized bool
	aborted   atomic.Bool
	life      lifetime                // ends at Abort: the bootstrap waits of Split and Shrink
	events    map[uintptr]launchEvent // last launch per stream
	// joinBusy remembers the streams that a multi-rank launch's join last
	// found busy (onelaunch.go: joinSkipsQuery), under mu.
	joinBusy map[uintptr]uint8
	beside   besideRecords  // captured records beside their chains (capture.go)
	grace    time.Duration  // Destroy's wait for kernels to react to an abort (0: abortGrace)
	res      residencyState // guarded by mu (residency.go)
	lanes    laneState      // guarded by mu (lane.go)
	multi    uint64         // launches this rank shared with other ranks (onelaunch.go); guarded by mu
	ops      cuda.Ops       // the driver calls of run and runMulti, queued in one (guarded by mu)
	split    splitState     // Split and Shrink (split.go)

	// sets are the completion events of the multi-rank launch sets the
	// rank was launched in (setevent.go), held until Destroy; guarded by
	// mu.
	sets []*setEvent

	// state mirrors destroyed (stateDestroyed) and finalized
	// (stateFinalized), written with them under mu, for State: every
	// call checks it, twice in a group.
	state atomic.Uint32
}

// hostFlags is the host-mapped memory shared with the kernels: the abort
// flag the host sets (the device image's AbortFlag) and the error flag a
// kernel sets, NG_DEV_ERR_* (ErrorFlag, at errorFlagOffset); and, shared
// with the ranks of other processes, whether the rank destroyed its
// communicator (its kernels are done: peerabort.go).
type hostFlags struct {
	abort atomic.Uint32
	err   atomic.Uint32
	freed atomic.Uint32
}

const (
	hostFlagsBytes  = 64 // allocated, zeroed
	errorFlagOffset = uint64(unsafe.Offsetof(hostFlags{}.err))
)

// abortGrace bounds how long Destroy waits for kernels to react to the
// abort flag.
const abortGrace = 10 * time.Second

// launchEvent is the completion of a rank's latest launch on a stream: a
// *cuda.Event recorded after it (tests stand in for one).
type launchEvent interface {
	residency.Completion
	Destroy() error
}

// NewHostOnly returns an engine with no device, over net (which may be
// nil), for tests of what lies above the device: argument checks, plans
// (with tn; nil plans nothing), Split and Shrink (whose children are
// host-only too, made once every rank of the child's network arrived) and
// the lifetime of a communicator. Its flags are Go memory (see Fault). It
// launches nothing.
func NewHostOnly(net bootstrap.Network, rank, nRanks, device int, s Settings, tn *tune.Tuner) *Engine {
	e := &Engine{rank: rank, nRanks: nRanks, device: device, s: s, net: net, hostOnly: true, tuner: tn,
		events: map[uintptr]launchEvent{}, log: s.Log, flags: new(hostFlags)}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if tn != nil {
		e.nChannels = tn.MaxChannels()
	}
	e.plan = enqueue.Comm{Rank: rank, NRanks: nRanks, NChannels: e.nChannels, P2PChannelsPerPeer: max(s.P2PPerPeer, 2)}
	return e
}

// Rank returns the communicator rank.
func (e *Engine) Rank() int { return e.rank }

// Size returns the number of ranks.
func (e *Engine) Size() int { return e.nRanks }

// Device returns the CUDA device ordinal.
func (e *Engine) Device() int { return e.device }

// NChannels returns the number of channels set up.
func (e *Engine) NChannels() int { return e.nChannels }

// Layout returns how the communicator's ranks sit on GPUs.
func (e *Engine) Layout() topo.Layout { return e.layout }

// Context returns the CUDA context the rank runs in (nil for a host-only
// engine). Destroy releases it.
func (e *Engine) Context() *cuda.Context { return e.cctx }

// Settings returns the settings the engine runs with.
func (e *Engine) Settings() Settings { return e.s }

// The bits of Engine.state.
const (
	stateDestroyed = 1 << iota
	stateFinalized
)

// State reports whether Destroy and Finalize were called. It takes no
// lock.
func (e *Engine) State() (destroyed, finalized bool) {
	st := e.state.Load()
	return st&stateDestroyed != 0, st&stateFinalized != 0
}

// Aborted reports whether the engine was aborted (Abort, a lost peer, or
// Shrink's abort mode).
func (e *Engine) Aborted() bool { return e.aborted.Load() }

// Lost returns the first rank whose process ended without destroying the
// communicator, or nil.
func (e *Engine) Lost() *PeerLost { return e.lost.Load() }

// NetError returns the error of the first NET connection the proxy lost
// while a launch of the engine may have needed it (a peer on another host
// aborted, vanished or misbehaved; it names the peer), or nil. The engine
// is aborted when it is set. A connection lost while the engine was idle
// is IdleNetError's.
func (e *Engine) NetError() error {
	if p := e.netErr.Load(); p != nil {
		return *p
	}
	return nil
}

// IdleNetError returns the error of the first NET connection the proxy
// lost while no launch of the engine ran (a peer aborted or vanished at
// its end, say), or nil. The engine is not aborted: its next launch fails
// with the error (nothing is launched), as would a launch already running
// that needs the connection, and Destroy stays clean (see proxyFailed).
func (e *Engine) IdleNetError() error {
	if p := e.netIdle.Load(); p != nil {
		return *p
	}
	return nil
}

// Abort stops the engine: it sets the device abort flag, so that every
// kernel stops waiting, and wakes every bootstrap waiter of it. A
// bootstrap network that views of Split and Shrink children ride on stays
// open for them (bootstrap.AbortShared).
func (e *Engine) Abort() {
	e.aborted.Store(true)
	e.setAbortFlag()
	e.life.end(ErrAborted)
	bootstrap.AbortShared(e.net)
}

// setAbortFlag tells the kernels to stop waiting; it does nothing once
// Destroy freed the flags.
func (e *Engine) setAbortFlag() {
	e.flagsMu.RLock()
	defer e.flagsMu.RUnlock()
	if e.flags != nil {
		e.flags.abort.Store(1)
	}
}

// ErrorCode reads the device error flag (NG_DEV_ERR_*; 0 once Destroy
// freed it).
func (e *Engine) ErrorCode() uint32 {
	e.flagsMu.RLock()
	defer e.flagsMu.RUnlock()
	if e.flags == nil {
		return 0
	}
	return e.flags.err.Load()
}

// Fault records on a host-only engine what a kernel or the liveness
// watcher would: a device error code (0: none) in the error flag, and a
// lost peer (nil: none), which aborts the engine. It is for tests of what
// lies above the engine, and does nothing on an engine with a device.
func (e *Engine) Fault(code uint32, lost *PeerLost) {
	if !e.hostOnly {
		return
	}
	e.flagsMu.RLock()
	if e.flags != nil && code != 0 {
		e.flags.err.Store(code)
	}
	e.flagsMu.RUnlock()
	if lost != nil {
		e.peerLost(lost)
	}
}

// lifetime is a context that ends once, with a cause; its zero value is
// ready to use (the context is made on first use).
type lifetime struct {
	once   sync.Once
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func (l *lifetime) init() {
	l.once.Do(func() { l.ctx, l.cancel = context.WithCancelCause(context.Background()) })
}

// end ends the lifetime with cause (the first call's cause stays).
func (l *lifetime) end(cause error) {
	l.init()
	l.cancel(cause)
}

// cause returns the cause the lifetime ended with (nil: not ended).
func (l *lifetime) cause() error {
	l.init()
	return context.Cause(l.ctx)
}

// bind returns ctx, ended also when the lifetime ends (with its cause),
// and the function that releases it.
func (l *lifetime) bind(ctx context.Context) (context.Context, func()) {
	l.init()
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.ctx, func() { cancel(context.Cause(l.ctx)) })
	return ctx, func() { stop(); cancel(nil) }
}

// Wait waits until every operation the engine has launched so far is
// done, or ctx is done, and then returns check's error (or ctx's cause).
// It polls, calling check between polls, so that a deadlocked or aborted
// kernel shows up as check's error. When another goroutine destroys the
// engine meanwhile, Wait ends with an error matching ErrDestroyed.
func (e *Engine) Wait(ctx context.Context, check func() error) error {
	e.mu.Lock()
	if e.destroyed {
		e.mu.Unlock()
		return fmt.Errorf("ncclgo: Wait: %w", ErrDestroyed)
	}
	evs := e.completions(nil)
	e.mu.Unlock()
	err := poll(ctx, func() (bool, error) {
		for len(evs) > 0 {
			done, err := e.query(evs[0])
			if err != nil {
				return false, fmt.Errorf("ncclgo: rank %d: Wait: %w", e.rank, err)
			}
			if !done {
				return false, check()
			}
			evs = evs[1:]
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	return check()
}

// query asks whether ev, one of the launch events, has completed. It runs
// under mu: Destroy, which may be running meanwhile, destroys the events
// under mu once it is done with them, and then the engine is destroyed.
func (e *Engine) query(ev launchEvent) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.destroyed {
		return false, ErrDestroyed
	}
	return ev.Query()
}

// Finalize refuses later calls (package ncclgo then fails them with
// ErrInvalidUsage); the caller then waits (Wait).
func (e *Engine) Finalize() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.destroyed {
		return fmt.Errorf("ncclgo: Finalize: %w", ErrDestroyed)
	}
	e.finalized = true
	e.state.Or(stateFinalized)
	return nil
}

// Destroy waits for every operation launched, bounded by the
// communicator's timeout (abortGrace after Abort), aborts this process's
// ranks of the communicator when that runs out, then frees everything;
// package ncclgo's Comm.Destroy documents the whole behaviour. It frees
// nothing a kernel may touch unless every launch's completion event said
// it had finished: a launch still running after the abort, or one whose
// event cannot be queried (a failed context), leaves that memory
// allocated (leak), and the error says what was left.
func (e *Engine) Destroy() error {
	e.mu.Lock()
	if e.destroyed {
		e.mu.Unlock()
		return fmt.Errorf("ncclgo: Destroy: %w", ErrDestroyed)
	}
	e.destroyed = true
	e.state.Or(stateDestroyed)
	evs := e.events // left in e.events for proxyFailed's look until destroyed below
	sets := e.sets  // likewise; no launch adds to either once destroyed is set
	e.mu.Unlock()
	handles := slices.Sorted(maps.Keys(evs))
	comps := make([]residency.Completion, 0, len(handles)+len(sets))
	labels := make([]string, 0, cap(comps))
	for _, h := range handles {
		comps = append(comps, evs[h])
		labels = append(labels, fmt.Sprintf("%#x", h))
	}
	for _, s := range sets {
		comps = append(comps, s.ev)
		labels = append(labels, s.label())
	}
	streams := func(idx []int) string {
		s := make([]string, len(idx))
		for i, p := range idx {
			s[i] = labels[p]
		}
		return strings.Join(s, ", ")
	}
	wait := e.res.timeout
	if wait <= 0 {
		wait = bootstrap.DefaultTimeout
	}
	grace := e.grace
	if grace <= 0 {
		grace = abortGrace
	}
	if e.aborted.Load() {
		wait = min(wait, grace)
	}
	var errs, unconfirmed []error
	pending, failed, err := awaitEvents(comps, wait)
	errs = append(errs, err)
	if len(failed) > 0 {
		unconfirmed = append(unconfirmed, fmt.Errorf("whether the launches on stream(s) %s finished is unknown: querying their completion events failed: %w",
			streams(failed), err))
	}
	if len(pending) > 0 {
		what := fmt.Sprintf("the launches on stream(s) %s had not finished after %v", streams(pending), wait)
		e.abortColocated()
		left := make([]residency.Completion, len(pending))
		for i, p := range pending {
			left[i] = comps[p]
		}
		still, failed, err := awaitEvents(left, grace)
		if len(still)+len(failed) > 0 {
			unconfirmed = append(unconfirmed, fmt.Errorf("%s, and %d still ran %v after the abort: %w (%w)",
				what, len(still)+len(failed), grace, errors.Join(context.DeadlineExceeded, err), ErrAborted))
		} else {
			errs = append(errs, err, fmt.Errorf("%s; aborted them and this process's other ranks of the communicator: %w (%w)", what, context.DeadlineExceeded, ErrAborted))
		}
	}
	e.stopNetWatch() // before the events it queries are destroyed
	if len(unconfirmed) > 0 {
		return e.explainLost(e.leak(errors.Join(unconfirmed...)))
	}
	// Off the ledger before the events it may query are destroyed, and
	// under mu, as a Wait of another goroutine may be querying one (query).
	e.leaveResidency()
	e.mu.Lock()
	for _, ev := range e.completions(nil) {
		capturedWaits.Delete(ev)
	}
	for _, ev := range evs {
		errs = append(errs, ev.Destroy())
	}
	e.events = nil
	// Every set event it held has completed: let go of them (the last
	// rank of a set destroys its event).
	errs = append(errs, e.releaseSets())
	e.mu.Unlock()
	// Freeing device memory waits for every kernel of the device, other
	// communicators' too: bound that wait as well.
	freed := make(chan error, 1)
	go func() { freed <- e.free() }()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case err := <-freed:
		errs = append(errs, err)
	case <-timer.C:
		errs = append(errs, fmt.Errorf("freeing its memory waited %v: freeing device memory waits for every kernel of device %d, and some (of another communicator) do not finish; the release completes in the background once they do: %w",
			wait, e.device, context.DeadlineExceeded))
	}
	if err := errors.Join(errs...); err != nil {
		return e.explainLost(fmt.Errorf("ncclgo: rank %d: Destroy: %w", e.rank, err))
	}
	if err := e.IdleNetError(); err != nil {
		// Its peer ended first (as at an Abort that ends a program):
		// nothing of this rank needed the connection any more.
		e.log.Info(fmt.Sprintf("communicator destroyed; a NET connection was lost while no launch ran: %v", err), config.SubsysInit.Attr(), config.SubsysNet.Attr())
		return nil
	}
	e.log.Info("communicator destroyed", config.SubsysInit.Attr())
	return nil
}

// leak ends a Destroy that could not confirm that the rank's kernels are
// done (why): a kernel may still poll or write the rank's device memory,
// its host-mapped flags and its connections' buffers (a NET connection's
// staging is host memory the kernels spin on: unmapping it under a kernel
// faults the context, and under MPS every client of the GPU). So all of
// that stays allocated, with the launcher, the kernels' module, the
// events and the CUDA context; only what no kernel touches is released:
// the liveness watcher, the peers' flag pages mapped here, the bootstrap
// network and the residency ledger's entry (the ledger keeps counting the
// running kernels). The error names what was left.
func (e *Engine) leak(why error) error {
	e.leaveResidency()
	var errs []error
	if e.watch != nil {
		errs = append(errs, e.watch.Close())
		e.watch = nil
	}
	errs = append(errs, e.closePeerPages())
	if e.net != nil {
		errs = append(errs, bootstrap.CloseShared(e.net))
	}
	var left []string
	if e.devMem != 0 {
		left = append(left, fmt.Sprintf("device memory at %#x (DevComm, channels, peers)", uint64(e.devMem)))
	}
	if e.directMem != 0 {
		left = append(left, fmt.Sprintf("DIRECT mailboxes at %#x", uint64(e.directMem)))
	}
	e.flagsMu.RLock()
	if e.flags != nil {
		left = append(left, fmt.Sprintf("the host-mapped abort and error flags at %p", e.flags))
	}
	e.flagsMu.RUnlock()
	if e.conns != nil {
		left = append(left, fmt.Sprintf("the connections' buffers and NET staging (%d bytes)", e.conns.Bytes()))
	}
	left = append(left, "the launcher, the kernels' module, the launch events and the CUDA context")
	err := fmt.Errorf("ncclgo: rank %d: Destroy: %w; left allocated, as a kernel may still use them: %s",
		e.rank, why, strings.Join(left, "; "))
	return errors.Join(append([]error{err}, errs...)...)
}

// explainLost adds the abort's cause to a Destroy error whose CUDA context
// failed after an abort: where processes share a GPU under MPS, a process
// killed while its kernels run takes every client of the GPU down with it
// (MPS's fatal-fault containment), so the survivors' contexts fail
// moments after they learned of the loss, through no fault of theirs.
func (e *Engine) explainLost(err error) error {
	if err == nil || !cuda.ContextLost(err) {
		return err
	}
	cause := e.abortCause() // the lost peer, the NET error, a device error
	if cause == nil {
		cause = e.life.cause() // ended by a context or an Abort
	}
	if cause == nil {
		return err
	}
	return fmt.Errorf("%w (%w; first: %v; where processes share a GPU under MPS, a process killed while its kernels run "+
		"takes every client of the GPU down with it, so this process's GPU work is lost and it must exit to use the GPU again)",
		err, ErrContextLostAfterAbort, cause)
}

// free releases what Init acquired; it tolerates a partial init.
func (e *Engine) free() error {
	e.stopNetWatch() // Init may fail after the proxy lost a connection
	var errs []error
	if e.watch != nil {
		// First: the callback may still set the flags freed below.
		errs = append(errs, e.watch.Close())
		e.watch = nil
	}
	errs = append(errs, e.closePeerPages())
	e.leaveResidency()
	if e.launcher != nil {
		errs = append(errs, e.launcher.Close())
		e.launcher = nil
	}
	errs = append(errs, e.closeLane())
	if e.conns != nil {
		errs = append(errs, e.conns.Close())
		e.conns = nil
	}
	if e.devMem != 0 {
		errs = append(errs, e.cctx.MemFree(e.devMem))
		e.devMem = 0
	}
	errs = append(errs, e.closeWindows(), e.closeDirectPeers())
	if e.directMem != 0 {
		errs = append(errs, e.cctx.MemFree(e.directMem))
		e.directMem = 0
	}
	// Abort and ErrorCode may be reading the flags: take them away first.
	e.flagsMu.Lock()
	flags := e.flags
	e.flags = nil
	e.flagsMu.Unlock()
	errs = append(errs, e.freeFlags(flags))
	// cctx and kset stay set: calls on other goroutines may be reading
	// them (Context, a call's stream check, the planner's lookups) until
	// they see that the engine is destroyed. free runs once.
	if e.kset != nil {
		errs = append(errs, e.kset.Release())
	}
	e.plans.Reset() // its plans' functions are the released set's
	if e.net != nil {
		errs = append(errs, bootstrap.CloseShared(e.net)) // a view of Split, or a network views share
	}
	if e.peers != nil {
		errs = append(errs, e.peers.Close())
		e.peers = nil
	}
	if e.cctx != nil {
		errs = append(errs, e.cctx.Release())
	}
	errs = append(errs, e.s.LogFile.Release())
	return errors.Join(errs...)
}

// Plan builds the launches of tasks, one group's calls of this rank.
func (e *Engine) Plan(tasks []enqueue.Task) (enqueue.Plan, error) {
	var p enqueue.Plan
	err := e.PlanInto(&p, tasks)
	return p, err
}

// PlanInto is Plan into *p, reusing the memory of the plan p held (see
// enqueue.PlanCache.BuildInto): a caller that plans each group into the
// same Plan allocates nothing for a repeated call. What p held is
// overwritten; nothing may still use it.
func (e *Engine) PlanInto(p *enqueue.Plan, tasks []enqueue.Task) error {
	lookup := enqueue.GeneratedLookup
	if e.kset != nil {
		lookup = e.kset.Resolve // the set's own ids, from its manifest
	}
	tasks = e.markWindows(tasks) // window.go
	if e.log != nil && e.log.Enabled(context.Background(), slog.LevelInfo) {
		for _, t := range tasks {
			if t.Coll != kspace.SendRecv {
				e.log.Info(fmt.Sprintf("%s sendbuff %#x recvbuff %#x bytes %d", t.Coll, t.Send, t.Recv, t.Bytes), config.SubsysColl.Attr())
			}
		}
	}
	var err error
	if e.log != nil && e.log.Enabled(context.Background(), slog.LevelDebug) {
		// The tuner logs each choice at Debug: ask it every time.
		*p, err = enqueue.Build(e.plan, tasks, e.tuner, lookup)
	} else {
		err = e.plans.BuildInto(p, e.plan, tasks, e.tuner, lookup)
	}
	if err != nil {
		if e.winTuner != nil && errors.Is(err, tune.ErrNoChoice) && !errors.Is(err, tune.ErrDirectLLOnly) {
			err = fmt.Errorf("%w (across processes DIRECT runs on calls whose buffers lie in registered windows, and as AllReduce's LL one-shot up to %d bytes)", err, e.tuner.DirectLLLimit())
		}
		return fmt.Errorf("ncclgo: rank %d: %w", e.rank, err)
	}
	return nil
}

// run queues a plan on stream and records the stream's completion event,
// which it returns (nil when nothing was queued, or only copies that
// nothing tracks: Settings.UntrackedOneRankCopies). A launch on another
// stream than the rank's previous one first waits for that one, so that a
// rank's kernels run one at a time (as NCCL's strong stream orders them);
// the residency ledger counts on it. On a stream being captured into a
// CUDA graph those events become the graph's external event nodes
// (enqueue.Capture), so that every replay is ordered the same way.
func (e *Engine) run(p *enqueue.Plan, stream *cuda.Stream) (*cuda.Event, error) {
	return e.runKnown(p, stream, captureUnknown)
}

// knownCapture is what a caller of runKnown already learned of its
// stream's capture state, so that the launch does not ask again.
type knownCapture int8

const (
	captureUnknown knownCapture = iota
	captureNone                 // not being captured
	captureActive               // being captured
)

// runKnown is run on a stream whose capture state the caller may know.
func (e *Engine) runKnown(p *enqueue.Plan, stream *cuda.Stream, known knownCapture) (*cuda.Event, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runLocked(p, stream, known)
}

// runLocked is runKnown with e.mu held.
func (e *Engine) runLocked(p *enqueue.Plan, stream *cuda.Stream, known knownCapture) (*cuda.Event, error) {
	if e.destroyed {
		return nil, fmt.Errorf("ncclgo: rank %d: %w", e.rank, ErrDestroyed)
	}
	if err := e.IdleNetError(); err != nil {
		// Under mu: proxyFailed either set it before (nothing is
		// launched into a wait that cannot end), or will find this
		// launch in flight and abort.
		return nil, fmt.Errorf("ncclgo: rank %d: nothing launched: %w: %w", e.rank, ErrPeerFailed, err)
	}
	e.logDecisions(p)
	stream, err := e.laneFor(stream)
	if err != nil {
		return nil, err
	}
	if e.s.UntrackedOneRankCopies && e.nRanks == 1 && len(p.Launches) == 0 {
		return nil, e.runCopies(p, stream)
	}
	ev, err := e.eventFor(stream)
	if err != nil {
		return nil, err
	}
	if known != captureActive {
		ev, done, captured, err := e.runEager(p, stream, ev, known == captureNone)
		if done {
			return ev, err
		}
		if captured {
			known = captureActive
		}
	}
	if known == captureActive {
		e.noteLaneCapture(stream, true)
		if ev, done, err := e.runSequence(p, stream, ev, true); done {
			return ev, err
		}
	}
	var capture enqueue.Capture
	if known == captureActive {
		capture = true
	} else if capture, err = enqueue.CaptureOf(stream); errors.Is(err, enqueue.ErrCaptureInvalidated) {
		return nil, fmt.Errorf("ncclgo: rank %d: %w under CUDA graph capture: %w", e.rank, ErrInvalidUsage, err)
	} else if err != nil {
		return nil, fmt.Errorf("ncclgo: rank %d: %w", e.rank, err)
	}
	e.noteLaneCapture(stream, capture)
	if last := e.res.last; last != nil && last != ev && !e.joinedAfter(last, stream.Handle()) {
		if err := captureWait(capture, stream, last); err != nil {
			return nil, fmt.Errorf("ncclgo: rank %d: ordering after the previous launch on another stream: %w", e.rank, err)
		}
	}
	runErr := e.launcher.RunIn(p, stream, capture)
	// Something may be queued even when Run failed: track it all the same.
	e.res.seq++
	if err := e.record(capture, ev, stream); err != nil {
		return nil, errors.Join(runErr, fmt.Errorf("ncclgo: rank %d: %w", e.rank, err))
	}
	e.res.last = ev
	if runErr != nil {
		return ev, fmt.Errorf("ncclgo: rank %d: %w", e.rank, runErr)
	}
	return ev, nil
}

// runCopies queues the copies of p, a one-rank plan that launches no
// kernel, on stream as Settings.UntrackedOneRankCopies says: the copies
// alone, in one call into the driver, tracked by nothing. A copy on a
// stream whose CUDA graph capture was invalidated fails as run's capture
// check does. e.mu is held.
func (e *Engine) runCopies(p *enqueue.Plan, stream *cuda.Stream) error {
	if e.launcher == nil {
		return nil // host-only: nothing runs
	}
	o := &e.ops
	o.Reset()
	first, last, ok, err := e.launcher.Queue(p, stream, o)
	if err == nil && !ok {
		err = errors.New("enqueue: a plan of copies only did not fit one sequence") // Queue takes every copy-only plan
	}
	if err == nil {
		err = o.Run()
	}
	k := 0
	for i := first; err == nil && i <= last; i++ {
		for p.Copies[k].Bytes == 0 {
			k++ // Queue leaves empty copies out
		}
		if err = o.Err(i); err != nil {
			err = fmt.Errorf("enqueue: copy of %d bytes: %w", p.Copies[k].Bytes, err)
		}
		k++
	}
	return e.copiesErr(err)
}

// copiesErr words the failure of runCopies' copies: ErrInvalidUsage on a
// stream whose CUDA graph capture was invalidated, as run's capture check.
func (e *Engine) copiesErr(err error) error {
	if ce := (*cuda.Error)(nil); errors.As(err, &ce) && ce.Code == cuda.ResultStreamCaptureInvalidated {
		return fmt.Errorf("ncclgo: rank %d: %w under CUDA graph capture: %w (%w)", e.rank, ErrInvalidUsage, enqueue.ErrCaptureInvalidated, err)
	}
	if err != nil {
		return fmt.Errorf("ncclgo: rank %d: %w", e.rank, err)
	}
	return nil
}

// RunOneRankCopy runs a collective of a one-rank engine that needs no
// kernel, given as what it plans (cp, from enqueue.OneRankCopy), without
// planning it: nothing for an empty copy (in place, or no bytes), as for
// an empty plan; else, under Settings.UntrackedOneRankCopies, the copy
// alone on stream in one call into the driver, as run queues a plan of
// only that copy (runCopies), with run's checks and errors. The engine's
// lock orders it with Destroy: it queues nothing once Destroy began.
// A plan of copies only has no decisions to log. done is false, with
// nothing done, when e has more than one rank or tracks its copies: the
// caller then plans the call.
func (e *Engine) RunOneRankCopy(cp enqueue.Copy, stream *cuda.Stream) (done bool, err error) {
	if e.nRanks != 1 {
		return false, nil
	}
	if cp.Bytes == 0 {
		return true, nil
	}
	// A one-rank engine shares its GPU with no rank of its own, so it has
	// no lane (laneFor) to enter.
	if !e.s.UntrackedOneRankCopies || e.lanes.shared {
		return false, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.destroyed {
		return true, fmt.Errorf("ncclgo: rank %d: %w", e.rank, ErrDestroyed)
	}
	if err := e.IdleNetError(); err != nil {
		return true, fmt.Errorf("ncclgo: rank %d: nothing launched: %w: %w", e.rank, ErrPeerFailed, err)
	}
	if e.launcher == nil {
		return true, nil // host-only: nothing runs
	}
	// One cgo call: no other thread's per-thread stream can come between.
	if err := stream.MemcpyDtoDAsync(cuda.DevicePtr(cp.Dst), cuda.DevicePtr(cp.Src), cp.Bytes); err != nil {
		return true, e.copiesErr(fmt.Errorf("enqueue: copy of %d bytes: %w", cp.Bytes, err))
	}
	return true, nil
}

// runEager is run's common case in one call into the driver (cuda.Ops):
// the capture check (left out when the caller knows the stream is not
// being captured: noCheck), then runSequence's operations. done is false,
// with nothing queued, when stream is being captured (captured: true), the
// check failed, the plan does not fit one sequence, or the sequence could
// not run: run then takes its general path, which asks again unless the
// stream was found captured. e.mu is held.
func (e *Engine) runEager(p *enqueue.Plan, stream *cuda.Stream, ev *cuda.Event, noCheck bool) (_ *cuda.Event, done, captured bool, _ error) {
	if e.launcher == nil {
		return nil, false, false, nil
	}
	o := &e.ops
	o.Reset()
	ci := -1
	if !noCheck {
		ci = o.Capture(stream)
	}
	ev, done, err := e.queueSequence(p, stream, ev, false)
	if ci >= 0 && o.Ran(ci) && o.Err(ci) == nil && o.CaptureOf(ci) == cuda.CaptureActive {
		return nil, false, true, nil
	}
	return ev, done, false, err
}

// runSequence is runEager on a stream whose capture state the caller
// knows (captured: true while it is being captured), without the check:
// the wait for the previous launch on another stream, the plan's copies
// and launch (enqueue.Launcher.Queue) and the record of ev, in one call
// into the driver, with run's order and its answers to failures. Under
// capture the wait and the record are the graph's external event nodes,
// as enqueue.Capture says. done is false, with nothing queued, when the
// plan does not fit one sequence or the sequence could not run. e.mu is
// held.
func (e *Engine) runSequence(p *enqueue.Plan, stream *cuda.Stream, ev *cuda.Event, captured bool) (_ *cuda.Event, done bool, _ error) {
	if e.launcher == nil {
		return nil, false, nil
	}
	e.ops.Reset()
	return e.queueSequence(p, stream, ev, captured)
}

// queueSequence adds runSequence's operations to e.ops after what the
// caller added (a capture check, which stops them), runs them and reads
// their outcome. e.mu is held.
func (e *Engine) queueSequence(p *enqueue.Plan, stream *cuda.Stream, ev *cuda.Event, captured bool) (_ *cuda.Event, done bool, _ error) {
	o := &e.ops
	checks := o.Len()
	wi := -1
	if last := e.res.last; last != nil && last != ev && !e.joinedAfter(last, stream.Handle()) {
		wi = o.WaitEvent(stream, last, captured, cuda.OpStop)
		if captured {
			noteCapturedWait(last)
		}
	}
	first, last, ok, err := e.launcher.QueueIn(p, stream, o, enqueue.Capture(captured))
	if err != nil || !ok {
		return nil, false, nil // RunIn reports the error
	}
	ri := e.queueRecord(o, ev, stream, captured)
	if err := o.Run(); err != nil {
		return nil, false, nil
	}
	for i := range checks {
		if o.Err(i) != nil || o.CaptureOf(i) != cuda.CaptureNone {
			return nil, false, nil
		}
	}
	if wi >= 0 {
		if err := o.Err(wi); err != nil {
			return nil, true, fmt.Errorf("ncclgo: rank %d: ordering after the previous launch on another stream: %w", e.rank, err)
		}
	}
	runErr := enqueue.QueueErr(p, o, first, last, enqueue.Capture(captured))
	// Something may be queued even when a copy or the launch failed: the
	// record ran all the same (cuda.OpAlways), as in run.
	e.res.seq++
	if err := o.Err(ri); err != nil {
		return nil, true, errors.Join(runErr, fmt.Errorf("ncclgo: rank %d: %w", e.rank, err))
	}
	e.recorded(o, ri, ev, stream)
	e.res.last = ev
	if runErr != nil {
		return ev, true, fmt.Errorf("ncclgo: rank %d: %w", e.rank, runErr)
	}
	return ev, true, nil
}

// logDecisions logs how p runs its calls, at level INFO. e.mu is held.
func (e *Engine) logDecisions(p *enqueue.Plan) {
	for _, d := range p.Decisions {
		if !e.log.Enabled(context.Background(), slog.LevelInfo) {
			break // skip formatting on the launch path when nobody listens
		}
		e.log.Info(fmt.Sprintf("%s %d bytes: %s/%s channels %d threads %d", d.Coll, d.Bytes, algoName(d.Choice), d.Choice.Proto, d.NChannels, d.Choice.NThreads),
			config.SubsysColl.Attr())
	}
}

// eventFor returns the completion event of e's launches on stream, made
// at its first use. e.mu is held.
func (e *Engine) eventFor(stream *cuda.Stream) (*cuda.Event, error) {
	h := stream.Handle()
	if ev, ok := e.events[h].(*cuda.Event); ok {
		return ev, nil
	}
	ev, err := e.cctx.NewEvent(true)
	if err != nil {
		return nil, fmt.Errorf("ncclgo: rank %d: %w", e.rank, err)
	}
	e.events[h] = ev
	return ev, nil
}

func algoName(ch tune.Choice) string {
	if ch.Algo < 0 {
		return "P2P"
	}
	return ch.Algo.String()
}
