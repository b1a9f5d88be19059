package comm

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/transport"
)

func TestProgrammaticFromEnv(t *testing.T) {
	for _, c := range []struct {
		v    string
		set  bool
		want Programmatic
	}{{"", false, ProgrammaticAuto}, {"", true, ProgrammaticAuto}, {"auto", true, ProgrammaticAuto},
		{"0", true, ProgrammaticOff}, {"1", true, ProgrammaticOn}} {
		got, err := programmaticFromEnv(func(string) (string, bool) { return c.v, c.set })
		require.NoError(t, err, "%q", c.v)
		assert.Equal(t, c.want, got, "%q", c.v)
	}
	for _, v := range []string{"yes", "2", " 1", "true", "AUTO"} {
		_, err := programmaticFromEnv(func(string) (string, bool) { return v, true })
		require.Error(t, err, "%q", v)
		assert.Contains(t, err.Error(), EnvProgrammatic)
		assert.Contains(t, err.Error(), "want auto")
		assert.Contains(t, err.Error(), v)
	}
}

// TestProgrammaticFor: auto launches programmatically exactly the ranks
// that share their GPU with no rank of their process; on and off apply to
// every rank.
func TestProgrammaticFor(t *testing.T) {
	// Ranks 0 and 1 share process 10 and GPU 0 on one host; rank 2 is
	// alone in process 11; rank 3 is process 10's pid on another host (a
	// different process); rank 4 is in process 12 with rank 5, each on
	// its own GPU.
	procs := []transport.Peer{
		{Rank: 0, PID: 10, Host: "a", Device: 0},
		{Rank: 1, PID: 10, Host: "a", Device: 0},
		{Rank: 2, PID: 11, Host: "a", Device: 0},
		{Rank: 3, PID: 10, Host: "b", Device: 0},
		{Rank: 4, PID: 12, Host: "a", Device: 0, BusID: "0000:19:00.0"},
		{Rank: 5, PID: 12, Host: "a", Device: 1, BusID: "0000:3b:00.0"},
	}
	want := []bool{false, false, true, true, true, true}
	for r := range procs {
		assert.Equal(t, want[r], programmaticFor(ProgrammaticAuto, procs, r, 9), "auto, rank %d", r)
		assert.True(t, programmaticFor(ProgrammaticOn, procs, r, 9), "on, rank %d", r)
		assert.False(t, programmaticFor(ProgrammaticOff, procs, r, 9), "off, rank %d", r)
	}
	assert.True(t, programmaticFor(ProgrammaticAuto, procs[:1], 0, 9), "one rank")
	assert.True(t, programmaticFor(ProgrammaticOn, procs[:1], 0, 10), "one rank, sm_100")
	for _, m := range []Programmatic{ProgrammaticAuto, ProgrammaticOn} {
		assert.False(t, programmaticFor(m, procs[:1], 0, 8), "sm_80 has no programmatic launch")
	}
}

// tinyAllReduce is rank r's 8-byte AllReduce on buffers of its own.
func tinyAllReduce(r int) []enqueue.Task {
	return []enqueue.Task{{Coll: kspace.AllReduce, Send: 0x1000_0000 + uint64(r)<<24, Recv: 0x2000_0000 + uint64(r)<<24,
		Bytes: 8, Type: kspace.F32, Op: kspace.Sum}}
}

