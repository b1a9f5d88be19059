package comm

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/residency"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

func TestOneLaunchFromEnv(t *testing.T) {
	env := func(v string, set bool) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if k != EnvOneLaunch {
				return "", false
			}
			return v, set
		}
	}
	for _, c := range []struct {
		v    string
		set  bool
		want bool
	}{{"", false, true}, {"", true, true}, {"0", true, false}, {"1", true, true}} {
		got, err := oneLaunchFromEnv(env(c.v, c.set))
		require.NoError(t, err, c.v)
		assert.Equal(t, c.want, got, "%q", c.v)
	}
	_, err := oneLaunchFromEnv(env("yes", true))
	assert.EqualError(t, err, `ncclgo: NCCLGO_ONE_LAUNCH="yes": want 0 (a launch per rank) or 1 (one launch for the ranks of this process on a GPU, the default)`)
}

func TestMutual(t *testing.T) {
	task := func(c kspace.Coll) enqueue.Task { return enqueue.Task{Coll: c} }
	assert.True(t, mutual([]enqueue.Task{task(kspace.AllReduce)}))
	assert.True(t, mutual([]enqueue.Task{task(kspace.AllGather), task(kspace.ReduceScatter)}))
	assert.False(t, mutual(nil))
	for _, c := range []kspace.Coll{kspace.Broadcast, kspace.Reduce, kspace.SendRecv, kspace.AllGatherV} {
		assert.False(t, mutual([]enqueue.Task{task(kspace.AllReduce), task(c)}), "%s", c)
	}
}

// ringChooser runs every collective as RING SIMPLE on nc channels.
type ringChooser int

func (nc ringChooser) Choose(coll kspace.Coll, op kspace.RedOp, ty kspace.Type, n int64) (tune.Choice, error) {
	f := kspace.Func{Coll: coll, RedOp: op, Type: ty, Algo: kspace.Ring, Proto: kspace.Simple}
	return tune.Choice{Func: f, Algo: kspace.Ring, Proto: kspace.Simple, NChannels: int(nc), NThreads: 512}, nil
}

// cand is rank's candidate for an AllReduce over nc channels, of the
// communicator lease on the GPU of context ctx.
func cand(t *testing.T, lease *residency.Lease, ctx uintptr, rank, nRanks, nc int) mergeCand {
	t.Helper()
	p, err := enqueue.Build(enqueue.Comm{Rank: rank, NRanks: nRanks, NChannels: 64, P2PChannelsPerPeer: 2},
		[]enqueue.Task{{Coll: kspace.AllReduce, Send: 0x1000, Recv: 0x2000, Bytes: 1 << 20, Type: kspace.F32, Op: kspace.Sum}},
		ringChooser(nc), func(kspace.Func) (int, int, error) { return 1, 0, nil })
	require.NoError(t, err)
	return mergeCand{key: mergeKey{lease: lease, ctx: ctx}, ok: true, rank: rank,
		part: enqueue.Part{Comm: uint64(0x100 * (rank + 1)), Launch: &p.Launches[0]}}
}

func TestPlanMerges(t *testing.T) {
	a, b := new(residency.Lease), new(residency.Lease) // two communicators
	const gpu0, gpu1 = 0x10, 0x20

	t.Run("one communicator on one GPU", func(t *testing.T) {
		// Entries in any order: the set is in rank order.
		cs := []mergeCand{cand(t, a, gpu0, 2, 4, 2), cand(t, a, gpu0, 0, 4, 2), cand(t, a, gpu0, 3, 4, 2), cand(t, a, gpu0, 1, 4, 2)}
		assert.Equal(t, [][]int{{1, 3, 0, 2}}, planMerges(cs))
	})
	t.Run("per communicator and GPU", func(t *testing.T) {
		cs := []mergeCand{
			cand(t, a, gpu0, 0, 4, 2), cand(t, a, gpu1, 1, 4, 2), cand(t, b, gpu0, 0, 2, 2),
			cand(t, a, gpu0, 2, 4, 2), cand(t, a, gpu1, 3, 4, 2), cand(t, b, gpu0, 1, 2, 2),
		}
		assert.Equal(t, [][]int{{0, 3}, {1, 4}, {2, 5}}, planMerges(cs))
	})
	t.Run("alone", func(t *testing.T) {
		// One rank per GPU, or a launch that may not merge: no set.
		cs := []mergeCand{cand(t, a, gpu0, 0, 2, 2), cand(t, a, gpu1, 1, 2, 2)}
		assert.Empty(t, planMerges(cs))
		cs = []mergeCand{cand(t, a, gpu0, 0, 2, 2), cand(t, a, gpu0, 1, 2, 2)}
		cs[1].ok = false
		assert.Empty(t, planMerges(cs))
		assert.Empty(t, planMerges(nil))
	})
	t.Run("split where the arguments run out", func(t *testing.T) {
		// 8 ranks × 8 channels: 64 works, more than one launch carries
		// (58): the first 7 ranks (56 blocks) share one launch, the last
		// runs alone.
		var cs []mergeCand
		for r := range 8 {
			cs = append(cs, cand(t, a, gpu0, r, 8, 8))
		}
		assert.Equal(t, [][]int{{0, 1, 2, 3, 4, 5, 6}}, planMerges(cs))
		// 8 ranks × 16 channels (48 works for 3): launches of 3, 3 and 2.
		cs = cs[:0]
		for r := range 8 {
			cs = append(cs, cand(t, a, gpu0, r, 8, 16))
		}
		assert.Equal(t, [][]int{{0, 1, 2}, {3, 4, 5}, {6, 7}}, planMerges(cs))
	})
	t.Run("different kernels", func(t *testing.T) {
		cs := []mergeCand{cand(t, a, gpu0, 0, 3, 2), cand(t, a, gpu0, 1, 3, 2), cand(t, a, gpu0, 2, 3, 2)}
		other := *cs[1].part.Launch
		other.Kernel = 5
		cs[1].part.Launch = &other
		assert.Equal(t, [][]int{{0, 2}}, planMerges(cs))
	})
	t.Run("every set is one launch", func(t *testing.T) {
		var cs []mergeCand
		for r := range 8 {
			cs = append(cs, cand(t, a, gpu0, r, 8, 1+r%5))
		}
		for _, set := range planMerges(cs) {
			var parts []enqueue.Part
			for _, k := range set {
				parts = append(parts, cs[k].part)
			}
			require.NoError(t, enqueue.CheckMulti(parts))
			a := new(generated.KernelArgs)
			_, n := enqueue.PutMultiArgs(a, parts)
			assert.Equal(t, int(a.NParts), len(set))
			assert.Positive(t, n)
		}
	})
}

