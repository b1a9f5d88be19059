package ncclgo_test

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"
	"unsafe"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// rank is what each example keeps per rank: its communicator, a stream of
// the communicator's context and device buffers.
type rank struct {
	comm   *ncclgo.Comm
	stream *cuda.Stream
	bufs   []cuda.DevicePtr
}

// newRank makes a stream and n float32 buffers of count elements, the
// first filled with value.
func newRank(c *ncclgo.Comm, n, count int, value float32) (*rank, error) {
	s, err := c.Context().NewStream(true)
	if err != nil {
		return nil, err
	}
	r := &rank{comm: c, stream: s}
	for i := range n {
		p, err := c.Context().MemAlloc(uint64(4 * count))
		if err != nil {
			return nil, err
		}
		r.bufs = append(r.bufs, p)
		if i == 0 {
			host := make([]float32, count)
			for j := range host {
				host[j] = value
			}
			if err := c.Context().MemcpyHtoD(p, unsafe.Pointer(&host[0]), uint64(4*count)); err != nil {
				return nil, err
			}
		}
	}
	return r, nil
}

// read copies count float32 elements of buffer i back to the host.
func (r *rank) read(i, count int) []float32 {
	host := make([]float32, count)
	if err := r.comm.Context().MemcpyDtoH(unsafe.Pointer(&host[0]), r.bufs[i], uint64(4*count)); err != nil {
		log.Fatal(err)
	}
	return host
}

func (r *rank) free() {
	for _, p := range r.bufs {
		_ = r.comm.Context().MemFree(p)
	}
	_ = r.stream.Destroy()
	_ = r.comm.Destroy()
}

// initRanks makes a communicator of two ranks on GPU 0 and, per rank, n
// buffers of count float32 elements, the first filled with rank+1.
func initRanks(ctx context.Context, n, count int) []*rank {
	comms, err := ncclgo.InitAll(ctx, []int{0, 0}, nil)
	if err != nil {
		log.Fatal(err)
	}
	ranks := make([]*rank, len(comms))
	for i, c := range comms {
		if ranks[i], err = newRank(c, n, count, float32(i+1)); err != nil {
			log.Fatal(err)
		}
	}
	return ranks
}

// waitAll waits for every rank's launched work.
func waitAll(ctx context.Context, ranks []*rank) {
	for _, r := range ranks {
		if err := r.comm.Wait(ctx); err != nil {
			log.Fatal(err)
		}
	}
}

// Two ranks driven by this process, both on GPU 0 (ranks may share a GPU),
// sum a vector.
func ExampleInitAll() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const count = 1024
	ranks := initRanks(ctx, 2, count)
	// Outside a group each call launches at once; ranks of one process
	// that depend on each other must be launched together (a Group) or
	// from separate goroutines. A group is the simplest.
	g := ncclgo.NewGroup()
	for _, r := range ranks {
		if err := g.AllReduce(r.comm, r.bufs[0], r.bufs[1], count, ncclgo.Float32, ncclgo.Sum, r.stream); err != nil {
			log.Fatal(err)
		}
	}
	if err := g.End(); err != nil {
		log.Fatal(err)
	}
	waitAll(ctx, ranks)
	fmt.Println("rank 0 got", ranks[0].read(1, count)[:4])
	for _, r := range ranks {
		r.free()
	}
}

// Each rank is a goroutine that joins the communicator through a unique id,
// as separate processes would (the id's String form travels as text).
func ExampleInitRank() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := ncclgo.GetUniqueID(ctx)
	if err != nil {
		log.Fatal(err)
	}
	text := id.String() // e.g. passed in an environment variable
	const nRanks, count = 2, 256
	results := make([][]float32, nRanks)
	var wg sync.WaitGroup
	for r := range nRanks {
		wg.Go(func() {
			id, err := ncclgo.ParseUniqueID(text)
			if err != nil {
				log.Fatal(err)
			}
			c, err := ncclgo.InitRank(ctx, nRanks, id, r, 0, nil)
			if err != nil {
				log.Fatal(err)
			}
			me, err := newRank(c, 2, count, float32(10*(r+1)))
			if err != nil {
				log.Fatal(err)
			}
			defer me.free()
			if err := c.AllReduce(me.bufs[0], me.bufs[1], count, ncclgo.Float32, ncclgo.Max, me.stream); err != nil {
				log.Fatal(err)
			}
			if err := c.Wait(ctx); err != nil {
				log.Fatal(err)
			}
			results[r] = me.read(1, count)
		})
	}
	wg.Wait()
	fmt.Println("max:", results[0][0], results[1][count-1])
}

// A group holds several calls of several communicators' ranks; they launch
// together at End, as few kernels as possible.
func ExampleGroup() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const count = 64
	ranks := initRanks(ctx, 3, 2*count)
	g := ncclgo.NewGroup()
	for _, r := range ranks {
		// An all-reduce into buffer 1 and an all-gather into buffer 2.
		if err := g.AllReduce(r.comm, r.bufs[0], r.bufs[1], count, ncclgo.Float32, ncclgo.Sum, r.stream); err != nil {
			log.Fatal(err)
		}
		if err := g.AllGather(r.comm, r.bufs[0], r.bufs[2], count, ncclgo.Float32, r.stream); err != nil {
			log.Fatal(err)
		}
	}
	if err := g.End(); err != nil {
		log.Fatal(err)
	}
	waitAll(ctx, ranks)
	gathered := ranks[1].read(2, 2*count)
	fmt.Println("sum:", ranks[1].read(1, count)[0], "gathered:", gathered[0], gathered[count])
	for _, r := range ranks {
		r.free()
	}
}

// Point-to-point: rank 0 sends to rank 1. Sends and receives between ranks
// of one process go in one group, so both sides launch together.
func ExampleGroup_Send() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const count = 100
	ranks := initRanks(ctx, 2, count)
	g := ncclgo.NewGroup()
	if err := g.Send(ranks[0].comm, ranks[0].bufs[0], count, ncclgo.Float32, 1, ranks[0].stream); err != nil {
		log.Fatal(err)
	}
	if err := g.Recv(ranks[1].comm, ranks[1].bufs[1], count, ncclgo.Float32, 0, ranks[1].stream); err != nil {
		log.Fatal(err)
	}
	if err := g.End(); err != nil {
		log.Fatal(err)
	}
	waitAll(ctx, ranks)
	fmt.Println("rank 1 received", ranks[1].read(1, count)[count-1])
	for _, r := range ranks {
		r.free()
	}
}

// Version says which NCCL API level ncclgo implements.
func ExampleVersion() {
	v := ncclgo.Version()
	fmt.Println(v.NCCLCode() >= 22800)
	// Output: true
}
