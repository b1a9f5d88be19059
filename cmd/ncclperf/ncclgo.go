package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// ncclgoBackend runs the sweep through ncclgo's runtime: one communicator of
// len(devices) ranks in this process, every rank's call in one group.
type ncclgoBackend struct {
	comms    []*ncclgo.Comm
	initTime time.Duration
}

func openNcclgo(c *config) (*ncclgoBackend, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	comms, err := ncclgo.InitAll(ctx, c.devices, &ncclgo.Options{KernelImage: c.fatbin})
	if err != nil {
		return nil, fmt.Errorf("ncclgo init: %w", err)
	}
	return &ncclgoBackend{comms: comms, initTime: time.Since(start)}, nil
}

func (b *ncclgoBackend) Name() string {
	return fmt.Sprintf("%d ranks, %d channels, init %v", len(b.comms), b.comms[0].NChannels(), b.initTime.Round(time.Millisecond))
}

func (b *ncclgoBackend) Run(c coll, send, recv []cuda.DevicePtr, count int, dt dataType, op redOp, root int, streams []*cuda.Stream) error {
	g := ncclgo.NewGroup()
	for r, comm := range b.comms {
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
			n := len(b.comms)
			err = g.Send(comm, send[r], count, rdt, (r+1)%n, streams[r])
			if err == nil {
				err = g.Recv(comm, recv[r], count, rdt, (r+n-1)%n, streams[r])
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

// Begin does nothing: every ncclgo call makes its rank's context current
// itself.
func (b *ncclgoBackend) Begin() error { return nil }

// Alloc allocates with cuMemAlloc, as ncclgo's users do.
func (b *ncclgoBackend) Alloc(r int, ctx *cuda.Context, n uint64) (cuda.DevicePtr, error) {
	return ctx.MemAlloc(n)
}

func (b *ncclgoBackend) Free(r int, ctx *cuda.Context, p cuda.DevicePtr) error { return ctx.MemFree(p) }

func (b *ncclgoBackend) Close() error {
	var first error
	for _, c := range b.comms {
		if err := c.Destroy(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
