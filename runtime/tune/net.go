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

// ncclgo's socket net, measured on one H200 with two fake hosts (one rank
// each, processes under MPS, loopback TCP; session 13, 2026-12-02:
// `NCCL_SOCKET_IFNAME=lo ncclperf -np 2 -hosts 2 -b 1K -e 8M -f 4` with
// NCCL_PROTO and NCCL_NCHANNELS forced):
//
//   - LL carries 0.09–0.13 GB/s (1 KiB 41 µs, 16 KiB 162, 64 KiB 789),
//     a quarter of what NCCL's model gives it, so SIMPLE wins from about
//     2 KiB (4 KiB 59 against 59, 16 KiB 162 against 61);
//   - every channel is a connection with step costs of its own: AllReduce
//     of 1 MiB took 284 µs on one channel, 270 on 2, 399 on 8, 1233 on
//     32; 4 MiB 1015 / 734 / 759 / 874 / 1027 on 1 / 2 / 4 / 8 / 32; 128
//     MiB peaked at 8 channels (8.04 GB/s, 7.02 on 32; session 9).
const (
	SocketNetLLBW         = 0.1
	SocketNetChannelBytes = 2 << 20
	SocketNetMaxChannels  = 8
)

// netChannels bounds nc, a call's channels, for a call across nodes:
// each channel gets at least NetChannelBytes, and there are at most
// NetMaxChannels, never fewer than the configured minimum.
func (t *Tuner) netChannels(nc int, nBytes int64) int {
	if !t.netModel() {
		return nc
	}
	if b := t.topo.NetChannelBytes; b > 0 {
		nc = min(nc, max(1, int(nBytes/b)))
	}
	if m := t.topo.NetMaxChannels; m > 0 {
		nc = min(nc, m)
	}
	return max(nc, t.minCh)
}

// netLL caps bus, LL's bus bandwidth in GB/s, at NetLLBW across nodes.
func (t *Tuner) netLL(bus float64) float64 {
	if t.netModel() && t.topo.NetLLBW > 0 {
		return math.Min(bus, t.topo.NetLLBW)
	}
	return bus
}

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