// launchPaths returns, by name, a call of each path that launches a
// collective kernel, on fresh engines of the fake driver that set has
// configured: one rank's kernel run alone ("1 rank kernel", whose engine
// first is), one rank of two processes through the ledger ("2
// processes"), and the multi-rank launch of two ranks of one process ("2
// ranks merged").
func launchPaths(t *testing.T, ctx *cuda.Context, fn *cuda.Function, set func(*Engine)) (paths map[string]func() error, first *Engine) {
	stream := func() *cuda.Stream {
		s, err := ctx.NewStream(true)
		require.NoError(t, err)
		return s
	}
	paths = map[string]func() error{}
	{
		e := countEngines(t, ctx, fn, 1, 2)[0]
		set(e)
		s := stream()
		p, err := e.Plan(tinyAllReduce(0))
		require.NoError(t, err)
		paths["1 rank kernel"] = func() error { _, err := e.run(&p, s); return err }
		first = e
	}
	{
		e := countEngines(t, ctx, fn, 1, 2)[0]
		set(e)
		s := stream()
		paths["2 processes"] = func() error {
			p, err := e.Plan(tinyAllReduce(0))
			if err != nil {
				return err
			}
			return AdmitAndRunOne(e, &p, tinyAllReduce(0), s, nil)
		}
	}
	{
		es := countEngines(t, ctx, fn, 2, 2)
		ss := []*cuda.Stream{stream(), stream()}
		for _, e := range es {
			set(e)
		}
		paths["2 ranks merged"] = func() error {
			ls := make([]Launch, len(es))
			for r, e := range es {
				p, err := e.Plan(tinyAllReduce(r))
				if err != nil {
					return err
				}
				ls[r] = Launch{Engine: e, Plan: &p, Tasks: tinyAllReduce(r), Stream: ss[r]}
			}
			before := es[0].MultiLaunches()
			err := AdmitAndRun(ls)
			require.Equal(t, before+1, es[0].MultiLaunches(), "one multi-rank launch")
			return err
		}
	}
	return paths, first
}

// TestProgrammaticLaunches: with the launcher's Programmatic set (as
// EnvProgrammatic sets it), every path that launches a collective kernel
// asks for programmatic dependent launch, and none does without it
// (launchPaths).
func TestProgrammaticLaunches(t *testing.T) {
	inFakeDriver(t, "TestProgrammaticLaunches", func(t *testing.T, lib string) {
		d, ctx, fn := fakeKernel(t, lib)
		for _, on := range []bool{false, true} {
			paths, _ := launchPaths(t, ctx, fn, func(e *Engine) { e.launcher.Programmatic = on })
			for name, call := range paths {
				c := measure(t, d, call)
				launches := c.calls["cuLaunchKernel"] + c.calls["cuLaunchKernelEx"]
				assert.Equal(t, 1, launches, "%s, programmatic %v: one launch per call: %v", name, on, c)
				if on {
					assert.Equal(t, 1, c.calls["cuLaunchKernelEx"], "%s: %v", name, c)
					assert.Positive(t, d.Peek("programmatic_launches"), "%s", name)
				} else {
					assert.Zero(t, c.calls["cuLaunchKernelEx"], "%s: %v", name, c)
				}
			}
		}
	})
}

func TestTriggerEarlyFromEnv(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{{"", true}, {"1", true}, {"0", false}} {
		got, err := triggerEarlyFromEnv(func(string) (string, bool) { return c.v, c.v != "" })
		require.NoError(t, err, "%q", c.v)
		assert.Equal(t, c.want, got, "%q", c.v)
	}
	_, err := triggerEarlyFromEnv(func(string) (string, bool) { return "yes", true })
	require.Error(t, err)
	assert.Contains(t, err.Error(), EnvTriggerEarly)
	assert.Contains(t, err.Error(), `"yes"`)
}

// TestTriggerEarlyBlocks: a kernel that starts the next one early may have
// at most half of what a rank's launch may have and half of its share of
// the GPU, so that every co-located rank's running kernel and the next one
// fit together.
func TestTriggerEarlyBlocks(t *testing.T) {
	for _, c := range []struct {
		on                           bool
		nChannels, budget, perGPU, w int
	}{
		{true, 32, 132, 2, 16}, // nChannels/2
		{true, 16, 132, 8, 8},  // 132/16 = 8
		{true, 16, 100, 8, 6},  // 100/16
		{true, 1, 132, 1, 0},   // one channel: never
		{true, 8, 132, 0, 0},   // nonsense: never
		{false, 32, 132, 2, 0}, // off
	} {
		got := triggerEarlyBlocks(c.on, c.nChannels, c.budget, c.perGPU)
		assert.Equal(t, c.w, got, "%+v", c)
		if got > 0 {
			assert.LessOrEqual(t, 2*got*c.perGPU, c.budget, "%+v: twice every rank's blocks fit", c)
			assert.LessOrEqual(t, 2*got, c.nChannels, "%+v: the ledger's width holds twice", c)
		}
	}
}

