package ncclgo

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

// UniqueID identifies a communicator while its ranks initialize: one
// process gets it from GetUniqueID and hands it to every rank (its String
// form travels as text; ParseUniqueID reads it back).
type UniqueID = bootstrap.UniqueID

// Comm is one rank of a communicator. Its methods may be called from any
// goroutine, but, as in NCCL, the ranks of a communicator must issue their
// collectives in the same order.
type Comm struct {
	rank, nRanks, device int
	s                    settings
	log                  *slog.Logger
	net                  bootstrap.Network

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
	// flags is host-mapped memory: uint32 abort flag, uint32 error flag.
	// Abort and Err may run while Destroy frees it: they read it under
	// flagsMu (read-locked), Destroy clears it under the write lock first.
	flags    unsafe.Pointer
	flagsMu  sync.RWMutex
	flagsDev cuda.DevicePtr
	launcher *enqueue.Launcher
	plan     enqueue.Comm
	watch    *ipc.Watcher                  // liveness of other processes' ranks (nil within one process)
	lost     atomic.Pointer[PeerLostError] // the first rank whose process died

	mu        sync.Mutex
	destroyed bool
	finalized bool
	aborted   atomic.Bool
	life      lifetime                // ends at Abort: the bootstrap waits of Split and Shrink
	events    map[uintptr]*cuda.Event // last launch per stream
	userOps   map[RedOp]devOp
	userTypes map[RedOp]DataType
	nextOp    RedOp
	res       residencyState // guarded by mu (residency.go)
	lanes     laneState      // guarded by mu (lane.go)
	split     splitState     // Split and Shrink (split.go)
}

// Rank returns the communicator rank of c (-1 for a nil Comm).
func (c *Comm) Rank() int {
	if c == nil {
		return -1
	}
	return c.rank
}

// Size returns the number of ranks (0 for a nil Comm).
func (c *Comm) Size() int {
	if c == nil {
		return 0
	}
	return c.nRanks
}

// Device returns the CUDA device ordinal c runs on (-1 for a nil Comm).
func (c *Comm) Device() int {
	if c == nil {
		return -1
	}
	return c.device
}

// NChannels returns the number of channels c set up (0 for a nil Comm).
func (c *Comm) NChannels() int {
	if c == nil {
		return 0
	}
	return c.nChannels
}

// errNilComm is the error of a method called on a nil *Comm.
func errNilComm(op string) error {
	return &ArgError{Op: op, Arg: "comm", Value: "nil", Want: "a communicator from InitRank, InitAll, Split or Shrink"}
}

// GetUniqueID starts the bootstrap root of a new communicator in this
// process and returns the id every rank passes to InitRank. The root lives
// until the ranks have all checked in, the bootstrap timeout
// (Options.BootstrapTimeout, NCCL_BOOTSTRAP_TIMEOUT, 120 s by default)
// passes, or ctx ends, whichever comes first; then its listener and
// goroutines are gone. To close it earlier, or to learn how the check-in
// went, use StartRoot instead.
func GetUniqueID(ctx context.Context) (UniqueID, error) {
	r, err := StartRoot(ctx, nil)
	if err != nil {
		return UniqueID{}, fmt.Errorf("ncclgo: GetUniqueID: %w", err)
	}
	return r.ID(), nil
}

// Root is the bootstrap root of one communicator, from StartRoot.
type Root struct {
	r *bootstrap.Root
}

// StartRoot starts the bootstrap root of a new communicator in this
// process, like GetUniqueID, and returns a handle on it. The root stops by
// itself once every rank has checked in, after the bootstrap timeout, or
// when ctx ends; Close stops it at once.
func StartRoot(ctx context.Context, opts *Options) (*Root, error) {
	s, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	r, _, err := bootstrap.NewRoot(ctx, s.bootstrap)
	if err != nil {
		_ = s.logCloser.closeUnused()
		return nil, fmt.Errorf("ncclgo: StartRoot: %w", err)
	}
	// The root logs until it stops: close the log file then.
	go func() {
		<-r.Done()
		_ = s.logCloser.closeUnused()
	}()
	return &Root{r: r}, nil
}

