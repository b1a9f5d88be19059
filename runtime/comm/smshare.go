package comm

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// This file decides the SMs and the competing ranks that bound a
// communicator's channels (tune.Topology's SMCount and RanksPerGPU).
//
// A rank sizes its channels from the SMs its process may use
// (topo.SMShareOf: under MPS with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, the
// process's share as the driver reports it). The ranks that compete for
// those SMs are the communicator's ranks on the same GPU, except when
// every process with ranks there has its own MPS share and the shares add
// up to at most 100 %: MPS then keeps each process within its share, the
// processes' blocks never wait on each other for room, and only the ranks
// of one process compete. Before, a 25 % client of an H200 counted its
// share twice (33 SMs scaled to 8) and every rank of the GPU against it,
// and got 2 channels.

// shareView is what a rank tells its peers about the SMs it may use.
type shareView struct {
	PID  int
	Host string
	// Machine is topo.ThisMachine: ranks of different hosts
	// (NCCL_HOSTID) on one machine share its GPUs. Empty: Host decides.
	Machine     string
	GPU         string // bus id, else ordinal
	SMs         int
	BlocksPerSM int
	Percent     float64 // its MPS share (topo.SMShare.Percent); 0: none
}

// agreedShare is what every rank's tuner sizes channels from.
type agreedShare struct {
	SMs, BlocksPerSM int
	RanksPerGPU      int    // the most ranks that compete for one share
	Why              string // for the log: what set RanksPerGPU
}

// agreeShares combines the ranks' views: the fewest SMs and blocks per SM
// (every rank must derive the same channels) and the most competing
// ranks over the GPUs. A GPU is its bus id (or ordinal) on a machine
// (shareView.Machine, else the host): fake hosts (NCCL_HOSTID per
// process) on one machine share its GPUs, and the blocks of all their
// ranks there must be resident at once. Counted per host, 3 fake hosts ×
// 2 ranks on one H200 took 32 channels each: 192 blocks for 132 SMs, and
// the rings waited on blocks that could not start (the fake-host
// matrix's h3r2 hang, docs/notes/20261201-hosts-matrix-faults.md).
func agreeShares(views []shareView) agreedShare {
	a := agreedShare{RanksPerGPU: 1, Why: "one rank per GPU"}
	type gpuKey struct{ machine, gpu string }
	groups := map[gpuKey][]shareView{}
	for i, v := range views {
		if i == 0 || v.SMs < a.SMs {
			a.SMs = v.SMs
		}
		if i == 0 || v.BlocksPerSM < a.BlocksPerSM {
			a.BlocksPerSM = v.BlocksPerSM
		}
		m := v.Machine
		if m == "" {
			m = "host " + v.Host
		}
		k := gpuKey{m, v.GPU}
		groups[k] = append(groups[k], v)
	}
	keys := slices.SortedFunc(maps.Keys(groups), func(x, y gpuKey) int {
		return strings.Compare(x.machine+"\x00"+x.gpu, y.machine+"\x00"+y.gpu)
	})
	for _, k := range keys {
		g := groups[k]
		if len(g) < 2 {
			continue
		}
		perProc := map[int]int{}
		pct := map[int]float64{}
		own := true
		var hosts []string
		for _, v := range g {
			if !slices.Contains(hosts, v.Host) {
				hosts = append(hosts, v.Host)
			}
			perProc[v.PID]++
			pct[v.PID] = v.Percent
			own = own && v.Percent > 0
		}
		sum := 0.0
		for _, p := range pct {
			sum += p
		}
		where := strings.Join(hosts, ", ")
		if len(hosts) > 1 {
			where = "hosts " + where + " (one machine)"
		}
		n, why := len(g), fmt.Sprintf("%d ranks share GPU %s on %s", len(g), k.gpu, where)
		if own && len(perProc) > 1 && sum <= 100+1e-9 {
			n = slices.Max(slices.Collect(maps.Values(perProc)))
			why = fmt.Sprintf("%d processes share GPU %s on %s with MPS shares adding up to %g %%; %d ranks of one process compete for its share",
				len(perProc), k.gpu, where, sum, n)
		} else if own && len(perProc) > 1 {
			why += fmt.Sprintf(" (their MPS shares add up to %g %%, over 100: they compete)", sum)
		}
		if n > a.RanksPerGPU {
			a.RanksPerGPU, a.Why = n, why
		}
	}
	return a
}

// ctxSMs asks the driver about a rank's context for topo.SMShareOf.
type ctxSMs struct {
	dev cuda.Device
	ctx *cuda.Context
}

func (c ctxSMs) DeviceSMs() (int, error)  { return c.dev.Attribute(cuda.DevAttrMultiprocessorCount) }
func (c ctxSMs) ContextSMs() (int, error) { return c.ctx.SMLimit() }
