package comm

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// procs makes the views of nProcs processes with perProc ranks each on
// one GPU of host h, each seeing sms SMs with MPS share pct.
func procs(h string, nProcs, perProc, sms int, pct float64) []shareView {
	var vs []shareView
	for p := range nProcs {
		for range perProc {
			vs = append(vs, shareView{PID: 100 + p, Host: h, GPU: "0000:1b:00.0", SMs: sms, BlocksPerSM: 1, Percent: pct})
		}
	}
	return vs
}

// onMachine puts the views of several hosts on machine m, one process
// per host (distinct PIDs, as on one machine).
func onMachine(m string, hosts ...[]shareView) []shareView {
	var vs []shareView
	for h, host := range hosts {
		for _, v := range host {
			v.Machine, v.PID = m, v.PID+1000*h
			vs = append(vs, v)
		}
	}
	return vs
}

// TestAgreeSharesMPS: processes with their own MPS shares size their
// channels from their share alone; the old sizing scaled the driver's
// (already limited) count by the percentage again and counted every rank
// of the GPU, which gave a 25 % client of an H200 2 channels.
func TestAgreeSharesMPS(t *testing.T) {
	cases := []struct {
		name     string
		views    []shareView
		ranks    int // RanksPerGPU
		channels int // the tuner's, 32 by default
	}{
		{"2 processes, 50 % each", procs("h", 2, 1, 66, 50), 1, 32},
		{"4 processes, 25 % each", procs("h", 4, 1, 33, 25), 1, 32},
		{"8 processes, 12.5 % each", procs("h", 8, 1, 16, 12.5), 1, 16},
		{"2 processes × 4 ranks, 50 % each", procs("h", 2, 4, 66, 50), 4, 16},
		{"2 processes, MPS without shares", procs("h", 2, 1, 132, 0), 2, 32},
		{"4 processes, no shares", procs("h", 4, 1, 132, 0), 4, 32},
		{"3 processes, 50 % each: over 100", procs("h", 3, 1, 66, 50), 3, 22},
		{"one process, 4 ranks", procs("h", 1, 4, 132, 0), 4, 32},
		{"one process, 4 ranks, 50 % share", procs("h", 1, 4, 66, 50), 4, 16},
		{"one share missing", append(procs("h", 1, 1, 66, 50), procs("h", 1, 1, 132, 0)[0]), 2, 32},
		{"2 hosts × 2 ranks of one process", append(procs("a", 1, 2, 132, 0), procs("b", 1, 2, 132, 0)...), 2, 32},
		{"one rank per GPU", append(procs("a", 1, 1, 132, 0), procs("b", 1, 1, 132, 0)...), 1, 32},
		// Fake hosts (NCCL_HOSTID) on one machine share its GPU: the
		// matrix's h3r2 took 32 channels × 6 ranks on 132 SMs and hung.
		{"3 fake hosts × 2 ranks of one process, one machine", onMachine("m", procs("a", 1, 2, 132, 0), procs("b", 1, 2, 132, 0), procs("c", 1, 2, 132, 0)), 6, 22},
		{"4 fake hosts × 2 processes, one machine", onMachine("m", procs("a", 2, 1, 132, 0), procs("b", 2, 1, 132, 0), procs("c", 2, 1, 132, 0), procs("d", 2, 1, 132, 0)), 8, 16},
		{"2 fake hosts, MPS shares of 50 %, one machine", onMachine("m", procs("a", 1, 1, 66, 50), procs("b", 1, 1, 66, 50)), 1, 32},
		{"2 fake hosts, MPS shares of 60 %, one machine", onMachine("m", procs("a", 1, 1, 79, 60), procs("b", 1, 1, 79, 60)), 2, 32},
		{"2 machines × 2 ranks of one process", append(onMachine("m1", procs("a", 1, 2, 132, 0)), onMachine("m2", procs("b", 1, 2, 132, 0))...), 2, 32},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := agreeShares(c.views)
			assert.Equal(t, c.ranks, a.RanksPerGPU, "why: %s", a.Why)
			assert.NotEmpty(t, a.Why)
			gpu := h200GPU
			gpu.SMCount = a.SMs
			n := len(c.views)
			tp := tuneTopology(topo.NewLayout(make([]int, n)), gpu, a.BlocksPerSM, config.Default())
			tp.RanksPerGPU = a.RanksPerGPU
			tu, err := tune.New(tp, config.Default(), nil)
			require.NoError(t, err)
			assert.Equal(t, c.channels, tu.MaxChannels(), "%d SMs, %d ranks per share", a.SMs, a.RanksPerGPU)
			// Every co-located process's blocks fit in its share.
			assert.LessOrEqual(t, tu.MaxChannels()*a.RanksPerGPU, a.SMs*a.BlocksPerSM)
		})
	}
}

// The ranks agree on the fewest SMs and blocks per SM whatever order the
// views come in.
func TestAgreeSharesMin(t *testing.T) {
	vs := []shareView{
		{PID: 1, Host: "a", GPU: "0", SMs: 132, BlocksPerSM: 2},
		{PID: 2, Host: "b", GPU: "0", SMs: 78, BlocksPerSM: 3},
		{PID: 3, Host: "c", GPU: "0", SMs: 100, BlocksPerSM: 1},
	}
	for i := range vs {
		rot := append(append([]shareView(nil), vs[i:]...), vs[:i]...)
		a := agreeShares(rot)
		assert.Equal(t, agreedShare{SMs: 78, BlocksPerSM: 1, RanksPerGPU: 1, Why: "one rank per GPU"}, a, fmt.Sprint(i))
	}
}
