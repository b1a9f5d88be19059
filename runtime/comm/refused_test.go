package comm

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/kernels"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/transport"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// netEngines returns host-only ranks of a communicator whose ranks each sit
// on their own fake host (NCCL_HOSTID), all on GPU 0 (the multi-process
// matrix's h<N>r1 runs), planned as Init plans them: the agreed topology
// with one node per host, the channels of the tuner over the kernel set,
// then the tuner Init makes once a connection goes through NET (no LL128),
// and the point-to-point channels per peer of p2pPerPeer.
func netEngines(t *testing.T, n int, env map[string]string) []*Engine {
	t.Helper()
	getenv := func(k string) string { return env[k] }
	cfg, err := config.FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	devs := make([]int, n)
	peers := make([]transport.Peer, n)
	for r := range n {
		peers[r] = transport.Peer{PID: 1000 + r, Host: fmt.Sprintf("mp1-host%d", r), Device: 0, BusID: "0000:19:00.0"}
	}
	l := topo.NewLayout(devs)
	top := withNodes(tuneTopology(l, h200GPU, 1, cfg), peers)
	top.RanksPerGPU = 1 // agreeResidency: one rank per host on the GPU
	first, err := tune.New(top, cfg, kernels.Available)
	require.NoError(t, err)
	nch := min(first.MaxChannels(), generated.MaxChannels)
	lim, err := p2pLimitsFrom(0, cfg.P2PDisable, getenv)
	require.NoError(t, err)
	perPeer, why := p2pPerPeer(l, peers, nch, lim)
	t.Logf("%d ranks on %d hosts: %d channels, %d p2p channels per peer (%s)", n, top.NNodes, nch, perPeer, why)
	es := make([]*Engine, n)
	for r := range n {
		tn, err := tune.New(top, cfg, func(f kspace.Func) bool { return f.Proto != kspace.LL128 && kernels.Available(f) })
		require.NoError(t, err)
		e := NewHostOnly(nil, r, n, 0, Settings{}, tn)
		e.nChannels = nch
		e.plan = enqueue.Comm{Rank: r, NRanks: n, NChannels: nch, P2PChannelsPerPeer: perPeer}
		es[r] = e
	}
	return es
}

// engineTrace is what a launch leaves on an engine: if a refused group
// changed any of it, the next group of that rank would not launch as its
// peers' does.
type engineTrace struct {
	plan    enqueue.Comm
	nch     int
	seq     uint64
	last    *cuda.Event
	events  int
	multi   uint64
	lane    *enqueue.Lane
	entered *cuda.Stream
	lease   bool
}

func traceOf(e *Engine) engineTrace {
	e.mu.Lock()
	defer e.mu.Unlock()
	return engineTrace{plan: e.plan, nch: e.nChannels, seq: e.res.seq, last: e.res.last, events: len(e.events),
		multi: e.multi, lane: e.lanes.lane, entered: e.lanes.entered, lease: e.res.lease != nil}
}

// mpMatrixCase is one case of tests/multiprocess_test.go's suite, as the
// planner sees rank r's calls: the buffers are fixed addresses, one
// element off alignment for odd counts as the suite places them.
type mpMatrixCase struct {
	name  string
	ty    kspace.Type
	count int
}

func (c mpMatrixCase) String() string { return fmt.Sprintf("%s %s count=%d", c.name, c.ty, c.count) }

func (c mpMatrixCase) tasks(r, n int) []enqueue.Task {
	es := uint64(c.ty.Size())
	off := uint64(c.count%2) * es
	send, recv := uint64(0x7f0000000000)+off, uint64(0x7f1000000000)+off
	b := uint64(c.count) * es
	switch c.name {
	case "AllReduce Sum":
		return []enqueue.Task{{Coll: kspace.AllReduce, Send: send, Recv: recv, Bytes: b, Type: c.ty, Op: kspace.Sum}}
	case "AllGather":
		return []enqueue.Task{{Coll: kspace.AllGather, Send: send, Recv: recv, Bytes: b, Type: c.ty}}
	case "ReduceScatter Sum":
		return []enqueue.Task{{Coll: kspace.ReduceScatter, Send: send, Recv: recv, Bytes: b, Type: c.ty, Op: kspace.Sum}}
	case "Broadcast":
		return []enqueue.Task{{Coll: kspace.Broadcast, Send: send, Recv: recv, Bytes: b, Type: c.ty, Root: n - 1}}
	case "SendRecv ring":
		return []enqueue.Task{
			{Coll: kspace.SendRecv, IsSend: true, Peer: (r + 1) % n, Send: send, Bytes: b, Type: c.ty},
			{Coll: kspace.SendRecv, Peer: (r + n - 1) % n, Recv: recv, Bytes: b, Type: c.ty},
		}
	}
	panic("unknown case " + c.name)
}

// h2r1Cases is the case list of the h2r1-RING-LL128 run, in the suite's
// order: per type and count the four collectives, then the Send/Recv ring.
func h2r1Cases() []mpMatrixCase {
	var cs []mpMatrixCase
	for _, ty := range []kspace.Type{kspace.I32, kspace.F32} {
		for _, count := range []int{1, 1001, 65539} {
			for _, name := range []string{"AllReduce Sum", "AllGather", "ReduceScatter Sum", "Broadcast", "SendRecv ring"} {
				cs = append(cs, mpMatrixCase{name, ty, count})
			}
		}
	}
	return cs
}