// ID returns the id every rank passes to InitRank (the zero UniqueID for
// a nil Root).
func (r *Root) ID() UniqueID {
	if r == nil {
		return UniqueID{}
	}
	return r.r.ID()
}

// Wait waits until the root stops (or ctx ends) and returns how the
// check-in went: nil once every rank received the table, or an error
// matching bootstrap.ErrTimeout that names the ranks that never checked in.
func (r *Root) Wait(ctx context.Context) error {
	if r == nil {
		return errNilRoot("Root.Wait")
	}
	return r.r.Wait(ctx)
}

// Close stops the root if it is still serving and waits until its
// listener is closed and its goroutines have exited. It is safe to call
// more than once.
func (r *Root) Close() error {
	if r == nil {
		return errNilRoot("Root.Close")
	}
	return r.r.Close()
}

// errNilRoot is the error of a method called on a nil *Root.
func errNilRoot(op string) error {
	return &ArgError{Op: op, Arg: "root", Value: "nil", Want: "a root from StartRoot"}
}

// InitRank creates rank `rank` of a communicator of nRanks ranks on CUDA
// device `device`, joining the others through the bootstrap root that id
// names. Every rank must call it, concurrently (ranks may be goroutines of
// one process, or processes of one host). Ranks of different processes
// sharing a GPU need MPS (see ErrSharedGPUNeedsMPS); ranks on different
// hosts cannot be connected yet (ErrNoTransport).
func InitRank(ctx context.Context, nRanks int, id UniqueID, rank, device int, opts *Options) (*Comm, error) {
	if nRanks < 1 || nRanks > bootstrap.MaxRanks {
		return nil, &ArgError{Op: "InitRank", Arg: "nRanks", Value: nRanks, Want: fmt.Sprintf("1..%d", bootstrap.MaxRanks)}
	}
	if rank < 0 || rank >= nRanks {
		return nil, &ArgError{Op: "InitRank", Arg: "rank", Value: rank, Want: fmt.Sprintf("0..%d", nRanks-1)}
	}
	if err := checkDevice("InitRank", "device", device); err != nil {
		return nil, err
	}
	s, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	conn, err := bootstrap.Init(ctx, id, rank, nRanks, s.bootstrap)
	if err != nil {
		_ = s.logCloser.closeUnused()
		return nil, fmt.Errorf("ncclgo: InitRank: rank %d: %w", rank, err)
	}
	s.logCloser.retain()
	c, err := initRank(ctx, conn, device, s)
	if err != nil {
		conn.Abort()
		_ = conn.Close()
		_ = s.logCloser.release()
		return nil, err
	}
	return c, nil
}

