package tune

import (
	"math"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
)

// The cost model follows NCCL's src/graph/tuning.cc (2.19 and later): a
// call's time is latency + bytes / algorithm bandwidth, where
//
//   - latency is a base latency per (algorithm, protocol) plus one hop
//     latency per step: a ring takes 2(n-1) steps for AllReduce (one for
//     a small LL AllReduce on 2 ranks: ringOneHop), n-1 for
//     AllGather and ReduceScatter, n for Broadcast and Reduce; a tree
//     climbs and descends its depth (a chain of the ranks inside a node,
//     a binary tree of depth log2(nodes) across nodes);
//   - bandwidth is channels × per-channel bandwidth, scaled by how much of
//     the link a protocol's lines carry as data (LL: 8 data bytes of 16, and
//     NCCL's measured model keeps 1/3 to 1/4 of the link; LL128: 120 of 128
//     bytes, ≈0.92; SIMPLE: all of it), capped per channel at NCCL's
//     measured Hopper limits, and converted to algorithm bandwidth (a ring
//     moves n/nsteps of the data per step; a tree halves it).
//
// RING and TREE have this model; PAT (pat.go) and DIRECT (direct.go) have
// their own. They are the algorithms the device library implements
// (kspace.Implemented). Times are in microseconds and
// bandwidths in GB/s (= bytes per ns, so bytes / (1000 × GB/s) is µs).

// Hardware classes of NCCL's latency table.
const (
	hwNVLink = iota
	hwPCI
	hwNet
)

// baseLat is NCCL's base latency (µs) per algorithm (TREE, RING) and protocol.
var baseLat = [2][kspace.NumProtos]float64{
	kspace.Tree: {6.8, 14.0, 8.4},
	kspace.Ring: {6.6, 14.0, 8.4},
}

// hwLat is NCCL's latency per hop (µs) per hardware class, algorithm and
// protocol.
var hwLat = [3][2][kspace.NumProtos]float64{
	hwNVLink: {kspace.Tree: {0.6, 1.25, 4.0}, kspace.Ring: {0.6, 1.9, 3.4}},
	hwPCI:    {kspace.Tree: {1.0, 1.9, 4.0}, kspace.Ring: {1.0, 2.5, 5.7}},
	hwNet:    {kspace.Tree: {5.0, 8.5, 14.0}, kspace.Ring: {2.7, 4.0, 14.0}},
}

// NCCL's measured per-channel limits (GB/s) on Hopper, by node count class
// (1, 2, more).
var (
	llMaxBW          = [3]float64{87.7, 22.5, 19.0}
	perChRingLL128BW = [3]float64{36.7, 36.7, 36.7}
	perChTreeLL128BW = [3]float64{36.7, 36.7, 29.0}
	perChTreeBW      = [3]float64{38.7, 41.4, 36.0}
)

// treeCorrection is NCCL's empirical correction of tree bandwidth for medium
// sizes, indexed by protocol and log2(bytes/64).
var treeCorrection = [kspace.NumProtos][22]float64{
	{1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0},
	{1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7, .8, .9, .9, 1.0},
	{.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6, .7, .8, .9},
}

// Per-thread byte thresholds below which a call uses fewer channels (then
// fewer threads): NCCL_LL_THREAD_THRESHOLD, NCCL_LL128_THREAD_THRESHOLD,
// NCCL_SIMPLE_THREAD_THRESHOLD. Ring LL's is multiplied by the rank count.
var threadThreshold = [kspace.NumProtos]int64{8, 8, 64}

// netOverhead is the per-step cost (µs) of posting to the network, which
// bounds a multi-node ring's intra-node hops from below (×3 for SIMPLE).
const netOverhead = 1.0

// p2pLLThreshold is NCCL_P2P_LL_THRESHOLD's default: SendRecv uses LL up to
// this many bytes.
const p2pLLThreshold = 16384

func log2i(n int64) int {
	l := 0
	for n >>= 1; n > 0; n >>= 1 {
		l++
	}
	return l
}

// nodeClass indexes the per-node-count tables.
func (t *Tuner) nodeClass() int { return min(t.topo.NNodes, 3) - 1 }

// steps returns the ring steps of a collective in total and across nodes.
func (t *Tuner) steps(c kspace.Coll) (nsteps, inter int) {
	n, nodes := t.topo.NRanks, t.topo.NNodes
	switch c {
	case kspace.AllReduce:
		nsteps = 2 * (n - 1)
		if nodes > 1 {
			inter = t.allReduceInterSteps()
		}
	case kspace.AllGather, kspace.AllGatherV, kspace.ReduceScatter:
		nsteps, inter = n-1, nodes-1
	default:
		nsteps, inter = n, nodes
	}
	return nsteps, min(inter, nsteps)
}

