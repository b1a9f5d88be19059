package comm

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/graph"
	"github.com/ncclgo/ncclgo/runtime/kernels"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/transport"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// The fake-host matrix (tests/gpu-verify.sh STEPS=hosts, issue 24) on the
// CPU: every rank's view of a communicator of H fake hosts (NCCL_HOSTID
// per block of processes) × R ranks per host, all on GPU 0 of one machine
// under MPS, derived as Init derives it, and checked for what the ranks
// must agree on and what the one GPU must hold.

// hostsPlacement is one placement of the matrix, as gpu-verify.sh lays it
// out: R=1 one process per host; R=2 one process with both ranks at 3
// hosts, two processes per host otherwise (SHM between them at 4 hosts).
type hostsPlacement struct {
	hosts, perHost int
	oneProcess     bool // a host's ranks share a process
	p2pDisable     bool
}

// comboEnv is the environment that forces ap (nothing for the default).
func comboEnv(ap [2]string) map[string]string {
	env := map[string]string{}
	if ap[0] != "" {
		env["NCCL_ALGO"] = ap[0]
	}
	if ap[1] != "" {
		env["NCCL_PROTO"] = ap[1]
	}
	return env
}

func comboName(ap [2]string) string {
	if ap[0] == "" && ap[1] == "" {
		return "default"
	}
	return ap[0] + "/" + ap[1]
}

func (p hostsPlacement) String() string {
	s := fmt.Sprintf("h%dr%d", p.hosts, p.perHost)
	if p.perHost > 1 && p.oneProcess {
		s += "-1proc"
	}
	if p.p2pDisable {
		s += "-shm"
	}
	return s
}

func hostsMatrix() []hostsPlacement {
	var ps []hostsPlacement
	for _, h := range []int{2, 3, 4} {
		ps = append(ps, hostsPlacement{hosts: h, perHost: 1})
		// Both layouts of two ranks per host, whichever the script runs.
		ps = append(ps, hostsPlacement{hosts: h, perHost: 2, oneProcess: true},
			hostsPlacement{hosts: h, perHost: 2, p2pDisable: h == 4})
	}
	return ps
}

// peers describes the ranks: rank r on host r/perHost, GPU 0.
func (p hostsPlacement) peers() []transport.Peer {
	n := p.hosts * p.perHost
	ps := make([]transport.Peer, n)
	for r := range n {
		pid := 1000 + r
		if p.oneProcess {
			pid = 1000 + r/p.perHost
		}
		ps[r] = transport.Peer{PID: pid, Host: fmt.Sprintf("mp1-host%d", r/p.perHost), Device: 0, BusID: "0000:19:00.0"}
	}
	return ps
}

// hostsView is what one rank derives at Init before it connects.
type hostsView struct {
	top     tune.Topology
	nch     int
	rings   [][]int
	trees   []graph.Tree
	perPeer int
	edges   []transport.Edge
	tuner   *tune.Tuner // after the connections (LL128 off across NET)
}

// h200BlocksPerSM is the occupancy the matrix assumes for the widest
// kernel (640 threads): one block per SM.
const h200BlocksPerSM = 1

// hostsViews derives every rank's view as Init does, from the peers, the
// agreed SM share (agreeShares over what each rank would publish, all on
// one machine) and the environment env.
func hostsViews(t *testing.T, p hostsPlacement, env map[string]string) ([]hostsView, agreedShare) {
	t.Helper()
	if p.p2pDisable {
		env["NCCL_P2P_DISABLE"] = "1"
	}
	cfg, err := config.FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	peers := p.peers()
	n := len(peers)
	views := make([]shareView, n)
	for r, q := range peers {
		views[r] = shareView{PID: q.PID, Host: q.Host, Machine: "boot:one-machine", GPU: q.BusID, SMs: h200GPU.SMCount, BlocksPerSM: h200BlocksPerSM}
	}
	agreed := agreeShares(views)
	l := topo.NewLayout(make([]int, n))
	lim, err := p2pLimitsFrom(0, cfg.P2PDisable, func(k string) string { return env[k] })
	require.NoError(t, err)
	pol := transport.Policy{P2PDisable: cfg.P2PDisable}
	out := make([]hostsView, n)
	for me := range n {
		gpu := h200GPU
		gpu.SMCount = agreed.SMs
		top := withNodes(tuneTopology(l, gpu, agreed.BlocksPerSM, cfg), peers)
		top.RanksPerGPU = agreed.RanksPerGPU
		top.Direct = directEligible(peers, l, cfg.P2PDisable)
		tn, err := tune.New(top, cfg, kernels.Available)
		require.NoError(t, err)
		v := hostsView{top: top, nch: min(tn.MaxChannels(), generated.MaxChannels)}
		v.rings, v.trees = buildGraphs(l, peers, v.nch)
		v.perPeer, _ = p2pPerPeer(l, peers, v.nch, lim)
		plan := enqueue.Comm{Rank: me, NRanks: n, NChannels: v.nch, P2PChannelsPerPeer: v.perPeer}
		v.edges = withPATEdges(edges(plan, v.rings, v.trees), plan, top.NNodes == top.NRanks)
		// Transports: the receiver picks, the sender must accept.
		usesNET := false
		for _, e := range v.edges {
			if e.To != me {
				continue
			}
			recvLink := linkFunc(l, me, peers)(e.From)
			tr, err := transport.Select(transport.Default(), pol, peers[e.From], peers[me], recvLink)
			require.NoError(t, err, "%v", e)
			ok, why := tr.CanConnect(pol, peers[e.From], peers[me], linkFunc(l, e.From, peers)(me))
			require.True(t, ok, "%s: %v: rank %d picked %s, rank %d refuses it: %s", p, e, me, tr.Name(), e.From, why)
			cross := peers[e.From].Host != peers[me].Host
			assert.Equal(t, cross, tr.Name() == "NET", "%s: %v goes through %s", p, e, tr.Name())
			if p.p2pDisable && !cross {
				assert.Equal(t, "SHM", tr.Name(), "%s: %v", p, e)
			}
			usesNET = usesNET || tr.Name() == "NET"
		}
		require.True(t, usesNET, "%s: rank %d receives nothing over NET", p, me)
		// Every rank of the matrix has a NET peer, so every rank's
		// Set.Uses("NET") is true: LL128 off.
		v.tuner, err = tune.New(top, cfg, func(f kspace.Func) bool { return f.Proto != kspace.LL128 && kernels.Available(f) })
		require.NoError(t, err)
		out[me] = v
	}
	return out, agreed
}

