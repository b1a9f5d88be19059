package enqueue

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"hash"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/kernels"
	"github.com/ncclgo/ncclgo/runtime/tune"
	"github.com/stretchr/testify/require"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/plans.golden from the current planner")

const goldenFile = "testdata/plans.golden"

// call is one operation of a group in the API's units: count elements of
// ty (of the whole buffer for AllReduce, Reduce and Broadcast, of one
// rank's chunk for AllGather and ReduceScatter, of the message for Send
// and Recv). It is the golden test's input, independent of how Task
// spells sizes.
type call struct {
	coll       kspace.Coll
	ty         kspace.Type
	count      uint64
	send, recv uint64
	op         kspace.RedOp
	opArg      uint64
	opArgPtr   bool
	root       int
	peer       int
	isSend     bool
}

// task is c as the planner takes it: the only place the golden test
// knows Task's size fields.
func (c call) task() Task {
	return Task{Coll: c.coll, Send: c.send, Recv: c.recv, Bytes: c.count * uint64(c.ty.Size()), Type: c.ty,
		Op: c.op, OpArg: c.opArg, OpArgPtr: c.opArgPtr, Root: c.root, Peer: c.peer, IsSend: c.isSend}
}

// recordingChooser passes every question to its chooser and writes the
// question into the encoding, so the golden also pins what the planner
// asks the tuner (the sizes it derives).
type recordingChooser struct {
	Chooser
	enc *planEncoder
}

func (r recordingChooser) Choose(coll kspace.Coll, op kspace.RedOp, ty kspace.Type, n int64) (tune.Choice, error) {
	r.enc.questions++
	r.enc.ints(0xc4005e, int64(coll), int64(op), int64(ty), n)
	return r.Chooser.Choose(coll, op, ty, n)
}

// planEncoder writes plans canonically (fixed-width little-endian
// integers, the works as the device reads them) into a hash.
type planEncoder struct {
	h hash.Hash
	// What was encoded, for the test's log.
	plans, errs, works, copies, questions int
}

func (e *planEncoder) ints(vs ...int64) {
	var b [8]byte
	for _, v := range vs {
		binary.LittleEndian.PutUint64(b[:], uint64(v))
		e.h.Write(b[:])
	}
}

func (e *planEncoder) u64s(vs ...uint64) {
	var b [8]byte
	for _, v := range vs {
		binary.LittleEndian.PutUint64(b[:], v)
		e.h.Write(b[:])
	}
}

func (e *planEncoder) fn(f kspace.Func) {
	e.ints(int64(f.Coll), int64(f.RedOp), int64(f.Type), int64(f.Algo), int64(f.Proto), int64(f.Kind))
}

func (e *planEncoder) choice(c tune.Choice) {
	e.fn(c.Func)
	e.ints(int64(c.Algo), int64(c.Proto), int64(c.NChannels), int64(c.NThreads), int64(c.PredictedTime))
}

