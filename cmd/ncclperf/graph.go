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
// -ncclgo=false, through -compare's library, in one process.

// graphFlags registers -G and --cudagraph, which set c.graphLaunches.
func graphFlags(fs *pflag.FlagSet, c *config) {
	fs.IntVarP(&c.graphLaunches, longNames["G"], "G", 0, "CUDA graph mode: capture the -n timed iterations into a graph per rank and launch it this many `times` (nccl-tests' -G); times are per collective")
}

// checkGraphFlags refuses -G where it cannot run: it is checked with the
// other flags, so that no process of a job ignores it.
func (c *config) checkGraphFlags(launched bool) error {
	switch {
	case c.graphLaunches < 0:
		return fmt.Errorf("%s %d: want a number of graph launches", flagName("G"), c.graphLaunches)
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
		fmt.Fprintf(w, "# ncclperf -G %d: %s, %s %s %s, %d ranks on devices %v, -n %d iterations per graph\n",
			gc.graphLaunches, b.Name(), gc.coll, gc.dt, gc.op, gc.nRanks, gc.devices, gc.iters)
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
// nccl-tests' per-iteration offsets) into one graph per rank's stream.
func (it *iterator) capture(count int64, iters int) (execs []*cuda.GraphExec, err error) {
	if err := it.b.Begin(); err != nil {
		return nil, err
	}
	for r, s := range it.streams {
		if err := s.BeginCapture(cuda.CaptureModeGlobal); err != nil {
			for _, s := range it.streams[:r] {
				if g, err := s.EndCapture(); err == nil {
					_ = g.Destroy()
				}
			}
			return nil, err
		}
	}
	var errs []error
	for i := range iters {
		if err := it.start(count, false, i); err != nil {
			errs = append(errs, fmt.Errorf("iteration %d under capture: %w", i, err))
			break
		}
	}
	// End every capture, whatever failed, before instantiating any graph:
	// in global capture mode cuGraphInstantiate is refused while another
	// stream of the process is still capturing.
	var graphs []*cuda.Graph
	for _, s := range it.streams {
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
