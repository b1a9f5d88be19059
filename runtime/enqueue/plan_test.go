package enqueue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/tune"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixedChooser answers every call with the same algorithm, protocol and
// channel count.
type fixedChooser struct {
	algo  kspace.Algo
	proto kspace.Proto
	nc    int
	nt    int
}

func (f fixedChooser) Choose(coll kspace.Coll, op kspace.RedOp, ty kspace.Type, n int64) (tune.Choice, error) {
	if coll == kspace.SendRecv {
		return tune.Choice{Func: kspace.SendRecvFunc, Algo: kspace.Unset, Proto: f.proto, NChannels: f.nc, NThreads: f.nt}, nil
	}
	c := tune.Choice{Algo: f.algo, Proto: f.proto, NChannels: f.nc, NThreads: f.nt}
	c.Func = kspace.Func{Coll: coll, RedOp: kspace.Unset, Type: kspace.Unset, Algo: f.algo, Proto: f.proto}
	if coll.HasRedOp() {
		c.Func.RedOp, c.Func.Type = op, ty
	}
	return c, nil
}

func ring(nc int) fixedChooser {
	return fixedChooser{algo: kspace.Ring, proto: kspace.Simple, nc: nc, nt: 512}
}

func TestKernelArgsLayout(t *testing.T) {
	require.Equal(t, 4096, KernelArgsSize)
	var a generated.KernelArgs
	a.Comm = 0x1122334455667788
	a.ChannelMask = 0xf
	a.NWork = 3
	a.ChanWorkStart[1] = 7
	a.Works[60].RecvPeer = -2
	got := argBytes(&a, KernelArgsSize)
	want, err := binary.Append(nil, binary.LittleEndian, &a)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "argBytes must match the little-endian encoding of the struct")
}

// checkCover checks that the works of one collective on a plan cover the
// buffer exactly, in order, with aligned boundaries.
func checkCover(t *testing.T, l Launch, units, granule uint64, wantChannels int) {
	t.Helper()
	var next uint64
	nch := 0
	for ch := range generated.MaxChannels {
		s, e := l.ChanWorkStart[ch], l.ChanWorkStart[ch+1]
		require.LessOrEqual(t, s, e)
		if s == e {
			assert.Zero(t, l.ChannelMask&(1<<ch), "channel %d without works is in the mask", ch)
			continue
		}
		assert.NotZero(t, l.ChannelMask&(1<<ch))
		require.Equal(t, int(s)+1, int(e), "one work per channel")
		w := l.Works[s]
		assert.Equal(t, units, w.Count)
		assert.Equal(t, next, w.ChanOffset, "channel %d starts where the previous ended", ch)
		assert.NotZero(t, w.ChanCount)
		assert.Zero(t, w.ChanOffset%granule, "channel %d offset aligned", ch)
		next += w.ChanCount
		nch++
	}
	assert.Equal(t, units, next, "the channels cover the buffer exactly")
	assert.Equal(t, wantChannels, nch)
	assert.Equal(t, nch, l.NBlocks())
}

