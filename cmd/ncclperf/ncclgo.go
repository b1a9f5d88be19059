package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/internal/diag"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// ncclgoBackend runs the sweep through ncclgo's runtime: one communicator of
// len(devices) ranks in this process, every rank's call in one group.
type ncclgoBackend struct {
	comms    []*ncclgo.Comm
	initTime time.Duration
	// windows (-R 2): the buffers registered as windows, by address.
	windows bool
	wins    map[cuda.DevicePtr]*ncclgo.Window
}

// With ranks in several processes (c.mp), this process's one rank joins
// with InitRank on its device; rank 0 starts the bootstrap root and hands
// its id to the others over the job's control channel.
func openNcclgo(c *config) (*ncclgoBackend, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	opts := &ncclgo.Options{KernelImage: c.fatbin, P2PChannelsPerPeer: c.p2pPerPeer}
	if c.mp != nil {
		// A lost rank ends the wait at once.
		stop := context.AfterFunc(c.mp.g.Context(), cancel)
		defer stop()
		comm, err := initRank(ctx, c, opts)
		if err != nil {
			if lost := c.mp.alive(); lost != nil {
				err = fmt.Errorf("%w (%w)", lost, err)
			}
			return nil, fmt.Errorf("ncclgo init: %w", err)
		}
		// -R 2: one rank per process registers every buffer as a window,
		// in the same order on every process (measureAll's). Ranks of
		// one process need none: DIRECT reads their buffers as they are.
		return &ncclgoBackend{comms: []*ncclgo.Comm{comm}, initTime: time.Since(start), windows: c.register == 2,
			wins: map[cuda.DevicePtr]*ncclgo.Window{}}, nil
	}
	comms, err := ncclgo.InitAll(ctx, c.devices, opts)
	if err != nil {
		return nil, fmt.Errorf("ncclgo init: %w", err)
	}
	return &ncclgoBackend{comms: comms, initTime: time.Since(start)}, nil
}

// initRank creates this process's rank (c.rank0) of a communicator of
// c.nRanks ranks in as many processes.
func initRank(ctx context.Context, c *config, opts *ncclgo.Options) (*ncclgo.Comm, error) {
	var mine []byte
	if c.rank0 == 0 {
		root, err := ncclgo.StartRoot(ctx, opts)
		if err != nil {
			return nil, err
		}
		defer root.Close()
		mine = []byte(root.ID().String())
	}
	ids, err := c.mp.g.AllGather(ctx, mine)
	if err != nil {
		return nil, fmt.Errorf("sharing rank 0's unique id: %w", err)
	}
	id, err := ncclgo.ParseUniqueID(string(ids[0]))
	if err != nil {
		return nil, fmt.Errorf("rank 0's unique id: %w", err)
	}
	return ncclgo.InitRank(ctx, c.nRanks, id, c.rank0, c.devices[c.rank0], opts)
}

func (b *ncclgoBackend) Name() string {
	return fmt.Sprintf("%d ranks, %d channels, init %v", b.comms[0].Size(), b.comms[0].NChannels(), b.initTime.Round(time.Millisecond))
}

func (b *ncclgoBackend) Run(c coll, send, recv []cuda.DevicePtr, count int, dt dataType, op redOp, root int, streams []*cuda.Stream) error {
	g := ncclgo.NewGroup()
	for r, comm := range b.comms { // r: this process's rank index
		var err error
		rdt, rop := ncclgo.DataType(dt), ncclgo.RedOp(op)
		switch c {
		case collAllReduce:
			err = g.AllReduce(comm, send[r], recv[r], count, rdt, rop, streams[r])
		case collAllGather:
			err = g.AllGather(comm, send[r], recv[r], count, rdt, streams[r])
		case collReduceScatter:
			err = g.ReduceScatter(comm, send[r], recv[r], count, rdt, rop, streams[r])
		case collBroadcast:
			err = g.Broadcast(comm, send[r], recv[r], count, rdt, root, streams[r])
		case collReduce:
			err = g.Reduce(comm, send[r], recv[r], count, rdt, rop, root, streams[r])
		case collSendRecv:
			me, n := comm.Rank(), comm.Size()
			err = g.Send(comm, send[r], count, rdt, (me+1)%n, streams[r])
			if err == nil {
				err = g.Recv(comm, recv[r], count, rdt, (me+n-1)%n, streams[r])
			}
		case collAllToAll:
			err = g.AllToAll(comm, send[r], recv[r], count, rdt, streams[r])
		default:
			err = fmt.Errorf("ncclgo backend: collective %s not supported", c)
		}
		if err != nil {
			g.Discard()
			return err
		}
	}
	if err := g.End(); err != nil {
		return err
	}
	for _, comm := range b.comms {
		if err := comm.Err(); err != nil {
			return err
		}
	}
	return nil
}

// AsyncErr reports rank r's asynchronous error (Comm.Err, ncclgo's
// ncclCommGetAsyncError), which drain polls while r's stream is busy.
func (b *ncclgoBackend) AsyncErr(r int) error { return b.comms[r].Err() }

// Begin does nothing: every ncclgo call makes its rank's context current
// itself.
func (b *ncclgoBackend) Begin() error { return nil }

// Dump says where every rank's connections stand (internal/diag), for
// -T's error; the reads may block behind a hung kernel, so it gives up
// after a few seconds.
func (b *ncclgoBackend) Dump() string {
	comms := make([]any, len(b.comms))
	for i, c := range b.comms {
		comms[i] = c
	}
	return diag.DumpWithin(comms, 5*time.Second)
}

// Alloc allocates with cuMemAlloc, as ncclgo's users do (legacy IPC
// exports it, for windows), and with -R 2 registers it as a window.
func (b *ncclgoBackend) Alloc(r int, ctx *cuda.Context, n uint64) (cuda.DevicePtr, error) {
	p, err := ctx.MemAlloc(n)
	if err != nil || !b.windows {
		return p, err
	}
	wctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := b.comms[r].RegisterWindow(wctx, p, n)
	if err != nil {
		_ = ctx.MemFree(p)
		return 0, fmt.Errorf("-R 2: registering rank %d's %d-byte buffer: %w", r, n, err)
	}
	b.wins[p] = w
	return p, nil
}

// Free deregisters p's window (-R 2) and frees it.
func (b *ncclgoBackend) Free(r int, ctx *cuda.Context, p cuda.DevicePtr) error {
	var err error
	if w := b.wins[p]; w != nil {
		delete(b.wins, p)
		wctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err = w.Deregister(wctx)
		cancel()
	}
	if ferr := ctx.MemFree(p); err == nil {
		err = ferr
	}
	return err
}

func (b *ncclgoBackend) Close() error {
	var first error
	for _, c := range b.comms {
		if err := c.Destroy(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Abort stops the communicators' kernels, then frees them (for a job that
// lost a rank: their kernels may wait for it).
func (b *ncclgoBackend) Abort() error {
	for _, c := range b.comms {
		c.Abort()
	}
	return b.Close()
}