// intraHW is the hardware class (hwLat's index) of the links within a node.
func (t *Tuner) intraHW() int {
	if t.topo.IntraLink == LinkPCI {
		return hwPCI
	}
	return hwNVLink
}

// ringOneHop reports whether a ring call on nc channels runs in one hop
// (devicesrc/all_reduce.h: each rank sends its input, both reduce): an
// AllReduce on exactly 2 ranks, with LL where the whole call's bytes
// (which bound every channel's share) are at most
// NG_ALLREDUCE_ONEHOP_BYTES, with SIMPLE where Topology.SimpleOneHop
// allows it and a channel's share fits one SIMPLE slot (NCCL_BUFFSIZE's
// eighth). It moves as many bytes per rank as the ring's two steps, so
// only the latency changes.
func (t *Tuner) ringOneHop(c kspace.Coll, p kspace.Proto, nBytes int64, nc int) bool {
	if c != kspace.AllReduce || t.topo.NRanks != 2 {
		return false
	}
	switch p {
	case kspace.LL:
		return nBytes <= generated.AllreduceOnehopBytes
	case kspace.Simple:
		return t.topo.SimpleOneHop && (nBytes+int64(nc)-1)/int64(max(nc, 1)) <= t.simpleSlotBytes()
	default: // LL128 has no one hop
		return false
	}
}

// simpleSlotBytes is one SIMPLE FIFO slot's bytes (NCCL_BUFFSIZE over the
// FIFO's steps).
func (t *Tuner) simpleSlotBytes() int64 {
	b := t.cfg.BuffSize
	if b <= 0 {
		b = config.DefaultBuffSize
	}
	return int64(b) / generated.Steps
}

// latency returns the latency (µs) of one call on one channel.
func (t *Tuner) latency(c kspace.Coll, a kspace.Algo, p kspace.Proto, nBytes int64) float64 {
	return t.latencyOn(c, a, p, nBytes, 1)
}

// latencyOn returns the latency (µs) of one call on nc channels.
func (t *Tuner) latencyOn(c kspace.Coll, a kspace.Algo, p kspace.Proto, nBytes int64, nc int) float64 {
	if a == kspace.PAT {
		return t.patLatency()
	}
	nodes := t.topo.NNodes
	intraHW := t.intraHW()
	intra, inter := hwLat[intraHW][a][p], t.netHopLat(a, p)
	lat := baseLat[a][p]
	switch a {
	case kspace.Ring:
		nsteps, nInter := t.steps(c)
		if t.ringOneHop(c, p, nBytes, nc) {
			nsteps, nInter = 1, min(nInter, 1)
		}
		if c == kspace.Broadcast || c == kspace.Reduce {
			hw := intraHW
			if nodes > 1 {
				hw = hwNet
			}
			return lat + float64(nsteps)*hwLat[hw][a][p]
		}
		if nodes > 1 {
			ov := netOverhead
			if p == kspace.Simple {
				ov *= 3
			}
			intra = math.Max(intra, ov)
		}
		lat += float64(nsteps-nInter)*intra + float64(nInter)*inter
		if p == kspace.Simple && nodes > 1 && c == kspace.AllReduce && float64(nBytes) >= float64(t.topo.NRanks)/16*65536 {
			lat *= 1.9 // NCCL's ring plateau
		}
		return lat
	case kspace.Tree:
		perNode := t.topo.NRanks / nodes
		return lat + 2*(float64(perNode-1)*intra+float64(log2i(int64(nodes)))*inter)
	default: // not modeled: never chosen
		return math.Inf(1)
	}
}

// Ranks that share one GPU share its memory system, which NCCL's model
// (one rank per GPU) does not see, and ncclgo's protocol engines have
// throughputs of their own. For them the bus bandwidth (nccl-tests'
// busbw) of each algorithm and protocol is capped at what ncclgo measured
// with 2 and 8 ranks on one H200 (AllReduce f32, 256 MiB, 2026-11-29:
// `NCCL_ALGO=A NCCL_PROTO=P ncclperf -coll allreduce -b 4K -e 256M -f 4 -g N`),
// interpolated as sharedBusBW × (2/ranksOnTheGPU)^sharedBusExp; the two
// points give each exponent. Measured busbw, 2 → 8 ranks: RING LL 116 → 44,
// LL128 186 → 92, SIMPLE 408 → 159; TREE LL 102 → 34, LL128 168 → 67,
// SIMPLE 373 → 95 GB/s.
var (
	sharedBusBW = [2][kspace.NumProtos]float64{
		kspace.Tree: {102, 168, 373},
		kspace.Ring: {116, 186, 408},
	}
	sharedBusExp = [2][kspace.NumProtos]float64{
		kspace.Tree: {0.79, 0.66, 0.99},
		kspace.Ring: {0.70, 0.51, 0.68},
	}
)