func TestCollectiveSplit(t *testing.T) {
	comm := Comm{Rank: 1, NRanks: 4, NChannels: 16, P2PChannelsPerPeer: 2}
	cases := []struct {
		coll  kspace.Coll
		ty    kspace.Type
		count uint64
		nc    int
		units uint64 // expected Count
		unit  uint64 // bytes per unit
		nch   int
	}{
		{kspace.AllReduce, kspace.F32, 1 << 18, 16, 1 << 18, 4, 16},
		{kspace.AllReduce, kspace.F32, 1, 16, 1, 4, 1},
		{kspace.AllReduce, kspace.F32, 1000, 16, 1000, 4, 8},        // 4000 bytes / 512
		{kspace.AllReduce, kspace.F64, 12345, 7, 12345, 8, 7},       // odd count
		{kspace.AllReduce, kspace.F32, 1 << 20, 64, 1 << 20, 4, 16}, // capped to the comm's channels
		{kspace.Broadcast, kspace.F32, 1001, 4, 4004, 1, 4},         // bytes
		{kspace.AllGather, kspace.F16, 777, 3, 1554, 1, 2},          // bytes of one rank's chunk; 518-byte parts round up to 1024
		{kspace.ReduceScatter, kspace.I32, 100000, 5, 100000, 4, 5},
		{kspace.Reduce, kspace.U8, 3, 16, 3, 1, 1},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%s/%d/%dch", tc.coll, tc.ty, tc.count, tc.nc), func(t *testing.T) {
			task := Task{Coll: tc.coll, Send: 0x1000, Recv: 0x2000, Bytes: tc.count * uint64(tc.ty.Size()), Type: tc.ty, Op: kspace.Sum, Root: 2}
			p, err := Build(comm, []Task{task}, ring(tc.nc), nil)
			require.NoError(t, err)
			require.Len(t, p.Launches, 1)
			l := p.Launches[0]
			checkCover(t, l, tc.units, max(Granule/tc.unit, 1), tc.nch)
			assert.True(t, l.Inline())
			for _, w := range l.Works {
				assert.EqualValues(t, 0x1000, w.Sendbuff)
				assert.EqualValues(t, 0x2000, w.Recvbuff)
				assert.EqualValues(t, 2, w.Root)
				id, _, err := GeneratedLookup(kspace.Func{Coll: tc.coll, RedOp: redOpOf(tc.coll), Type: typeOf(tc.coll, tc.ty), Algo: kspace.Ring, Proto: kspace.Simple})
				require.NoError(t, err)
				assert.EqualValues(t, id, w.FuncId)
			}
			args := argsOf(&l, 0xabc, 0)
			assert.EqualValues(t, 0xabc, args.Comm)
			assert.Zero(t, args.WorkBuf)
			assert.EqualValues(t, len(l.Works), args.NWork)
			assert.Equal(t, l.Works[0], args.Works[0])
		})
	}
}

func redOpOf(c kspace.Coll) kspace.RedOp {
	if c.HasRedOp() {
		return kspace.Sum
	}
	return kspace.Unset
}

func typeOf(c kspace.Coll, t kspace.Type) kspace.Type {
	if c.HasRedOp() {
		return t
	}
	return kspace.Unset
}

func TestZeroCountAndOneRank(t *testing.T) {
	p, err := Build(Comm{Rank: 0, NRanks: 2, NChannels: 4}, []Task{{Coll: kspace.AllReduce, Type: kspace.F32, Bytes: 0}}, ring(4), nil)
	require.NoError(t, err)
	assert.True(t, p.Empty())

	one := Comm{Rank: 0, NRanks: 1, NChannels: 4}
	p, err = Build(one, []Task{
		{Coll: kspace.AllReduce, Send: 0x10, Recv: 0x20, Type: kspace.F32, Bytes: 5 * 4},
		{Coll: kspace.AllGather, Send: 0x30, Recv: 0x30, Type: kspace.F32, Bytes: 5 * 4}, // in place: nothing
	}, ring(4), nil)
	require.NoError(t, err)
	assert.Equal(t, []Copy{{Dst: 0x20, Src: 0x10, Bytes: 20}}, p.Copies)
	assert.Empty(t, p.Launches)
}