// TestHostsMatrixViewsAgree checks, for every placement of the matrix and
// every forced algorithm and protocol, that the ranks derive the same
// topology, channels, rings, trees and point-to-point channels; that
// every connection one rank sets up is one its peer sets up too; and that
// the channels of all the ranks on the one GPU fit it at once (the h3r2
// hang: 6 ranks × 32 channels on 132 SMs).
func TestHostsMatrixViewsAgree(t *testing.T) {
	for _, p := range hostsMatrix() {
		for _, ap := range hostsCombos(p) {
			t.Run(p.String()+"/"+comboName(ap), func(t *testing.T) {
				vs, agreed := hostsViews(t, p, comboEnv(ap))
				n := len(vs)
				for r := 1; r < n; r++ {
					require.Equal(t, vs[0].top, vs[r].top, "rank %d's topology", r)
					require.Equal(t, vs[0].nch, vs[r].nch, "rank %d's channels", r)
					require.Equal(t, vs[0].rings, vs[r].rings, "rank %d's rings", r)
					require.Equal(t, vs[0].trees, vs[r].trees, "rank %d's trees", r)
					require.Equal(t, vs[0].perPeer, vs[r].perPeer, "rank %d's p2p channels per peer", r)
				}
				for ch, ring := range vs[0].rings {
					require.NoError(t, graph.CheckRing(ring, n), "channel %d", ch)
				}
				for ch, tr := range vs[0].trees {
					require.NoError(t, graph.CheckTree(tr, n), "channel %d", ch)
				}
				for me, v := range vs {
					for _, e := range v.edges {
						other := e.To
						if other == me {
							other = e.From
						}
						require.True(t, slices.Contains(vs[other].edges, e), "%v is rank %d's but not rank %d's", e, me, other)
					}
				}
				// All ranks of the machine's one GPU, at their widest.
				assert.LessOrEqual(t, vs[0].nch*n, agreed.SMs*agreed.BlocksPerSM,
					"%d ranks on one GPU × %d channels each > %d SMs × %d blocks/SM (RanksPerGPU %d: %s)",
					n, vs[0].nch, agreed.SMs, agreed.BlocksPerSM, agreed.RanksPerGPU, agreed.Why)
			})
		}
	}
}

// hostsCombos is gpu-verify.sh's HOSTS_COMBOS for a placement, and the
// tuner's own choice (nothing forced).
func hostsCombos(p hostsPlacement) [][2]string {
	cs := [][2]string{{"", ""}, {"RING", "LL"}, {"RING", "SIMPLE"}, {"TREE", "LL"}, {"TREE", "SIMPLE"}}
	if p.perHost == 1 {
		cs = append(cs, [2]string{"PAT", "SIMPLE"}, [2]string{"RING", "LL128"})
	} else {
		cs = append(cs, [2]string{"TREE", "LL128"})
	}
	return cs
}