// TestTriggerEarlyLaunches: every path that launches a collective kernel
// marks it generated.ArgsTriggerEarly exactly when the launcher is
// programmatic and the kernel's blocks per rank are within
// TriggerEarlyBlocks, and the residency ledger is asked for twice the
// blocks of a marked launch.
func TestTriggerEarlyLaunches(t *testing.T) {
	inFakeDriver(t, "TestTriggerEarlyLaunches", func(t *testing.T, lib string) {
		d, ctx, fn := fakeKernel(t, lib)
		flagsAt := fmt.Sprintf("last_args_u16@%d", unsafe.Offsetof(generated.KernelArgs{}.Flags))
		for _, c := range []struct {
			programmatic bool
			limit        int
			want         bool
		}{{true, 1, true}, {true, 0, false}, {false, 1, false}} {
			paths, e := launchPaths(t, ctx, fn, func(e *Engine) {
				e.launcher.Programmatic, e.launcher.TriggerEarlyBlocks = c.programmatic, c.limit
			})
			p, err := e.Plan(tinyAllReduce(0))
			require.NoError(t, err)
			require.Equal(t, 1, p.Launches[0].NBlocks(), "an 8-byte AllReduce runs on one channel")
			r, ok := e.request(&p, tinyAllReduce(0))
			require.True(t, ok)
			want := 1
			if c.want {
				want = 2
			}
			assert.Equal(t, want, r.Blocks, "%+v: the ledger's request", c)
			for name, call := range paths {
				require.NoError(t, call(), name)
				flags := d.Peek(flagsAt)
				require.GreaterOrEqual(t, flags, 0, "%s: the launch's arguments reached the driver", name)
				assert.Equal(t, c.want, flags&generated.ArgsTriggerEarly != 0, "%s, %+v: flags %#x", name, c, flags)
			}
		}
	})
}

func TestCapturedProgrammaticFor(t *testing.T) {
	assert.True(t, capturedProgrammaticFor(ProgrammaticAuto, 9))
	assert.True(t, capturedProgrammaticFor(ProgrammaticOn, 10))
	assert.False(t, capturedProgrammaticFor(ProgrammaticOff, 9))
	assert.False(t, capturedProgrammaticFor(ProgrammaticAuto, 8), "sm_80 has no programmatic launch")
}

// TestCapturedProgrammatic: a launcher with CapturedProgrammatic but not
// Programmatic (auto, for ranks that share a process and a GPU) launches
// plainly while its stream is not captured, and programmatically, with
// the early start, while it is.
func TestCapturedProgrammatic(t *testing.T) {
	inFakeDriver(t, "TestCapturedProgrammatic", func(t *testing.T, lib string) {
		d, ctx, fn := fakeKernel(t, lib)
		flagsAt := fmt.Sprintf("last_args_u16@%d", unsafe.Offsetof(generated.KernelArgs{}.Flags))
		e := countEngines(t, ctx, fn, 1, 2)[0]
		e.launcher.CapturedProgrammatic, e.launcher.TriggerEarlyBlocks = true, 1
		s, err := ctx.NewStream(true)
		require.NoError(t, err)
		task := tinyAllReduce(0)
		p, err := e.Plan(task)
		require.NoError(t, err)
		for _, captured := range []bool{false, true, false} {
			if captured {
				d.Set("capture_status", 1)
			}
			d.Reset()
			_, err := e.run(&p, s)
			d.Set("capture_status", 0)
			require.NoError(t, err, "captured %v", captured)
			if captured {
				assert.Equal(t, 1, d.Peek("programmatic_launches"), "captured: a programmatic launch")
			} else {
				assert.Zero(t, d.Peek("programmatic_launches"), "eager: a plain launch")
			}
			assert.Equal(t, captured, d.Peek(flagsAt)&generated.ArgsTriggerEarly != 0, "captured %v: the early start", captured)
			r, ok := e.request(&p, task)
			require.True(t, ok)
			assert.Equal(t, 1, r.Blocks, "the ledger counts eager launches, which start nothing early")
		}
	})
}