// InitAll creates a communicator whose ranks are driven by this process,
// rank i on devices[i]; a device may repeat (ranks sharing a GPU). It uses
// an in-process bootstrap network. Without a usable CUDA driver it fails
// with an error that matches cuda.ErrNoDriver.
func InitAll(ctx context.Context, devices []int, opts *Options) ([]*Comm, error) {
	if len(devices) == 0 || len(devices) > bootstrap.MaxRanks {
		return nil, &ArgError{Op: "InitAll", Arg: "len(devices)", Value: len(devices), Want: fmt.Sprintf("1..%d device ordinals", bootstrap.MaxRanks)}
	}
	if err := cuda.Init(); err != nil {
		return nil, fmt.Errorf("ncclgo: InitAll: %w", err)
	}
	for i, d := range devices {
		if err := checkDevice("InitAll", fmt.Sprintf("devices[%d]", i), d); err != nil {
			return nil, err
		}
	}
	s, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	nets, err := bootstrap.NewInProcessOptions(len(devices), s.bootstrap)
	if err != nil {
		_ = s.logCloser.closeUnused()
		return nil, fmt.Errorf("ncclgo: InitAll: %w", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	comms := make([]*Comm, len(devices))
	errs := make([]error, len(devices))
	var wg sync.WaitGroup
	for range devices {
		// Every rank's reference first: a rank failing at once releases
		// its own, which must not close the file under the others.
		s.logCloser.retain()
	}
	for i := range devices {
		wg.Go(func() {
			c, err := initRank(ctx, nets[i], devices[i], s)
			if err != nil {
				errs[i] = err
				_ = s.logCloser.release()
				cancel(fmt.Errorf("rank %d failed: %w", i, err))
				return
			}
			comms[i] = c
		})
	}
	wg.Wait()
	if err := firstRootCause(errs); err != nil {
		for i, c := range comms {
			if c != nil {
				_ = c.Destroy()
			} else {
				nets[i].Abort()
				_ = nets[i].Close()
			}
		}
		return nil, err
	}
	return comms, nil
}

// firstRootCause picks the error of the rank that failed first on its own
// (not because another rank's failure cancelled the context).
func firstRootCause(errs []error) error {
	var first error
	for _, e := range errs {
		if e == nil {
			continue
		}
		if first == nil {
			first = e
		}
		if !errors.Is(e, context.Canceled) {
			return e
		}
	}
	return first
}

func checkDevice(op, arg string, device int) error {
	if device < 0 {
		return &ArgError{Op: op, Arg: arg, Value: device, Want: "a device ordinal >= 0"}
	}
	if err := cuda.Init(); err != nil {
		return fmt.Errorf("ncclgo: %s: %w", op, err)
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return fmt.Errorf("ncclgo: %s: %w", op, err)
	}
	if device >= n {
		return &ArgError{Op: op, Arg: arg, Value: device, Want: fmt.Sprintf("a device ordinal in 0..%d (%d devices)", n-1, n)}
	}
	return nil
}

// Abort stops the communicator: it sets the device abort flag, so that
// every kernel of it stops waiting (recording NG_DEV_ERR_ABORTED), and
// wakes every bootstrap waiter of it. Calls made afterwards fail with
// ErrAborted; Destroy is still needed to free the communicator.
//
// As in NCCL, communicators made from c by Split and Shrink go on: their
// bootstrap rides on c's network, which then stays open for them (only
// c's own waits end), and c's peers' next bootstrap exchange fails at once
// with bootstrap.ErrCollectiveBroken instead of waiting for this rank.
func (c *Comm) Abort() {
	if c == nil {
		return
	}
	c.aborted.Store(true)
	c.setAbortFlag()
	c.life.end(ErrAborted)
	abortNet(c.net)
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

// bind returns ctx, ended also when the lifetime ends (with its cause),
// and the function that releases it.
func (l *lifetime) bind(ctx context.Context) (context.Context, func()) {
	l.init()
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.ctx, func() { cancel(context.Cause(l.ctx)) })
	return ctx, func() { stop(); cancel(nil) }
}

// setAbortFlag tells the kernels to stop waiting; it does nothing once
// Destroy freed the flags.
func (c *Comm) setAbortFlag() {
	c.flagsMu.RLock()
	defer c.flagsMu.RUnlock()
	if c.flags != nil {
		atomic.StoreUint32((*uint32)(c.flags), 1)
	}
}

// errorCode reads the device error flag (0 once Destroy freed it).
func (c *Comm) errorCode() uint32 {
	c.flagsMu.RLock()
	defer c.flagsMu.RUnlock()
	if c.flags == nil {
		return 0
	}
	return atomic.LoadUint32((*uint32)(unsafe.Add(c.flags, 4)))
}

// Err returns the error a kernel of c reported (a *DeviceError), or
// ErrAborted after Abort, or nil. Like ncclCommGetAsyncError it does not
// wait; see Wait. It may be called while another goroutine destroys c.
func (c *Comm) Err() error {
	if c == nil {
		return errNilComm("Err")
	}
	if err := c.lostErr(); err != nil {
		return err
	}
	if code := c.errorCode(); code != 0 {
		return &DeviceError{Rank: c.rank, Code: code}
	}
	if c.aborted.Load() {
		return ErrAborted
	}
	return nil
}

// Wait waits until every operation c has launched so far is done, or ctx
// is done, and then returns Err (or ctx's error). It polls, so a deadlocked
// or aborted kernel shows up as the context's error or as the device error.
// When another goroutine destroys c meanwhile, Wait ends with an error
// matching ErrDestroyed.
func (c *Comm) Wait(ctx context.Context) error {
	if c == nil {
		return errNilComm("Wait")
	}
	c.mu.Lock()
	if c.destroyed {
		c.mu.Unlock()
		return fmt.Errorf("ncclgo: Wait: %w", ErrDestroyed)
	}
	evs := make([]*cuda.Event, 0, len(c.events))
	for _, e := range c.events {
		evs = append(evs, e)
	}
	c.mu.Unlock()
	delay := 10 * time.Microsecond
	for _, e := range evs {
		for {
			done, err := c.query(e)
			if err != nil {
				return fmt.Errorf("ncclgo: rank %d: Wait: %w", c.rank, err)
			}
			if done {
				break
			}
			if err := c.Err(); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(delay):
			}
			delay = min(2*delay, time.Millisecond)
		}
	}
	return c.Err()
}

// query asks whether e, one of c's launch events, has completed. It runs
// under mu: Destroy, which may be running meanwhile, destroys the events
// under mu once it is done with them, and then c is destroyed.
func (c *Comm) query(e *cuda.Event) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return false, ErrDestroyed
	}
	return e.Query()
}