// TestOneRankCopy: OneRankCopy answers what Build plans for one
// collective of one rank, for every collective and op, in and out of
// place: a copy or nothing when it needs no kernel, a launch otherwise
// (PreMulSum, Avg of floating-point types included).
func TestOneRankCopy(t *testing.T) {
	one := Comm{Rank: 0, NRanks: 1, NChannels: 4}
	for _, coll := range []kspace.Coll{kspace.Broadcast, kspace.Reduce, kspace.AllGather, kspace.ReduceScatter, kspace.AllReduce} {
		ops := []kspace.RedOp{kspace.Sum}
		if coll.HasRedOp() {
			ops = []kspace.RedOp{kspace.Sum, kspace.Prod, kspace.MinMax, kspace.PreMulSum, kspace.SumPostDiv}
		}
		for _, op := range ops {
			for _, recv := range []uint64{0x10, 0x20} {
				for _, bytes := range []uint64{0, 8} {
					task := Task{Coll: coll, Send: 0x10, Recv: recv, Type: kspace.F32, Op: op, Bytes: bytes}
					name := fmt.Sprintf("%s %s recv %#x %d bytes", coll, op, recv, bytes)
					p, err := Build(one, []Task{task}, ring(4), nil)
					require.NoError(t, err, name)
					cp, ok := OneRankCopy(task)
					if !ok {
						assert.Equal(t, kspace.PreMulSum, op, name)
						assert.Len(t, p.Launches, min(int(bytes), 1), "%s: a kernel scales", name)
						continue
					}
					assert.Empty(t, p.Launches, name)
					if cp.Bytes == 0 {
						assert.Empty(t, p.Copies, name)
					} else {
						assert.Equal(t, []Copy{cp}, p.Copies, name)
					}
				}
			}
		}
	}
	_, ok := OneRankCopy(Task{Coll: kspace.SendRecv, Send: 0x10, Bytes: 8, IsSend: true})
	assert.False(t, ok, "a send to itself pairs with a receive")
}

func TestAggregationAndWorkFIFO(t *testing.T) {
	comm := Comm{Rank: 0, NRanks: 2, NChannels: 8}
	var tasks []Task
	for i := range 40 {
		tasks = append(tasks, Task{Coll: kspace.AllReduce, Send: uint64(0x1000 * (i + 1)), Recv: uint64(0x1000 * (i + 1)), Bytes: (1 << 16) * 4, Type: kspace.F32, Op: kspace.Sum})
	}
	// 40 collectives × 2 channels = 80 works: one launch, works in a FIFO.
	p, err := Build(comm, tasks, ring(2), nil)
	require.NoError(t, err)
	require.Len(t, p.Launches, 1, "collectives of one kernel aggregate into one launch")
	l := p.Launches[0]
	assert.Len(t, l.Works, 80)
	assert.False(t, l.Inline())
	assert.EqualValues(t, 0b11, l.ChannelMask)
	args := argsOf(&l, 1, 0xfeed000)
	assert.EqualValues(t, 0xfeed000, args.WorkBuf)
	assert.Equal(t, generated.DevWork{}, args.Works[0], "no inline works with a FIFO")
	assert.EqualValues(t, 80, args.NWork)
	assert.EqualValues(t, 40, args.ChanWorkStart[1])
	assert.EqualValues(t, 80, args.ChanWorkStart[2])
	assert.EqualValues(t, 80, args.ChanWorkStart[64])
	// Every channel keeps the call order.
	for ch := range 2 {
		for i := range 40 {
			w := l.Works[ch*40+i]
			assert.EqualValues(t, 0x1000*(i+1), w.Sendbuff)
		}
	}
	assert.Len(t, WorkBytes(l.Works), 80*64)

	// 61 works still fit inline.
	p, err = Build(comm, tasks[:30], ring(2), nil)
	require.NoError(t, err)
	assert.True(t, p.Launches[0].Inline())

	// Works of other kernels join the launch (the kernel runs them
	// through the function table); every channel keeps the call order.
	mixed := []Task{tasks[0], {Coll: kspace.AllGather, Send: 1, Recv: 2, Bytes: 10, Type: kspace.U8}, tasks[1]}
	p, err = Build(comm, mixed, ring(2), nil)
	require.NoError(t, err)
	require.Len(t, p.Launches, 1, "one launch per group")
	l = p.Launches[0]
	assert.Equal(t, kspace.AllReduce, l.Func.Coll, "the first work's kernel")
	assert.Equal(t, []uint64{0x1000, 1, 0x2000, 0x1000, 0x2000}, sendbuffs(l.Works))
}

