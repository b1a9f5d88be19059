package tune

import (
	"math"

	"github.com/ncclgo/ncclgo/kspace"
)

// The network between nodes. NCCL's graph search gives an inter-node ring
// or tree only as many channels as the NICs carry (channels × bwInter ≤
// the NICs' speed), so its bus bandwidth across nodes never exceeds the
// network's; ncclgo's channels all cross the one socket device, so the
// tuner caps the bus bandwidth of every call that crosses nodes at
// Topology.NetBW, the host's network bandwidth, before the protocols'
// factors. The hop latencies are NCCL's network figures (hwLat[hwNet]),
// which NCCL uses for its socket transport too (whose latency property
// adds nothing), with the rules of NCCL 2.23 and later's tuning.cc:
//
//   - with one rank per node the network's latency is fully exposed:
//     every inter-node hop, ring or tree, costs the tree's figure;
//   - a ring AllReduce crosses nodes 2(nodes-1) times, AllGather and
//     ReduceScatter nodes-1 times.
//
// All of it applies only when NetBW is set (NNodes > 1): without it the
// model is the per-channel InterBW one of model.go.

// SocketNetBW is the bandwidth (GB/s) NCCL assumes for a socket device
// whose speed the system does not report, the loopback device's among
// them (10 Gbit/s): Topology.NetBW for a socket network of unknown speed.
const SocketNetBW = 10000.0 / 8000

// netModel reports whether the network model applies.
func (t *Tuner) netModel() bool { return t.topo.NNodes > 1 && t.topo.NetBW > 0 }

// netBus caps bus, a bus bandwidth in GB/s, at the network's when the
// call crosses nodes.
func (t *Tuner) netBus(bus float64) float64 {
	if t.netModel() {
		return math.Min(bus, t.topo.NetBW)
	}
	return bus
}

// netHopLat is the latency (µs) of one hop between nodes for a and p.
func (t *Tuner) netHopLat(a kspace.Algo, p kspace.Proto) float64 {
	if t.netModel() && t.topo.NRanks == t.topo.NNodes {
		return hwLat[hwNet][kspace.Tree][p]
	}
	return hwLat[hwNet][a][p]
}

// allReduceInterSteps is how many of a ring AllReduce's steps cross nodes.
func (t *Tuner) allReduceInterSteps() int {
	if t.netModel() {
		return 2 * (t.topo.NNodes - 1)
	}
	return 2 * t.topo.NNodes
}
