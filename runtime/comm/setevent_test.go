package comm

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/fakecuda"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
)

// fakeSetup is what the tests of set events need of the fake driver: the
// driver's counts, its device, and a kernel to launch.
type fakeSetup struct {
	d   *fakecuda.Driver
	dev cuda.Device
	fn  *cuda.Function
}

func newFakeSetup(t *testing.T, lib string) fakeSetup {
	t.Helper()
	d, ctx, fn := fakeKernel(t, lib)
	return fakeSetup{d: d, dev: ctx.Device(), fn: fn}
}

// engines returns n engines of one communicator of n ranks on the fake
// device, as countEngines, but each with its context and launcher of its
// own, as Init makes them: Destroy releases them.
func (f fakeSetup) engines(t *testing.T, n int) []*Engine {
	t.Helper()
	ctx0, err := f.dev.PrimaryContext()
	require.NoError(t, err)
	es := countEngines(t, ctx0, f.fn, n, n)
	require.NoError(t, ctx0.Release())
	for r, e := range es {
		e.cctx, err = f.dev.PrimaryContext()
		require.NoError(t, err)
		e.launcher = enqueue.NewLauncher(e.cctx, 0xc0de00+uint64(r), func(kspace.Func) (*cuda.Function, error) { return f.fn, nil })
	}
	return es
}

// stream returns a new stream of the fake device's primary context.
func (f fakeSetup) stream(t *testing.T) *cuda.Stream {
	t.Helper()
	ctx, err := f.dev.PrimaryContext()
	require.NoError(t, err)
	s, err := ctx.NewStream(true)
	require.NoError(t, err)
	return s
}

// liveEvents is how many events were made and not destroyed since the
// driver's counts were reset.
func (f fakeSetup) liveEvents() int {
	c := f.d.Counts()
	return c["cuEventCreate"] - c["cuEventDestroy_v2"]
}

// smallAllReduce is rank r's 8-byte out-of-place AllReduce.
func smallAllReduce(r int) []enqueue.Task {
	return []enqueue.Task{{Coll: kspace.AllReduce, Send: 0x1000_0000 + uint64(r)<<24, Recv: 0x2000_0000 + uint64(r)<<24,
		Bytes: 8, Type: kspace.F32, Op: kspace.Sum}}
}

// group runs one group of a small AllReduce of each engine of es, es[i]
// on ss[i].
func group(es []*Engine, ss []*cuda.Stream) error {
	ls := make([]Launch, len(es))
	for i, e := range es {
		tasks := smallAllReduce(e.rank)
		p, err := e.Plan(tasks)
		if err != nil {
			return err
		}
		ls[i] = Launch{Engine: e, Plan: &p, Tasks: tasks, Stream: ss[i]}
	}
	return AdmitAndRun(ls)
}

// alone runs a small AllReduce of e on s by itself (Engine.run), and
// returns the completion event it recorded.
func alone(e *Engine, s *cuda.Stream) (*cuda.Event, error) {
	p, err := e.Plan(smallAllReduce(e.rank))
	if err != nil {
		return nil, err
	}
	return e.run(&p, s)
}