func sendbuffs(ws []generated.DevWork) []uint64 {
	var out []uint64
	for _, w := range ws {
		out = append(out, w.Sendbuff)
	}
	return out
}

// TestOneLaunchPerGroup: collectives and point-to-point operations of one
// group share one launch, the collectives first on every channel; only
// more than MaxWorksPerLaunch works split it, at a task boundary.
func TestOneLaunchPerGroup(t *testing.T) {
	comm := Comm{Rank: 0, NRanks: 3, NChannels: 4, P2PChannelsPerPeer: 1}
	tasks := []Task{
		{Coll: kspace.SendRecv, IsSend: true, Peer: 1, Send: 0x9000, Bytes: 100, Type: kspace.U8},
		{Coll: kspace.AllReduce, Send: 0x1000, Recv: 0x1000, Bytes: 3 * 4, Type: kspace.I32, Op: kspace.Sum},
		{Coll: kspace.SendRecv, Peer: 2, Recv: 0xa000, Bytes: 100, Type: kspace.U8},
		{Coll: kspace.ReduceScatter, Send: 0x2000, Recv: 0x3000, Bytes: 1 * 4, Type: kspace.I32, Op: kspace.Sum},
	}
	p, err := Build(comm, tasks, ring(1), nil)
	require.NoError(t, err)
	require.Len(t, p.Launches, 1)
	l := p.Launches[0]
	// Distance 1 (send to 1, receive from 2) uses channel 0, after the
	// two collectives.
	assert.Equal(t, []uint64{0x1000, 0x2000, 0x9000}, sendbuffs(l.Works))
	assert.EqualValues(t, 0xa000, l.Works[2].Recvbuff)
	assert.EqualValues(t, 512, l.NThreads)

	// Past MaxWorksPerLaunch works the launch splits between tasks.
	var many []Task
	for i := range MaxWorksPerLaunch/4 + 1 {
		many = append(many, Task{Coll: kspace.AllReduce, Send: uint64(i + 1), Recv: uint64(i + 1), Bytes: (1 << 20) * 4, Type: kspace.F32, Op: kspace.Sum})
	}
	p, err = Build(comm, many, ring(4), nil)
	require.NoError(t, err)
	require.Len(t, p.Launches, 2)
	assert.Len(t, p.Launches[0].Works, 4*(MaxWorksPerLaunch/4))
	assert.Len(t, p.Launches[1].Works, 4)
}

func TestNWarpsAndMinThreads(t *testing.T) {
	comm := Comm{Rank: 0, NRanks: 2, NChannels: 8}
	p, err := Build(comm, []Task{{Coll: kspace.AllReduce, Send: 1, Recv: 1, Bytes: 4 * 4, Type: kspace.F32}},
		fixedChooser{algo: kspace.Ring, proto: kspace.LL, nc: 1, nt: 64}, nil)
	require.NoError(t, err)
	l := p.Launches[0]
	assert.Equal(t, MinBlockThreads, l.NThreads)
	assert.EqualValues(t, 2, l.Works[0].NWarps)
}

// p2pOps describes the sends and receives of every rank.
type p2pOp struct {
	from, to int
	bytes    uint64
}

