package comm

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/fakecuda"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/residency"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// launchCost is what one call of a launch path asks of the driver: calls
// by symbol, and the process's cgo calls (runtime.NumCgoCall).
type launchCost struct {
	calls fakecuda.Counts
	cgo   int
}

func (c launchCost) String() string {
	return fmt.Sprintf("%d driver calls in %d cgo calls: %v", c.calls.Total(), c.cgo, c.calls)
}

// TestDriverCallsPerLaunch counts the driver calls and cgo calls of the
// launch paths of small calls, with a counting fake of the driver
// (internal/fakecuda) in a child process: a one-rank out-of-place copy, a
// one-rank kernel, one rank of two processes (through the residency
// ledger), and the multi-rank launch of 2 and 8 ranks of one process on
// their own streams (ncclperf -g N). It fails when a path makes other
// calls than it does now.
func TestDriverCallsPerLaunch(t *testing.T) {
	inFakeDriver(t, "TestDriverCallsPerLaunch", driverCallsChild)
}

// copyAnswers checks what a one-rank copy call answers to the driver: on
// a capturing stream the copy is queued all the same (the driver captures
// it as a copy node); a capture invalidated earlier fails it, saying so
// as run's capture check does; a failed copy is the driver's error, not a
// usage error.
func copyAnswers(t *testing.T, d *fakecuda.Driver, call func() error) {
	t.Helper()
	d.Set("capture_status", 1)
	c := measure(t, d, call)
	d.Set("capture_status", 0)
	assert.Equal(t, 1, c.calls["cuMemcpyAsync"], "captured: %v", c)
	assert.Equal(t, 2, c.calls.Total(), "captured: %v", c)
	d.Set("copy_result", int(cuda.ResultStreamCaptureInvalidated))
	err := call()
	d.Set("copy_result", 0)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrInvalidUsage)
	assert.ErrorIs(t, err, enqueue.ErrCaptureInvalidated)
	assert.Contains(t, err.Error(), "copy of 8 bytes")
	d.Set("copy_result", int(cuda.ResultIllegalAddress))
	err = call()
	d.Set("copy_result", 0)
	assert.ErrorIs(t, err, cuda.ErrIllegalAddress)
	assert.NotErrorIs(t, err, ErrInvalidUsage)
}

// inFakeDriver runs child in a child process of the test binary that
// loads the counting fake driver (fakecuda.InChild), with the test name,
// t's; child gets the fake's path. Copies go through cuMemcpyAsync unless
// the environment says otherwise: the fake can inject their failures
// (copy_result), while the default copy kernel's launch is counted by
// runtime/cuda's and capi's tests, and TestKernelCopies asks for it.
func inFakeDriver(t *testing.T, name string, child func(t *testing.T, lib string)) {
	env := func(testing.TB) []string {
		if _, set := os.LookupEnv(cuda.CopyAPIEnv); set {
			return nil
		}
		return []string{cuda.CopyAPIEnv + "=generic"}
	}
	if lib, ok := fakecuda.InChild(t, name, cuda.LibraryEnv, env); ok {
		child(t, lib)
	}
}

