package cuda

import (
	"errors"
	"fmt"
	"testing"
)

// BenchmarkGPULaunch measures the host's cost of queueing work on this
// machine's driver, the floor under ncclgo's small-message latency: a
// kernel with 16 bytes of parameters, the 4 KiB-parameter kernel given its
// whole block or only its first 256 bytes, an 8-byte device copy, a stream
// query, an event record, a stream's wait on an event (alone and after its
// record on another stream), the capture check, the current-context
// check, and a launch on each of two streams (as two ranks of one process
// do). The queue is
// drained off the clock every 256 operations, so the figure is host time,
// not GPU time.
func BenchmarkGPULaunch(b *testing.B) {
	c := gpu(b)
	m := loadTestModule(b, c)
	add1, err := m.Function("add1")
	if err != nil {
		b.Fatal(err)
	}
	big, err := m.Function("big")
	if err != nil {
		b.Fatal(err)
	}
	out, err := c.MemAlloc(4 * 1024)
	if err != nil {
		b.Fatal(err)
	}
	defer c.MemFree(out)
	var small, large packArgs
	small.u64(uint64(out))
	small.u32(0) // add1(int*, int): 12 bytes
	large.u64(uint64(out))
	large.u32(0)
	for len(large.b) < 4096 {
		large.u32(0)
	}
	s1, err := c.NewStream(true)
	if err != nil {
		b.Fatal(err)
	}
	defer s1.Destroy()
	s2, err := c.NewStream(true)
	if err != nil {
		b.Fatal(err)
	}
	defer s2.Destroy()
	ev, err := c.NewEvent(true)
	if err != nil {
		b.Fatal(err)
	}
	defer ev.Destroy()

	run := func(b *testing.B, op func() error) {
		b.Helper()
		i := 0
		for b.Loop() {
			if err := op(); err != nil {
				b.Fatal(err)
			}
			if i++; i%256 == 0 {
				b.StopTimer()
				if err := c.Synchronize(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		}
		if err := c.Synchronize(); err != nil {
			b.Fatal(err)
		}
	}
	one := Dim1(1)
	b.Run("params=12B", func(b *testing.B) {
		run(b, func() error { return s1.Launch(add1, one, Dim1(64), 0, small.b) })
	})
	b.Run("params=4096B", func(b *testing.B) {
		run(b, func() error { return s1.Launch(big, one, Dim1(64), 0, large.b) })
	})
	b.Run("params=256of4096B", func(b *testing.B) {
		run(b, func() error { return s1.Launch(big, one, Dim1(64), 0, large.b[:256]) })
	})
	// One rank's collective is a device copy: its host cost, and a poll.
	b.Run("memcpyDtoD8B", func(b *testing.B) {
		setCopyMode(copyDtoD)
		defer setCopyMode(copyAuto) // the default
		run(b, func() error { return s1.MemcpyDtoDAsync(out+64, out, 8) })
	})
	// The same through cuMemcpyAsync (NCCLGO_COPY_API=generic), the call
	// cudaMemcpyAsync makes: NCCL's one-rank copy.
	b.Run("memcpyGeneric8B", func(b *testing.B) {
		setCopyMode(copyGeneric)
		defer setCopyMode(copyAuto) // the default
		run(b, func() error { return s1.MemcpyDtoDAsync(out+64, out, 8) })
	})
	// The same as a launch of the copy kernel (NCCLGO_COPY_API=kernel).
	b.Run("memcpyKernel8B", func(b *testing.B) {
		setCopyMode(copyKernel)
		defer setCopyMode(copyAuto) // the default
		// The first copy loads the kernel.
		if err := s1.MemcpyDtoDAsync(out+64, out, 8); err != nil {
			b.Fatal(err)
		}
		run(b, func() error { return s1.MemcpyDtoDAsync(out+64, out, 8) })
	})
	b.Run("streamQuery", func(b *testing.B) {
		run(b, func() error { _, err := s1.Query(); return err })
	})
	b.Run("eventRecord", func(b *testing.B) {
		run(b, func() error { return ev.Record(s1) })
	})
	// What a multi-rank launch adds per extra stream: a wait on another
	// stream's event, the capture check, the current-context check.
	b.Run("streamWaitEvent", func(b *testing.B) {
		if err := ev.Record(s2); err != nil {
			b.Fatal(err)
		}
		run(b, func() error { return s1.WaitEvent(ev) })
	})
	b.Run("recordAndWait", func(b *testing.B) {
		run(b, func() error {
			if err := ev.Record(s2); err != nil {
				return err
			}
			return s1.WaitEvent(ev)
		})
	})
	b.Run("captureStatus", func(b *testing.B) {
		run(b, func() error { _, err := s1.CaptureStatus(); return err })
	})
	b.Run("currentContext", func(b *testing.B) {
		run(b, func() error { _, err := CurrentContextHandle(); return err })
	})
	// A graph of one kernel, launched whole each time: the host cost of
	// cuGraphLaunch against cuLaunchKernel's (params=12B).
	b.Run("graphOf1", func(b *testing.B) {
		x := captureChain(b, s1, add1, out, 1, nil, 1, "none")
		defer x.Destroy()
		run(b, func() error { return x.Launch(s1) })
	})
	// The same kernels through a launch graph (LaunchGraph): the node
	// updated to each launch, then the graph launched.
	b.Run("graphVia12B", func(b *testing.B) {
		g, err := c.NewLaunchGraph(add1, 1, 64, small.b)
		if err != nil {
			b.Fatal(err)
		}
		defer g.Destroy()
		run(b, func() error { return s1.LaunchVia(g, add1, one, Dim1(64), 0, small.b) })
	})
	b.Run("graphVia256of4096B", func(b *testing.B) {
		g, err := c.NewLaunchGraph(big, 1, 64, large.b[:256])
		if err != nil {
			b.Fatal(err)
		}
		defer g.Destroy()
		run(b, func() error { return s1.LaunchVia(g, big, one, Dim1(64), 0, large.b[:256]) })
	})
	// Two kernels in turn through one graph (each update changes the
	// node's function) against each through a graph of its own: whether
	// a launcher should keep a graph per kernel.
	alternate := func(b *testing.B, ga, gb *LaunchGraph) {
		i := 0
		run(b, func() error {
			i++
			if i%2 == 0 {
				return s1.LaunchVia(gb, big, one, Dim1(64), 0, large.b[:256])
			}
			return s1.LaunchVia(ga, add1, one, Dim1(64), 0, small.b)
		})
	}
	newGraph := func(b *testing.B, fn *Function, args []byte) *LaunchGraph {
		g, err := c.NewLaunchGraph(fn, 1, 64, args)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = g.Destroy() })
		return g
	}
	b.Run("graphViaAlternating", func(b *testing.B) {
		g := newGraph(b, add1, small.b)
		alternate(b, g, g)
	})
	b.Run("graphViaEachOwn", func(b *testing.B) {
		alternate(b, newGraph(b, add1, small.b), newGraph(b, big, large.b[:256]))
	})
	// The driver calls of a multi-rank launch for N ranks on N streams
	// (runtime/comm's runMultiOps), without ncclgo: per other stream a
	// record and the first stream's wait on it, the launch, its record,
	// and every other stream's wait on that; "+checks" adds each stream's
	// capture check first.
	for _, n := range []int{2, 8} {
		for _, checks := range []bool{false, true} {
			name := fmt.Sprintf("join%d", n)
			if checks {
				name += "+checks"
			}
			b.Run(name, func(b *testing.B) {
				j := newJoinBench(b, c, n)
				defer j.close(b)
				run(b, func() error { return j.once(add1, small.b, checks) })
			})
		}
	}
	// The same joins timed with the GPU's work (no drain off the clock,
	// one at the end): the time per call of a loop of them, the longer of
	// the host's and the GPU's; "launch" is a lone stream's launches.
	wall := func(b *testing.B, op func() error) {
		b.Helper()
		for b.Loop() {
			if err := op(); err != nil {
				b.Fatal(err)
			}
		}
		if err := c.Synchronize(); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("wall/launch", func(b *testing.B) {
		wall(b, func() error { return s1.Launch(add1, one, Dim1(64), 0, small.b) })
	})
	for _, n := range []int{2, 8} {
		b.Run(fmt.Sprintf("wall/join%d", n), func(b *testing.B) {
			j := newJoinBench(b, c, n)
			defer j.close(b)
			wall(b, func() error { return j.once(add1, small.b, false) })
		})
	}
	b.Run("twoStreams+records", func(b *testing.B) {
		run(b, func() error {
			for _, s := range []*Stream{s1, s2} {
				if err := s.Launch(big, one, Dim1(64), 0, large.b[:256]); err != nil {
					return err
				}
				if err := ev.Record(s); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// joinBench holds the streams and events of BenchmarkGPULaunch's joinN.
type joinBench struct {
	ss  []*Stream
	evs []*Event
	set *Event
}

func newJoinBench(tb testing.TB, c *Context, n int) *joinBench {
	tb.Helper()
	j := new(joinBench)
	for range n {
		s, err := c.NewStream(true)
		if err != nil {
			tb.Fatal(err)
		}
		j.ss = append(j.ss, s)
		ev, err := c.NewEvent(true)
		if err != nil {
			tb.Fatal(err)
		}
		j.evs = append(j.evs, ev)
	}
	set, err := c.NewEvent(true)
	if err != nil {
		tb.Fatal(err)
	}
	j.set = set
	return j
}

func (j *joinBench) once(fn *Function, args []byte, checks bool) error {
	if checks {
		for _, s := range j.ss {
			if _, err := s.CaptureStatus(); err != nil {
				return err
			}
		}
	}
	s0 := j.ss[0]
	for k := 1; k < len(j.ss); k++ {
		if err := j.evs[k].Record(j.ss[k]); err != nil {
			return err
		}
		if err := s0.WaitEvent(j.evs[k]); err != nil {
			return err
		}
	}
	if err := s0.Launch(fn, Dim1(1), Dim1(64), 0, args); err != nil {
		return err
	}
	if err := j.set.Record(s0); err != nil {
		return err
	}
	for k := 1; k < len(j.ss); k++ {
		if err := j.ss[k].WaitEvent(j.set); err != nil {
			return err
		}
	}
	return nil
}

func (j *joinBench) close(tb testing.TB) {
	var errs []error
	for i := range j.ss {
		errs = append(errs, j.ss[i].Destroy(), j.evs[i].Destroy())
	}
	if err := errors.Join(append(errs, j.set.Destroy())...); err != nil {
		tb.Error(err)
	}
}
