package comm

import (
	"errors"
	"fmt"
	"slices"

	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/graph"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/transport"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// This file holds the parts of a rank's setup that depend on how the ranks
// sit on several GPUs, as pure functions of the layout (tested on the CPU
// with fakes): peer access, the link kind the tuner models, the tuner's
// topology and the graphs.

// peerEnabler enables peer access from one rank's context (cudaPeers in
// production, a fake in tests).
type peerEnabler interface {
	// Enable lets kernels in the rank's context load and store the memory
	// of device dev's primary context.
	Enable(dev int) error
}

// enablePeers enables peer access from rank's GPU to every other GPU of the
// layout it can reach, once per ordered pair of GPUs: only the first rank
// of each GPU does it (ranks of one GPU in one process share its primary
// context, so the others would repeat it). GPUs that the peer matrix says
// cannot be reached are skipped; a connection that needs one fails in
// transport.Connect with its own error.
//
// local, when not nil, tells the ranks of this process: only they count
// (the first local rank of a GPU enables it, and only towards GPUs that
// local ranks use; ranks of other processes reach each other through
// exported memory, which needs no peer context).
func enablePeers(l topo.Layout, rank int, local func(r int) bool, pe peerEnabler) error {
	if l.NGPUs < 2 {
		return nil
	}
	if local == nil {
		local = func(int) bool { return true }
	}
	g := l.GPUOf[rank]
	if i := slices.IndexFunc(l.Ranks[g], local); i < 0 || l.Ranks[g][i] != rank {
		return nil
	}
	for j := range l.NGPUs {
		if j == g || !reachable(l, g, j) || !slices.ContainsFunc(l.Ranks[j], local) {
			continue
		}
		if err := pe.Enable(l.Ordinals[j]); err != nil {
			return fmt.Errorf("enabling peer access from device %d to device %d: %w", l.Ordinals[g], l.Ordinals[j], err)
		}
	}
	return nil
}

// reachable reports whether GPU index i can access GPU index j's memory
// (unknown counts as reachable: the driver then has the last word).
func reachable(l topo.Layout, i, j int) bool {
	k := l.LinkBetween(i, j)
	return k != topo.LinkNone
}

// peerAccessFunc is transport.Connect's canAccess for rank: whether its
// device can load and store device dev's memory.
func peerAccessFunc(l topo.Layout, rank int) func(dev int) bool {
	g := l.GPUOf[rank]
	return func(dev int) bool {
		j, ok := slices.BinarySearch(l.Ordinals, dev)
		return ok && reachable(l, g, j)
	}
}

// cudaPeers enables peer access through the driver. It keeps the peer
// devices' primary contexts retained until Close, so that none is
// destroyed (losing the mapping) while this rank lives, whatever order the
// ranks start and stop in.
type cudaPeers struct {
	self *cuda.Context
	held []*cuda.Context
}

func (p *cudaPeers) Enable(dev int) error {
	d, err := cuda.GetDevice(dev)
	if err != nil {
		return err
	}
	ctx, err := d.PrimaryContext()
	if err != nil {
		return err
	}
	p.held = append(p.held, ctx)
	return p.self.EnablePeerAccess(ctx)
}

// Close releases the retained peer contexts.
func (p *cudaPeers) Close() error {
	if p == nil {
		return nil
	}
	var errs []error
	for _, c := range p.held {
		errs = append(errs, c.Release())
	}
	p.held = nil
	return errors.Join(errs...)
}

// intraLink is the link the tuner models between the layout's GPUs: PCI
// when NVML's counts are known and some pair of GPUs has neither a direct
// NVLink nor NVLinks to a switch on both ends, NVLink otherwise (one GPU,
// NVLink or NVSwitch, or unknown counts).
func intraLink(l topo.Layout) tune.Link {
	if l.NGPUs < 2 || l.NVLinks == nil {
		return tune.LinkNVLink
	}
	for i := range l.NGPUs {
		for j := range l.NGPUs {
			if i == j || l.NVLinks[i][j] < 0 || l.SwitchLinks[i] < 0 || l.SwitchLinks[j] < 0 {
				continue
			}
			if l.NVLinks[i][j] == 0 && (l.SwitchLinks[i] == 0 || l.SwitchLinks[j] == 0) {
				return tune.LinkPCI
			}
		}
	}
	return tune.LinkNVLink
}

// tuneTopology is the tuner's view of rank's communicator: the residency
// cap counts the ranks that share one GPU (per GPU, not the whole
// communicator), and the channels default to DefaultNChannels (NCCL's 32
// for NVLink on Hopper) unless NCCL_MAX_NCHANNELS says otherwise.
func tuneTopology(l topo.Layout, gpu topo.GPU, blocksPerSM int, cfg config.Config) tune.Topology {
	ch := DefaultNChannels
	if cfg.MaxNChannels > 0 {
		ch = cfg.MaxNChannels
	}
	return tune.Topology{NRanks: l.NRanks, NNodes: 1, NGPUs: l.NGPUs, RanksPerGPU: l.RanksPerGPU,
		SMCount: gpu.SMCount, BlocksPerSM: blocksPerSM, IntraBW: intraBW, IntraLink: intraLink(l), NChannels: ch}
}

// withNodes sets t's node count to the number of distinct hosts among
// peers (NCCL_HOSTID makes processes of one machine distinct hosts).
func withNodes(t tune.Topology, peers []transport.Peer) tune.Topology {
	hosts := map[string]bool{}
	for _, p := range peers {
		hosts[p.Host] = true
	}
	t.NNodes = max(1, len(hosts))
	if t.NNodes > 1 && !(t.InterBW > 0) {
		t.InterBW = tune.SocketNetBW
	}
	if t.NNodes > 1 && !(t.NetBW > 0) {
		// A socket device of unknown speed: NCCL's figure for the
		// bandwidth, ncclgo's measured ones for LL and the channels.
		t.NetBW = tune.SocketNetBW
		t.NetLLBW = tune.SocketNetLLBW
		t.NetChannelBytes = tune.SocketNetChannelBytes
		t.NetMaxChannels = tune.SocketNetMaxChannels
	}
	return t
}

// buildGraphs returns the rings of every channel and the trees. With the
// ranks on one host (peers all on one Host, or nil): graph.Rings over l
// (ranks sharing a GPU adjacent, GPUs in an order of peer-connected
// neighbours) and NCCL's double binary trees over the ranks. Across hosts,
// from the peers' hosts and devices alone: rings that leave each host once
// and double binary trees over hosts with a chain inside each
// (graph.RingsAcrossHosts, graph.TreesAcrossHosts).
func buildGraphs(l topo.Layout, peers []transport.Peer, nChannels int) ([][]int, []graph.Tree) {
	ids := map[string]int{}
	hostOf, devs := make([]int, len(peers)), make([]int, len(peers))
	for r, p := range peers {
		if _, ok := ids[p.Host]; !ok {
			ids[p.Host] = len(ids)
		}
		hostOf[r], devs[r] = ids[p.Host], p.Device
	}
	if len(ids) <= 1 {
		return graph.Rings(l, nChannels), graph.Trees(l.NRanks, nChannels)
	}
	return graph.RingsAcrossHosts(hostOf, devs, nChannels), graph.TreesAcrossHosts(hostOf, devs, nChannels)
}

// busIDsByGPU gives the PCI bus id of each GPU index of l, from the ranks'
// descriptions.
func busIDsByGPU(l topo.Layout, peers []peerInfo) []string {
	ids := make([]string, l.NGPUs)
	for g, ranks := range l.Ranks {
		ids[g] = peers[ranks[0]].BusID
	}
	return ids
}