func TestCandidate(t *testing.T) {
	// A host-only engine never merges: it launches nothing.
	e := NewHostOnly(nil, 0, 2, 0, Settings{OneLaunch: true}, nil)
	p := enqueue.Plan{Launches: make([]enqueue.Launch, 1)}
	l := Launch{Engine: e, Plan: &p, Tasks: []enqueue.Task{{Coll: kspace.AllReduce}}}
	assert.False(t, l.candidate().ok)
}

// fakeSync is a streamSync that logs its calls, with each stream's
// handle, and answers idle from busy.
type fakeSync struct {
	calls    []string
	recorded []*cuda.Event // the events recorded and waited for, in order
	busy     map[uintptr]bool
	fail     string // a call that fails ("idle", "record" or "wait")
}

func (f *fakeSync) idle(s *cuda.Stream) (bool, error) {
	f.calls = append(f.calls, fmt.Sprintf("idle %#x", s.Handle()))
	if f.fail == "idle" {
		return false, errors.New("boom")
	}
	return !f.busy[s.Handle()], nil
}

func (f *fakeSync) record(ev *cuda.Event, s *cuda.Stream) error {
	f.calls = append(f.calls, fmt.Sprintf("record on %#x", s.Handle()))
	f.recorded = append(f.recorded, ev)
	if f.fail == "record" {
		return errors.New("boom")
	}
	return nil
}

func (f *fakeSync) wait(s *cuda.Stream, ev *cuda.Event) error {
	f.calls = append(f.calls, fmt.Sprintf("wait on %#x", s.Handle()))
	f.recorded = append(f.recorded, ev)
	if f.fail == "wait" {
		return errors.New("boom")
	}
	return nil
}

