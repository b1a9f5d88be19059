package comm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
)

// TestKernelGraphLaunches checks, on the counting fake driver, that with
// launch graphs on (EnvKernelGraph) every plain launch path, a rank's
// kernel alone, through the ledger and a multi-rank launch of 2 and 8
// ranks, updates its rank's graph node and launches the graph instead of
// calling cuLaunchKernel, with the arguments the launch would have passed
// (the fake keeps the last update's); that the graph is made once per
// rank; that programmatic and captured launches keep cuLaunchKernelEx and
// cuLaunchKernel; and that a launch whose node update the driver refuses
// goes through cuLaunchKernel.
func TestKernelGraphLaunches(t *testing.T) {
	inFakeDriver(t, "TestKernelGraphLaunches", kernelGraphChild)
}

func kernelGraphChild(t *testing.T, lib string) {
	d, ctx, fn := fakeKernel(t, lib)
	// The callers' streams come from another *Context of the same
	// context, as a program's do (ncclperf retains the primary context
	// itself).
	sctx := otherContext(t, ctx)
	stream := func() *cuda.Stream {
		s, err := sctx.NewStream(true)
		require.NoError(t, err)
		return s
	}
	ar := func(r int) []enqueue.Task { return smallTasks(kspace.AllReduce, r) }
	graphed := func(es []*Engine) []*Engine {
		for _, e := range es {
			e.launcher.LaunchGraphs = true
		}
		return es
	}
	// nParts is the part count of the last launch's arguments.
	nParts := func() int {
		return d.Peek("last_args_u16@28") // KernelArgs.NParts (u32 at 28, little-endian)
	}
	require.Equal(t, 28, generated.Layouts["KernelArgs"].Offsets[4], "KernelArgs.NParts' offset")

	// One rank's kernel alone, then through the ledger.
	for name, run := range map[string]func(e *Engine, s *cuda.Stream, p *enqueue.Plan) error{
		"alone":  func(e *Engine, s *cuda.Stream, p *enqueue.Plan) error { _, err := e.run(p, s); return err },
		"ledger": func(e *Engine, s *cuda.Stream, p *enqueue.Plan) error { return AdmitAndRunOne(e, p, ar(0), s, nil) },
	} {
		e := graphed(countEngines(t, ctx, fn, 1, 2))[0]
		s := stream()
		p, err := e.Plan(ar(0))
		require.NoError(t, err)
		d.Reset()
		for range 3 {
			require.NoError(t, run(e, s, &p), name)
		}
		c := d.Counts()
		assert.Equal(t, 1, c["cuGraphCreate"], "%s: one graph per rank: %v", name, c)
		assert.Equal(t, 1, c["cuGraphInstantiateWithFlags"], "%s: %v", name, c)
		assert.Equal(t, 1, c["cuGraphExecKernelNodeSetParams"], "%s: the same call three times: the node updated once: %v", name, c)
		assert.Equal(t, 3, c["cuGraphLaunch"], "%s: %v", name, c)
		assert.Zero(t, c["cuLaunchKernel"], "%s: %v", name, c)
		assert.Equal(t, 0, nParts(), "%s: one rank's arguments", name)
		// Other buffers: the node is updated, once.
		q, err := e.Plan(ar(1))
		require.NoError(t, err)
		d.Reset()
		for range 2 {
			require.NoError(t, run(e, s, &q), name)
		}
		c = d.Counts()
		assert.Equal(t, 1, c["cuGraphExecKernelNodeSetParams"], "%s: another call twice: the node updated once: %v", name, c)
		assert.Equal(t, 2, c["cuGraphLaunch"], "%s: %v", name, c)
		through, refused := e.launcher.GraphLaunches()
		assert.Equal(t, [2]uint64{5, 0}, [2]uint64{through, refused}, name)
		require.NoError(t, e.launcher.Close())
	}
	// A multi-rank launch of n ranks on their own streams: one graph
	// launch, on the first rank's graph, with every part in its arguments.
	for _, n := range []int{2, 8} {
		es := graphed(countEngines(t, ctx, fn, n, n))
		group := smallGroup(t, sctx, es, kspace.AllReduce)
		require.NoError(t, group())
		c := measure(t, d, group)
		assert.Equal(t, 1, c.calls["cuGraphLaunch"], "%d ranks: %v", n, c)
		assert.Zero(t, c.calls["cuGraphExecKernelNodeSetParams"], "%d ranks: the same group again: the node holds it: %v", n, c)
		assert.Zero(t, c.calls["cuLaunchKernel"], "%d ranks: %v", n, c)
		assert.Zero(t, c.calls["cuGraphCreate"], "%d ranks: made once: %v", n, c)
		assert.Equal(t, 1, c.cgo, "%d ranks: still one cgo call", n)
		assert.Equal(t, n, nParts(), "%d ranks: the multi-rank launch's arguments", n)
	}
	// With join graphs, a multi-rank launch of n ranks on busy streams:
	// each other stream records its event and waits for the set's (the
	// first stream's waits and the set's record are in the graph, made
	// once with a wait node per other stream).
	d.Set("stream_busy", 1)
	for _, n := range []int{2, 8} {
		es := graphed(countEngines(t, ctx, fn, n, n))
		for _, e := range es {
			e.launcher.JoinGraphs = true
		}
		group := smallGroup(t, sctx, es, kspace.AllReduce)
		d.Reset()
		require.NoError(t, group())
		c := d.Counts()
		assert.Equal(t, n-1, c["cuGraphAddEventWaitNode"], "%d ranks: a wait node per other stream: %v", n, c)
		assert.Equal(t, n-1, d.Peek("kernel_node_deps"), "%d ranks: the kernel after the waits", n)
		assert.Equal(t, 1, d.Peek("record_deps"), "%d ranks: the record after the kernel", n)
		m := measure(t, d, group)
		assert.Equal(t, 1, m.calls["cuGraphLaunch"], "%d ranks joined: %v", n, m)
		assert.Equal(t, n-1, m.calls["cuEventRecord"], "%d ranks joined: the other streams' records only: %v", n, m)
		assert.Equal(t, n-1, m.calls["cuStreamWaitEvent"], "%d ranks joined: the other streams' waits after only: %v", n, m)
		assert.Zero(t, m.calls["cuGraphCreate"], "%d ranks joined: made once: %v", n, m)
		assert.Zero(t, m.calls["cuLaunchKernel"], "%d ranks joined: %v", n, m)
	}
	d.Set("stream_busy", 0)
	// A join graph destroyed before its sequence runs fails the sequence
	// rather than launch without its waits and record.
	{
		ev, err := ctx.NewEvent(true)
		require.NoError(t, err)
		g, err := ctx.NewJoinGraph(fn, 1, 128, nil, []*cuda.Event{ev}, nil)
		require.NoError(t, err)
		var o cuda.Ops
		i := o.Launch(stream(), fn, 1, 128, 0, 0)
		o.Via(i, g)
		require.NoError(t, g.Destroy())
		d.Reset()
		err = o.Run()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "destroyed join graph")
		assert.Zero(t, d.Counts()["cuLaunchKernel"], "nothing launched")
		require.NoError(t, ev.Destroy())
	}
	// Programmatic launches keep cuLaunchKernelEx; captured ones the
	// ordinary launch.
	{
		e := graphed(countEngines(t, ctx, fn, 1, 2))[0]
		e.launcher.Programmatic = true
		p, err := e.Plan(ar(0))
		require.NoError(t, err)
		c := measure(t, d, func() error { _, err := e.run(&p, stream()); return err })
		assert.Equal(t, 1, c.calls["cuLaunchKernelEx"], "programmatic: %v", c)
		assert.Zero(t, c.calls["cuGraphLaunch"], "programmatic: %v", c)
	}
	{
		e := graphed(countEngines(t, ctx, fn, 1, 2))[0]
		p, err := e.Plan(ar(0))
		require.NoError(t, err)
		d.Set("capture_status", 1)
		c := measure(t, d, func() error { _, err := e.run(&p, stream()); return err })
		refused := d.Peek("capture_refused")
		d.Set("capture_status", 0)
		assert.Equal(t, 1, c.calls["cuLaunchKernel"], "captured: %v", c)
		assert.Zero(t, c.calls["cuGraphLaunch"], "captured: %v", c)
		assert.Zero(t, refused, "captured: the graph made at the first launch is made relaxed")
	}
	// The first launch of fresh ranks comes under capture (as ncclperf -G
	// -c 1's does): the launch graphs their launchers make then are made
	// in relaxed capture mode, which a global-mode capture does not
	// refuse (it would invalidate the capture), and the eager launches
	// after the capture go through them.
	for _, joins := range []bool{false, true} {
		for _, n := range []int{2, 8} {
			es := graphed(countEngines(t, ctx, fn, n, n))
			for _, e := range es {
				e.launcher.JoinGraphs = joins
			}
			group := smallGroup(t, sctx, es, kspace.AllReduce)
			d.Set("capture_status", 1)
			d.Reset()
			err := group()
			refused := d.Peek("capture_refused")
			d.Set("capture_status", 0)
			require.NoError(t, err, "joins %v, %d ranks, captured", joins, n)
			assert.Zero(t, refused, "joins %v, %d ranks: no graph built outside relaxed mode under capture", joins, n)
			c := measure(t, d, group)
			assert.Equal(t, 1, c.calls["cuGraphLaunch"], "joins %v, %d ranks, eager after the capture: %v", joins, n, c)
			assert.Zero(t, c.calls["cuLaunchKernel"], "joins %v, %d ranks, eager after the capture: %v", joins, n, c)
		}
	}
	// A refused node update: the launch goes the ordinary way.
	{
		e := graphed(countEngines(t, ctx, fn, 1, 2))[0]
		p, err := e.Plan(ar(0))
		require.NoError(t, err)
		d.Set("node_update_result", int(cuda.ResultInvalidValue))
		c := measure(t, d, func() error { _, err := e.run(&p, stream()); return err })
		d.Set("node_update_result", 0)
		assert.Equal(t, 1, c.calls["cuLaunchKernel"], "refused: %v", c)
		assert.Zero(t, c.calls["cuGraphLaunch"], "refused: %v", c)
		_, refused := e.launcher.GraphLaunches()
		assert.Positive(t, refused)
	}
}

