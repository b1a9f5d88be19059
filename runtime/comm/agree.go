package comm

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// agreeResidency returns what every rank's tuner bounds the channels
// with (agreeShares over the ranks' views, exchanged through net): the
// fewest SMs and resident blocks per SM, and the most ranks that compete
// for one GPU's share. The channel count, the rings and each call's
// channel split must be identical on every rank, and they derive from
// these numbers; a rank that took its own GPU's (a different model, a MIG
// slice, another MPS share, a different occupancy) would set up other
// channels than its peers and their connections would never match.
func agreeResidency(ctx context.Context, net bootstrap.Network, me shareView) (agreedShare, error) {
	mine, err := json.Marshal(me)
	if err != nil {
		return agreedShare{}, fmt.Errorf("encoding the SM share: %w", err)
	}
	all, err := net.AllGather(ctx, mine)
	if err != nil {
		return agreedShare{}, fmt.Errorf("exchanging SM counts: %w", err)
	}
	views := make([]shareView, len(all))
	for r, b := range all {
		if len(b) > 4096 {
			return agreedShare{}, fmt.Errorf("rank %d's SM share: %d bytes, want at most 4096", r, len(b))
		}
		if err := json.Unmarshal(b, &views[r]); err != nil {
			return agreedShare{}, fmt.Errorf("rank %d's SM share: %w", r, err)
		}
		if views[r].SMs < 1 || views[r].BlocksPerSM < 1 {
			return agreedShare{}, fmt.Errorf("rank %d's SM share: %d SMs × %d blocks/SM, want both at least 1", r, views[r].SMs, views[r].BlocksPerSM)
		}
	}
	return agreeShares(views), nil
}

// tuningInputs is everything a rank's tuner and planner decide from. It
// must be the same on every rank: ranks that plan one call differently
// (one picks RING where another picks TREE, or another protocol) wait on
// connections their peers never feed, and the call hangs.
type tuningInputs struct {
	// Topology is derived from numbers the ranks already agree on, except
	// the link between GPUs, which each rank probes itself (NVML): a probe
	// that answers differently in one rank must not split the ranks'
	// choices, so every rank takes rank 0's.
	Topology tune.Topology
	// Settings are the NCCL_* variables and options that steer the tuner,
	// the channel split and the buffers, and the kernel set's filter (what
	// the tuner may pick). They come from each process's environment and
	// files; ranks whose settings differ cannot run together.
	Settings tuningSettings
}

type tuningSettings struct {
	Algo, Proto                           string
	NChannels, MinNChannels, MaxNChannels int
	NThreads, LL128NThreads               int
	BuffSize, LLBuffSize, LL128BuffSize   int
	NetBuffSize                           int
	P2PChannelsPerPeer                    int
	KernelSetFilter                       string
}

// settingsOf collects the tuning settings of one rank.
func settingsOf(cfg config.Config, p2pPerPeer int, filter string) tuningSettings {
	return tuningSettings{Algo: cfg.Algo.String(), Proto: cfg.Proto.String(),
		NChannels: cfg.NChannels, MinNChannels: cfg.MinNChannels, MaxNChannels: cfg.MaxNChannels,
		NThreads: cfg.NThreads, LL128NThreads: cfg.LL128NThreads, BuffSize: cfg.BuffSize, LLBuffSize: cfg.LLBuffSize, LL128BuffSize: cfg.LL128BuffSize,
		NetBuffSize: cfg.NetBuffSize, P2PChannelsPerPeer: p2pPerPeer, KernelSetFilter: filter}
}

// agreeTuning exchanges every rank's tuning inputs through net and returns
// the topology every rank tunes with (rank 0's). Settings that differ
// between ranks are an error naming the ranks and the values, rather than
// a hang at the first call they would plan differently. changed reports
// whether this rank's own topology differed from rank 0's (the caller
// logs it).
func agreeTuning(ctx context.Context, net bootstrap.Network, mine tuningInputs) (_ tune.Topology, changed bool, err error) {
	b, err := json.Marshal(mine)
	if err != nil {
		return tune.Topology{}, false, fmt.Errorf("encoding the tuning inputs: %w", err)
	}
	all, err := net.AllGather(ctx, b)
	if err != nil {
		return tune.Topology{}, false, fmt.Errorf("exchanging the tuning inputs: %w", err)
	}
	in := make([]tuningInputs, len(all))
	for r, raw := range all {
		if len(raw) > 1<<16 {
			return tune.Topology{}, false, fmt.Errorf("rank %d's tuning inputs: %d bytes, want at most %d", r, len(raw), 1<<16)
		}
		if err := json.Unmarshal(raw, &in[r]); err != nil {
			return tune.Topology{}, false, fmt.Errorf("rank %d's tuning inputs: %w", r, err)
		}
	}
	var differ []string
	for r := 1; r < len(in); r++ {
		if in[r].Settings != in[0].Settings {
			differ = append(differ, fmt.Sprintf("rank %d has %+v", r, in[r].Settings))
		}
	}
	if len(differ) > 0 {
		return tune.Topology{}, false, fmt.Errorf("%w: the ranks' tuning settings (NCCL_ALGO, NCCL_PROTO, NCCL_*NCHANNELS, NCCL_*NTHREADS, NCCL_*BUFFSIZE, NCCLGO_NET_BUFFSIZE, P2P channels per peer, the kernel set) differ: rank 0 has %+v, %s; set them alike in every process",
			ErrInvalidUsage, in[0].Settings, strings.Join(differ, ", "))
	}
	return in[0].Topology, in[0].Topology != mine.Topology, nil
}
