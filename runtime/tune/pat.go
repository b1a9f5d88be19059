package tune

import (
	"math"

	"github.com/ncclgo/ncclgo/kspace"
)

// PATMaxChannels is the most channels a PAT call uses. Each channel
// connects every rank to its 2·ceil(log2 n) PAT peers, so the bound keeps
// those connections' buffers (host-pinned staging for NET) small; PAT is
// for small and medium sizes, where a few channels suffice.
const PATMaxChannels = 4

// patStepLat is the cost (µs) of one PAT step that crosses no network: a
// step per block, n of them per chunk, each a few barriers and flag polls.
const patStepLat = 0.6

// patBWFactor is the share of a ring's SIMPLE bandwidth that PAT keeps:
// its rank sends its own block over every dimension at once, so the links
// are used less evenly than a ring's.
const patBWFactor = 0.75

// patApplies reports whether PAT can run on the communicator: one rank per
// host (as in NCCL), since its peers at distances 2^k are all across the
// network.
func (t *Tuner) patApplies() bool { return t.topo.NNodes == t.topo.NRanks }

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
// link.
func (t *Tuner) patBandwidth(nc int) float64 {
	bw := t.topo.IntraBW
	if t.topo.NNodes > 1 {
		bw = math.Min(bw, t.topo.InterBW)
	}
	n := float64(t.topo.NRanks)
	if n < 2 {
		return float64(nc) * bw
	}
	return float64(nc) * bw * patBWFactor * n / (n - 1)
}