// A rank that launches alone after a multi-rank launch records its own
// event, not the set's (which only launches of the exact set record):
// its latest launch, its Wait and a later launch on another stream go by
// its own; the set's other rank keeps the set's.
func TestMultiSetEventAloneAfterSet(t *testing.T) {
	inFakeDriver(t, "TestMultiSetEventAloneAfterSet", func(t *testing.T, lib string) {
		f := newFakeSetup(t, lib)
		f.d.Reset()
		es := f.engines(t, 2)
		s0, s1, s2 := f.stream(t), f.stream(t), f.stream(t)

		require.NoError(t, group(es, []*cuda.Stream{s0, s1}))
		require.Equal(t, uint64(1), es[0].MultiLaunches())
		require.Len(t, es[0].sets, 1)
		set := es[0].sets[0]
		assert.Equal(t, []*setEvent{set}, es[1].sets, "one event, both ranks' reference")
		assert.EqualValues(t, 2, set.refs.Load())
		for r, e := range es {
			assert.Same(t, set.ev, e.res.last, "rank %d's latest launch", r)
		}
		assert.Equal(t, []bool{true, true}, set.joined)

		// Rank 1 alone on its stream: its own event, no wait (its stream
		// waited for the set's launch).
		f.d.Reset()
		ev, err := alone(es[1], s1)
		require.NoError(t, err)
		c := f.d.Counts()
		assert.Equal(t, 4, c.Total(), "ctx, capture, launch, record: %v", c)
		assert.Zero(t, c["cuStreamWaitEvent"], "%v", c)
		assert.Equal(t, 1, c["cuEventRecord"], "%v", c)
		assert.Same(t, es[1].events[s1.Handle()], ev, "recorded its own event")
		assert.NotSame(t, set.ev, ev, "not the set's")
		assert.Same(t, ev, es[1].res.last)
		assert.Same(t, set.ev, es[0].res.last, "rank 0's latest is still the set's launch")

		// Its Wait queries what it holds: its own event and the set's.
		f.d.Reset()
		require.NoError(t, es[1].Wait(context.Background(), func() error { return nil }))
		assert.Equal(t, 2, f.d.Counts()["cuEventQuery"])

		// Rank 0 alone on s0, where the set's event was recorded: no wait.
		f.d.Reset()
		_, err = alone(es[0], s0)
		require.NoError(t, err)
		assert.Zero(t, f.d.Counts()["cuStreamWaitEvent"])

		// Rank 1 alone on another stream waits for its latest launch.
		f.d.Reset()
		_, err = alone(es[1], s2)
		require.NoError(t, err)
		assert.Equal(t, 1, f.d.Counts()["cuStreamWaitEvent"])

		// The set again: its event, found (none made), recorded once;
		// rank 1's previous launch (on s2) is waited for.
		f.d.Reset()
		require.NoError(t, group(es, []*cuda.Stream{s0, s1}))
		c = f.d.Counts()
		assert.Zero(t, c["cuEventCreate"], "%v", c)
		assert.Equal(t, 1, c["cuEventRecord"], "%v", c)
		assert.Equal(t, 2, c["cuStreamWaitEvent"], "rank 1's previous launch, and s1 after the launch: %v", c)
		assert.Equal(t, []*setEvent{set}, es[0].sets)

		// The same ranks on other streams are another set: another event.
		f.d.Reset()
		require.NoError(t, group(es, []*cuda.Stream{s0, s2}))
		assert.Equal(t, 1, f.d.Counts()["cuEventCreate"])
		require.Len(t, es[1].sets, 2)
		assert.Same(t, es[1].sets[1].ev, es[1].res.last)
		assert.True(t, slices.Equal(es[0].sets, es[1].sets))

		for _, e := range es {
			require.NoError(t, e.Destroy())
		}
	})
}

// permutations returns every order of 0..n-1.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := slices.Insert(slices.Clone(p), i, n-1)
			out = append(out, q)
		}
	}
	return out
}

// Set events are owned jointly: whatever order the ranks are destroyed
// in, with launches (alone, and of the ranks left) between the Destroys,
// every Destroy is clean, the ranks left keep launching and waiting, and
// once all are destroyed every event made is destroyed, and no goroutine
// is left.
func TestMultiSetEventDestroyOrders(t *testing.T) {
	inFakeDriver(t, "TestMultiSetEventDestroyOrders", func(t *testing.T, lib string) {
		f := newFakeSetup(t, lib)
		const n = 3
		ss := []*cuda.Stream{f.stream(t), f.stream(t), f.stream(t)}
		goroutines := runtime.NumGoroutine()
		for _, order := range permutations(n) {
			t.Run(fmt.Sprint(order), func(t *testing.T) {
				f.d.Reset()
				es := f.engines(t, n)
				require.NoError(t, group(es, ss))         // the set {0,1,2}
				require.NoError(t, group(es[:2], ss[:2])) // {0,1}
				require.NoError(t, group(es[1:], ss[1:])) // {1,2}
				_, err := alone(es[2], ss[2])             // 2 alone
				require.NoError(t, err)
				require.NoError(t, group(es, ss)) // {0,1,2} again: its event
				assert.Equal(t, 3, f.liveEvents()-n, "three sets' events, and each rank's own")
				for r, e := range es {
					assert.Len(t, e.sets, []int{2, 3, 2}[r], "rank %d's sets", r)
				}
				left := slices.Clone(es)
				for k, r := range order {
					e := es[r]
					require.NoError(t, e.Destroy(), "rank %d, %d-th", r, k)
					assert.Nil(t, e.sets)
					left = slices.DeleteFunc(left, func(x *Engine) bool { return x == e })
					// A group with the destroyed rank: it is refused, the
					// others launch (together when two are left).
					var multi uint64
					if len(left) > 0 {
						multi = left[0].MultiLaunches()
					}
					if err := group(es, ss); assert.Error(t, err) {
						assert.ErrorIs(t, err, ErrDestroyed)
					}
					if len(left) >= 2 {
						assert.Equal(t, multi+1, left[0].MultiLaunches(), "the two left: one multi-rank launch")
					}
					for _, l := range left {
						_, err := alone(l, ss[l.rank])
						require.NoError(t, err)
						require.NoError(t, l.Wait(context.Background(), func() error { return nil }), "rank %d", l.rank)
					}
				}
				assert.Zero(t, f.liveEvents(), "every event made is destroyed: %v", f.d.Counts())
			})
		}
		// Polled here: require.Eventually's own goroutine would count.
		for end := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > goroutines && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
		assert.LessOrEqual(t, runtime.NumGoroutine(), goroutines, "goroutines left")
	})
}