// plan encodes one Build result. Errors count only as errors (and whether
// they are ErrInvalidPlan): their texts may change.
func (e *planEncoder) plan(p Plan, err error) {
	e.plans++
	if err != nil {
		e.errs++
		e.ints(-1, boolInt(errors.Is(err, ErrInvalidPlan)))
		return
	}
	e.copies += len(p.Copies)
	e.ints(int64(len(p.Copies)))
	for _, c := range p.Copies {
		e.u64s(c.Dst, c.Src, c.Bytes)
	}
	e.ints(int64(len(p.Launches)))
	for _, l := range p.Launches {
		e.fn(l.Func)
		e.ints(int64(l.Kernel), int64(l.NThreads), int64(l.NBlocks()), int64(l.ArgsSize()), boolInt(l.Inline()))
		e.u64s(l.ChannelMask)
		for _, s := range l.ChanWorkStart {
			e.ints(int64(s))
		}
		e.works += len(l.Works)
		e.ints(int64(len(l.Works)))
		e.h.Write(WorkBytes(l.Works))
	}
	e.ints(int64(len(p.Decisions)))
	for _, d := range p.Decisions {
		e.ints(int64(d.Coll), d.Bytes, int64(d.NChannels))
		e.choice(d.Choice)
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// goldenCounts are element counts the groups draw from: 0, 1, odd, round,
// granule edges, 2^31 and around, 8 GiB of bytes, and sizes past the
// limits (negative or overflowing byte counts must stay errors).
func goldenCounts(ty kspace.Type) []uint64 {
	const n31 = uint64(1) << 31
	es := uint64(ty.Size())
	return []uint64{0, 1, 2, 3, 5, 7, 31, 127, 128, 129, 255, 256, 257, 1000, 1023, 1024, 4097, 12345, 65535, 100000,
		1<<20 + 5, 3 << 20, n31, n31 + 3, 2*n31 + 1, 4*n31 + 5, (1 << 33) / es, (1<<33)/es + 1,
		uint64(math.MaxInt64) / es, uint64(math.MaxInt64)/es/2 + 1, (1<<63)/es + 1}
}

// randCount is a count of ty: from goldenCounts, or uniform below 2^24
// (or 2^12, where most counts land).
func randCount(rng *rand.Rand, ty kspace.Type) uint64 {
	switch rng.IntN(4) {
	case 0:
		return uint64(rng.IntN(1 << 24))
	case 1:
		return uint64(rng.IntN(1 << 12))
	}
	cs := goldenCounts(ty)
	c := cs[rng.IntN(len(cs))]
	// Sizes past the limits are rare, so most groups plan.
	if c > 1<<40 && rng.IntN(4) != 0 {
		return uint64(rng.IntN(1 << 16))
	}
	return c
}

// randGroup is a random group on nRanks ranks: per rank, its calls in
// order (collectives are every rank's; a send is its sender's and a
// receive its receiver's, so the ranks' point-to-point calls match).
func randGroup(rng *rand.Rand, nRanks int) [][]call {
	ranks := make([][]call, nRanks)
	colls := []kspace.Coll{kspace.Broadcast, kspace.Reduce, kspace.AllGather, kspace.ReduceScatter, kspace.AllReduce}
	addr := func() uint64 { return uint64(1+rng.IntN(1<<20)) << 12 }
	n := rng.IntN(9)
	for range n {
		ty := kspace.Type(rng.IntN(int(kspace.NumTypes)))
		count := randCount(rng, ty)
		if rng.IntN(10) < 7 {
			c := call{coll: colls[rng.IntN(len(colls))], ty: ty, count: count, send: addr(), recv: addr(), root: rng.IntN(nRanks)}
			if rng.IntN(4) == 0 {
				c.recv = c.send
			}
			if rng.IntN(2) == 0 {
				c.op = kspace.RedOp(rng.IntN(int(kspace.NumRedOps)))
				c.opArg = rng.Uint64()
				c.opArgPtr = c.op == kspace.PreMulSum && rng.IntN(2) == 0
			}
			for r := range ranks {
				ranks[r] = append(ranks[r], c)
			}
			continue
		}
		from, to := rng.IntN(nRanks), rng.IntN(nRanks)
		s := call{coll: kspace.SendRecv, ty: ty, count: count, send: addr(), peer: to, isSend: true, root: -1}
		r := call{coll: kspace.SendRecv, ty: ty, count: count, recv: addr(), peer: from, root: -1}
		if from == to && rng.IntN(3) == 0 {
			r.recv = s.send
		}
		if rng.IntN(20) == 0 {
			// A receive of another size: an error for a message to
			// oneself, a plan otherwise.
			r.count = randCount(rng, ty)
		}
		ranks[from] = append(ranks[from], s)
		ranks[to] = append(ranks[to], r)
	}
	return ranks
}

// goldenScenario is one communicator shape and chooser; its groups are
// drawn from a generator seeded by its name.
type goldenScenario struct {
	name    string
	comm    Comm
	chooser func(t *testing.T) Chooser
	groups  int
	// ranks lists which ranks' plans to build (all when nil).
	ranks []int
}

func goldenScenarios() []goldenScenario {
	var out []goldenScenario
	choosers := []struct {
		name string
		c    fixedChooser
	}{
		{"ring1", ring(1)}, {"ring3", ring(3)}, {"ring64", ring(64)},
		{"ll2x64", fixedChooser{algo: kspace.Ring, proto: kspace.LL, nc: 2, nt: 64}},
		{"ll128x16x640", fixedChooser{algo: kspace.Ring, proto: kspace.LL128, nc: 16, nt: 640}},
		{"tree5x256", fixedChooser{algo: kspace.Tree, proto: kspace.Simple, nc: 5, nt: 256}},
	}
	for _, n := range []int{1, 2, 3, 4, 8} {
		for _, nch := range []int{1, 4, 32, 64} {
			for _, pp := range []int{1, 2} {
				for _, ch := range choosers {
					out = append(out, goldenScenario{
						name:    fmt.Sprintf("fixed/%dr/%dch/%dpp/%s", n, nch, pp, ch.name),
						comm:    Comm{NRanks: n, NChannels: nch, P2PChannelsPerPeer: pp},
						chooser: func(*testing.T) Chooser { return ch.c },
						groups:  24,
					})
				}
			}
		}
	}
	topos := []tune.Topology{
		{NRanks: 2, RanksPerGPU: 1, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 32},
		{NRanks: 3, RanksPerGPU: 2, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 32},
		{NRanks: 4, RanksPerGPU: 4, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 16},
		{NRanks: 8, RanksPerGPU: 1, SMCount: 132, BlocksPerSM: 2, IntraBW: 20, NChannels: 32},
		{NRanks: 8, RanksPerGPU: 8, SMCount: 132, BlocksPerSM: 1, IntraBW: 20},
		{NRanks: 16, NNodes: 2, RanksPerGPU: 1, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, InterBW: 12, NChannels: 32},
	}
	envs := []map[string]string{
		{}, {"NCCL_PROTO": "LL"}, {"NCCL_PROTO": "LL128"}, {"NCCL_PROTO": "SIMPLE"},
		{"NCCL_ALGO": "ring"}, {"NCCL_ALGO": "allreduce:tree", "NCCL_PROTO": "SIMPLE"}, {"NCCL_MIN_NCHANNELS": "4", "NCCL_MAX_NCHANNELS": "8"},
	}
	for _, tp := range topos {
		for ei, env := range envs {
			var ranks []int
			if tp.NRanks > 4 {
				ranks = []int{0, 1, tp.NRanks - 1}
			}
			out = append(out, goldenScenario{
				name: fmt.Sprintf("tuner/%dr/%dn/%dpg/%dbps/%dch/env%d", tp.NRanks, max(tp.NNodes, 1), tp.RanksPerGPU, tp.BlocksPerSM, tp.NChannels, ei),
				chooser: func(t *testing.T) Chooser {
					cfg, err := config.FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
					require.NoError(t, err)
					tn, err := tune.New(tp, cfg, kernels.Available)
					require.NoError(t, err)
					return tn
				},
				comm:   Comm{NRanks: tp.NRanks, P2PChannelsPerPeer: 2}, // NChannels: the tuner's
				groups: 48,
				ranks:  ranks,
			})
		}
	}
	return out
}

// largeGolden are the cases of large_test.go: 2^31-element and 8 GiB
// collectives and an 8 GiB send/receive, per rank.
func largeGolden(e *planEncoder, t *testing.T) {
	const n31 = uint64(1) << 31
	cases := []struct {
		coll  kspace.Coll
		ty    kspace.Type
		count uint64
	}{
		{kspace.AllReduce, kspace.F32, n31}, {kspace.AllReduce, kspace.F32, n31 + 3}, {kspace.AllReduce, kspace.F64, n31},
		{kspace.Reduce, kspace.F32, n31}, {kspace.ReduceScatter, kspace.F32, n31}, {kspace.AllGather, kspace.F32, n31},
		{kspace.AllGather, kspace.F16, n31*2 + 1}, {kspace.Broadcast, kspace.F32, n31}, {kspace.Broadcast, kspace.U8, n31*4 + 5},
	}
	for _, nRanks := range []int{2, 8} {
		comm := Comm{Rank: nRanks - 1, NRanks: nRanks, NChannels: 32, P2PChannelsPerPeer: 2}
		for _, nc := range []int{1, 7, 32} {
			for _, tc := range cases {
				c := call{coll: tc.coll, send: 0x7f0000000000, recv: 0x7e0000000000, count: tc.count, ty: tc.ty, op: kspace.Sum, root: nRanks - 1}
				e.plan(Build(comm, []Task{c.task()}, recordingChooser{ring(nc), e}, nil))
			}
		}
	}
	for _, perPeer := range []int{1, 2, 4} {
		for r := range 2 {
			c := Comm{Rank: r, NRanks: 2, NChannels: 8, P2PChannelsPerPeer: perPeer}
			tasks := []Task{
				call{coll: kspace.SendRecv, ty: kspace.F32, send: 0x7f0000000000 + uint64(r), count: 1 << 31, peer: 1 - r, isSend: true}.task(),
				call{coll: kspace.SendRecv, ty: kspace.U8, recv: 0x7e0000000000 + uint64(r), count: 1 << 33, peer: 1 - r}.task(),
			}
			e.plan(Build(c, tasks, recordingChooser{ring(8), e}, nil))
		}
	}
	tn, err := tune.New(tune.Topology{NRanks: 8, RanksPerGPU: 1, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 32}, config.Default(), nil)
	require.NoError(t, err)
	c := Comm{Rank: 3, NRanks: 8, NChannels: tn.MaxChannels(), P2PChannelsPerPeer: 2}
	for _, coll := range []kspace.Coll{kspace.AllReduce, kspace.ReduceScatter, kspace.AllGather, kspace.Broadcast, kspace.Reduce} {
		k := call{coll: coll, send: 1 << 40, recv: 1 << 41, count: n31, ty: kspace.F32, op: kspace.Sum}
		e.plan(Build(c, []Task{k.task()}, recordingChooser{tn, e}, nil))
	}
}

// TestPlanGolden pins the plans (copies, launches with their works as the
// device reads them, decisions) and the tuner questions of thousands of
// random groups — every collective, data type and reduction op, counts
// from 0 to past the limits (2^31 elements, 8 GiB, overflowing byte
// counts), sends and receives between every pair of ranks including
// oneself — on 1 to 16 ranks, fixed choosers over 1 to 64 channels and the
// real tuner under forced protocols, algorithms and channel bounds, plus
// the cases of large_test.go. testdata/plans.golden holds a SHA-256 per
// scenario and one over all of them; a refactor of the planner must leave
// it unchanged. Run with -update to rewrite it after an intended change of
// the plans, the tuner or the generated tables.
func TestPlanGolden(t *testing.T) {
	var lines []string
	all := sha256.New()
	var total planEncoder
	count := func(e *planEncoder) {
		total.plans += e.plans
		total.errs += e.errs
		total.works += e.works
		total.copies += e.copies
		total.questions += e.questions
	}
	for si, sc := range goldenScenarios() {
		e := &planEncoder{h: sha256.New()}
		rng := rand.New(rand.NewPCG(uint64(si), 0x601de2))
		ch := sc.chooser(t)
		comm := sc.comm
		if tn, ok := ch.(*tune.Tuner); ok {
			comm.NChannels = tn.MaxChannels()
		}
		for range sc.groups {
			group := randGroup(rng, comm.NRanks)
			ranks := sc.ranks
			if ranks == nil {
				ranks = make([]int, comm.NRanks)
				for r := range ranks {
					ranks[r] = r
				}
			}
			for _, r := range ranks {
				tasks := make([]Task, len(group[r]))
				for i, c := range group[r] {
					tasks[i] = c.task()
				}
				c := comm
				c.Rank = r
				e.ints(int64(r))
				e.plan(Build(c, tasks, recordingChooser{ch, e}, nil))
			}
		}
		count(e)
		sum := hex.EncodeToString(e.h.Sum(nil))
		lines = append(lines, sc.name+" "+sum)
		all.Write([]byte(sum))
	}
	e := &planEncoder{h: sha256.New()}
	largeGolden(e, t)
	count(e)
	t.Logf("%d plans (%d errors), %d works, %d copies, %d tuner questions", total.plans, total.errs, total.works, total.copies, total.questions)
	sum := hex.EncodeToString(e.h.Sum(nil))
	lines = append(lines, "large "+sum)
	all.Write([]byte(sum))
	lines = append(lines, "all "+hex.EncodeToString(all.Sum(nil)))

	if *updateGolden {
		var b bytes.Buffer
		b.WriteString("# SHA-256 of the canonical encoding of the plans of each scenario of TestPlanGolden\n")
		b.WriteString("# (go test ./runtime/enqueue -run TestPlanGolden -update rewrites it).\n")
		for _, l := range lines {
			b.WriteString(l + "\n")
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(goldenFile), 0o755))
		require.NoError(t, os.WriteFile(goldenFile, b.Bytes(), 0o644))
		return
	}
	f, err := os.Open(goldenFile)
	require.NoError(t, err, "run with -update to create it")
	defer f.Close()
	want := map[string]string{}
	var order []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		name, sum, ok := strings.Cut(l, " ")
		require.True(t, ok, "malformed golden line %q", l)
		want[name] = sum
		order = append(order, name)
	}
	require.NoError(t, sc.Err())
	got := map[string]string{}
	for _, l := range lines {
		name, sum, _ := strings.Cut(l, " ")
		got[name] = sum
	}
	require.Len(t, got, len(want), "scenarios: the golden has %d, the test %d", len(want), len(got))
	for _, name := range order {
		if got[name] != want[name] {
			t.Errorf("scenario %s: plans changed (sha256 %s, golden %s)", name, got[name], want[name])
		}
	}
}
