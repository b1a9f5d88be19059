package comm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
// that are alone in their process; on and off apply to every rank.
func TestProgrammaticFor(t *testing.T) {
	// Ranks 0 and 1 share process 10 on one host; rank 2 is alone in
	// process 11; rank 3 is process 10's pid on another host (a
	// different process).
	procs := []transport.Peer{
		{Rank: 0, PID: 10, Host: "a", Device: 0},
		{Rank: 1, PID: 10, Host: "a", Device: 0},
		{Rank: 2, PID: 11, Host: "a", Device: 0},
		{Rank: 3, PID: 10, Host: "b", Device: 0},
	}
	want := []bool{false, false, true, true}
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

// TestProgrammaticLaunches: with the launcher's Programmatic set (as
// EnvProgrammatic sets it), every path that launches a collective kernel
// asks for programmatic dependent launch, and none does without it: one
// rank's kernel run alone, one rank of two processes through the ledger,
// and the multi-rank launch of two ranks of one process.
func TestProgrammaticLaunches(t *testing.T) {
	inFakeDriver(t, "TestProgrammaticLaunches", func(t *testing.T, lib string) {
		d, ctx, fn := fakeKernel(t, lib)
		task := func(r int) []enqueue.Task {
			return []enqueue.Task{{Coll: kspace.AllReduce, Send: 0x1000_0000 + uint64(r)<<24, Recv: 0x2000_0000 + uint64(r)<<24,
				Bytes: 8, Type: kspace.F32, Op: kspace.Sum}}
		}
		stream := func() *cuda.Stream {
			s, err := ctx.NewStream(true)
			require.NoError(t, err)
			return s
		}
		for _, on := range []bool{false, true} {
			paths := map[string]func() error{}
			{
				e := countEngines(t, ctx, fn, 1, 2)[0]
				e.launcher.Programmatic = on
				s := stream()
				p, err := e.Plan(task(0))
				require.NoError(t, err)
				paths["1 rank kernel"] = func() error { _, err := e.run(&p, s); return err }
			}
			{
				e := countEngines(t, ctx, fn, 1, 2)[0]
				e.launcher.Programmatic = on
				s := stream()
				paths["2 processes"] = func() error {
					p, err := e.Plan(task(0))
					if err != nil {
						return err
					}
					return AdmitAndRunOne(e, &p, task(0), s, nil)
				}
			}
			{
				es := countEngines(t, ctx, fn, 2, 2)
				ss := []*cuda.Stream{stream(), stream()}
				for _, e := range es {
					e.launcher.Programmatic = on
				}
				paths["2 ranks merged"] = func() error {
					ls := make([]Launch, len(es))
					for r, e := range es {
						p, err := e.Plan(task(r))
						if err != nil {
							return err
						}
						ls[r] = Launch{Engine: e, Plan: &p, Tasks: task(r), Stream: ss[r]}
					}
					before := es[0].MultiLaunches()
					err := AdmitAndRun(ls)
					require.Equal(t, before+1, es[0].MultiLaunches(), "one multi-rank launch")
					return err
				}
			}
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
