package tune

import (
	"fmt"
	"math"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
)

// PATMaxChannels is the most channels a PAT call uses. Each channel
// connects every rank to its 2·ceil(log2 n) PAT peers, so the bound keeps
// those connections' buffers (host-pinned staging for NET) small; PAT is
// for small and medium sizes, where a few channels suffice.
const PATMaxChannels = 4

// PATMaxRanksReduceScatter is the largest communicator on which PAT's
// ReduceScatter schedule fits the FIFOs (see PATFits).
const PATMaxRanksReduceScatter = 24

// PATFits reports whether PAT's schedule for coll (runtime/enqueue's
// pat.go, devicesrc/pat.h) runs on n ranks with FIFOs of NG_STEPS slots:
// AllGather always; ReduceScatter, whose partial sums wait in the FIFO
// slots, while every distance d = 2^k < n sends min(d, n-d) <= NG_STEPS
// messages at once.
func PATFits(coll kspace.Coll, n int) bool {
	switch coll {
	case kspace.AllGather:
		return true
	case kspace.ReduceScatter:
		for d := 1; d < n; d *= 2 {
			if min(d, n-d) > generated.Steps {
				return false
			}
		}
		return true
	default:
		return false
	}
}

// patStepLat is the cost (µs) of one PAT step that crosses no network: a
// step per block, n of them per chunk, each a few barriers and flag polls.
const patStepLat = 0.6

// patBWFactor is the share of a ring's SIMPLE bandwidth that PAT keeps:
// its rank sends its own block over every dimension at once, so the links
// are used less evenly than a ring's.
const patBWFactor = 0.75

// patApplies reports whether PAT can run coll on the communicator: one
// rank per host (as in NCCL; runtime/comm connects the PAT peers only
// then), within PATFits; or why not.
func (t *Tuner) patApplies(coll kspace.Coll) (ok bool, why string) {
	n := t.topo.NRanks
	switch {
	case t.topo.NNodes != n:
		return false, fmt.Sprintf("PAT needs one rank per host, not %d ranks on %d hosts", n, t.topo.NNodes)
	case !PATFits(coll, n):
		return false, fmt.Sprintf("PAT %s runs on at most %d ranks, not %d", coll, PATMaxRanksReduceScatter, n)
	}
	return true, ""
}

// patDims is ceil(log2 n): the network hops of a PAT call on n ranks.
func patDims(n int) int {
	k := 0
	for d := 1; d < n; d *= 2 {
		k++
	}
	return k
}

// patLatency models a PAT AllGather or ReduceScatter: ceil(log2 n)
// network hops of SIMPLE steps, plus a local step per block.
func (t *Tuner) patLatency() float64 {
	n := t.topo.NRanks
	hop := hwLat[hwNet][kspace.Ring][kspace.Simple]
	if t.topo.NNodes == 1 {
		hop = hwLat[hwNVLink][kspace.Ring][kspace.Simple]
	}
	return baseLat[kspace.Ring][kspace.Simple] + float64(patDims(n))*hop + float64(n)*patStepLat
}

// patBandwidth is PAT's algorithm bandwidth (GB/s) on nc channels: each
// rank sends and receives n-1 blocks, as in a ring, at patBWFactor of the
// link, and no faster than the network carries across nodes.
func (t *Tuner) patBandwidth(nc int) float64 {
	bw := t.topo.IntraBW
	if t.topo.NNodes > 1 {
		bw = math.Min(bw, t.topo.InterBW)
	}
	n := float64(t.topo.NRanks)
	if n < 2 {
		return float64(nc) * bw
	}
	// The bus bandwidth is capped by the network's (net.go) like every
	// other algorithm's; the algorithm bandwidth follows from it.
	return t.netBus(float64(nc)*bw*patBWFactor) * n / (n - 1)
}