func buildP2P(t *testing.T, n, nch, perPeer int, ops []p2pOp, ch Chooser) []Plan {
	t.Helper()
	plans := make([]Plan, n)
	for r := range n {
		var tasks []Task
		for i, o := range ops {
			if o.from == r {
				tasks = append(tasks, Task{Coll: kspace.SendRecv, IsSend: true, Peer: o.to, Send: uint64(0x10000000 * (i + 1)), Bytes: o.bytes, Type: kspace.U8})
			}
			if o.to == r {
				tasks = append(tasks, Task{Coll: kspace.SendRecv, Peer: o.from, Recv: uint64(0x10000000*(i+1) + 0x8000000), Bytes: o.bytes, Type: kspace.U8})
			}
		}
		// Interleave at random, keeping the order among the messages of
		// one (peer, direction): the plan must not depend on the rest.
		queues := map[[2]int][]Task{}
		var keys [][2]int
		for _, tk := range tasks {
			k := [2]int{tk.Peer, 0}
			if tk.IsSend {
				k[1] = 1
			}
			if _, ok := queues[k]; !ok {
				keys = append(keys, k)
			}
			queues[k] = append(queues[k], tk)
		}
		rng := rand.New(rand.NewPCG(uint64(r), 7))
		tasks = tasks[:0]
		for len(keys) > 0 {
			i := rng.IntN(len(keys))
			k := keys[i]
			tasks = append(tasks, queues[k][0])
			queues[k] = queues[k][1:]
			if len(queues[k]) == 0 {
				keys = append(keys[:i], keys[i+1:]...)
			}
		}
		p, err := Build(Comm{Rank: r, NRanks: n, NChannels: nch, P2PChannelsPerPeer: perPeer}, tasks, ch, nil)
		require.NoError(t, err, "rank %d", r)
		plans[r] = p
	}
	return plans
}

// simulate runs the plans' p2p works with rendezvous semantics (a half of
// a work completes only when the matching half of the peer is current on
// the same channel; no buffering) and reports whether everything finishes.
func simulate(plans []Plan) error {
	n := len(plans)
	type state struct {
		works    []generated.DevWork
		pos      int
		sendDone bool
		recvDone bool
	}
	st := make([][generated.MaxChannels]*state, n)
	for r, p := range plans {
		for _, l := range p.Launches {
			for ch := range generated.MaxChannels {
				s, e := l.ChanWorkStart[ch], l.ChanWorkStart[ch+1]
				if s == e {
					continue
				}
				st[r][ch] = &state{works: l.Works[s:e]}
			}
		}
	}
	cur := func(r, ch int) *generated.DevWork {
		s := st[r][ch]
		if s == nil || s.pos >= len(s.works) {
			return nil
		}
		return &s.works[s.pos]
	}
	for {
		progress := false
		for r := range n {
			for ch := range generated.MaxChannels {
				w := cur(r, ch)
				if w == nil {
					continue
				}
				s := st[r][ch]
				if w.SendPeer < 0 {
					s.sendDone = true
				}
				if w.RecvPeer < 0 {
					s.recvDone = true
				}
				if !s.sendDone {
					p := int(w.SendPeer)
					pw := cur(p, ch)
					if pw != nil && int(pw.RecvPeer) == r && !st[p][ch].recvDone {
						if pw.ChanCount != w.Count {
							return fmt.Errorf("channel %d: rank %d sends %d bytes to %d, which expects %d", ch, r, w.Count, p, pw.ChanCount)
						}
						s.sendDone, st[p][ch].recvDone = true, true
						progress = true
					}
				}
				if s.sendDone && s.recvDone {
					s.pos++
					s.sendDone, s.recvDone = false, false
					progress = true
				}
			}
		}
		if !progress {
			break
		}
	}
	for r := range n {
		for ch := range generated.MaxChannels {
			if w := cur(r, ch); w != nil {
				return fmt.Errorf("deadlock: rank %d channel %d stuck at work %d (send to %d, recv from %d)", r, ch, st[r][ch].pos, w.SendPeer, w.RecvPeer)
			}
		}
	}
	return nil
}

