package comm

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/transport"
)

// p2pPeers describes ranks on the given hosts and devices (one process
// each).
func p2pPeers(hosts []string, devs []int) []transport.Peer {
	ps := make([]transport.Peer, len(devs))
	for r, d := range devs {
		ps[r] = transport.Peer{PID: 100 + r, Host: hosts[r], Device: d}
	}
	return ps
}

func sameHost(n string, k int) []string {
	h := make([]string, k)
	for i := range h {
		h[i] = n
	}
	return h
}

// withNVLinks gives every pair of GPUs of l n direct NVLinks (n < 0:
// unknown), and every GPU sw NVLinks to a switch.
func withNVLinks(l topo.Layout, n, sw int) topo.Layout {
	l.NVLinks = make([][]int, l.NGPUs)
	l.SwitchLinks = make([]int, l.NGPUs)
	for i := range l.NGPUs {
		l.NVLinks[i] = make([]int, l.NGPUs)
		for j := range l.NGPUs {
			if i != j {
				l.NVLinks[i][j] = n
			}
		}
		l.SwitchLinks[i] = sw
	}
	return l
}

func noEnv(string) string { return "" }

func TestP2PPerPeerByPath(t *testing.T) {
	def, err := p2pLimitsFrom(0, false, noEnv)
	require.NoError(t, err)
	h200 := func(devs []int) topo.Layout { return withNVLinks(topo.NewLayout(devs), 0, 18) }
	cases := []struct {
		name   string
		hosts  []string
		devs   []int
		layout topo.Layout
		nch    int
		lim    p2pLimits
		want   int
	}{
		{"2 ranks on one GPU", sameHost("a", 2), []int{0, 0}, topo.NewLayout([]int{0, 0}), 32, def, 32},
		{"4 ranks on one GPU, 16 channels", sameHost("a", 4), []int{0, 0, 0, 0}, topo.NewLayout([]int{0, 0, 0, 0}), 16, def, 16},
		{"8 GPUs on NVSwitch (18 NVLinks)", sameHost("a", 8), []int{0, 1, 2, 3, 4, 5, 6, 7}, h200([]int{0, 1, 2, 3, 4, 5, 6, 7}), 32, def, 16},
		{"4 GPUs on NVSwitch (18 NVLinks)", sameHost("a", 4), []int{0, 1, 2, 3}, h200([]int{0, 1, 2, 3}), 32, def, 32},
		{"16 ranks on one GPU", sameHost("a", 16), make([]int, 16), topo.NewLayout(make([]int, 16)), 32, def, 8},
		{"8 GPUs, set to 32", sameHost("a", 8), []int{0, 1, 2, 3, 4, 5, 6, 7}, h200([]int{0, 1, 2, 3, 4, 5, 6, 7}), 32, p2pLimits{PerPeer: 32, PerNetPeer: 2}, 32},
		{"2 GPUs, 2 direct NVLinks", sameHost("a", 2), []int{0, 1}, withNVLinks(topo.NewLayout([]int{0, 1}), 2, 0), 32, def, 4},
		{"2 GPUs on PCIe", sameHost("a", 2), []int{0, 1}, withNVLinks(topo.NewLayout([]int{0, 1}), 0, 0), 32, def, 2},
		{"2 GPUs, NVLinks unknown", sameHost("a", 2), []int{0, 1}, topo.NewLayout([]int{0, 1}), 32, def, 2},
		{"2 hosts", []string{"a", "b"}, []int{0, 0}, topo.NewLayout([]int{0, 0}), 32, def, 2},
		{"2 hosts × 2 ranks of one GPU", []string{"a", "a", "b", "b"}, []int{0, 0, 0, 0}, topo.NewLayout([]int{0, 0, 0, 0}), 32, def, 2},
		{"2 hosts, NCCL_NCHANNELS_PER_NET_PEER=8", []string{"a", "b"}, []int{0, 0}, topo.NewLayout([]int{0, 0}), 32, p2pLimits{PerNetPeer: 8}, 8},
		{"one GPU, NCCL_MAX_P2P_NCHANNELS=8", sameHost("a", 2), []int{0, 0}, topo.NewLayout([]int{0, 0}), 32, p2pLimits{PerNetPeer: 2, MaxP2P: 8}, 8},
		{"one GPU, set to 3", sameHost("a", 2), []int{0, 0}, topo.NewLayout([]int{0, 0}), 32, p2pLimits{PerPeer: 3, PerNetPeer: 2}, 3},
		{"set above the channels", sameHost("a", 2), []int{0, 0}, topo.NewLayout([]int{0, 0}), 4, p2pLimits{PerPeer: 16, PerNetPeer: 2}, 4},
		{"one GPU, P2P disabled", sameHost("a", 2), []int{0, 0}, topo.NewLayout([]int{0, 0}), 32, p2pLimits{PerNetPeer: 2, P2PDisable: true}, 2},
		{"one channel", sameHost("a", 2), []int{0, 0}, topo.NewLayout([]int{0, 0}), 1, def, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, why := p2pPerPeer(c.layout, p2pPeers(c.hosts, c.devs), c.nch, c.lim)
			assert.Equal(t, c.want, got, "why: %s", why)
			assert.NotEmpty(t, why)
		})
	}
}

