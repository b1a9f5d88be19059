package tune

import (
	"math"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
)

// DIRECT (kspace.Direct, devicesrc/direct.h) runs where every rank can load
// its peers' user buffers (Topology.Direct), for AllReduce, AllGather,
// ReduceScatter and Broadcast. AllReduce runs a channel's share of at most
// directOneShotBytes one-shot (two barriers; every rank reads every rank's
// whole share), a larger one two-shot (three barriers; a reduce-scatter
// and an all-gather by direct reads). The others take two barriers: one to
// publish the buffers, one before returning. Its model:
//
//   - latency: directBaseLat plus per barrier directBarrierLat and
//     directBarrierPerPeer per peer polled;
//   - bandwidth, with every rank on one GPU: the GPU's memory bandwidth
//     (directHBMBW) shared by every byte the call reads and writes there
//     (directTraffic); on several GPUs (NVLink peers), RING/SIMPLE's
//     model of the collective, since each rank moves over its links what
//     a ring rank moves.
//
// The latency figures are fitted to the first measurements of the
// one-shot AllReduce (one H200, 8 B, ncclperf -g: 21.6 µs on 2 ranks and
// 70 µs on 8, where RING/LL took 16.3 and 60), in the units of NCCL's
// model, whose RING/LL latency is 7.8 and 15.0 µs there: 5 and 10 µs
// above it. The bandwidth figure matches the two-shot's 731 GB/s busbw
// at 512 MiB on 2 ranks (3600/5 = 720 GB/s algorithm bandwidth).
const (
	directBaseLat        = 9.5  // µs
	directBarrierLat     = 0.8  // µs
	directBarrierPerPeer = 1.0  // µs: thread 0 polls the peers one after another
	directHBMBW          = 3600 // GB/s: ~75% of the H200's 4.8 TB/s
	// directOneShotBytes is the largest channel share that the device
	// runs one-shot.
	directOneShotBytes = generated.DirectOneshotBytes
	// directTwoShotChannelBytes is the share a two-shot channel (or a
	// channel of the other collectives) gets at least before the call
	// spreads over more channels.
	directTwoShotChannelBytes = 64 << 10
	// directMinThreads is the smallest block a DIRECT work gets: the
	// one-shot keeps NG_DIRECT_ONESHOT_BYTES in 128 threads' registers.
	directMinThreads = 128
)

// directChannels returns the channels and threads of a DIRECT call of
// coll on nBytes (as Choose counts them) and whether its shares run
// one-shot (AllReduce only).
func (t *Tuner) directChannels(coll kspace.Coll, nBytes int64) (nc, nt int, oneShot bool) {
	nt = max(t.nThreads[kspace.Simple], directMinThreads)
	if coll == kspace.AllReduce {
		if need := int((nBytes + directOneShotBytes - 1) / directOneShotBytes); need <= t.maxCh {
			return min(t.maxCh, max(t.minCh, need, 1)), nt, true
		}
	}
	need := int((nBytes + directTwoShotChannelBytes - 1) / directTwoShotChannelBytes)
	return min(t.maxCh, max(t.minCh, need, 1)), nt, false
}

// directTraffic is how many times nBytes (as Choose counts them) a DIRECT
// call reads and writes on n ranks, all ranks together, out of place:
//
//   - AllReduce two-shot: every rank reads S (its slice of every input)
//     and writes S/n, then reads and writes (n-1)/n·S: (3n-1)·S;
//     one-shot: every rank reads n·S and writes S: n(n+1)·S;
//   - AllGather (nBytes = the output, n blocks): every rank reads and
//     writes all of it: 2n;
//   - ReduceScatter (nBytes = the input, n blocks of nBytes/n): every
//     rank reads its block of every input (nBytes) and writes one block
//     (nBytes/n): (n+1)·nBytes;
//   - Broadcast: every rank reads the root's S and writes S: 2n.
func directTraffic(coll kspace.Coll, n int, oneShot bool) float64 {
	switch coll {
	case kspace.AllReduce:
		if oneShot {
			return float64(n * (n + 1))
		}
		return float64(3*n - 1)
	case kspace.ReduceScatter:
		return float64(n + 1)
	default: // AllGather, Broadcast
		return float64(2 * n)
	}
}

// directTime is the model's time (µs) of a DIRECT call of coll on nBytes
// on nc channels.
func (t *Tuner) directTime(coll kspace.Coll, nBytes int64, nc int, oneShot bool) float64 {
	n := t.topo.NRanks
	barriers := 2.0
	if coll == kspace.AllReduce && !oneShot {
		barriers = 3
	}
	lat := directBaseLat + barriers*(directBarrierLat+directBarrierPerPeer*float64(n-1))
	var bw float64 // algorithm bandwidth, GB/s
	if t.topo.RanksPerGPU >= n {
		bw = directHBMBW / directTraffic(coll, n, oneShot)
	} else {
		bw = t.ncclBandwidth(coll, kspace.Ring, kspace.Simple, nc, nBytes)
	}
	if !(bw > 0) {
		return math.Inf(1)
	}
	return lat + float64(nBytes)/(1000*bw)
}
