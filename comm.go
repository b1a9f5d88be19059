package ncclgo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/transport"
	"github.com/ncclgo/ncclgo/runtime/transport/ipc"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// UniqueID identifies a communicator while its ranks initialize: one
// process gets it from GetUniqueID and hands it to every rank (its String
// form travels as text; bootstrap.ParseUniqueID reads it back).
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
	flags     unsafe.Pointer // host-mapped: uint32 abort flag, uint32 error flag
	flagsDev  cuda.DevicePtr
	launcher  *enqueue.Launcher
	plan      enqueue.Comm
	watch     *ipc.Watcher                  // liveness of other processes' ranks (nil within one process)
	lost      atomic.Pointer[PeerLostError] // the first rank whose process died

	mu        sync.Mutex
	destroyed bool
	aborted   atomic.Bool
	events    map[uintptr]*cuda.Event // last launch per stream
	userOps   map[RedOp]devOp
	userTypes map[RedOp]DataType
	nextOp    RedOp
}

// Rank returns the communicator rank of c.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks.
func (c *Comm) Size() int { return c.nRanks }

// Device returns the CUDA device ordinal c runs on.
func (c *Comm) Device() int { return c.device }

// NChannels returns the number of channels c set up.
func (c *Comm) NChannels() int { return c.nChannels }

// GetUniqueID starts the bootstrap root of a new communicator in this
// process and returns the id every rank passes to InitRank. The root serves
// one complete check-in of the ranks, then exits.
func GetUniqueID(ctx context.Context) (UniqueID, error) {
	s, err := (*Options)(nil).resolve()
	if err != nil {
		return UniqueID{}, err
	}
	_, id, err := bootstrap.NewRoot(ctx, s.bootstrap)
	if err != nil {
		return UniqueID{}, fmt.Errorf("ncclgo: GetUniqueID: %w", err)
	}
	return id, nil
}

// InitRank creates rank `rank` of a communicator of nRanks ranks on CUDA
// device `device`, joining the others through the bootstrap root that id
// names. Every rank must call it, concurrently (ranks may be goroutines of
// one process, or processes of one host). Ranks of different processes
// sharing a GPU need MPS (see ErrSharedGPUNeedsMPS); ranks on different
// hosts cannot be connected yet (transport.ErrNoTransport).
func InitRank(ctx context.Context, nRanks int, id UniqueID, rank, device int, opts *Options) (*Comm, error) {
	if nRanks < 1 {
		return nil, &ArgError{Op: "InitRank", Arg: "nRanks", Value: nRanks, Want: "at least 1"}
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
	if len(devices) == 0 {
		return nil, &ArgError{Op: "InitAll", Arg: "devices", Value: "[]", Want: "at least one device ordinal"}
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
		return nil, fmt.Errorf("ncclgo: InitAll: %w", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	comms := make([]*Comm, len(devices))
	errs := make([]error, len(devices))
	var wg sync.WaitGroup
	for i := range devices {
		s.logCloser.retain()
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
// wakes every bootstrap waiter. Calls made afterwards fail with
// ErrAborted; Destroy is still needed to free the communicator.
func (c *Comm) Abort() {
	if c == nil {
		return
	}
	c.aborted.Store(true)
	c.setAbortFlag()
	c.net.Abort()
}

// setAbortFlag tells the kernels to stop waiting.
func (c *Comm) setAbortFlag() {
	if c.flags != nil {
		atomic.StoreUint32((*uint32)(c.flags), 1)
	}
}

// errorCode reads the device error flag.
func (c *Comm) errorCode() uint32 {
	if c.flags == nil {
		return 0
	}
	return atomic.LoadUint32((*uint32)(unsafe.Add(c.flags, 4)))
}

// Err returns the error a kernel of c reported (a *DeviceError), or
// ErrAborted after Abort, or nil. Like ncclCommGetAsyncError it does not
// wait; see Wait.
func (c *Comm) Err() error {
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
func (c *Comm) Wait(ctx context.Context) error {
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
			done, err := e.Query()
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

// Destroy waits for every operation c launched, then frees everything c
// holds (device memory, connections, the bootstrap network, its
// goroutines). After Abort it does not wait for the device beyond the
// kernels' reaction to the abort flag. The other ranks must not be using
// the communicator any more: their kernels may read this rank's buffers.
func (c *Comm) Destroy() error {
	if c == nil {
		return &ArgError{Op: "Destroy", Arg: "comm", Value: "nil", Want: "a communicator"}
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
	var errs []error
	for _, e := range evs {
		errs = append(errs, e.Synchronize(), e.Destroy())
	}
	errs = append(errs, c.free())
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
	if c.launcher != nil {
		errs = append(errs, c.launcher.Close())
		c.launcher = nil
	}
	if c.conns != nil {
		errs = append(errs, c.conns.Close())
		c.conns = nil
	}
	if c.devMem != 0 {
		errs = append(errs, c.cctx.MemFree(c.devMem))
		c.devMem = 0
	}
	if c.flags != nil {
		errs = append(errs, c.cctx.MemFreeHost(c.flags))
		c.flags = nil
	}
	if c.kset != nil {
		errs = append(errs, c.kset.Release())
		c.kset = nil
	}
	if c.net != nil {
		errs = append(errs, c.net.Close())
	}
	if c.peers != nil {
		errs = append(errs, c.peers.Close())
		c.peers = nil
	}
	if c.cctx != nil {
		errs = append(errs, c.cctx.Release())
		c.cctx = nil
	}
	errs = append(errs, c.s.logCloser.release())
	return errors.Join(errs...)
}

// usable checks that c can take calls.
func (c *Comm) usable(op string) error {
	if c == nil {
		return &ArgError{Op: op, Arg: "comm", Value: "nil", Want: "a communicator"}
	}
	c.mu.Lock()
	d := c.destroyed
	c.mu.Unlock()
	if d {
		return fmt.Errorf("ncclgo: %s: %w", op, ErrDestroyed)
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

// run queues a plan on stream and records the stream's completion event.
func (c *Comm) run(p *enqueue.Plan, stream *cuda.Stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return fmt.Errorf("ncclgo: rank %d: %w", c.rank, ErrDestroyed)
	}
	for _, d := range p.Decisions {
		if !c.log.Enabled(context.Background(), slog.LevelInfo) {
			break // skip formatting on the launch path when nobody listens
		}
		c.log.Info(fmt.Sprintf("%s %d bytes: %s/%s channels %d threads %d", d.Coll, d.Bytes, algoName(d.Choice), d.Choice.Proto, d.NChannels, d.Choice.NThreads),
			config.SubsysColl.Attr())
	}
	if err := c.launcher.Run(p, stream); err != nil {
		return fmt.Errorf("ncclgo: rank %d: %w", c.rank, err)
	}
	h := stream.Handle()
	ev := c.events[h]
	if ev == nil {
		var err error
		if ev, err = c.cctx.NewEvent(true); err != nil {
			return fmt.Errorf("ncclgo: rank %d: %w", c.rank, err)
		}
		c.events[h] = ev
	}
	if err := ev.Record(stream); err != nil {
		return fmt.Errorf("ncclgo: rank %d: %w", c.rank, err)
	}
	return nil
}

func algoName(ch tune.Choice) string {
	if ch.Algo < 0 {
		return "P2P"
	}
	return ch.Algo.String()
}
