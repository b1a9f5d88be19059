package tests

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// The CUDA graph tests capture groups of calls (cuStreamBeginCapture in
// global mode, as torch.cuda.graph and nccl-tests -G do), replay them
// NCCLGO_GRAPH_REPLAYS times (default 1000) in NCCLGO_GRAPH_BATCHES batches
// (default 10), and check every byte of every rank's arena after each
// batch. Each batch uploads fresh inputs (and fresh poison around the
// outputs) first, so a replay that reused stale works, read a stale input
// or wrote nothing is caught. Rank counts come from NCCLGO_GRAPH_RANKS
// (default "1,2,4"), devices from NCCLGO_TEST_DEVICES as in the rest of the
// suite.
//
// Three ways to capture, as callers do:
//
//   - streams: each rank's own stream is captured into a graph of its own
//     (nccl-tests -G with several GPUs per thread; torch with one rank per
//     process), and every replay launches each rank's graph.
//   - forked: one graph for every rank: rank 0's stream is captured and the
//     other ranks' streams join the capture through events (fork/join),
//     then one graph launch replays all ranks. One device only.
//   - merged: forked, with a group of one AllReduce, AllGather or
//     ReduceScatter, which the ranks of one process on one device launch
//     as one kernel: the captured multi-rank launch (the AllReduce in one
//     pass). One device, 2 ranks or more.
//   - default: every rank is handed the per-thread default stream, which
//     is captured; ranks sharing the GPU then run on their lanes, which
//     join the capture through their events. One device, 2 ranks or more.

// graphReplays returns the batches and the replays per batch.
func graphReplays(t *testing.T) (batches, per int) {
	total, batches := 1000, 10
	if s := os.Getenv("NCCLGO_GRAPH_REPLAYS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "NCCLGO_GRAPH_REPLAYS=%q", s)
		total = n
	}
	if s := os.Getenv("NCCLGO_GRAPH_BATCHES"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "NCCLGO_GRAPH_BATCHES=%q", s)
		batches = n
	}
	require.Positive(t, total, "NCCLGO_GRAPH_REPLAYS")
	require.Positive(t, batches, "NCCLGO_GRAPH_BATCHES")
	batches = min(batches, total)
	return batches, (total + batches - 1) / batches
}

func graphRankCounts(t *testing.T) []int {
	s := os.Getenv("NCCLGO_GRAPH_RANKS")
	if s == "" {
		return []int{1, 2, 4}
	}
	t.Setenv("NCCLGO_TEST_RANKS", s)
	return rankCounts(t)
}

