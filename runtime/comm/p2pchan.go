package comm

import (
	"fmt"

	"github.com/ncclgo/ncclgo/internal/envint"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/transport"
)

// This file decides how many channels the point-to-point traffic between
// two ranks spreads over (enqueue.Comm.P2PChannelsPerPeer), after NCCL's
// rule: each pair of ranks gets the channels its path supports, and the
// communicator takes the smallest over its pairs, so that every rank maps
// the traffic at one distance to the same channels.
//
//   - the same GPU: no limit of its own (the communicator's channels);
//   - NVLink: two per NVLink between the GPUs (through NVSwitch, two per
//     NVLink of the GPU with fewer), which on an H100 or H200 (18 NVLinks)
//     exceeds any channel count;
//   - PCIe, or NVLink counts unknown: 2;
//   - another host (NET): NCCL_NCHANNELS_PER_NET_PEER, default 2;
//
// then at most the communicator's channels and NCCL_MAX_P2P_NCHANNELS,
// and halved while the ranks times the count exceed four times that bound
// (NCCL's rule too: 8 ranks on NVSwitch with 32 channels get 16 each, and
// each channel carries the traffic of a few distances).
// Options.P2PChannelsPerPeer or NCCL_NCHANNELS_PER_PEER, when set, replaces
// the path's answer for every pair (still within those bounds). A copy
// through one block runs at some tens of GB/s, so two channels held a
// 1 GiB SendRecv between two ranks of one H200 to 55 GB/s; a peer on the
// same GPU or on NVLink needs every channel to reach the copy rate.

// DefaultP2PNetChannels is NCCL_NCHANNELS_PER_NET_PEER's default: the
// channels between two ranks on different hosts.
const DefaultP2PNetChannels = 2

// p2pPCIChannels is the channels between two GPUs joined by PCIe (or whose
// NVLinks are unknown), NCCL's 2.
const p2pPCIChannels = 2

// noLimit is routeChannels' answer for a path that does not limit the
// channels (two ranks on one GPU).
const noLimit = -1

// p2pLimits are the settings that bound the channels per peer.
type p2pLimits struct {
	// PerPeer replaces every path's count when positive
	// (Options.P2PChannelsPerPeer, else NCCL_NCHANNELS_PER_PEER).
	PerPeer int
	// PerNetPeer is the count for peers on another host
	// (NCCL_NCHANNELS_PER_NET_PEER).
	PerNetPeer int
	// MaxP2P caps the result when positive (NCCL_MAX_P2P_NCHANNELS).
	MaxP2P int
	// P2PDisable (NCCL_P2P_DISABLE) makes every path count as PCIe: the
	// traffic goes through host memory.
	P2PDisable bool
}

// p2pLimitsFrom reads the limits: opt is Options.P2PChannelsPerPeer (0
// unset), getenv os.Getenv normally. A malformed or out-of-range variable
// is an error naming it.
func p2pLimitsFrom(opt int, p2pDisable bool, getenv func(string) string) (p2pLimits, error) {
	lim := p2pLimits{PerPeer: opt, PerNetPeer: DefaultP2PNetChannels, P2PDisable: p2pDisable}
	read := func(name string, dst *int) error {
		n, ok, err := envint.Get(getenv, name, "a channel count", 1, config.MaxChannels)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
		if ok {
			*dst = n
		}
		return nil
	}
	if lim.PerPeer == 0 {
		if err := read("NCCL_NCHANNELS_PER_PEER", &lim.PerPeer); err != nil {
			return lim, err
		}
	}
	if err := read("NCCL_NCHANNELS_PER_NET_PEER", &lim.PerNetPeer); err != nil {
		return lim, err
	}
	if err := read("NCCL_MAX_P2P_NCHANNELS", &lim.MaxP2P); err != nil {
		return lim, err
	}
	return lim, nil
}

// route is what joins two ranks, as far as channels go.
type route struct {
	kind    routeKind
	nvlinks int // NVLinks of the path (routeNVLink)
}

type routeKind int

