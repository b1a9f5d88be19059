package main

import (
	"errors"
	"fmt"
	"github.com/spf13/pflag"
	"io"
	"time"

	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// CUDA graph mode (-G N, nccl-tests' -G/--cudagraph): at each size the -n
// timed iterations are captured into one graph per rank's stream (global
// capture mode, as nccl-tests and torch.cuda.graph capture), and the
// graphs are launched N times; the time reported is per collective, the
// total over the N × -n replayed collectives. With -c 1, one iteration
// captured on its own is replayed once on fresh inputs and checked first.
// It runs the first job (-coll, -d, -o) through ncclgo, or, with
// -ncclgo=false, through -compare's library, in one process. With
// -graph-one the first rank's stream captures alone and the others fork
// from it (an event recorded there, waited for on each) and join back
// before the capture ends: one graph holds every rank's collectives, as a
// program that drives its ranks from one capturing stream builds it, and
// it is launched on the first rank's stream.

// graphFlags registers -G and --cudagraph, which set c.graphLaunches.
func graphFlags(fs *pflag.FlagSet, c *config) {
	fs.IntVarP(&c.graphLaunches, longNames["G"], "G", 0, "CUDA graph mode: capture the -n timed iterations into a graph per rank and launch it this many `times` (nccl-tests' -G); times are per collective")
	fs.BoolVar(&c.graphOne, "graph-one", false, "with -G: capture every rank's stream into one graph (the others fork from the first rank's stream) instead of a graph per rank")
}

// checkGraphFlags refuses -G where it cannot run: it is checked with the
// other flags, so that no process of a job ignores it.
func (c *config) checkGraphFlags(launched bool) error {
	switch {
	case c.graphLaunches < 0:
		return fmt.Errorf("%s %d: want a number of graph launches", flagName("G"), c.graphLaunches)
	case c.graphLaunches == 0 && c.graphOne:
		return fmt.Errorf("-graph-one captures for %s: give %s N", flagName("G"), flagName("G"))
	case c.graphLaunches == 0:
		return nil
	case c.np > 0 || launched:
		return fmt.Errorf("%s %d runs the ranks of one process: leave out -np and the launcher (nccl-tests -G on libnccl.so.2 covers several processes)", flagName("G"), c.graphLaunches)
	case c.ncclgo && c.compare != "":
		return fmt.Errorf("%s %d times one library: give -compare with -ncclgo=false, or leave -compare out", flagName("G"), c.graphLaunches)
	}
	return nil
}

// measureGraph is -G's run on this process's ranks (devices local).
func (c *config) measureGraph(w io.Writer, local []int) (err error) {
	ranks, release, err := openRanks(local)
	defer release()
	if err != nil {
		return err
	}
	var b backend
	if c.ncclgo {
		b, err = openOurs(c)
	} else {
		b, err = openRef(c, ranks)
	}
	if err != nil {
		return err
	}
	defer func() {
		if cerr := c.closeBackend(b, err); err == nil {
			err = cerr
		}
	}()
	jb := c.jobs()[0]
	return c.measureAll(b, ranks, []job{jb}, func(_ int, t *table) error {
		gc := t.c
		graphs := "a graph per rank"
		if gc.graphOne {
			graphs = "one graph for every rank"
		}
		fmt.Fprintf(w, "# ncclperf -G %d: %s, %s %s %s, %d ranks on devices %v, -n %d iterations per graph, %s\n",
			gc.graphLaunches, b.Name(), gc.coll, gc.dt, gc.op, gc.nRanks, gc.devices, gc.iters, graphs)
		fmt.Fprintf(w, "# %12s %12s %6s %10s %10s %10s %6s\n", "size", "count", "type", "time(us)", "algbw", "busbw", "#wrong")
		it := newIterator(gc, b, ranks)
		for _, size := range gc.sizes() {
			count := gc.countFor(size)
			wrong := "N/A"
			if gc.check {
				n, err := it.graphCheck(count)
				if err != nil {
					return fmt.Errorf("-G, size %d, check (graphs of %v nodes): %w", size, it.graphNodes, err)
				}
				wrong = fmt.Sprint(n)
			}
			usec, err := it.graphTime(count)
			if err != nil {
				return fmt.Errorf("-G, size %d (graphs of %v nodes): %w", size, it.graphNodes, err)
			}
			alg, bus := gc.bandwidth(count, usec)
			fmt.Fprintf(w, "  %12d %12d %6s %10.2f %10.2f %10.2f %6s\n", gc.rowBytes(count), count, gc.dt, usec, alg, bus, wrong)
		}
		return nil
	})
}

// capture captures iters iterations of count elements (out-of-place, with
// nccl-tests' per-iteration offsets) into one graph per rank's stream, or
// with -graph-one into one graph on the first rank's stream.
func (it *iterator) capture(count int64, iters int) (execs []*cuda.GraphExec, err error) {
	if err := it.b.Begin(); err != nil {
		return nil, err
	}
	capturing := it.streams
	var fork *cuda.Event
	if it.c.graphOne && len(it.streams) > 1 {
		capturing = it.streams[:1]
		if fork, err = it.streams[0].Context().NewEvent(true); err != nil {
			return nil, fmt.Errorf("-graph-one: the fork event: %w", err)
		}
		defer func() {
			if derr := fork.Destroy(); err == nil && derr != nil {
				destroyExecs(execs)
				execs, err = nil, derr
			}
		}()
	}
	for r, s := range capturing {
		if err := s.BeginCapture(cuda.CaptureModeGlobal); err != nil {
			for _, s := range capturing[:r] {
				if g, err := s.EndCapture(); err == nil {
					_ = g.Destroy()
				}
			}
			return nil, err
		}
	}
	var errs []error
	if fork != nil {
		errs = append(errs, joinStreams(fork, it.streams[0], it.streams[1:]))
	}
	for i := range iters {
		if errors.Join(errs...) != nil {
			break
		}
		if err := it.start(count, false, i); err != nil {
			errs = append(errs, fmt.Errorf("iteration %d under capture: %w", i, err))
		}
	}
	if fork != nil {
		for _, s := range it.streams[1:] {
			errs = append(errs, joinStreams(fork, s, it.streams[:1]))
		}
	}
	// End every capture, whatever failed, before instantiating any graph:
	// in global capture mode cuGraphInstantiate is refused while another
	// stream of the process is still capturing.
	var graphs []*cuda.Graph
	for _, s := range capturing {
		g, err := s.EndCapture()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		graphs = append(graphs, g)
	}
	it.graphNodes = it.graphNodes[:0]
	for _, g := range graphs {
		n, err := g.NodeCount()
		errs = append(errs, err)
		it.graphNodes = append(it.graphNodes, n)
		if errors.Join(errs...) == nil { // nothing failed so far
			x, err := g.Instantiate()
			errs = append(errs, err)
			if x != nil {
				execs = append(execs, x)
			}
		}
		errs = append(errs, g.Destroy())
	}
	if err := errors.Join(errs...); err != nil {
		destroyExecs(execs)
		return nil, err
	}
	return execs, nil
}

// joinStreams makes each of to wait for what from has queued (through ev,
// recorded on from): under capture, the edges that fork streams into the
// capture and join them back.
func joinStreams(ev *cuda.Event, from *cuda.Stream, to []*cuda.Stream) error {
	if err := ev.Record(from); err != nil {
		return fmt.Errorf("-graph-one: recording stream %#x: %w", from.Handle(), err)
	}
	for _, s := range to {
		if err := s.WaitEvent(ev); err != nil {
			return fmt.Errorf("-graph-one: stream %#x waiting for stream %#x: %w", s.Handle(), from.Handle(), err)
		}
	}
	return nil
}

func destroyExecs(execs []*cuda.GraphExec) {
	for _, x := range execs {
		_ = x.Destroy()
	}
}

// launch launches each rank's graph on its stream.
func (it *iterator) launch(execs []*cuda.GraphExec) error {
	for r, x := range execs {
		if err := x.Launch(it.streams[r]); err != nil {
			return err
		}
	}
	return nil
}

// graphCheck captures iteration 0 alone, replays it once on fresh inputs
// and returns the wrong elements.
func (it *iterator) graphCheck(count int64) (int, error) {
	c := it.c
	execs, err := it.capture(count, 1)
	if err != nil {
		return 0, err
	}
	defer destroyExecs(execs)
	c.pointers(it.ranks, count, false, 0, it.send, it.recv)
	if err := c.fill(it.ranks, it.send, count); err != nil {
		return 0, err
	}
	if err := it.b.Begin(); err != nil {
		return 0, err
	}
	if err := it.launch(execs); err != nil {
		return 0, err
	}
	if err := it.drain(); err != nil {
		return 0, err
	}
	return c.verify(it.ranks, it.recv, count)
}

// graphTime captures -n iterations, launches the graphs once to warm up,
// then -G times, and returns the microseconds per collective.
func (it *iterator) graphTime(count int64) (float64, error) {
	c := it.c
	execs, err := it.capture(count, c.iters)
	if err != nil {
		return 0, err
	}
	defer destroyExecs(execs)
	if err := it.launch(execs); err != nil {
		return 0, err
	}
	if err := it.drain(); err != nil {
		return 0, err
	}
	start := time.Now()
	for range c.graphLaunches {
		if err := it.launch(execs); err != nil {
			return 0, err
		}
	}
	if err := it.drain(); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds() * 1e6 / float64(c.graphLaunches*c.iters), nil
}
