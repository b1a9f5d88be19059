package tune

import (
	"math"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
)

// DIRECT (kspace.Direct, devicesrc/direct.h) runs where every rank can load
// its peers' user buffers (Topology.Direct), for AllReduce, AllGather,
// ReduceScatter and Broadcast; where the ranks share only their mailboxes
// (Topology.DirectLLAcross: processes of one host), for AllReduce up to
// DirectLLLimit, the sizes it runs as the LL one-shot. AllReduce runs a
// channel's share in one of
// three ways (directMode), by its size: at most directLLBytes the LL
// one-shot (no barrier: each rank stores its share as LL lines in its
// mailbox and polls its peers'), at most directOneShotBytes the barrier
// one-shot (two barriers; every rank reads every rank's whole share), else
// two-shot (three barriers; a reduce-scatter and an all-gather by direct
// reads). The others take two barriers: one to publish the buffers, one
// before returning. Its model:
//
//   - latency: the LL one-shot is one LL hop, RING/LL's base latency and
//     one intra-node LL hop of NCCL's model plus directLLPerPeer per peer
//     (the polls of a batch of peers overlap), less directLLOneGPUSaving
//     when every rank is on one GPU; the others directBaseLat
//     plus per barrier directBarrierLat and directBarrierPerPeer per peer;
//   - bandwidth, with every rank on one GPU: the GPU's memory bandwidth
//     (directHBMBW) shared by every byte the call reads and writes there
//     (directTraffic); on several GPUs (NVLink peers), RING/SIMPLE's
//     model of the collective, since each rank moves over its links what
//     a ring rank moves; the LL one-shot RING/LL's scaled by 2/n (a ring
//     rank moves 2(n-1)/n of the buffer, a one-shot rank pulls n-1 times
//     it).
//
// The barrier latency figures are fitted to the first measurements of the
// one-shot AllReduce (one H200, 8 B, ncclperf -g: 21.6 µs on 2 ranks and
// 70 µs on 8, where RING/LL took 16.3 and 60), in the units of NCCL's
// model, whose RING/LL latency is 7.8 and 15.0 µs there: 5 and 10 µs
// above it. The LL one-shot's model puts it well below RING/LL on 8 ranks
// (7.9 against 15.0), where it takes 1 LL hop against RING/LL's 14
// (not yet measured at 8 ranks; 2 processes: directLLOneGPUSaving); on 2 ranks RING/LL
// takes one hop too (ringOneHop, 7.2), and the one-shot ties with it at
// the smallest sizes (directLLOneGPUSaving). The bandwidth figure is what the two-shot that gathered
// the slices back (5 S on 2 ranks) reached: 731 GB/s busbw at 512 MiB in
// one process, 777 at 1 GiB across two processes on windows (3.6-3.9 TB/s
// of reads and writes); the pushed two-shot moves 4 S.
const (
	directBaseLat        = 9.5  // µs
	directBarrierLat     = 0.8  // µs
	directBarrierPerPeer = 1.0  // µs: thread 0 polls the peers one after another
	directLLPerPeer      = 0.05 // µs: a thread loads 8 peers' lines at once
	// directLLOneGPUSaving is what the LL one-shot saves against RING/LL's
	// one hop (2 ranks) when every rank is on one GPU. Measured on one
	// H200 (session 24, after RING LL kernels ran the one-shot inline
	// instead of through the table call, which had cost it 1.4 µs a
	// call), per 8 B AllReduce replayed in a graph per rank (ncclperf -g 2
	// -G 100): 2.36-2.69 µs DIRECT against 2.33-3.55 RING/LL, and from
	// 128 B to 8 KiB 2.23-2.59 against 2.56-3.19; 2 processes under MPS
	// (nccl-tests -G 100 over MPI): 2.21-2.22 against 2.28.
	directLLOneGPUSaving = 0.3  // µs
	directHBMBW          = 3600 // GB/s: ~75% of the H200's 4.8 TB/s
	// directLLBytes is the largest channel share that the device runs as
	// the LL one-shot, directOneShotBytes the largest it runs one-shot.
	directLLBytes      = generated.DirectLlBytes
	directOneShotBytes = generated.DirectOneshotBytes
	// directLLMaxChannels is the most channels the tuner spreads an LL
	// one-shot over (16 KiB): beyond, until measured, the call is no longer
	// small and the ring's bandwidth terms decide.
	directLLMaxChannels = 4
	// directTwoShotChannelBytes is the share a two-shot channel (or a
	// channel of the other collectives) gets at least before the call
	// spreads over more channels.
	directTwoShotChannelBytes = 64 << 10
	// directMinThreads is the smallest block a DIRECT work gets, but the
	// LL one-shot: the one-shot keeps NG_DIRECT_ONESHOT_BYTES in 128
	// threads' registers.
	directMinThreads = 128
	// directLLMinThreads is the smallest group of an LL one-shot: a thread
	// per 8-byte line of its share, in whole warps (ngAllReduceDirectLL's
	// loops stride by the group, any multiple of 32), at least RING/LL's
	// smallest.
	directLLMinThreads = 2 * config.WarpSize
)

// directMode is how the device runs a DIRECT AllReduce's channel shares.
type directMode int

const (
	directTwoShot directMode = iota // and every other collective
	directOneShot                   // barrier one-shot: share <= directOneShotBytes
	directLL                        // LL one-shot: share <= directLLBytes
)