func TestP2PPairing(t *testing.T) {
	const n = 5
	var ops []p2pOp
	for i := range n {
		for j := range n {
			ops = append(ops, p2pOp{i, j, uint64(1000*(i+1) + 37*j)})
		}
	}
	ops = append(ops, p2pOp{0, 3, 1 << 20}, p2pOp{0, 3, 5}, p2pOp{2, 1, 0})
	plans := buildP2P(t, n, 4, 2, ops, ring(2))
	for r, p := range plans {
		require.Len(t, p.Launches, 1)
		l := p.Launches[0]
		assert.Equal(t, kspace.SendRecvFunc, l.Func)
		// Works on each channel are in (distance, index, part) order.
		for ch := range generated.MaxChannels {
			ws := l.Works[l.ChanWorkStart[ch]:l.ChanWorkStart[ch+1]]
			last := 0
			for _, w := range ws {
				d := 0
				if w.SendPeer >= 0 {
					d = (int(w.SendPeer) - r + n) % n
				} else {
					d = (r - int(w.RecvPeer) + n) % n
				}
				assert.GreaterOrEqual(t, d, last, "rank %d channel %d: distances ascend", r, ch)
				last = d
				if w.SendPeer >= 0 && w.RecvPeer >= 0 {
					assert.Equal(t, (r+d)%n, int(w.SendPeer))
					assert.Equal(t, (r-d+n)%n, int(w.RecvPeer), "a work pairs send to rank+d with recv from rank-d")
				}
				assert.Contains(t, P2PChannels(Comm{Rank: r, NRanks: n, NChannels: 4, P2PChannelsPerPeer: 2}, d), ch)
			}
		}
		// The self message is one copy.
		require.Len(t, p.Copies, 1)
		assert.EqualValues(t, 1000*(r+1)+37*r, p.Copies[0].Bytes)
	}
	require.NoError(t, simulate(plans))

	// Bytes sent and received, per rank pair, add up.
	sent := map[[2]int]uint64{}
	recv := map[[2]int]uint64{}
	for r, p := range plans {
		for _, w := range p.Launches[0].Works {
			if w.SendPeer >= 0 {
				sent[[2]int{r, int(w.SendPeer)}] += w.Count
			}
			if w.RecvPeer >= 0 {
				recv[[2]int{int(w.RecvPeer), r}] += w.ChanCount
			}
		}
	}
	assert.Equal(t, sent, recv)
	want := map[[2]int]uint64{}
	for _, o := range ops {
		if o.from != o.to && o.bytes > 0 {
			want[[2]int{o.from, o.to}] += o.bytes
		}
	}
	assert.Equal(t, want, sent)
}

func TestP2PRandomNoDeadlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 200 {
		n := 2 + rng.IntN(7)
		var ops []p2pOp
		for range rng.IntN(3 * n) {
			a, b := rng.IntN(n), rng.IntN(n)
			if a == b {
				continue
			}
			ops = append(ops, p2pOp{a, b, uint64(rng.IntN(1 << 16))})
		}
		nch := 1 + rng.IntN(8)
		plans := buildP2P(t, n, nch, 1+rng.IntN(4), ops, ring(1+rng.IntN(4)))
		require.NoError(t, simulate(plans), "iteration %d: %d ranks, %d channels, ops %v", iter, n, nch, ops)
	}
}

func TestP2PManyWorksUseFIFO(t *testing.T) {
	var ops []p2pOp
	for i := range 8 {
		for j := range 8 {
			if i != j {
				for range 3 {
					ops = append(ops, p2pOp{i, j, 1 << 20})
				}
			}
		}
	}
	plans := buildP2P(t, 8, 16, 4, ops, ring(4))
	for _, p := range plans {
		assert.Greater(t, len(p.Launches[0].Works), generated.WorkInlineMax)
		assert.False(t, p.Launches[0].Inline())
	}
	require.NoError(t, simulate(plans))
}

