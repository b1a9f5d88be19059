package ncclgo

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/comm"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/topo"
)

// DefaultNChannels is the number of channels a communicator sets up when
// NCCL_NCHANNELS / NCCL_MAX_NCHANNELS / NCCL_MIN_NCHANNELS do not say
// otherwise (fewer when ranks share a GPU and fewer keep them resident).
const DefaultNChannels = comm.DefaultNChannels

// Comm is one rank of a communicator. Its methods may be called from any
// goroutine, but, as in NCCL, the ranks of a communicator must issue their
// collectives in the same order.
type Comm struct {
	e    *comm.Engine // the rank's machinery: setup, launches, liveness, teardown
	zero sync.Once    // gives the zero Comm an engine (engine)

	// What the engine set up for good, copied for the calls' checks.
	rank, nRanks, device int
	cctx                 *cuda.Context
	layout               topo.Layout

	mu        sync.Mutex // guards the PreMulSum ops
	userOps   map[RedOp]devOp
	userTypes map[RedOp]DataType
	nextOp    RedOp

	endUsable func() error // usableAtEnd's answer, made once by newComm
}

// newComm wraps a rank's engine.
func newComm(e *comm.Engine) *Comm {
	c := &Comm{e: e, rank: e.Rank(), nRanks: e.Size(), device: e.Device(), cctx: e.Context(), layout: e.Layout(),
		userOps: map[RedOp]devOp{}, userTypes: map[RedOp]DataType{}, nextOp: NumRedOps}
	c.endUsable = func() error { return c.usable("Group.End") }
	return c
}

// engine returns c's engine. The zero Comm gets one of no ranks and no
// device on first use, so that its methods behave as on a communicator
// with nothing launched.
func (c *Comm) engine() *comm.Engine {
	c.zero.Do(func() {
		if c.e == nil {
			c.e = comm.NewHostOnly(nil, 0, 0, 0, comm.Settings{}, nil)
		}
	})
	return c.e
}

// Rank returns the communicator rank of c (-1 for a nil Comm).
func (c *Comm) Rank() int {
	if c == nil {
		return -1
	}
	return c.engine().Rank()
}

// Size returns the number of ranks (0 for a nil Comm).
func (c *Comm) Size() int {
	if c == nil {
		return 0
	}
	return c.engine().Size()
}

// Device returns the CUDA device ordinal c runs on (-1 for a nil Comm).
func (c *Comm) Device() int {
	if c == nil {
		return -1
	}
	return c.engine().Device()
}