func TestKernelGraphFromEnv(t *testing.T) {
	for v, want := range map[string]KernelGraphs{"": KernelGraphsOn, "1": KernelGraphsOn, "0": KernelGraphsOff, "joins": KernelGraphsJoins} {
		got, err := kernelGraphFromEnv(func(string) (string, bool) { return v, v != "" })
		require.NoError(t, err, v)
		assert.Equal(t, want, got, v)
	}
	_, err := kernelGraphFromEnv(func(string) (string, bool) { return "2", true })
	require.Error(t, err)
	assert.Contains(t, err.Error(), EnvKernelGraph)
	assert.Contains(t, err.Error(), `"2"`)
}

// smallTasks is rank r's call of an 8 B coll on f32 (a sum where coll
// reduces).
func smallTasks(coll kspace.Coll, r int) []enqueue.Task {
	tk := enqueue.Task{Coll: coll, Send: 0x1000_0000 + uint64(r)<<24, Recv: 0x2000_0000 + uint64(r)<<24,
		Bytes: 8, Type: kspace.F32, Op: kspace.Sum}
	if !coll.HasRedOp() {
		tk.Op = 0
	}
	return []enqueue.Task{tk}
}

// smallGroup returns a call that runs one group of smallTasks(coll) over
// es, each rank on a stream of its own (made here, in ctx).
func smallGroup(t *testing.T, ctx *cuda.Context, es []*Engine, coll kspace.Coll) func() error {
	t.Helper()
	ss := make([]*cuda.Stream, len(es))
	for r := range ss {
		var err error
		ss[r], err = ctx.NewStream(true)
		require.NoError(t, err)
	}
	return func() error {
		ls := make([]Launch, len(es))
		for r, e := range es {
			p, err := e.Plan(smallTasks(coll, r))
			if err != nil {
				return err
			}
			ls[r] = Launch{Engine: e, Plan: &p, Tasks: smallTasks(coll, r), Stream: ss[r]}
		}
		return AdmitAndRun(ls)
	}
}

// otherContext returns another *Context of ctx's device's primary context
// (released when t ends).
func otherContext(t *testing.T, ctx *cuda.Context) *cuda.Context {
	t.Helper()
	dev, err := cuda.GetDevice(int(ctx.Device()))
	require.NoError(t, err)
	other, err := dev.PrimaryContext()
	require.NoError(t, err)
	require.Equal(t, ctx.Handle(), other.Handle())
	t.Cleanup(func() { assert.NoError(t, other.Release()) })
	return other
}