// TestRefusedGroupLeavesNoTrace runs, on every rank of a 2- and a 3-host
// communicator under NCCL_ALGO=RING NCCL_PROTO=LL128, the fake-host
// matrix's case list (the h2r1-RING-LL128 hang): each collective must be
// refused with tune.ErrNoChoice and leave the engine exactly as it was
// (planner view, launch sequence, events, lane, ledger lease), and each
// Send/Recv ring must plan exactly as on a fresh engine that never saw a
// refusal, and as the same bytes of the other type do (the Int32 65539
// SendRecv passed on the GPU, the Float32 one hung).
func TestRefusedGroupLeavesNoTrace(t *testing.T) {
	env := map[string]string{"NCCL_ALGO": "RING", "NCCL_PROTO": "LL128"}
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("hosts=%d", n), func(t *testing.T) {
			es := netEngines(t, n, env)
			fresh := netEngines(t, n, env)
			plans := make(map[string][]enqueue.Plan)
			for _, c := range h2r1Cases() {
				for r, e := range es {
					before := traceOf(e)
					p, err := e.Plan(c.tasks(r, n))
					require.Equal(t, before, traceOf(e), "%s: rank %d: planning changed the engine", c, r)
					if c.name != "SendRecv ring" {
						require.ErrorIs(t, err, tune.ErrNoChoice, "%s: rank %d", c, r)
						assert.Empty(t, p.Launches, "%s: rank %d: a refused plan", c, r)
						continue
					}
					require.NoError(t, err, "%s: rank %d", c, r)
					want, err := fresh[r].Plan(c.tasks(r, n))
					require.NoError(t, err)
					require.Equal(t, want, p, "%s: rank %d: the plan after the refused groups differs from a fresh engine's", c, r)
					plans[c.String()] = append(plans[c.String()], p)
				}
				if c.name == "SendRecv ring" {
					checkRingPairs(t, c.String(), plans[c.String()])
				}
			}
			for _, count := range []int{1, 1001, 65539} {
				i32 := plans[mpMatrixCase{"SendRecv ring", kspace.I32, count}.String()]
				f32 := plans[mpMatrixCase{"SendRecv ring", kspace.F32, count}.String()]
				require.Equal(t, i32, f32, "count=%d: Int32 and Float32 Send/Recv of the same bytes plan alike", count)
			}
			for _, count := range []int{1, 1001, 65539} {
				p := plans[mpMatrixCase{"SendRecv ring", kspace.F32, count}.String()][0]
				t.Logf("rank 0 SendRecv Float32 count=%d: %s", count, describeP2P(p))
			}
		})
	}
}

// checkRingPairs checks a ring shift's plans: on every channel, what rank r
// sends to r+1 is what r+1 receives from r, part for part, whole-message
// sizes included, and every byte is sent once.
func checkRingPairs(t *testing.T, what string, plans []enqueue.Plan) {
	t.Helper()
	n := len(plans)
	type part struct{ bytes, msg uint64 }
	sends := make([]map[int][]part, n) // per rank, per channel, to r+1
	recvs := make([]map[int][]part, n) // per rank, per channel, from r-1
	for r, p := range plans {
		sends[r], recvs[r] = map[int][]part{}, map[int][]part{}
		require.Len(t, p.Launches, 1, "%s: rank %d", what, r)
		ln := p.Launches[0]
		for ch := range generated.MaxChannels {
			for _, w := range ln.Works[ln.ChanWorkStart[ch]:ln.ChanWorkStart[ch+1]] {
				if w.SendPeer >= 0 {
					require.EqualValues(t, (r+1)%n, w.SendPeer, "%s: rank %d channel %d", what, r, ch)
					sends[r][ch] = append(sends[r][ch], part{w.Count, w.ChanOffset})
				}
				if w.RecvPeer >= 0 {
					require.EqualValues(t, (r+n-1)%n, w.RecvPeer, "%s: rank %d channel %d", what, r, ch)
					recvs[r][ch] = append(recvs[r][ch], part{w.ChanCount, w.RedOpArg})
				}
			}
		}
	}
	for r := range n {
		to := (r + 1) % n
		assert.Equal(t, sends[r], recvs[to], "%s: rank %d's sends to %d against %d's receives from %d, per channel", what, r, to, to, r)
	}
}

// describeP2P lists a point-to-point plan's parts: "ch0 send 131328 recv
// 131328, ch1 ...".
func describeP2P(p enqueue.Plan) string {
	s := ""
	for _, d := range p.Decisions {
		s += fmt.Sprintf("[%s %d B: %s %d channels %d threads] ", d.Coll, d.Bytes, d.Choice.Proto, d.NChannels, d.Choice.NThreads)
	}
	for _, ln := range p.Launches {
		for ch := range generated.MaxChannels {
			for _, w := range ln.Works[ln.ChanWorkStart[ch]:ln.ChanWorkStart[ch+1]] {
				s += fmt.Sprintf("ch%d send %d recv %d; ", ch, w.Count, w.ChanCount)
			}
		}
		s += fmt.Sprintf("grid %d × %d threads", ln.NBlocks(), ln.NThreads)
	}
	return s
}