func TestSelfMismatch(t *testing.T) {
	c := Comm{Rank: 1, NRanks: 3, NChannels: 2}
	_, err := Build(c, []Task{{Coll: kspace.SendRecv, IsSend: true, Peer: 1, Send: 1, Bytes: 8, Type: kspace.U8}}, ring(1), nil)
	assert.True(t, errors.Is(err, ErrInvalidPlan), "%v", err)
	_, err = Build(c, []Task{
		{Coll: kspace.SendRecv, IsSend: true, Peer: 1, Send: 1, Bytes: 8, Type: kspace.U8},
		{Coll: kspace.SendRecv, Peer: 1, Recv: 2, Bytes: 16, Type: kspace.U8},
	}, ring(1), nil)
	assert.ErrorIs(t, err, ErrInvalidPlan)
	_, err = Build(c, []Task{{Coll: kspace.SendRecv, IsSend: true, Peer: 3, Send: 1, Bytes: 8, Type: kspace.U8}}, ring(1), nil)
	assert.ErrorIs(t, err, ErrInvalidPlan)
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		n       uint64
		k       int
		granule uint64
	}{{1, 4, 1}, {100, 3, 1}, {100, 3, 16}, {1 << 20, 16, 128}, {17, 64, 4}, {5, 1, 1000}, {0, 4, 1}, {96, 4, 32}, {97, 4, 32}} {
		per, parts := split(tc.n, tc.k, tc.granule)
		var sum uint64
		for i := range parts {
			off, count := part(tc.n, per, i)
			assert.Equal(t, sum, off)
			assert.Zero(t, off%tc.granule)
			assert.NotZero(t, count)
			sum += count
		}
		assert.Equal(t, tc.n, sum)
		assert.LessOrEqual(t, parts, tc.k)
	}
}

// With the real tuner the planner stays within the comm's channels.
func TestWithTuner(t *testing.T) {
	tn, err := tune.New(tune.Topology{NRanks: 4, RanksPerGPU: 4, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 16}, config.Default(), nil)
	require.NoError(t, err)
	c := Comm{Rank: 2, NRanks: 4, NChannels: tn.MaxChannels(), P2PChannelsPerPeer: 2}
	for _, n := range []uint64{1, 1000, 1 << 18, 1 << 26} {
		p, err := Build(c, []Task{{Coll: kspace.AllReduce, Send: 1, Recv: 2, Bytes: n * 4, Type: kspace.F32, Op: kspace.Sum}}, tn, nil)
		require.NoError(t, err)
		l := p.Launches[0]
		assert.LessOrEqual(t, l.NBlocks()*4, 132, "4 co-located ranks stay resident")
		checkCover(t, l, n, Granule/4, l.NBlocks())
	}
}

func TestArgsSize(t *testing.T) {
	require.Equal(t, 192, argsHeaderSize, "the header the device reads before the works")
	require.Equal(t, 64, int(unsafe.Sizeof(generated.DevWork{})))
	for _, tc := range []struct{ works, want int }{
		{0, 192}, {1, 256}, {2, 320}, {generated.WorkInlineMax, KernelArgsSize}, {generated.WorkInlineMax + 1, 192},
	} {
		l := Launch{Works: make([]generated.DevWork, tc.works)}
		require.Equal(t, tc.want, l.ArgsSize(), "%d works", tc.works)
		require.Zero(t, l.ArgsSize()%16)
	}
}

// TestPutArgsReuse: a block that held a FIFO launch's arguments gets an
// inline launch's header right, so the kernel does not read a stale FIFO.
func TestPutArgsReuse(t *testing.T) {
	fifo := Launch{ChannelMask: 0xff, Works: make([]generated.DevWork, generated.WorkInlineMax+1)}
	inline := Launch{ChannelMask: 1, Works: []generated.DevWork{{Count: 2}}}
	inline.ChanWorkStart[1] = 1
	var a generated.KernelArgs
	fifo.PutArgs(&a, 0x10, 0xdead0000)
	require.Equal(t, uint64(0xdead0000), a.WorkBuf)
	inline.PutArgs(&a, 0x20, 0xdead0000)
	want := argsOf(&inline, 0x20, 0)
	n := inline.ArgsSize()
	require.Equal(t, argBytes(&want, n), argBytes(&a, n), "the passed bytes equal a fresh block's")
	require.Zero(t, a.WorkBuf)
}

// argsOf is l's kernel arguments in a fresh block.
func argsOf(l *Launch, comm, workBuf uint64) generated.KernelArgs {
	var a generated.KernelArgs
	l.PutArgs(&a, comm, workBuf)
	return a
}