// directChannels returns the channels and threads of a DIRECT call of
// coll on nBytes (as Choose counts them) and how its shares run. A share
// is at most ceil(nBytes/nc) rounded up to 16 bytes (runtime/enqueue's
// split), so the limits, multiples of 16, bound it.
func (t *Tuner) directChannels(coll kspace.Coll, nBytes int64) (nc, nt int, mode directMode) {
	nt = max(t.nThreads[kspace.Simple], directMinThreads)
	spread := func(need int64) int { return min(t.maxCh, max(t.minCh, int(need), 1)) }
	if coll == kspace.AllReduce {
		if need := (nBytes + directLLBytes - 1) / directLLBytes; need <= int64(min(t.maxCh, directLLMaxChannels)) {
			nc = spread(need)
			return nc, t.directLLThreads(nBytes, nc), directLL
		}
		if need := (nBytes + directOneShotBytes - 1) / directOneShotBytes; need <= int64(t.maxCh) {
			nc = spread(need)
			if (nBytes+int64(nc)-1)/int64(nc) <= directLLBytes { // spread by minCh
				return nc, t.directLLThreads(nBytes, nc), directLL
			}
			return nc, nt, directOneShot
		}
	}
	return spread((nBytes + directTwoShotChannelBytes - 1) / directTwoShotChannelBytes), nt, directTwoShot
}

// directLLThreads is the group of an LL one-shot of nBytes on nc
// channels: a thread per line of the largest share (ceil(nBytes/nc)
// rounded up to 16 bytes, as runtime/enqueue splits), in whole warps,
// between directLLMinThreads and RING/LL's threads (NCCL_NTHREADS). A
// smaller group syncs faster; each thread still polls its lines of every
// peer.
func (t *Tuner) directLLThreads(nBytes int64, nc int) int {
	share := ((nBytes+int64(nc)-1)/int64(nc) + 15) / 16 * 16
	lines := int((share + 7) / 8)
	nt := (lines + config.WarpSize - 1) / config.WarpSize * config.WarpSize
	return max(directLLMinThreads, min(nt, t.nThreads[kspace.LL]))
}

// DirectLLLimit is the largest AllReduce (bytes, as Choose counts them)
// that directChannels runs as the LL one-shot: directLLBytes per channel
// on directLLMaxChannels channels (fewer when the tuner has fewer), or on
// NCCL_MIN_NCHANNELS's channels when more. Beyond it a channel's share is
// above directLLBytes. Where the ranks share only their mailboxes
// (Topology.DirectLLAcross) DIRECT runs AllReduce up to this size.
func (t *Tuner) DirectLLLimit() int64 {
	return directLLBytes * int64(max(min(t.maxCh, directLLMaxChannels), t.minCh))
}

// directTraffic is how many times nBytes (as Choose counts them) a DIRECT
// call reads and writes on n ranks, all ranks together, out of place:
//
//   - AllReduce two-shot: every rank reads S (its slice of every input)
//     and writes its reduced slice into every rank's output, S: 2n·S;
//     one-shot: every rank reads n·S and writes S: n(n+1)·S;
//     LL one-shot: every rank reads S and writes 2S of lines, reads
//     (n-1)·2S of lines and writes S: 2n(n+1)·S;
//   - AllGather (nBytes = the output, n blocks): every rank reads and
//     writes all of it: 2n;
//   - ReduceScatter (nBytes = the input, n blocks of nBytes/n): every
//     rank reads its block of every input (nBytes) and writes one block
//     (nBytes/n): (n+1)·nBytes;
//   - Broadcast: every rank reads the root's S and writes S: 2n.
func directTraffic(coll kspace.Coll, n int, mode directMode) float64 {
	switch coll {
	case kspace.AllReduce:
		switch mode {
		case directLL:
			return float64(2 * n * (n + 1))
		case directOneShot:
			return float64(n * (n + 1))
		}
		return float64(2 * n)
	case kspace.ReduceScatter:
		return float64(n + 1)
	default: // AllGather, Broadcast
		return float64(2 * n)
	}
}

// directTime is the model's time (µs) of a DIRECT call of coll on nBytes
// on nc channels.
func (t *Tuner) directTime(coll kspace.Coll, nBytes int64, nc int, mode directMode) float64 {
	n := t.topo.NRanks
	var lat float64
	if mode == directLL {
		lat = baseLat[kspace.Ring][kspace.LL] + hwLat[t.intraHW()][kspace.Ring][kspace.LL] + directLLPerPeer*float64(n-1)
		if t.topo.RanksPerGPU >= n {
			lat -= directLLOneGPUSaving
		}
	} else {
		const barriers = 2.0 // every mode opens with one and ends with one
		lat = directBaseLat + barriers*(directBarrierLat+directBarrierPerPeer*float64(n-1))
	}
	var bw float64 // algorithm bandwidth, GB/s
	switch {
	case t.topo.RanksPerGPU >= n:
		bw = directHBMBW / directTraffic(coll, n, mode)
	case mode == directLL:
		bw = t.ncclBandwidth(coll, kspace.Ring, kspace.LL, nc, nBytes) * 2 / float64(n)
	default:
		bw = t.ncclBandwidth(coll, kspace.Ring, kspace.Simple, nc, nBytes)
	}
	if !(bw > 0) {
		return math.Inf(1)
	}
	return lat + float64(nBytes)/(1000*bw)
}