// countEngines returns n engines of one communicator of nRanks ranks on
// the fake driver's device 0, on one residency lease (n of the
// communicator's ranks in this process), each launching fn.
func countEngines(t *testing.T, ctx *cuda.Context, fn *cuda.Function, n, nRanks int) []*Engine {
	t.Helper()
	topo := oneGPU(nRanks, true)
	topo.RanksPerGPU = n
	cfg, err := config.FromEnv(func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	tn, err := tune.New(topo, cfg, nil)
	require.NoError(t, err)
	nc := tn.MaxChannels()
	lease, err := residency.Default().Join(fmt.Sprintf("count-%d-%d", n, nRanks), "fake0", 132, map[string]int{"fake0": n}, nc)
	require.NoError(t, err)
	es := make([]*Engine, n)
	for r := range es {
		es[r] = &Engine{rank: r, nRanks: nRanks, s: Settings{OneLaunch: true}, tuner: tn, cctx: ctx,
			launcher:  enqueue.NewLauncher(ctx, 0xc0de00+uint64(r), func(kspace.Func) (*cuda.Function, error) { return fn, nil }),
			nChannels: nc, events: map[uintptr]launchEvent{}, log: slog.New(slog.DiscardHandler),
			plan: enqueue.Comm{Rank: r, NRanks: nRanks, NChannels: nc, P2PChannelsPerPeer: 2}}
		es[r].res.lease = lease
	}
	return es
}

// measure runs one warm-up call of op (events are made at first use) and
// then iters calls, returning the cost of one.
func measure(t *testing.T, d *fakecuda.Driver, op func() error) launchCost {
	t.Helper()
	require.NoError(t, op())
	const iters = 64
	runtime.GC()
	d.Reset()
	cgo := runtime.NumCgoCall()
	for range iters {
		require.NoError(t, op())
	}
	cgo = runtime.NumCgoCall() - cgo // before Counts' own cgo calls
	return launchCost{calls: d.Counts().Div(iters), cgo: int(cgo) / iters}
}

// fakeKernel loads the fake driver at lib (in inFakeDriver's child) and
// returns it, device 0's primary context and a kernel of a fake module.
func fakeKernel(t *testing.T, lib string) (*fakecuda.Driver, *cuda.Context, *cuda.Function) {
	t.Helper()
	require.NoError(t, cuda.Init())
	d, err := fakecuda.Loaded(lib)
	require.NoError(t, err)
	dev, err := cuda.GetDevice(0)
	require.NoError(t, err)
	ctx, err := dev.PrimaryContext()
	require.NoError(t, err)
	m, err := ctx.LoadModule([]byte("fake image"))
	require.NoError(t, err)
	fn, err := m.Function("fake")
	require.NoError(t, err)
	return d, ctx, fn
}

func driverCallsChild(t *testing.T, lib string) {
	d, ctx, fn := fakeKernel(t, lib)
	stream := func() *cuda.Stream {
		s, err := ctx.NewStream(true)
		require.NoError(t, err)
		return s
	}
	ar := func(r int, inPlace bool) []enqueue.Task {
		tk := enqueue.Task{Coll: kspace.AllReduce, Send: 0x1000_0000 + uint64(r)<<24, Recv: 0x2000_0000 + uint64(r)<<24,
			Bytes: 8, Type: kspace.F32, Op: kspace.Sum}
		if inPlace {
			tk.Recv = tk.Send
		}
		return []enqueue.Task{tk}
	}
	// groupOf plans an out-of-place AllReduce for each engine of es on
	// its stream ss[r]: one group's launches.
	groupOf := func(es []*Engine, ss []*cuda.Stream) ([]Launch, error) {
		ls := make([]Launch, len(es))
		for r, e := range es {
			tasks := ar(r, false)
			p, err := e.Plan(tasks)
			if err != nil {
				return nil, err
			}
			ls[r] = Launch{Engine: e, Plan: &p, Tasks: tasks, Stream: ss[r]}
		}
		return ls, nil
	}
	got := map[string]launchCost{}
	got["nothing"] = measure(t, d, func() error { return nil })

	// One rank, out of place: a copy (ncclperf -g 1).
	{
		e := countEngines(t, ctx, fn, 1, 1)[0]
		s := stream()
		tasks := ar(0, false)
		got["1 rank copy"] = measure(t, d, func() error {
			p, err := e.Plan(tasks)
			if err != nil {
				return err
			}
			require.Len(t, p.Copies, 1)
			return AdmitAndRunOne(e, &p, tasks, s, nil)
		})
	}
	// The same through the C ABI (Settings.UntrackedOneRankCopies): the
	// copy alone, as NCCL's one-rank path queues it.
	{
		e := countEngines(t, ctx, fn, 1, 1)[0]
		e.s.UntrackedOneRankCopies = true
		s := stream()
		tasks := ar(0, false)
		call := func() error {
			p, err := e.Plan(tasks)
			if err != nil {
				return err
			}
			require.Len(t, p.Copies, 1)
			return AdmitAndRunOne(e, &p, tasks, s, nil)
		}
		got["1 rank copy untracked"] = measure(t, d, call)
		assert.Empty(t, e.events, "no completion event: Wait, Finalize and Destroy have no copy to wait for")
		assert.Nil(t, e.res.last)
		copyAnswers(t, d, call)
	}
	// The same without a plan (RunOneRankCopy, a one-rank collective of
	// the C ABI outside a group): the same driver calls, and the same
	// answers to a capture and to a failed copy.
	{
		e := countEngines(t, ctx, fn, 1, 1)[0]
		e.s.UntrackedOneRankCopies = true
		s := stream()
		cp, ok := enqueue.OneRankCopy(ar(0, false)[0])
		require.True(t, ok)
		call := func() error {
			done, err := e.RunOneRankCopy(cp, s)
			require.True(t, done)
			return err
		}
		got["1 rank unplanned"] = measure(t, d, call)
		assert.Empty(t, e.events)
		assert.Nil(t, e.res.last)
		copyAnswers(t, d, call)
		// In place: nothing reaches the driver.
		inPlace, ok := enqueue.OneRankCopy(ar(0, true)[0])
		require.True(t, ok)
		c := measure(t, d, func() error { _, err := e.RunOneRankCopy(inPlace, s); return err })
		assert.Zero(t, c.calls.Total(), "in place: %v", c)
		assert.Zero(t, c.cgo, "in place: %v", c)
	}
	// One rank's kernel, run alone (Engine.run).
	{
		e := countEngines(t, ctx, fn, 1, 2)[0]
		s := stream()
		p, err := e.Plan(ar(0, false))
		require.NoError(t, err)
		require.Len(t, p.Launches, 1)
		got["1 rank kernel"] = measure(t, d, func() error { _, err := e.run(&p, s); return err })
	}
	// One rank of a communicator of two processes: through the ledger.
	{
		e := countEngines(t, ctx, fn, 1, 2)[0]
		s := stream()
		tasks := ar(0, false)
		got["2 processes"] = measure(t, d, func() error {
			p, err := e.Plan(tasks)
			if err != nil {
				return err
			}
			return AdmitAndRunOne(e, &p, tasks, s, nil)
		})
	}
	// The same on a stream being captured: the general path's external
	// record (a graph node) and the launch, without asking again whether
	// the stream is being captured.
	{
		e := countEngines(t, ctx, fn, 1, 2)[0]
		s := stream()
		p, err := e.Plan(ar(0, false))
		require.NoError(t, err)
		d.Set("capture_status", 1)
		got["1 rank captured"] = measure(t, d, func() error { _, err := e.run(&p, s); return err })
		d.Set("capture_status", 0)
	}
	// Two ranks of one process on one shared (non-default) stream.
	{
		es := countEngines(t, ctx, fn, 2, 2)
		s := stream()
		ss := []*cuda.Stream{s, s}
		got["2 ranks 1 stream"] = measure(t, d, func() error {
			ls, err := groupOf(es, ss)
			if err != nil {
				return err
			}
			before := es[0].MultiLaunches()
			err = AdmitAndRun(ls)
			require.Equal(t, before+1, es[0].MultiLaunches(), "one multi-rank launch")
			return err
		})
	}
	// n ranks of one process, one group, each rank on its own stream: one
	// multi-rank launch.
	for _, n := range []int{2, 8} {
		es := countEngines(t, ctx, fn, n, n)
		ss := make([]*cuda.Stream, n)
		tasks := make([][]enqueue.Task, n)
		for r := range ss {
			ss[r], tasks[r] = stream(), ar(r, false)
		}
		plans := make([]enqueue.Plan, n)
		ls := make([]Launch, n)
		got[fmt.Sprintf("%d ranks merged", n)] = measure(t, d, func() error {
			for r, e := range es {
				p, err := e.Plan(tasks[r])
				if err != nil {
					return err
				}
				plans[r] = p
				ls[r] = Launch{Engine: e, Plan: &plans[r], Tasks: tasks[r], Stream: ss[r]}
			}
			before := es[0].MultiLaunches()
			err := AdmitAndRun(ls)
			require.Equal(t, before+1, es[0].MultiLaunches(), "one multi-rank launch")
			return err
		})
	}
	// The same with every other rank's stream busy: each joins the launch
	// (a record and a wait before it), asked whether it is busy only every
	// joinQueryEvery-th launch (so, with no query, no capture-mode switch).
	d.Set("stream_busy", 1)
	for _, n := range []int{2, 8} {
		es := countEngines(t, ctx, fn, n, n)
		ss := make([]*cuda.Stream, n)
		for r := range ss {
			ss[r] = stream()
		}
		run := func() error {
			ls, err := groupOf(es, ss)
			if err != nil {
				return err
			}
			return AdmitAndRun(ls)
		}
		got[fmt.Sprintf("%d ranks busy", n)] = measure(t, d, run)
		d.Reset()
		for range 2 * joinQueryEvery {
			require.NoError(t, run())
		}
		c := d.Counts()
		assert.Equal(t, 2*(n-1), c["cuStreamQuery"], "%d ranks busy: each other stream asked once per %d launches", n, joinQueryEvery)
		assert.Equal(t, 2*joinQueryEvery*n, c["cuEventRecord"], "%d ranks busy: every launch joins every other stream, and records the set's completion", n)
		assert.Equal(t, 2*joinQueryEvery*2*(n-1), c["cuStreamWaitEvent"], "%d ranks busy: every launch joins every other stream before and after", n)
	}
	d.Set("stream_busy", 0)
	// Under CUDA graph capture the ordering events become external nodes.
	// Streams of one capture share one captured multi-rank launch
	// (runMultiCaptured); streams captured apart launch each rank alone.
	d.Set("capture_status", 1)
	for _, k := range []string{"2 ranks captured", "2 ranks captured apart", "2 ranks captured, no follow"} {
		es := countEngines(t, ctx, fn, 2, 2)
		ss := []*cuda.Stream{stream(), stream()}
		want := uint64(1)
		switch k {
		case "2 ranks captured apart":
			d.Set("capture_id_per_stream", 1)
			want = 0
		case "2 ranks captured, no follow":
			d.Set("update_deps_result", int(cuda.ResultNotSupported))
		}
		got[k] = measure(t, d, func() error {
			ls, err := groupOf(es, ss)
			if err != nil {
				return err
			}
			before := es[0].MultiLaunches()
			err = AdmitAndRun(ls)
			require.Equal(t, before+want, es[0].MultiLaunches(), "%s: multi-rank launches", k)
			return err
		})
		d.Set("capture_id_per_stream", 0)
		d.Set("update_deps_result", 0)
	}
	d.Set("capture_status", 0)
	// Two ranks sharing the GPU, handed the per-thread default stream:
	// each launches on its lane. Under capture the first lane to leave
	// sets the stream's capture dependencies (so they do not gather every
	// earlier launch), the second adds its own.
	for _, captured := range []bool{false, true} {
		es := countEngines(t, ctx, fn, 2, 2)
		for _, e := range es {
			e.lanes.shared = true
		}
		def := cuda.WrapStream(ctx, cuda.StreamPerThread)
		k := "2 ranks default stream"
		if captured {
			d.Set("capture_status", 1)
			k += " captured"
		}
		got[k] = measure(t, d, func() error {
			ls, err := groupOf(es, []*cuda.Stream{def, def})
			if err != nil {
				return err
			}
			return AdmitAndRun(ls)
		})
		d.Set("capture_status", 0)
		for _, e := range es {
			require.NoError(t, e.closeLane())
		}
	}
	for _, k := range []string{"nothing", "1 rank copy", "1 rank copy untracked", "1 rank unplanned", "1 rank kernel", "1 rank captured", "2 processes", "2 ranks 1 stream", "2 ranks merged", "8 ranks merged", "2 ranks busy", "8 ranks busy", "2 ranks captured", "2 ranks captured apart", "2 ranks captured, no follow", "2 ranks default stream", "2 ranks default stream captured"} {
		t.Logf("%-16s %v", k, got[k])
	}
	// The counts of branch launchbatch; before it (one cgo call per driver
	// call, each asking for the current context): 6 driver calls in 5 cgo
	// calls, 6 in 4, 6 in 5, 16 in 13, 76 in 55.
	want := map[string]struct{ calls, cgo int }{
		"1 rank copy": {4, 1},
		// Branch onerank: the C ABI's copy alone (was 4 in 1).
		"1 rank copy untracked": {2, 1},
		"1 rank unplanned":      {2, 1},
		"1 rank kernel":         {4, 1},
		"2 processes":           {4, 1},
		// Branch setevent: one completion record per multi-rank launch
		// (the set's event), not one per rank (were 10, 34, 12 and 5).
		"2 ranks merged": {9, 1},
		"8 ranks merged": {27, 1},
		// Busy streams are joined without asking (joinQueryEvery): the
		// query and the mode switches around it went (were 11 and 41).
		"2 ranks busy":     {8, 1},
		"8 ranks busy":     {32, 1},
		"2 ranks 1 stream": {4, 1},
		// Branch launchcut: a captured launch asked twice whether its
		// stream was being captured, and made a cgo call per driver call
		// after that (8 in 4; 2 ranks 20 in 9: each stream asked up to 3
		// times, and the capture mode switched for queries that never
		// ran).
		"1 rank captured": {5, 2},
		// Branch capturemulti: each stream's capture id is asked too, at
		// capture time (the two cuStreamGetCaptureInfo_v2 calls and their
		// context checks; was 9 in 3).
		"2 ranks captured apart": {13, 5},
		// One capture: two checks and two capture ids, the fork's
		// record and wait before the launch, the launch, the external
		// completion record, and the other stream following the first
		// (its capture info, the update), each a cgo call of its own
		// with its context check.
		"2 ranks captured": {18, 8},
		// A driver that cannot follow: the fork's record and wait
		// after the launch instead (the update tried first, its error
		// named through cuGetErrorName and cuGetErrorString).
		"2 ranks captured, no follow": {26, 14},
	}
	for k, w := range want {
		assert.Equal(t, w.calls, got[k].calls.Total(), "%s: %v", k, got[k])
		assert.Equal(t, w.cgo, got[k].cgo, "%s: %v", k, got[k])
		if got[k].cgo == 1 {
			assert.Equal(t, 1, got[k].calls["cuCtxGetCurrent"], "%s: one check of the current context", k)
		}
	}
	for _, k := range []string{"1 rank kernel", "1 rank captured", "2 processes", "2 ranks 1 stream", "2 ranks merged", "8 ranks merged", "2 ranks busy"} {
		assert.Equal(t, 1, got[k].calls["cuLaunchKernel"], k)
	}
	for _, k := range []string{"1 rank captured", "2 ranks captured", "2 ranks captured apart"} {
		assert.Equal(t, got[k].cgo, got[k].calls["cuCtxGetCurrent"], "%s: one check of the current context per cgo call", k)
	}
	assert.Equal(t, 1, got["1 rank captured"].calls["cuStreamIsCapturing"], "captured: asked once")
	assert.Equal(t, 1, got["1 rank captured"].calls["cuEventRecordWithFlags"], "captured: the external completion record")
	for _, k := range []string{"2 ranks captured", "2 ranks captured apart", "2 ranks captured, no follow"} {
		assert.Equal(t, 2, got[k].calls["cuStreamIsCapturing"], "%s: each stream asked once", k)
		assert.Zero(t, got[k].calls["cuThreadExchangeStreamCaptureMode"], "%s: no query ran, so no mode switch", k)
	}
	assert.Equal(t, 1, got["2 ranks 1 stream"].calls["cuStreamIsCapturing"], "one stream: asked once")
	assert.Zero(t, got["2 ranks 1 stream"].calls["cuStreamWaitEvent"], "one stream: no join")
	assert.Equal(t, 1, got["1 rank copy"].calls["cuMemcpyAsync"])
	assert.Equal(t, 1, got["1 rank copy untracked"].calls["cuMemcpyAsync"])
	assert.Equal(t, 1, got["1 rank unplanned"].calls["cuMemcpyAsync"])
	assert.Equal(t, 2, got["2 ranks busy"].calls["cuEventRecord"], "the busy stream's join, and the set's completion")
	assert.Equal(t, 2, got["2 ranks busy"].calls["cuStreamWaitEvent"], "the busy stream's join")
	for _, k := range []string{"2 ranks 1 stream", "2 ranks merged", "8 ranks merged"} {
		assert.Equal(t, 1, got[k].calls["cuEventRecord"], "%s: one completion record, the set's", k)
	}
	assert.Equal(t, 7, got["8 ranks merged"].calls["cuStreamWaitEvent"], "every other stream waits for the launch")
	assert.Equal(t, 7, got["8 ranks merged"].calls["cuStreamQuery"])
	c := got["2 ranks captured apart"].calls
	assert.Equal(t, 2, c["cuLaunchKernel"], "apart: one launch per rank")
	assert.Equal(t, 2, c["cuEventRecordWithFlags"], "apart: external completion records")
	assert.Zero(t, c["cuEventRecord"], "apart: no eager record in a capture")
	assert.Equal(t, 2, c["cuStreamGetCaptureInfo_v2"], "apart: each stream's capture id")
	for _, k := range []string{"2 ranks captured", "2 ranks captured, no follow"} {
		c = got[k].calls
		assert.Equal(t, 1, c["cuLaunchKernel"], "%s: one launch for both ranks", k)
		assert.Equal(t, 1, c["cuEventRecordWithFlags"], "%s: the set's external completion record", k)
		assert.Equal(t, 1, c["cuStreamUpdateCaptureDependencies"], "%s: the other stream follows the first", k)
		assert.Equal(t, 3, c["cuStreamGetCaptureInfo_v2"], "%s: each stream's capture id, the first's dependencies", k)
	}
	assert.Zero(t, got["2 ranks default stream"].calls["cuStreamUpdateCaptureDependencies"], "eager lanes: no capture to follow")
	c = got["2 ranks default stream captured"].calls
	assert.Equal(t, 1, c["cuStreamUpdateCaptureDependencies"], "captured lanes: the first to leave follows")
	assert.Equal(t, 2, c["cuLaunchKernel"], "captured lanes: a launch per rank")
	c = got["2 ranks captured"].calls
	assert.Equal(t, 1, c["cuEventRecord"], "one capture: the fork's record before the launch")
	assert.Equal(t, 1, c["cuStreamWaitEvent"], "one capture: the fork's wait before the launch")
	c = got["2 ranks captured, no follow"].calls
	assert.Equal(t, 2, c["cuEventRecord"], "no follow: the fork's records, before and after the launch")
	assert.Equal(t, 2, c["cuStreamWaitEvent"], "no follow: the fork's waits, before and after the launch")
}