// Finalize ends the use of c (NCCL's ncclCommFinalize): calls made
// afterwards fail with ErrInvalidUsage, and Finalize waits until every
// operation c launched so far has completed, or ctx ends, then reports c's
// error state (see Wait). It frees nothing: Destroy still must be called,
// and then finds no work left to wait for. Finalize may be called again,
// for instance after ctx ended.
func (c *Comm) Finalize(ctx context.Context) error {
	if c == nil {
		return errNilComm("Finalize")
	}
	c.mu.Lock()
	if c.destroyed {
		c.mu.Unlock()
		return fmt.Errorf("ncclgo: Finalize: %w", ErrDestroyed)
	}
	c.finalized = true
	c.mu.Unlock()
	if err := c.Wait(ctx); err != nil {
		return fmt.Errorf("ncclgo: rank %d: Finalize: %w", c.rank, err)
	}
	return nil
}

// Destroy waits for every operation c launched, then frees everything c
// holds (device memory, connections, the bootstrap network, its
// goroutines). The other ranks must not be using the communicator any
// more: their kernels may read this rank's buffers.
//
// The wait is bounded. When the launches have not finished within the
// communicator's timeout (Options.BootstrapTimeout, else
// NCCL_BOOTSTRAP_TIMEOUT, else 120 s) — a peer never launched its side, say
// — Destroy aborts c and this process's other ranks of the communicator
// (as Abort does: their kernels wait on each other, so none of them could
// finish; but the bootstrap connections that Split children share stay
// up), waits up to 10 s more for the kernels to react to the abort
// flag, frees everything, and returns an error that names the streams
// whose work did not finish and matches context.DeadlineExceeded and
// ErrAborted. After Abort it waits only for that reaction. Should the
// kernels not stop even then, Destroy leaves c's device memory,
// connections and events allocated (the kernels still use them; the
// residency ledger keeps counting their blocks until they end) and says so
// in its error. Freeing device memory waits for every kernel of the
// device; when another communicator's kernels keep it from finishing
// within the timeout, Destroy returns an error matching
// context.DeadlineExceeded and the release completes in the background.
//
// Side by side, the three ways to end a communicator:
//
//   - Wait(ctx) waits, as long as ctx allows, for what c launched; it
//     frees nothing and leaves c usable. Finalize(ctx) is Wait that also
//     refuses later calls (ErrInvalidUsage), NCCL's ncclCommFinalize.
//   - Abort stops c's kernels and wakes its bootstrap waiters at once; it
//     frees nothing, returns nothing and makes later calls fail with
//     ErrAborted. Use it on every rank of a hung communicator before
//     Destroy, so that Destroy does not first wait for the timeout.
//   - Destroy waits (bounded, as above), then frees; it is the only one
//     that releases resources and must be called once per rank, also after
//     Abort.
func (c *Comm) Destroy() error {
	if c == nil {
		return errNilComm("Destroy")
	}
	c.mu.Lock()
	if c.destroyed {
		c.mu.Unlock()
		return fmt.Errorf("ncclgo: Destroy: %w", ErrDestroyed)
	}
	c.destroyed = true
	evs := c.events
	c.events = nil
	c.mu.Unlock()
	handles := slices.Sorted(maps.Keys(evs))
	comps := make([]residency.Completion, len(handles))
	for i, h := range handles {
		comps[i] = evs[h]
	}
	wait := orDefault(c.res.timeout, bootstrap.DefaultTimeout)
	if c.aborted.Load() {
		wait = min(wait, abortGrace)
	}
	var errs []error
	pending, err := awaitEvents(comps, wait)
	errs = append(errs, err)
	if len(pending) > 0 {
		streams := make([]string, len(pending))
		for i, p := range pending {
			streams[i] = fmt.Sprintf("%#x", handles[p])
		}
		what := fmt.Sprintf("the launches on stream(s) %s had not finished after %v", strings.Join(streams, ", "), wait)
		c.abortColocated()
		left := make([]residency.Completion, len(pending))
		for i, p := range pending {
			left[i] = comps[p]
		}
		still, err := awaitEvents(left, abortGrace)
		errs = append(errs, err)
		if len(still) > 0 {
			c.leaveResidency() // the ledger keeps counting the running kernels
			return fmt.Errorf("ncclgo: rank %d: Destroy: %s, and %d still ran %v after the abort; the communicator's device memory, connections and events stay allocated: %w (%w)",
				c.rank, what, len(still), abortGrace, context.DeadlineExceeded, ErrAborted)
		}
		errs = append(errs, fmt.Errorf("%s; aborted them and this process's other ranks of the communicator: %w (%w)", what, context.DeadlineExceeded, ErrAborted))
	}
	// Off the ledger before the events it may query are destroyed, and
	// under mu, as a Wait of another goroutine may be querying one (query).
	c.leaveResidency()
	c.mu.Lock()
	for _, e := range evs {
		errs = append(errs, e.Destroy())
	}
	c.mu.Unlock()
	// Freeing device memory waits for every kernel of the device, other
	// communicators' too: bound that wait as well.
	freed := make(chan error, 1)
	go func() { freed <- c.free() }()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case err := <-freed:
		errs = append(errs, err)
	case <-timer.C:
		errs = append(errs, fmt.Errorf("freeing its memory waited %v: freeing device memory waits for every kernel of device %d, and some (of another communicator) do not finish; the release completes in the background once they do: %w",
			wait, c.device, context.DeadlineExceeded))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ncclgo: rank %d: Destroy: %w", c.rank, err)
	}
	c.log.Info("communicator destroyed", config.SubsysInit.Attr())
	return nil
}