// NChannels returns the number of channels c set up (0 for a nil Comm).
func (c *Comm) NChannels() int {
	if c == nil {
		return 0
	}
	return c.engine().NChannels()
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
// itself once every rank has checked in and acknowledged its table, after
// the bootstrap timeout, or when ctx ends; Close stops it at once.
func StartRoot(ctx context.Context, opts *Options) (*Root, error) {
	s, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	r, _, err := bootstrap.NewRoot(ctx, s.Bootstrap)
	if err != nil {
		_ = s.LogFile.CloseUnused()
		return nil, fmt.Errorf("ncclgo: StartRoot: %w", err)
	}
	// The root logs until it stops: close the log file then.
	go func() {
		<-r.Done()
		_ = s.LogFile.CloseUnused()
	}()
	return &Root{r: r}, nil
}

// ID returns the id every rank passes to InitRank (the zero UniqueID for
// a nil Root).
func (r *Root) ID() UniqueID {
	if r == nil {
		return UniqueID{}
	}
	return UniqueID(r.r.ID())
}

// Wait waits until the root stops (or ctx ends) and returns how the
// check-in went: nil once every rank received the table, or an error
// matching ErrTimeout that names the ranks that never checked in.
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
// one process, or processes of one or several hosts). Ranks of different
// processes sharing a GPU need MPS (see ErrSharedGPUNeedsMPS); ranks on
// different hosts (or given distinct NCCL_HOSTID values) connect over the
// network.
func InitRank(ctx context.Context, nRanks int, id UniqueID, rank, device int, opts *Options) (*Comm, error) {
	return initRank(ctx, "InitRank", nRanks, []UniqueID{id}, rank, device, opts)
}

// InitRankScalable is InitRank with several bootstrap roots, as NCCL's
// ncclCommInitRankScalable: ids[i] (from GetUniqueID or StartRoot, each in
// some process of the job) serves a slice of the ranks, so that no root
// answers them all. Every rank passes the same ids in the same order;
// len(ids) must be 1..min(32, nRanks).
func InitRankScalable(ctx context.Context, nRanks int, ids []UniqueID, rank, device int, opts *Options) (*Comm, error) {
	return initRank(ctx, "InitRankScalable", nRanks, ids, rank, device, opts)
}

func initRank(ctx context.Context, op string, nRanks int, ids []UniqueID, rank, device int, opts *Options) (*Comm, error) {
	if nRanks < 1 || nRanks > bootstrap.MaxRanks {
		return nil, &ArgError{Op: op, Arg: "nRanks", Value: nRanks, Want: fmt.Sprintf("1..%d", bootstrap.MaxRanks)}
	}
	if rank < 0 || rank >= nRanks {
		return nil, &ArgError{Op: op, Arg: "rank", Value: rank, Want: fmt.Sprintf("0..%d", nRanks-1)}
	}
	if maxIDs := min(bootstrap.MaxRoots, nRanks); len(ids) < 1 || len(ids) > maxIDs {
		return nil, &ArgError{Op: op, Arg: "len(ids)", Value: len(ids), Want: fmt.Sprintf("1..%d unique ids", maxIDs)}
	}
	if err := checkDevice(op, "device", device); err != nil {
		return nil, err
	}
	s, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	bids := make([]bootstrap.UniqueID, len(ids))
	for i, id := range ids {
		bids[i] = bootstrap.UniqueID(id)
	}
	conn, err := bootstrap.JoinScalable(ctx, bids, rank, nRanks, s.Bootstrap)
	if err != nil {
		_ = s.LogFile.CloseUnused()
		return nil, fmt.Errorf("ncclgo: %s: rank %d: %w", op, rank, err)
	}
	s.LogFile.Retain()
	e, err := comm.Init(ctx, conn, device, s)
	if err != nil {
		conn.Abort()
		_ = conn.Close()
		_ = s.LogFile.Release()
		return nil, err
	}
	return newComm(e), nil
}

// InitAll creates a communicator whose ranks are driven by this process,
// rank i on devices[i]; a device may repeat (ranks sharing a GPU). It uses
// an in-process bootstrap network. Without a usable CUDA driver it fails
// with an error that matches ErrNoDriver.
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
	nets, err := bootstrap.NewInProcessOptions(len(devices), s.Bootstrap)
	if err != nil {
		_ = s.LogFile.CloseUnused()
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
		s.LogFile.Retain()
	}
	for i := range devices {
		wg.Go(func() {
			e, err := comm.Init(ctx, nets[i], devices[i], s)
			if err != nil {
				errs[i] = err
				_ = s.LogFile.Release()
				cancel(fmt.Errorf("rank %d failed: %w", i, err))
				return
			}
			comms[i] = newComm(e)
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
// with ErrCollectiveBroken instead of waiting for this rank.
func (c *Comm) Abort() {
	if c == nil {
		return
	}
	c.engine().Abort()
}

// Err returns the error a kernel of c reported (a *DeviceError), or
// ErrAborted after Abort, or nil. Like ncclCommGetAsyncError it does not
// wait; see Wait. A peer on another host that aborted or exited while
// nothing of c ran leaves Err nil (see ErrPeerFailed). It may be called while another goroutine destroys c.
func (c *Comm) Err() error {
	if c == nil {
		return errNilComm("Err")
	}
	if l := c.engine().Lost(); l != nil {
		return &PeerLostError{Rank: l.Rank, PID: l.PID, Host: l.Host}
	}
	if err := c.engine().NetError(); err != nil {
		return fmt.Errorf("ncclgo: %w: %w", ErrAborted, err)
	}
	if code := c.engine().ErrorCode(); code != 0 {
		return &DeviceError{Rank: c.engine().Rank(), Code: code}
	}
	if c.engine().Aborted() {
		return ErrAborted
	}
	return nil
}

// Wait waits until every operation c has launched so far is done (but
// the copies that Options.UntrackedOneRankCopies leaves to the caller's
// stream), or ctx is done, and then returns Err (or ctx's error). It polls, so a deadlocked
// or aborted kernel shows up as the context's error or as the device error.
// When another goroutine destroys c meanwhile, Wait ends with an error
// matching ErrDestroyed.
func (c *Comm) Wait(ctx context.Context) error {
	if c == nil {
		return errNilComm("Wait")
	}
	return c.engine().Wait(ctx, c.Err)
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
	if err := c.engine().Finalize(); err != nil {
		return err
	}
	if err := c.Wait(ctx); err != nil {
		return fmt.Errorf("ncclgo: rank %d: Finalize: %w", c.engine().Rank(), err)
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
// kernels not stop even then, or should Destroy be unable to tell whether
// they did (querying a launch's completion event fails, as on a CUDA
// context that faulted), it frees nothing a kernel may touch: c's device
// memory, host-mapped flags, connections (a NET connection's host
// staging included), module, events and CUDA context stay allocated (the
// residency ledger keeps counting the kernels' blocks until they end),
// only the bootstrap network and the liveness watcher are closed, and its
// error names the streams and what was left. Freeing device memory waits for every kernel of the
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
	return c.engine().Destroy()
}

// usable checks that c can take calls.
func (c *Comm) usable(op string) error {
	if c == nil {
		return errNilComm(op)
	}
	e := c.engine()
	d, f := e.State()
	if d {
		return fmt.Errorf("ncclgo: %s: %w", op, ErrDestroyed)
	}
	rank := e.Rank()
	if f {
		return fmt.Errorf("ncclgo: %s: rank %d: %w: the communicator was finalized", op, rank, ErrInvalidUsage)
	}
	if l := e.Lost(); l != nil {
		return fmt.Errorf("ncclgo: %s: rank %d: %w", op, rank, &PeerLostError{Rank: l.Rank, PID: l.PID, Host: l.Host})
	}
	if err := e.NetError(); err != nil {
		return fmt.Errorf("ncclgo: %s: rank %d: %w: %w", op, rank, ErrAborted, err)
	}
	if e.Aborted() {
		return fmt.Errorf("ncclgo: %s: rank %d: %w", op, rank, ErrAborted)
	}
	if err := e.IdleNetError(); err != nil {
		return fmt.Errorf("ncclgo: %s: rank %d: %w: %w", op, rank, ErrPeerFailed, err)
	}
	if code := e.ErrorCode(); code != 0 {
		return fmt.Errorf("ncclgo: %s: %w", op, &DeviceError{Rank: rank, Code: code})
	}
	return nil
}

// Context returns the CUDA context c runs in: its device's primary context,
// or the one Options.Contexts named (nil for a nil Comm). Streams passed to
// c must belong to it. Destroy releases it.
func (c *Comm) Context() *cuda.Context {
	if c == nil {
		return nil
	}
	return c.engine().Context()
}