// Every rank of a communicator derives the same count, and the edges it
// connects cover every channel the planner then uses for a peer.
func TestP2PPerPeerEdgesCoverPlan(t *testing.T) {
	for _, devs := range [][]int{{0, 0}, {0, 0, 0, 0}, {0, 1, 2, 3}} {
		t.Run(fmt.Sprint(devs), func(t *testing.T) {
			n := len(devs)
			l := withNVLinks(topo.NewLayout(devs), 0, 18)
			peers := p2pPeers(sameHost("a", n), devs)
			k, _ := p2pPerPeer(l, peers, 32, p2pLimits{PerNetPeer: 2})
			require.Equal(t, 32, k)
			rings, trees := buildGraphs(l, peers, 32)
			for r := range n {
				plan := enqueue.Comm{Rank: r, NRanks: n, NChannels: 32, P2PChannelsPerPeer: k}
				es := edges(plan, rings, trees)
				for d := 1; d < n; d++ {
					chans := enqueue.P2PChannels(plan, d)
					assert.Len(t, chans, 32, "distance %d uses every channel", d)
					for _, ch := range chans {
						assert.True(t, slices.Contains(es, transport.Edge{Channel: ch, From: r, To: (r + d) % n}), "rank %d: send edge ch %d d %d", r, ch, d)
						assert.True(t, slices.Contains(es, transport.Edge{Channel: ch, From: (r - d + n) % n, To: r}), "rank %d: recv edge ch %d d %d", r, ch, d)
					}
				}
			}
		})
	}
}

func TestP2PLimitsFromEnv(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	lim, err := p2pLimitsFrom(0, false, env(map[string]string{"NCCL_NCHANNELS_PER_NET_PEER": "4", "NCCL_MAX_P2P_NCHANNELS": "16", "NCCL_NCHANNELS_PER_PEER": "8"}))
	require.NoError(t, err)
	assert.Equal(t, p2pLimits{PerPeer: 8, PerNetPeer: 4, MaxP2P: 16}, lim)

	lim, err = p2pLimitsFrom(3, true, env(map[string]string{"NCCL_NCHANNELS_PER_PEER": "8"}))
	require.NoError(t, err)
	assert.Equal(t, p2pLimits{PerPeer: 3, PerNetPeer: DefaultP2PNetChannels, P2PDisable: true}, lim, "the option wins over the variable")

	for _, kv := range []map[string]string{
		{"NCCL_NCHANNELS_PER_NET_PEER": "0"},
		{"NCCL_MAX_P2P_NCHANNELS": "65"},
		{"NCCL_NCHANNELS_PER_PEER": "two"},
	} {
		_, err := p2pLimitsFrom(0, false, env(kv))
		require.Error(t, err, "%v", kv)
		assert.True(t, errors.Is(err, ErrInvalidArgument))
		for k, v := range kv {
			assert.Contains(t, err.Error(), k)
			assert.Contains(t, err.Error(), v)
		}
	}
}