const (
	routeSameGPU routeKind = iota
	routeNVLink
	routePCI
	routeNet
)

func (r route) String() string {
	switch r.kind {
	case routeSameGPU:
		return "the same GPU"
	case routeNVLink:
		return fmt.Sprintf("%d NVLinks", r.nvlinks)
	case routePCI:
		return "PCIe (or NVLinks unknown)"
	default:
		return "the network"
	}
}

// routeOf classifies the path between ranks a and b from their
// descriptions and the layout of their GPUs (NVLink counts from
// Layout.ProbeNVLinks; unknown counts as PCIe).
func routeOf(l topo.Layout, peers []transport.Peer, a, b int) route {
	p, q := peers[a], peers[b]
	switch {
	case p.Host != q.Host:
		return route{kind: routeNet}
	case p.SameGPU(q):
		return route{kind: routeSameGPU}
	}
	i, j := l.GPUOf[a], l.GPUOf[b]
	if i == j {
		return route{kind: routeSameGPU}
	}
	if l.NVLinks != nil {
		if n := l.NVLinks[i][j]; n > 0 {
			return route{kind: routeNVLink, nvlinks: n}
		}
		if l.SwitchLinks != nil {
			if n := min(l.SwitchLinks[i], l.SwitchLinks[j]); n > 0 {
				return route{kind: routeNVLink, nvlinks: n}
			}
		}
	}
	return route{kind: routePCI}
}

// routeChannels is the channels one path supports, or noLimit.
func routeChannels(r route, lim p2pLimits) int {
	if lim.PerPeer > 0 {
		return lim.PerPeer
	}
	if lim.P2PDisable && (r.kind == routeSameGPU || r.kind == routeNVLink) {
		r = route{kind: routePCI}
	}
	switch r.kind {
	case routeSameGPU:
		return noLimit
	case routeNVLink:
		return 2 * r.nvlinks
	case routePCI:
		return p2pPCIChannels
	default:
		return lim.PerNetPeer
	}
}

// p2pPerPeer returns the channels per peer for a communicator of the ranks
// peers, laid out as l, with nChannels channels, and why: the pair of
// ranks (and its path) that limits it, or the bound that does. Every rank
// computes it from the same inputs, so every rank gets the same answer.
func p2pPerPeer(l topo.Layout, peers []transport.Peer, nChannels int, lim p2pLimits) (int, string) {
	k, why := noLimit, "every pair of ranks shares a GPU"
	if lim.PerPeer > 0 {
		k, why = lim.PerPeer, "set (Options.P2PChannelsPerPeer or NCCL_NCHANNELS_PER_PEER)"
	} else {
		for a := range peers {
			for b := a + 1; b < len(peers); b++ {
				r := routeOf(l, peers, a, b)
				if n := routeChannels(r, lim); n != noLimit && (k == noLimit || n < k) {
					k, why = n, fmt.Sprintf("ranks %d and %d are joined by %s", a, b, r)
				}
			}
		}
	}
	upper, upperWhy := nChannels, fmt.Sprintf("the communicator's %d channels", nChannels)
	if lim.MaxP2P > 0 && lim.MaxP2P < upper {
		upper, upperWhy = lim.MaxP2P, fmt.Sprintf("NCCL_MAX_P2P_NCHANNELS=%d", lim.MaxP2P)
	}
	switch {
	case k == noLimit:
		k, why = upper, upperWhy+" ("+why+")"
	case k > upper:
		k, why = upper, upperWhy
	}
	k = max(k, 1)
	if lim.PerPeer > 0 {
		return k, why
	}
	// Many peers: halve while the peers' channels would exceed four times
	// the channels, as NCCL does, so that an all-to-all of many ranks does
	// not connect every peer on every channel (each connection holds its
	// buffers).
	if k*len(peers) > 4*upper {
		for k > 1 && k*len(peers) > 4*upper {
			k /= 2
		}
		why += fmt.Sprintf(", halved to %d for %d ranks", k, len(peers))
	}
	return k, why
}
