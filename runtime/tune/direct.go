package tune

import (
	"math"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
)

// DIRECT (kspace.Direct, devicesrc/direct.h) runs where every rank can load
// its peers' user buffers (Topology.Direct): a channel's share of at most
// directOneShotBytes runs one-shot (two barriers; every rank reads every
// rank's whole share), a larger one two-shot (three barriers; a
// reduce-scatter and an all-gather by direct reads). Its model:
//
//   - latency: directBaseLat plus one barrier per phase, each
//     directBarrierLat plus directBarrierPerPeer per peer polled;
//   - bandwidth, with every rank on one GPU: the GPU's memory bandwidth
//     (directHBMBW) shared by every byte the call reads and writes there,
//     (3n-1)·S for two-shot and n(n+1)·S for one-shot on n ranks and S
//     bytes; on several GPUs (NVLink peers), RING/SIMPLE's model, since
//     each rank moves the same 2(n-1)/n·S over its links.
//
// These figures are estimates to be replaced by measurements (the ring's
// shared-GPU caps in model.go are measured); they only need to rank DIRECT
// below RING and TREE where it runs.
const (
	directBaseLat        = 4.0  // µs
	directBarrierLat     = 0.8  // µs
	directBarrierPerPeer = 0.1  // µs
	directHBMBW          = 3600 // GB/s: ~75% of the H200's 4.8 TB/s
	// directOneShotBytes is the largest channel share that the device
	// runs one-shot.
	directOneShotBytes = generated.DirectOneshotBytes
	// directTwoShotChannelBytes is the share a two-shot channel gets at
	// least before the call spreads over more channels.
	directTwoShotChannelBytes = 64 << 10
	// directMinThreads is the smallest block a DIRECT work gets: the
	// one-shot keeps NG_DIRECT_ONESHOT_BYTES in 128 threads' registers.
	directMinThreads = 128
)

// directChannels returns the channels and threads of a DIRECT call and
// whether its shares run one-shot.
func (t *Tuner) directChannels(nBytes int64) (nc, nt int, oneShot bool) {
	nt = max(t.nThreads[kspace.Simple], directMinThreads)
	if need := int((nBytes + directOneShotBytes - 1) / directOneShotBytes); need <= t.maxCh {
		return min(t.maxCh, max(t.minCh, need, 1)), nt, true
	}
	need := int((nBytes + directTwoShotChannelBytes - 1) / directTwoShotChannelBytes)
	return min(t.maxCh, max(t.minCh, need, 1)), nt, false
}

// directTime is the model's time (µs) of a DIRECT AllReduce of nBytes on
// nc channels.
func (t *Tuner) directTime(nBytes int64, nc int, oneShot bool) float64 {
	n := t.topo.NRanks
	barriers := 3.0
	if oneShot {
		barriers = 2
	}
	lat := directBaseLat + barriers*(directBarrierLat+directBarrierPerPeer*float64(n-1))
	var bw float64 // algorithm bandwidth, GB/s
	if t.topo.RanksPerGPU >= n {
		traffic := float64(3*n - 1)
		if oneShot {
			traffic = float64(n * (n + 1))
		}
		bw = directHBMBW / traffic
	} else {
		bw = t.ncclBandwidth(kspace.AllReduce, kspace.Ring, kspace.Simple, nc, nBytes)
	}
	if !(bw > 0) {
		return math.Inf(1)
	}
	return lat + float64(nBytes)/(1000*bw)
}