// count returns how many calls begin with prefix.
func (f *fakeSync) count(prefix string) int {
	n := 0
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// syncs returns n ranks' rankSyncs, rank r on the stream of handle h(r),
// each with its own event, which was its previous launch's.
func syncs(n int, h func(r int) uintptr) []rankSync {
	rs := make([]rankSync, n)
	for r := range rs {
		ev := new(cuda.Event)
		rs[r] = rankSync{rank: r, stream: cuda.WrapStream(nil, h(r)), h: h(r), ev: ev, last: ev}
	}
	return rs
}

// setOf returns the completion event of the set of ranks rs (setEvent),
// as setEventFor makes it, without a device.
func setOf(rs []rankSync) *setEvent {
	s := &setEvent{ev: new(cuda.Event), joined: make([]bool, len(rs))}
	for _, r := range rs {
		s.members = append(s.members, &Engine{rank: r.rank})
		s.handles = append(s.handles, r.h)
	}
	return s
}

func TestJoinStreams(t *testing.T) {
	own := func(r int) uintptr { return uintptr(0x1000 + r) }
	t.Run("streams of their own, idle", func(t *testing.T) {
		// The steady state of a loop of multi-rank launches: the other
		// streams have done their work (their wait for the previous
		// launch), so the launch waits for none of them.
		f := &fakeSync{}
		rs := syncs(8, own)
		set := setOf(rs)
		require.NoError(t, joinBefore(f, rs, set))
		assert.Equal(t, 7, f.count("idle"))
		assert.Zero(t, f.count("record")+f.count("wait"), "%q", f.calls)
		f.calls, f.recorded = nil, nil
		evs := make([]*cuda.Event, 8)
		require.Empty(t, joinAfter(f, rs, set, evs))
		assert.Equal(t, 1, f.count("record on 0x1000"), "the set's completion on s0, once")
		assert.Equal(t, 1, f.count("record"), "%q", f.calls)
		assert.Equal(t, 7, f.count("wait"), "every other stream waits for the launch")
		for i, ev := range f.recorded {
			assert.Same(t, set.ev, ev, "call %d: %s", i, f.calls[i])
		}
		for r, ev := range evs {
			assert.Same(t, set.ev, ev, "rank %d", r)
			assert.True(t, set.joined[r], "rank %d's stream waited", r)
		}
		// The next launch of the set: no rank's previous launch (the
		// set's, on s0) is waited for.
		for r := range rs {
			rs[r].last = set.ev
		}
		f.calls = nil
		require.NoError(t, joinBefore(f, rs, set))
		assert.Zero(t, f.count("wait"), "%q", f.calls)
	})
	t.Run("streams of their own, busy", func(t *testing.T) {
		f := &fakeSync{busy: map[uintptr]bool{0x1002: true, 0x1005: true}}
		rs := syncs(8, own)
		require.NoError(t, joinBefore(f, rs, setOf(rs)))
		assert.Equal(t, []string{"idle 0x1001", "idle 0x1002", "record on 0x1002", "wait on 0x1000",
			"idle 0x1003", "idle 0x1004", "idle 0x1005", "record on 0x1005", "wait on 0x1000",
			"idle 0x1006", "idle 0x1007"}, f.calls)
	})
	for _, h := range []uintptr{0, cuda.StreamLegacy, cuda.StreamPerThread, 0x1000} {
		t.Run(fmt.Sprintf("one stream %#x", h), func(t *testing.T) {
			// Ranks handed one stream (a default one, say): nothing to join.
			f := &fakeSync{busy: map[uintptr]bool{h: true}}
			rs := syncs(4, func(int) uintptr { return h })
			set := setOf(rs)
			require.NoError(t, joinBefore(f, rs, set))
			assert.Empty(t, f.calls)
			require.Empty(t, joinAfter(f, rs, set, make([]*cuda.Event, 4)))
			assert.Equal(t, []string{fmt.Sprintf("record on %#x", h)}, f.calls, "one record, no wait")
			assert.Equal(t, []bool{true, true, true, true}, set.joined, "s0 is every rank's stream")
		})
	}
	t.Run("previous launch on another stream", func(t *testing.T) {
		f := &fakeSync{}
		rs := syncs(2, own)
		rs[1].last = new(cuda.Event) // rank 1's lane, say
		require.NoError(t, joinBefore(f, rs, setOf(rs)))
		assert.Equal(t, []string{"wait on 0x1000", "idle 0x1001"}, f.calls)
	})
	t.Run("errors name the rank", func(t *testing.T) {
		rs := syncs(2, own)
		set := setOf(rs)
		f := &fakeSync{busy: map[uintptr]bool{0x1001: true}, fail: "idle"}
		assert.ErrorContains(t, joinBefore(f, rs, set), "rank 1: querying stream 0x1001")
		f = &fakeSync{busy: map[uintptr]bool{0x1001: true}, fail: "record"}
		assert.ErrorContains(t, joinBefore(f, rs, set), "rank 1: recording stream 0x1001")
		// A failed record of the set's event: no rank's launch is
		// tracked by it, and the error names the set's ranks.
		f.calls = nil
		evs := make([]*cuda.Event, 2)
		errs := joinAfter(f, rs, set, evs)
		require.Len(t, errs, 1)
		assert.ErrorContains(t, errs[0], "ranks 0,1: recording the completion of the multi-rank launch")
		assert.Equal(t, []*cuda.Event{nil, nil}, evs, "no completion where the record failed")
		assert.Equal(t, []string{"record on 0x1000", "wait on 0x1001"}, f.calls, "the wait runs: for the set's previous launch")
		f = &fakeSync{fail: "wait"}
		errs = joinAfter(f, rs, set, evs)
		require.Len(t, errs, 1)
		assert.ErrorContains(t, errs[0], "rank 1: joining stream 0x1001 after the multi-rank launch")
		assert.Equal(t, []*cuda.Event{set.ev, set.ev}, evs)
		assert.Equal(t, []bool{true, false}, set.joined, "rank 1's stream is not ordered after the launch")
	})
}

func TestPerThread(t *testing.T) {
	l := func(h uintptr) Launch { return Launch{Stream: cuda.WrapStream(nil, h)} }
	assert.False(t, perThread(nil))
	assert.False(t, perThread([]Launch{l(0), l(cuda.StreamLegacy), l(0x1000)}))
	assert.True(t, perThread([]Launch{l(0x1000), l(cuda.StreamPerThread)}))
}