// bandwidth returns the algorithm bandwidth (GB/s) of a call on nc
// channels: NCCL's model, capped for ranks that share a GPU.
func (t *Tuner) bandwidth(c kspace.Coll, a kspace.Algo, p kspace.Proto, nc int, nBytes int64) float64 {
	bw := t.ncclBandwidth(c, a, p, nc, nBytes)
	if r := t.topo.RanksPerGPU; r > 1 && (a == kspace.Ring || a == kspace.Tree) {
		capBus := sharedBusBW[a][p] * math.Pow(2/float64(r), sharedBusExp[a][p])
		if f := c.BusFactor(t.topo.NRanks); f > 0 { // nccl-tests' busbw factor (kspace.Colls)
			bw = math.Min(bw, capBus/f)
		}
	}
	return bw
}

// ncclBandwidth is NCCL's algorithm bandwidth (GB/s) of a call on nc channels.
func (t *Tuner) ncclBandwidth(c kspace.Coll, a kspace.Algo, p kspace.Proto, nc int, nBytes int64) float64 {
	if a == kspace.PAT {
		return t.patBandwidth(nc)
	}
	nodes, k := t.topo.NNodes, t.nodeClass()
	bw := t.topo.IntraBW
	if nodes > 1 {
		bw = math.Min(bw, t.topo.InterBW)
	}
	ncf := float64(nc)
	bus := t.netBus(ncf * bw) // net.go
	ppn := float64(t.topo.NRanks) / float64(nodes)
	switch a {
	case kspace.Ring:
		switch p {
		case kspace.LL:
			f := 1.0 / 3
			if nodes > 1 || c == kspace.AllReduce || c == kspace.Reduce {
				f = 1.0 / 4
			}
			bus = t.netLL(math.Min(llMaxBW[k], bus*f))
		case kspace.LL128:
			f := 0.92
			if ppn < 2 {
				f = 0.7
			}
			bus = math.Min(bus*f, ncf*perChRingLL128BW[k])
		case kspace.Simple: // the links' bandwidth as is
		}
		nsteps, _ := t.steps(c)
		return bus * float64(t.topo.NRanks) / float64(nsteps)
	case kspace.Tree:
		bus = math.Min(bus*0.92, ncf*perChTreeBW[k])
		switch p {
		case kspace.LL:
			bus = t.netLL(math.Min(bus/3.8, llMaxBW[k]))
		case kspace.LL128:
			f := 120.0 / 128
			if nodes == 1 {
				f = 7.0 / 9
			}
			bus = math.Min(bus*f, ncf*perChTreeLL128BW[k])
		case kspace.Simple: // the links' bandwidth as is
		}
		if l := log2i(nBytes >> 6); l < len(treeCorrection[p]) {
			bus *= treeCorrection[p][l]
		}
		return bus * 0.5
	default: // not modeled
		return 0
	}
}

// p2pTime models one SendRecv: one hop on a ring-like connection.
func (t *Tuner) p2pTime(p kspace.Proto, nc int, nBytes int64) float64 {
	hw := hwNVLink
	bw := t.topo.IntraBW
	if t.topo.NNodes > 1 {
		hw, bw = hwNet, math.Min(bw, t.topo.InterBW)
	} else if t.topo.IntraLink == LinkPCI {
		hw = hwPCI
	}
	eff := [kspace.NumProtos]float64{0.5, 120.0 / 128, 1}[p]
	return baseLat[kspace.Ring][p] + hwLat[hw][kspace.Ring][p] + float64(nBytes)/(1000*t.netBus(float64(nc)*bw)*eff)
}

// modeled reports whether the model covers algorithm a for collective c.
func modeled(c kspace.Coll, a kspace.Algo) bool {
	switch a {
	case kspace.Ring:
		return c != kspace.SendRecv
	case kspace.Tree:
		return c == kspace.AllReduce
	case kspace.Direct:
		return kspace.Implemented(c, kspace.Direct)
	case kspace.PAT: // pat.go
		return c == kspace.AllGather || c == kspace.ReduceScatter
	default:
		return false
	}
}