// graphCalls is the group captured for one configuration: out-of-place
// calls only (a replay of an in-place reduction would reduce its own
// result again), of every collective the configuration runs, and, with
// many, enough small AllReduces that the works do not fit in the kernel
// arguments (the launcher's work FIFO path). The configurations come from
// the model (configs), so every algorithm and protocol is captured;
// SendRecv, which NCCL_ALGO does not steer, rides with the configurations
// that run every collective (RING).
func graphCalls(cfg config1, n int, many bool) []call {
	sum, mx := ops[0], ops[2]
	cands := []call{
		{kind: kindColl, coll: kspace.AllReduce, ty: kspace.F32, o: sum, count: 1023},
		{kind: kindColl, coll: kspace.AllReduce, ty: kspace.I32, o: mx, count: 65536 + 5, mis: true},
		{kind: kindColl, coll: kspace.ReduceScatter, ty: kspace.F32, o: sum, count: 1000},
		{kind: kindColl, coll: kspace.AllGather, ty: kspace.U8, o: sum, count: 4099},
		{kind: kindColl, coll: kspace.Broadcast, ty: kspace.F16, o: sum, count: 777, root: n / 2},
		{kind: kindColl, coll: kspace.Reduce, ty: kspace.F32, o: sum, count: 513, root: n - 1},
	}
	if cfg.every() {
		cands = append(cands, call{kind: kindSendRecv, ty: kspace.U8, count: 3001, shift: 1})
	}
	if many {
		for i := range 70 {
			cands = append(cands, call{kind: kindColl, coll: kspace.AllReduce, ty: kspace.F32, o: sum, count: 7 + i})
		}
	}
	var out []call
	for _, c := range cands {
		if c.kind == kindColl && (!cfg.runs(c.coll) || !built(c.coll, c.o, c.ty, cfg.algo, cfg.proto)) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// mergedCalls is the group of merged mode: the first of calls that every
// rank's result depends on (an AllReduce, AllGather or ReduceScatter),
// alone, so that its ranks' launches merge into one.
func mergedCalls(calls []call) []call {
	for _, c := range calls {
		if c.kind == kindColl && (c.coll == kspace.AllReduce || c.coll == kspace.AllGather || c.coll == kspace.ReduceScatter) {
			return []call{c}
		}
	}
	return nil
}

func TestGraphReplay(t *testing.T) {
	gpu(t)
	seed := suiteSeed(t)
	batches, per := graphReplays(t)
	devs := testDevices(t)
	for _, n := range graphRankCounts(t) {
		for _, cfg := range configs {
			for _, mode := range []string{"streams", "forked", "merged", "default"} {
				for _, many := range []bool{false, true} {
					if many && mode != "streams" {
						continue // the work FIFO path once per configuration
					}
					name := fmt.Sprintf("ranks=%d/%s/%s", n, cfg.name(), mode)
					if many {
						name += "/many"
					}
					t.Run(name, func(t *testing.T) {
						skipUnlessApplies(t, cfg, n)
						placed := rankDevices(devs, n)
						oneDev := !slices.ContainsFunc(placed, func(d int) bool { return d != placed[0] })
						switch {
						case mode == "forked" && !oneDev:
							t.Skip("forked capture needs every rank on one device")
						case mode == "default" && (!oneDev || n < 2):
							t.Skip("the shared default stream needs 2 ranks or more on one device")
						case mode == "merged" && (!oneDev || n < 2):
							t.Skip("a multi-rank launch needs 2 ranks or more on one device")
						}
						runGraph(t, n, cfg, mode, many, seed, batches, per)
					})
				}
			}
		}
	}
}

// runGraph captures one group on a fresh world and replays it.
func runGraph(t *testing.T, n int, cfg config1, mode string, many bool, seed uint64, batches, per int) {
	// Global-mode captures end on the thread that began them, and the
	// per-thread default stream is the thread's.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	calls := graphCalls(cfg, n, many)
	if mode == "merged" {
		calls = mergedCalls(calls)
	}
	require.NotEmpty(t, calls, "no function of this configuration is in the kernel set")
	reseed := func() []call {
		cs := slices.Clone(calls)
		for i := range cs {
			cs[i].seed = nextCallSeed(seed)
		}
		return cs
	}
	g, err := planGroup(reseed(), n, 0)
	require.NoError(t, err)
	end := 0
	for r := range n {
		end = max(end, len(g.before[r]))
	}
	w := newWorld(t, n, cfg.algoEnv(), cfg.protoEnv(), uint64(end)+4096)
	if mode == "default" {
		for r := range w.streams {
			w.streams[r] = cuda.WrapStream(w.ctxs[r], cuda.StreamPerThread) // Destroy leaves it alone
		}
	}

	// An eager run of the group first: it sets up what a first launch sets
	// up (the streams' events, a lane), and it fills the launcher's reused
	// work FIFO staging, which the captured launches must not depend on.
	errs := g.run(w, false)
	for _, err := range errs {
		t.Errorf("eager run: %v", err)
	}
	if len(errs) > 0 || w.hung {
		t.FailNow()
	}

	execs, origins := captureGroup(t, w, g, mode)
	defer func() {
		for _, e := range execs {
			require.NoError(t, e.Destroy())
		}
	}()

	// Between capture and replay, an eager group of other calls: with
	// works that do not fit in the arguments it reuses the staging the
	// capture would have used.
	other := reseed()
	for i := range other {
		other[i].count += 3
	}
	og, err := planGroup(other, n, 0)
	require.NoError(t, err)
	if og.fits(w) {
		for _, err := range og.run(w, false) {
			t.Errorf("eager group between capture and replay: %v", err)
		}
		if w.hung {
			t.FailNow()
		}
	}

	start := time.Now()
	for b := range batches {
		cur, err := planGroup(reseed(), n, 0)
		require.NoError(t, err)
		require.Equal(t, g.send, cur.send, "the layout must not depend on the data")
		require.Equal(t, g.recv, cur.recv, "the layout must not depend on the data")
		require.NoError(t, cur.upload(w))
		for range per {
			for i, e := range execs {
				require.NoError(t, e.Launch(origins[i]), "batch %d", b)
			}
		}
		if err := waitStreams(w, origins); err != nil {
			w.hung = true
			t.Fatalf("batch %d of %d replays: %v", b, per, err)
		}
		for r, c := range w.comms {
			require.NoError(t, c.Err(), "rank %d after batch %d", r, b)
		}
		var errs []error
		for r := range n {
			got := make([]byte, len(cur.after[r]))
			require.NoError(t, w.ctxs[r].MemcpyDtoH(unsafe.Pointer(&got[0]), w.send[r], uint64(len(got))))
			errs = append(errs, cur.check(r, got)...)
		}
		for _, err := range errs {
			t.Errorf("batch %d (after %d replays): %v", b, per, err)
		}
		if len(errs) > 0 {
			t.Logf("group:%s", describe(calls))
			t.FailNow()
		}
	}
	t.Logf("%d calls, %d replays in %d batches: %v per replay (with checks)", len(calls), batches*per, batches,
		time.Since(start)/time.Duration(batches*per))
}

// fits reports whether the group's arena fits in w's buffers.
func (g *groupRun) fits(w *world) bool {
	for r := range g.n {
		if len(g.before[r]) > int(w.size) {
			return false
		}
	}
	return true
}

// upload writes every rank's inputs and poison, and waits for them.
func (g *groupRun) upload(w *world) error {
	for r := range g.n {
		if err := w.ctxs[r].MemcpyHtoD(w.send[r], unsafe.Pointer(&g.before[r][0]), uint64(len(g.before[r]))); err != nil {
			return fmt.Errorf("rank %d: upload: %w", r, err)
		}
	}
	for _, ctx := range w.ctxs {
		if err := ctx.Synchronize(); err != nil {
			return err
		}
	}
	return nil
}

// captureGroup captures one group of g's calls on every rank and returns
// the executable graphs and the streams to launch each on.
func captureGroup(t *testing.T, w *world, g *groupRun, mode string) ([]*cuda.GraphExec, []*cuda.Stream) {
	t.Helper()
	n := len(w.comms)
	var capturing []*cuda.Stream // the streams whose capture this test began
	switch mode {
	case "streams":
		capturing = w.streams
	case "forked", "merged", "default":
		capturing = w.streams[:1]
	}
	for _, s := range capturing {
		require.NoError(t, s.BeginCapture(cuda.CaptureModeGlobal))
	}
	ended := false
	defer func() {
		if !ended { // a failure below: end the captures, drop the graphs
			for _, s := range capturing {
				if gr, err := s.EndCapture(); err == nil {
					_ = gr.Destroy()
				}
			}
		}
	}()
	var evs []*cuda.Event
	defer func() {
		for _, e := range evs {
			_ = e.Destroy()
		}
	}()
	event := func(r int) *cuda.Event {
		e, err := w.ctxs[r].NewEvent(true)
		require.NoError(t, err)
		evs = append(evs, e)
		return e
	}
	if mode == "forked" || mode == "merged" {
		fork := event(0)
		require.NoError(t, fork.Record(w.streams[0]))
		for r := 1; r < n; r++ {
			require.NoError(t, w.streams[r].WaitEvent(fork))
		}
	}
	for _, s := range w.streams {
		st, err := s.CaptureStatus()
		require.NoError(t, err)
		require.Equal(t, cuda.CaptureActive, st, "stream %#x", s.Handle())
	}
	var ops []func() error
	grp := ncclgo.NewGroup()
	for r := range n {
		for ci := range g.calls {
			require.NoError(t, g.enqueue(w, grp, r, ci, &ops))
		}
	}
	require.NoError(t, grp.End(), "Group.End under capture")
	if mode == "forked" || mode == "merged" {
		for r := 1; r < n; r++ {
			join := event(r)
			require.NoError(t, join.Record(w.streams[r]))
			require.NoError(t, w.streams[0].WaitEvent(join))
		}
	}
	ended = true
	// Every capture ends before any graph is instantiated: while one
	// stream still captures in global mode, the driver refuses
	// cuGraphInstantiate in the whole process.
	graphs := make([]*cuda.Graph, len(capturing))
	for i, s := range capturing {
		gr, err := s.EndCapture()
		require.NoError(t, err, "EndCapture of stream %#x", s.Handle())
		graphs[i] = gr
	}
	var execs []*cuda.GraphExec
	for i, gr := range graphs {
		s := capturing[i]
		nodes, err := gr.NodeCount()
		require.NoError(t, err)
		require.Positive(t, nodes, "the graph of stream %#x is empty", s.Handle())
		e, err := gr.Instantiate()
		require.NoError(t, gr.Destroy())
		require.NoError(t, err)
		execs = append(execs, e)
		t.Logf("stream %#x: graph of %d nodes", s.Handle(), nodes)
	}
	for _, f := range ops {
		require.NoError(t, f())
	}
	return execs, capturing
}

// waitStreams waits for the work queued on streams so far, at most
// NCCLGO_TEST_WAIT; on a timeout it aborts w's communicators.
func waitStreams(w *world, streams []*cuda.Stream) error {
	var evs []*cuda.Event
	defer func() {
		for _, e := range evs {
			_ = e.Destroy()
		}
	}()
	for _, s := range streams {
		e, err := s.Context().NewEvent(true)
		if err != nil {
			return err
		}
		evs = append(evs, e)
		if err := e.Record(s); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(testWait())
	for _, e := range evs {
		for {
			done, err := e.Query()
			if err != nil {
				return err
			}
			if done {
				break
			}
			if time.Now().After(deadline) {
				for _, c := range w.comms {
					c.Abort()
				}
				return fmt.Errorf("the replays did not finish within %v (NCCLGO_TEST_WAIT)", testWait())
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	return nil
}

// TestGraphCaptureInvalidated: a call on a stream whose capture was
// invalidated fails at once with a clear error, never hangs, and the
// communicator still works after the capture ended.
func TestGraphCaptureInvalidated(t *testing.T) {
	gpu(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	w := newWorld(t, 1, "", "", 1<<20)
	s := w.streams[0]
	require.NoError(t, s.BeginCapture(cuda.CaptureModeGlobal))
	// Synchronizing a capturing stream is illegal and invalidates its capture.
	require.Error(t, s.Synchronize())
	st, err := s.CaptureStatus()
	require.NoError(t, err)
	require.Equal(t, cuda.CaptureInvalidated, st)
	err = w.comms[0].AllReduce(w.send[0], w.recv[0], 16, ncclgo.Float32, ncclgo.Sum, s)
	require.ErrorIs(t, err, ncclgo.ErrInvalidUsage)
	require.Contains(t, err.Error(), "capture was invalidated")
	_, err = s.EndCapture()
	require.Error(t, err)
	require.NoError(t, w.comms[0].AllReduce(w.send[0], w.recv[0], 16, ncclgo.Float32, ncclgo.Sum, s))
	errs, hang := waitAll("AllReduce after an invalidated capture", w.comms)
	require.NoError(t, hang)
	require.NoError(t, errs[0])
}