// free releases what initRank acquired; it tolerates a partial init.
func (c *Comm) free() error {
	var errs []error
	if c.watch != nil {
		// First: the callback may still set the flags freed below.
		errs = append(errs, c.watch.Close())
		c.watch = nil
	}
	c.leaveResidency()
	if c.launcher != nil {
		errs = append(errs, c.launcher.Close())
		c.launcher = nil
	}
	errs = append(errs, c.closeLane())
	if c.conns != nil {
		errs = append(errs, c.conns.Close())
		c.conns = nil
	}
	if c.devMem != 0 {
		errs = append(errs, c.cctx.MemFree(c.devMem))
		c.devMem = 0
	}
	// Abort and Err may be reading the flags: take them away first.
	c.flagsMu.Lock()
	flags := c.flags
	c.flags = nil
	c.flagsMu.Unlock()
	if flags != nil && c.cctx != nil {
		errs = append(errs, c.cctx.MemFreeHost(flags))
	}
	// cctx and kset stay set: calls on other goroutines may be reading
	// them (Context, a call's stream check, the planner's lookups) until
	// they see that c is destroyed. free runs once.
	if c.kset != nil {
		errs = append(errs, c.kset.Release())
	}
	if c.net != nil {
		errs = append(errs, closeNet(c.net)) // a view of Split, or a network views share (splitnet.go)
	}
	if c.peers != nil {
		errs = append(errs, c.peers.Close())
		c.peers = nil
	}
	if c.cctx != nil {
		errs = append(errs, c.cctx.Release())
	}
	errs = append(errs, c.s.logCloser.release())
	return errors.Join(errs...)
}