// TestHostsMatrixPlansAgree plans, on every rank of every placement and
// forced algorithm and protocol, the matrix's cases (the 65539-element
// AllGather among them) and a sweep of sizes: the ranks must choose the
// same function, protocol, channels and threads (or all refuse), and the
// grids of all the ranks on the one GPU must fit it at once.
func TestHostsMatrixPlansAgree(t *testing.T) {
	counts := []int{1, 1001, 65539, 1 << 20, 4<<20 + 3}
	names := []string{"AllReduce Sum", "AllGather", "ReduceScatter Sum", "Broadcast", "SendRecv ring"}
	for _, p := range hostsMatrix() {
		for _, ap := range hostsCombos(p) {
			t.Run(p.String()+"/"+comboName(ap), func(t *testing.T) {
				vs, agreed := hostsViews(t, p, comboEnv(ap))
				n := len(vs)
				es := make([]*Engine, n)
				for r, v := range vs {
					es[r] = NewHostOnly(nil, r, n, 0, Settings{}, v.tuner)
					es[r].nChannels = v.nch
					es[r].plan = enqueue.Comm{Rank: r, NRanks: n, NChannels: v.nch, P2PChannelsPerPeer: v.perPeer}
				}
				for _, ty := range []kspace.Type{kspace.I32, kspace.F32, kspace.U8, kspace.BF16} {
					for _, count := range counts {
						for _, name := range names {
							c := mpMatrixCase{name, ty, count}
							var first *enqueue.Plan
							var firstErr error
							blocks := 0
							for r, e := range es {
								pl, err := e.Plan(c.tasks(r, n))
								if r == 0 {
									first, firstErr = &pl, err
									if err != nil && !errors.Is(err, tune.ErrNoChoice) {
										require.NoError(t, err, "%s: rank 0", c)
									}
								}
								if firstErr != nil {
									require.ErrorIs(t, err, tune.ErrNoChoice, "%s: rank %d plans what rank 0 refused (%v)", c, r, firstErr)
									continue
								}
								require.NoError(t, err, "%s: rank %d refuses what rank 0 planned", c, r)
								require.Equal(t, decisionsOf(*first), decisionsOf(pl), "%s: rank %d's choices against rank 0's", c, r)
								require.Equal(t, len(first.Launches), len(pl.Launches), "%s: rank %d's launches", c, r)
								for _, d := range pl.Decisions {
									// PAT's connections are set up only with one rank per host.
									require.False(t, d.Choice.Algo == kspace.PAT && vs[r].top.NNodes != n, "%s: rank %d runs PAT with %d ranks on %d hosts", c, r, n, vs[r].top.NNodes)
								}
								for i, ln := range pl.Launches {
									f := first.Launches[i]
									if c.name != "SendRecv ring" {
										require.Equal(t, [3]any{f.Func, f.NThreads, f.ChannelMask}, [3]any{ln.Func, ln.NThreads, ln.ChannelMask},
											"%s: rank %d's launch %d", c, r, i)
									}
									require.LessOrEqual(t, ln.NBlocks(), vs[r].nch, "%s: rank %d launches more blocks than it has channels", c, r)
									require.Zero(t, ln.ChannelMask>>uint(vs[r].nch), "%s: rank %d uses a channel it did not set up", c, r)
									// Every point-to-point part runs on a connection both
									// sides set up.
									for ch := range generated.MaxChannels {
										for _, w := range ln.Works[ln.ChanWorkStart[ch]:ln.ChanWorkStart[ch+1]] {
											if c.name != "SendRecv ring" {
												continue
											}
											if w.SendPeer >= 0 {
												require.True(t, slices.Contains(vs[r].edges, transport.Edge{Channel: ch, From: r, To: int(w.SendPeer)}),
													"%s: rank %d sends to %d on channel %d, not connected", c, r, w.SendPeer, ch)
											}
											if w.RecvPeer >= 0 {
												require.True(t, slices.Contains(vs[r].edges, transport.Edge{Channel: ch, From: int(w.RecvPeer), To: r}),
													"%s: rank %d receives from %d on channel %d, not connected", c, r, w.RecvPeer, ch)
											}
										}
									}
									blocks = max(blocks, ln.NBlocks()) // per rank, the widest launch
								}
							}
							if firstErr == nil && c.name == "AllGather" && ty == kspace.I32 && count == 65539 {
								d := first.Decisions[0]
								t.Logf("%s: %d channels set up; %s/%s on %d channels, %d ranks × %d blocks on the GPU",
									c, vs[0].nch, d.Choice.Algo, d.Choice.Proto, d.NChannels, n, blocks)
							}
							if firstErr == nil {
								assert.LessOrEqual(t, blocks*n, agreed.SMs*agreed.BlocksPerSM, "%s: %d ranks × %d blocks on one GPU", c, n, blocks)
							}
						}
					}
				}
			})
		}
	}
}

// decisionsOf is what must agree in a plan's decisions: everything but
// the model's predicted time.
func decisionsOf(p enqueue.Plan) []enqueue.Decision {
	ds := slices.Clone(p.Decisions)
	for i := range ds {
		ds[i].Choice.PredictedTime = 0
	}
	return ds
}
