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
	PID         int
	Host        string
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
// ranks over the GPUs.
func agreeShares(views []shareView) agreedShare {
	a := agreedShare{RanksPerGPU: 1, Why: "one rank per GPU"}
	type gpuKey struct{ host, gpu string }
	groups := map[gpuKey][]shareView{}
	for i, v := range views {
		if i == 0 || v.SMs < a.SMs {
			a.SMs = v.SMs
		}
		if i == 0 || v.BlocksPerSM < a.BlocksPerSM {
			a.BlocksPerSM = v.BlocksPerSM
		}
		k := gpuKey{v.Host, v.GPU}
		groups[k] = append(groups[k], v)
	}
	keys := slices.SortedFunc(maps.Keys(groups), func(x, y gpuKey) int {
		return strings.Compare(x.host+"\x00"+x.gpu, y.host+"\x00"+y.gpu)
	})
	for _, k := range keys {
		g := groups[k]
		if len(g) < 2 {
			continue
		}
		perProc := map[int]int{}
		pct := map[int]float64{}
		own := true
		for _, v := range g {
			perProc[v.PID]++
			pct[v.PID] = v.Percent
			own = own && v.Percent > 0
		}
		sum := 0.0
		for _, p := range pct {
			sum += p
		}
		n, why := len(g), fmt.Sprintf("%d ranks share GPU %s on %s", len(g), k.gpu, k.host)
		if own && len(perProc) > 1 && sum <= 100+1e-9 {
			n = slices.Max(slices.Collect(maps.Values(perProc)))
			why = fmt.Sprintf("%d processes share GPU %s on %s with MPS shares adding up to %g %%; %d ranks of one process compete for its share",
				len(perProc), k.gpu, k.host, sum, n)
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