// usable checks that c can take calls.
func (c *Comm) usable(op string) error {
	if c == nil {
		return errNilComm(op)
	}
	c.mu.Lock()
	d, f := c.destroyed, c.finalized
	c.mu.Unlock()
	if d {
		return fmt.Errorf("ncclgo: %s: %w", op, ErrDestroyed)
	}
	if f {
		return fmt.Errorf("ncclgo: %s: rank %d: %w: the communicator was finalized", op, c.rank, ErrInvalidUsage)
	}
	if err := c.lostErr(); err != nil {
		return fmt.Errorf("ncclgo: %s: rank %d: %w", op, c.rank, err)
	}
	if c.aborted.Load() {
		return fmt.Errorf("ncclgo: %s: rank %d: %w", op, c.rank, ErrAborted)
	}
	if code := c.errorCode(); code != 0 {
		return fmt.Errorf("ncclgo: %s: %w", op, &DeviceError{Rank: c.rank, Code: code})
	}
	return nil
}

// run queues a plan on stream and records the stream's completion event,
// which it returns (nil when nothing was queued). A launch on another
// stream than the rank's previous one first waits for that one, so that a
// rank's kernels run one at a time (as NCCL's strong stream orders them);
// the residency ledger counts on it. On a stream being captured into a
// CUDA graph those events become the graph's external event nodes
// (enqueue.Capture), so that every replay is ordered the same way.
func (c *Comm) run(p *enqueue.Plan, stream *cuda.Stream) (*cuda.Event, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return nil, fmt.Errorf("ncclgo: rank %d: %w", c.rank, ErrDestroyed)
	}
	for _, d := range p.Decisions {
		if !c.log.Enabled(context.Background(), slog.LevelInfo) {
			break // skip formatting on the launch path when nobody listens
		}
		c.log.Info(fmt.Sprintf("%s %d bytes: %s/%s channels %d threads %d", d.Coll, d.Bytes, algoName(d.Choice), d.Choice.Proto, d.NChannels, d.Choice.NThreads),
			config.SubsysColl.Attr())
	}
	stream, err := c.laneFor(stream)
	if err != nil {
		return nil, err
	}
	capture, err := enqueue.CaptureOf(stream)
	if errors.Is(err, enqueue.ErrCaptureInvalidated) {
		return nil, fmt.Errorf("ncclgo: rank %d: %w under CUDA graph capture: %w", c.rank, ErrInvalidUsage, err)
	}
	if err != nil {
		return nil, fmt.Errorf("ncclgo: rank %d: %w", c.rank, err)
	}
	h := stream.Handle()
	ev := c.events[h]
	if ev == nil {
		var err error
		if ev, err = c.cctx.NewEvent(true); err != nil {
			return nil, fmt.Errorf("ncclgo: rank %d: %w", c.rank, err)
		}
		c.events[h] = ev
	}
	if last := c.res.last; last != nil && last != ev {
		if err := capture.Wait(stream, last); err != nil {
			return nil, fmt.Errorf("ncclgo: rank %d: ordering after the previous launch on another stream: %w", c.rank, err)
		}
	}
	runErr := c.launcher.RunIn(p, stream, capture)
	// Something may be queued even when Run failed: track it all the same.
	c.res.seq++
	if err := capture.Record(ev, stream); err != nil {
		return nil, errors.Join(runErr, fmt.Errorf("ncclgo: rank %d: %w", c.rank, err))
	}
	c.res.last = ev
	if runErr != nil {
		return ev, fmt.Errorf("ncclgo: rank %d: %w", c.rank, runErr)
	}
	return ev, nil
}

func algoName(ch tune.Choice) string {
	if ch.Algo < 0 {
		return "P2P"
	}
	return ch.Algo.String()
}

// Context returns the CUDA context c runs in: its device's primary context,
// or the one Options.Contexts named (nil for a nil Comm). Streams passed to
// c must belong to it. Destroy releases it.
func (c *Comm) Context() *cuda.Context {
	if c == nil {
		return nil
	}
	return c.cctx
}
