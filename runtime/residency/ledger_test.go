package residency

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fake is a completion the test finishes by hand.
type fake struct{ done atomic.Bool }

func (f *fake) Query() (bool, error) { return f.done.Load(), nil }

func (f *fake) finish() { f.done.Store(true) }

// chained finishes after its own work and the launch before it on the
// same rank (stream order).
type chained struct {
	prev *chained
	done atomic.Bool
}

func (c *chained) Query() (bool, error) {
	if !c.done.Load() {
		return false, nil
	}
	if c.prev == nil {
		return true, nil
	}
	return c.prev.Query()
}

// failing is a completion whose query fails (a dead context).
type failing struct{}

func (failing) Query() (bool, error) { return false, errors.New("context is dead") }

func join(t *testing.T, l *Ledger, key string, budget int, local map[string]int, width int) *Lease {
	t.Helper()
	var s *Lease
	for g := range local {
		var err error
		s, err = l.Join(key, g, budget, local, width)
		require.NoError(t, err)
	}
	return s
}

func short(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

func long(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// admit acquires reqs and returns the ticket once all are admitted, with
// the indexes in the order Next gave them.
func admit(t *testing.T, l *Ledger, reqs ...Request) (*Ticket, []int) {
	t.Helper()
	tk, err := l.Acquire(reqs, nil)
	require.NoError(t, err)
	t.Cleanup(tk.Close)
	var order []int
	for range reqs {
		i, err := tk.Next(long(t))
		require.NoError(t, err)
		order = append(order, i)
	}
	return tk, order
}

func TestBudget(t *testing.T) {
	for _, c := range []struct {
		sms, bps int
		pct      string
		want     int
	}{
		{132, 1, "", 132},
		{132, 2, "", 264},
		{132, 1, "50", 66},
		{132, 2, " 25 ", 66},
		{132, 1, "33.3", 43},
		{132, 1, "100", 132},
		{132, 1, "0.1", 1},
	} {
		got, err := Budget(c.sms, c.bps, c.pct)
		require.NoError(t, err, "%+v", c)
		assert.Equal(t, c.want, got, "%+v", c)
	}
	for _, pct := range []string{"0", "-5", "101", "half"} {
		_, err := Budget(132, 1, pct)
		require.Error(t, err, pct)
		assert.Contains(t, err.Error(), EnvMPSPercent)
	}
	_, err := Budget(0, 1, "")
	require.Error(t, err)
}

func TestJoin(t *testing.T) {
	l := New()
	local := map[string]int{"0": 2, "1": 2}
	a, err := l.Join("a", "0", 100, local, 16)
	require.NoError(t, err)
	b, err := l.Join("a", "1", 80, local, 16)
	require.NoError(t, err)
	assert.Same(t, a, b, "ranks of one communicator share its lease")
	_, err = l.Join("a", "0", 100, map[string]int{"0": 4}, 16)
	require.ErrorContains(t, err, "disagree")
	// The smallest budget of a GPU wins, and a lease that cannot fit alone
	// is refused at once instead of waiting forever.
	_, err = l.Join("b", "0", 200, map[string]int{"0": 8}, 16)
	require.ErrorContains(t, err, "needs 128 blocks on GPU 0")
	_, err = l.Join("c", "0", 100, map[string]int{"1": 1}, 16)
	require.ErrorContains(t, err, "joining GPU")
	_, err = l.Acquire([]Request{{Lease: a, Seq: 0, Blocks: 17}}, nil)
	require.ErrorContains(t, err, "blocks=17")
	_, err = l.Acquire([]Request{{Lease: New().leaseFor(t), Blocks: 1}}, nil)
	require.ErrorContains(t, err, "lease of this ledger")
	a.Leave(0)
	a.Leave(1)
	l.mu.Lock()
	assert.Empty(t, l.leases, "the last Leave forgets the key")
	l.mu.Unlock()
}

func (l *Ledger) leaseFor(t *testing.T) *Lease {
	return join(t, l, "x", 10, map[string]int{"0": 1}, 1)
}

// A launch waits while another communicator's reservation fills the GPU,
// its wait is bounded by its context with an error saying what it waited
// for, and it is admitted once the holder's launches complete.
func TestWaitsForRelease(t *testing.T) {
	l := New()
	local := map[string]int{"0": 2}
	a := join(t, l, "A", 12, local, 6)
	b := join(t, l, "B", 12, local, 6)

	tkA, _ := admit(t, l, Request{Lease: a, Rank: 0, Blocks: 6}, Request{Lease: a, Rank: 1, Blocks: 6})
	used, budget := l.Used("0")
	assert.Equal(t, 12, used)
	assert.Equal(t, 12, budget)
	doneA := []*fake{{}, {}}
	tkA.Done(0, doneA[0])
	tkA.Done(1, doneA[1])

	tkB, err := l.Acquire([]Request{{Lease: b, Rank: 0, Blocks: 1}}, nil)
	require.NoError(t, err)
	defer tkB.Close()
	start := time.Now()
	_, err = tkB.Next(short(t))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Contains(t, err.Error(), "communicator B rank 0 launch 0")
	assert.Contains(t, err.Error(), "GPU 0: 12 of 12 blocks in use")

	doneA[0].finish()
	_, err = tkB.Next(short(t))
	require.ErrorIs(t, err, context.DeadlineExceeded, "one of A's ranks still runs")
	doneA[1].finish()
	i, err := tkB.Next(long(t))
	require.NoError(t, err)
	assert.Equal(t, 0, i)
	used, _ = l.Used("0")
	assert.Equal(t, 2, used, "B reserves 1 block × 2 ranks; A was released")
	_, err = tkB.Next(long(t))
	require.ErrorIs(t, err, ErrNoRequest)
}

// TryNext hands out admitted requests lowest first without waiting, says
// false while a request waits for room (and once all were returned), and
// sees a release without Next having slept.
func TestTryNext(t *testing.T) {
	l := New()
	local := map[string]int{"0": 2}
	a := join(t, l, "A", 12, local, 6)
	b := join(t, l, "B", 12, local, 6)

	tkA, err := l.Acquire([]Request{{Lease: a, Rank: 0, Blocks: 6}, {Lease: a, Rank: 1, Blocks: 6}}, nil)
	require.NoError(t, err)
	defer tkA.Close()
	doneA := []*fake{{}, {}}
	for want := range 2 {
		i, ok := tkA.TryNext()
		require.True(t, ok)
		assert.Equal(t, want, i)
		tkA.Done(i, doneA[i])
	}
	_, ok := tkA.TryNext()
	assert.False(t, ok, "every request returned")
	_, err = tkA.Next(long(t))
	assert.ErrorIs(t, err, ErrNoRequest, "Next says why")

	tkB, err := l.Acquire([]Request{{Lease: b, Rank: 0, Blocks: 1}}, nil)
	require.NoError(t, err)
	defer tkB.Close()
	_, ok = tkB.TryNext()
	assert.False(t, ok, "the GPU is full while A runs")
	doneA[0].finish()
	doneA[1].finish()
	i, ok := tkB.TryNext()
	require.True(t, ok, "A's release is seen without a wait")
	assert.Equal(t, 0, i)
}

// A rank whose peers already launched the same sequence number passes a
// waiting communicator; a rank running ahead queues behind it.
func TestCoveredNeverWaits(t *testing.T) {
	l := New()
	a := join(t, l, "A", 8, map[string]int{"0": 2}, 4)
	b := join(t, l, "B", 8, map[string]int{"0": 2}, 4)
	tk0, _ := admit(t, l, Request{Lease: a, Rank: 0, Seq: 0, Blocks: 4})
	d0 := &fake{}
	tk0.Done(0, d0)

	tkB, err := l.Acquire([]Request{{Lease: b, Rank: 0, Blocks: 4}}, nil)
	require.NoError(t, err)
	defer tkB.Close()

	// Rank 1 of A at launch 0: covered, admitted at once.
	tk1, err := l.Acquire([]Request{{Lease: a, Rank: 1, Seq: 0, Blocks: 4}}, nil)
	require.NoError(t, err)
	i, err := tk1.Next(short(t))
	require.NoError(t, err)
	d1 := &fake{}
	tk1.Done(i, d1)
	tk1.Close()

	// Rank 0 of A at launch 1 would keep A busy forever: it waits behind B.
	tkNext, err := l.Acquire([]Request{{Lease: a, Rank: 0, Seq: 1, Blocks: 4}}, nil)
	require.NoError(t, err)
	defer tkNext.Close()
	_, err = tkNext.Next(short(t))
	require.ErrorIs(t, err, context.DeadlineExceeded)

	d0.finish()
	d1.finish()
	_, err = tkB.Next(long(t))
	require.NoError(t, err, "A drained, B goes first")
	_, err = tkNext.Next(short(t))
	require.ErrorIs(t, err, context.DeadlineExceeded, "A's next launch waits for B")
	tkB.Done(0, nil)
	_, err = tkNext.Next(long(t))
	require.NoError(t, err)
}

// Once a lease is released, a rank still at an old sequence number must be
// granted again: nothing of its communicator runs, so it may wait.
func TestLaggingRankAfterRelease(t *testing.T) {
	l := New()
	a := join(t, l, "A", 8, map[string]int{"0": 2}, 4)
	b := join(t, l, "B", 8, map[string]int{"0": 2}, 4)
	tk0, _ := admit(t, l, Request{Lease: a, Rank: 0, Seq: 0, Blocks: 4})
	tk0.Done(0, failing{}) // an error counts as finished
	tkB, _ := admit(t, l, Request{Lease: b, Rank: 0, Blocks: 4})
	tk1, err := l.Acquire([]Request{{Lease: a, Rank: 1, Seq: 0, Blocks: 4}}, nil)
	require.NoError(t, err)
	defer tk1.Close()
	_, err = tk1.Next(short(t))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	tkB.Done(0, nil)
	_, err = tk1.Next(long(t))
	require.NoError(t, err)
}

// Waiters are admitted in arrival order, per GPU: a later, smaller launch
// that would fit now does not overtake a wide one that waits (no
// starvation of wide communicators), and a busy communicator's next launch
// queues behind both.
func TestFIFO(t *testing.T) {
	l := New()
	local := map[string]int{"0": 1}
	h := join(t, l, "H", 10, local, 10)
	wide := join(t, l, "W", 10, local, 10)
	small := join(t, l, "S", 10, local, 10)
	hold, _ := admit(t, l, Request{Lease: h, Seq: 0, Blocks: 6})
	hDone := &fake{}
	hold.Done(0, hDone)

	tkW, err := l.Acquire([]Request{{Lease: wide, Blocks: 10}}, nil)
	require.NoError(t, err)
	defer tkW.Close()
	tkS, err := l.Acquire([]Request{{Lease: small, Blocks: 3}}, nil)
	require.NoError(t, err)
	defer tkS.Close()
	tkH, err := l.Acquire([]Request{{Lease: h, Seq: 1, Blocks: 8}}, nil)
	require.NoError(t, err)
	defer tkH.Close()

	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for name, tk := range map[string]*Ticket{"W": tkW, "S": tkS, "H": tkH} {
		wg.Go(func() {
			_, err := tk.Next(long(t))
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			f := &fake{}
			tk.Done(0, f)
			time.AfterFunc(5*time.Millisecond, f.finish)
		})
	}
	time.Sleep(20 * time.Millisecond)
	mu.Lock()
	assert.Empty(t, order, "S fits beside H but must not overtake W; H's next launch must not either")
	mu.Unlock()
	hDone.finish()
	wg.Wait()
	assert.Equal(t, []string{"W", "S", "H"}, order)
}

// A communicator spanning two GPUs reserves both at once or neither.
func TestMultiGPUAtomic(t *testing.T) {
	l := New()
	both := map[string]int{"0": 1, "1": 1}
	a := join(t, l, "A", 4, both, 4)
	b := join(t, l, "B", 4, both, 4)
	c := join(t, l, "C", 4, map[string]int{"1": 1}, 4)
	tkC, _ := admit(t, l, Request{Lease: c, Blocks: 4}) // GPU 1 is full
	tkA, err := l.Acquire([]Request{{Lease: a, Blocks: 4}}, nil)
	require.NoError(t, err)
	defer tkA.Close()
	_, err = tkA.Next(short(t))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	used0, _ := l.Used("0")
	assert.Equal(t, 0, used0, "A took nothing on GPU 0 while GPU 1 is full")
	tkB, err := l.Acquire([]Request{{Lease: b, Blocks: 4}}, nil)
	require.NoError(t, err)
	defer tkB.Close()
	tkC.Done(0, nil)
	_, err = tkA.Next(long(t))
	require.NoError(t, err)
	_, err = tkB.Next(short(t))
	require.ErrorIs(t, err, context.DeadlineExceeded, "B comes after A")
}

// A group holding ranks of several communicators gets each as soon as it
// fits, lowest index first, and is told when it was interrupted.
func TestGroupAndInterrupt(t *testing.T) {
	l := New()
	a := join(t, l, "A", 8, map[string]int{"0": 2}, 4)
	b := join(t, l, "B", 8, map[string]int{"0": 2}, 4)
	hold, _ := admit(t, l, Request{Lease: b, Rank: 0, Blocks: 4})
	stop := errors.New("aborted")
	var interrupted atomic.Pointer[error]
	tk, err := l.Acquire([]Request{
		{Lease: b, Rank: 1, Blocks: 4}, // covered by the held lease
		{Lease: a, Rank: 0, Blocks: 4},
		{Lease: a, Rank: 1, Blocks: 4},
	}, func() error {
		if p := interrupted.Load(); p != nil {
			return *p
		}
		return nil
	})
	require.NoError(t, err)
	defer tk.Close()
	i, err := tk.Next(short(t))
	require.NoError(t, err)
	assert.Equal(t, 0, i)
	tk.Done(i, nil)
	interrupted.Store(&stop)
	_, err = tk.Next(long(t))
	require.ErrorIs(t, err, stop)
	interrupted.Store(nil)
	hold.Done(0, nil)
	i, err = tk.Next(long(t))
	require.NoError(t, err)
	assert.Equal(t, 1, i)
	i, err = tk.Next(long(t))
	require.NoError(t, err)
	assert.Equal(t, 2, i, "covered by the grant of index 1")
}

// Communicators driven concurrently, each launch finishing a little later:
// the reservations never exceed a GPU's budget, every unfinished launch is
// inside its communicator's held reservation, and everything completes.
func TestConcurrentNeverOverBudget(t *testing.T) {
	l := New()
	budgets := map[string]int{"0": 24, "1": 16}
	type comm struct {
		lease *Lease
		ranks int
		width int
	}
	layouts := []map[string]int{{"0": 4}, {"0": 2, "1": 2}, {"1": 4}, {"0": 3}, {"0": 1, "1": 1}}
	var comms []comm
	for i, local := range layouts {
		width := 4
		for g, n := range local {
			width = min(width, budgets[g]/n)
		}
		var s *Lease
		for g := range local {
			var err error
			s, err = l.Join(fmt.Sprint("C", i), g, budgets[g], local, width)
			require.NoError(t, err)
		}
		ranks := 0
		for _, n := range local {
			ranks += n
		}
		comms = append(comms, comm{s, ranks, width})
	}

	type launch struct {
		lease  *Lease
		blocks int
		done   *chained
	}
	var mu sync.Mutex
	var running []launch
	check := func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		for g, st := range l.gpus {
			assert.LessOrEqual(t, st.used, st.budget, "GPU %s", g)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, ln := range running {
			if ok, _ := ln.done.Query(); ok {
				continue
			}
			if !assert.True(t, ln.lease.held, "unfinished launch of %s outside a reservation", ln.lease.key) {
				return
			}
			assert.LessOrEqual(t, ln.blocks, ln.lease.width, "%s", ln.lease.key)
		}
	}
	var wg sync.WaitGroup
	for ci, c := range comms {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(ci), 7))
			last := make([]*chained, c.ranks)
			for seq := range uint64(40) {
				blocks := 1 + rng.IntN(c.width)
				reqs := make([]Request, c.ranks)
				for r := range reqs {
					reqs[r] = Request{Lease: c.lease, Rank: r, Seq: seq, Blocks: blocks}
				}
				tk, err := l.Acquire(reqs, nil)
				if !assert.NoError(t, err) {
					return
				}
				for range reqs {
					i, err := tk.Next(long(t))
					if !assert.NoError(t, err) {
						tk.Close()
						return
					}
					f := &chained{prev: last[i]}
					last[i] = f
					mu.Lock()
					running = append(running, launch{c.lease, blocks, f})
					mu.Unlock()
					d := time.Duration(rng.IntN(300)) * time.Microsecond
					time.AfterFunc(d, func() { f.done.Store(true) })
					tk.Done(i, f)
					check()
				}
				tk.Close()
			}
		})
	}
	wg.Wait()
	check()
	// Once every launch has finished (their timers may fire late on a
	// loaded machine), the next pass releases every lease.
	deadline := time.Now().Add(10 * time.Second)
	for _, ln := range running {
		for {
			if ok, _ := ln.done.Query(); ok {
				break
			}
			require.True(t, time.Now().Before(deadline), "a launch of %s never finished", ln.lease.key)
			time.Sleep(100 * time.Microsecond)
		}
	}
	l.mu.Lock()
	l.pass(true)
	for g, st := range l.gpus {
		assert.Zero(t, st.used, "GPU %s", g)
	}
	assert.Empty(t, l.queue)
	l.mu.Unlock()
}

// A rank that leaves while its launch still runs (Destroy could not stop
// its kernels) keeps its blocks counted until the launch ends.
func TestLeaveKeepsRunningLaunches(t *testing.T) {
	l := New()
	local := map[string]int{"0": 1}
	a := join(t, l, "A", 4, local, 4)
	b := join(t, l, "B", 4, local, 4)
	tk, _ := admit(t, l, Request{Lease: a, Blocks: 4})
	running := &fake{}
	tk.Done(0, running)
	a.Leave(0)
	tkB, err := l.Acquire([]Request{{Lease: b, Blocks: 4}}, nil)
	require.NoError(t, err)
	defer tkB.Close()
	_, err = tkB.Next(short(t))
	require.ErrorIs(t, err, context.DeadlineExceeded, "A's kernel still occupies the GPU")
	running.finish()
	_, err = tkB.Next(long(t))
	require.NoError(t, err)
	l.mu.Lock()
	assert.NotContains(t, l.leases, "A", "A left")
	assert.NotContains(t, l.held, a, "and was released")
	l.mu.Unlock()
}

// A ticket acquired into again and again reuses its memory: admitting a
// group that fits allocates nothing. An open ticket is refused.
func TestAcquireIntoReuses(t *testing.T) {
	l := New()
	s := join(t, l, "A", 132, map[string]int{"0": 8}, 16)
	done := &fake{}
	done.finish()
	reqs := make([]Request, 8)
	var tk Ticket
	tk.Close() // a zero ticket is closed
	var seq uint64
	group := func() {
		for r := range reqs {
			reqs[r] = Request{Lease: s, Rank: r, Seq: seq, Blocks: 16}
		}
		if err := l.AcquireInto(&tk, reqs, nil); err != nil {
			t.Fatal(err)
		}
		for range reqs {
			i, ok := tk.TryNext()
			if !ok {
				t.Fatal("a request that fits waits")
			}
			tk.Done(i, done)
		}
		tk.Close()
		seq++
	}
	group()
	assert.Zero(t, testing.AllocsPerRun(100, group))
	require.NoError(t, l.AcquireInto(&tk, reqs[:1], nil))
	require.ErrorIs(t, l.AcquireInto(&tk, reqs[:1], nil), ErrTicketOpen)
	tk.Close()
	tk.Close()
	require.Empty(t, l.queue)
}

// A GPU of a lease on which no rank joined yet counts the lease's blocks
// all the same, so that they are taken back whole when it is released
// after a rank joins there: Used never goes negative.
func TestReservationOnGPUJoinedLater(t *testing.T) {
	l := New()
	both := map[string]int{"0": 1, "1": 1}
	a, err := l.Join("A", "0", 8, both, 4)
	require.NoError(t, err)
	tk, _ := admit(t, l, Request{Lease: a, Blocks: 4})
	tk.Done(0, nil)
	tk.Close()
	used, budget := l.Used("1")
	assert.Equal(t, [2]int{0, 0}, [2]int{used, budget}, "no rank joined on GPU 1")
	_, err = l.Join("A", "1", 8, both, 4)
	require.NoError(t, err)
	used, _ = l.Used("1")
	assert.Equal(t, 4, used, "A's held reservation on GPU 1")
	// A request that needs room waits for a pass that reaps A's finished
	// launch: then both GPUs are free again.
	b := join(t, l, "B", 8, both, 8)
	tkB, _ := admit(t, l, Request{Lease: b, Blocks: 8})
	defer tkB.Close()
	for _, g := range []string{"0", "1"} {
		used, _ := l.Used(g)
		assert.Equal(t, 8, used, "GPU %s: B alone", g)
	}
}

// TryNextAll returns every admitted request at once, lowest first, and
// DoneEach finishes several: the lease keeps the completions given, and a
// wait behind them ends once they finish.
func TestTryNextAllAndDoneEach(t *testing.T) {
	l := New()
	a := join(t, l, "A", 8, map[string]int{"0": 2}, 4)
	b := join(t, l, "B", 8, map[string]int{"0": 1}, 4)
	tk, err := l.Acquire([]Request{{Lease: a, Rank: 0, Blocks: 4}, {Lease: b, Blocks: 4}, {Lease: a, Rank: 1, Blocks: 4}}, nil)
	require.NoError(t, err)
	defer tk.Close()
	// A takes 8 blocks (2 ranks × 4): B does not fit.
	ks := tk.TryNextAll(nil)
	assert.Equal(t, []int{0, 2}, ks)
	assert.Empty(t, tk.TryNextAll(nil), "returned already")
	f := &fake{}
	tk.DoneEach(ks, func(j int) Completion {
		if j == 0 {
			return f
		}
		return nil
	})
	assert.Zero(t, a.pins)
	assert.Equal(t, Completion(f), a.latest[0])
	assert.NotContains(t, a.latest, 1, "nothing launched for rank 1")
	_, err = tk.Next(short(t))
	require.ErrorIs(t, err, context.DeadlineExceeded, "A's launch still runs")
	f.finish()
	i, err := tk.Next(long(t))
	require.NoError(t, err)
	assert.Equal(t, 1, i)
}

// A closed ticket keeps no lease, nor the interruption check: a caller
// that keeps it for its next group (a pooled admission) does not keep a
// destroyed communicator's lease, and the completions it holds, alive.
// Closed, it still answers as one: nothing to take, Done ignored.
func TestClosedTicketKeepsNothing(t *testing.T) {
	l := New()
	a := join(t, l, "A", 8, map[string]int{"0": 2}, 4)
	b := join(t, l, "B", 8, map[string]int{"0": 1}, 4)
	var tk Ticket
	require.NoError(t, l.AcquireInto(&tk, []Request{{Lease: a, Rank: 0, Blocks: 4}, {Lease: b, Blocks: 4}, {Lease: a, Rank: 1, Blocks: 4}},
		func() error { return nil }))
	ks := tk.TryNextAll(nil)
	require.Equal(t, []int{0, 2}, ks, "B waits")
	tk.Done(0, nil)
	tk.Close()
	for i, r := range tk.reqs[:cap(tk.reqs)] {
		assert.Nil(t, r.Lease, "request %d", i)
	}
	assert.Nil(t, tk.interrupted)
	assert.Zero(t, a.pins, "the admitted request not Done was unpinned")
	tk.Done(2, nil) // after Close: ignored
	_, ok := tk.TryNext()
	assert.False(t, ok)
	_, err := tk.Next(long(t))
	require.ErrorIs(t, err, ErrNoRequest)
	l.mu.Lock()
	assert.Empty(t, l.queue, "B's request was withdrawn")
	l.mu.Unlock()
	// Acquired into again, it works as new.
	require.NoError(t, l.AcquireInto(&tk, []Request{{Lease: b, Blocks: 1}}, nil))
	defer tk.Close()
	i, err := tk.Next(long(t))
	require.NoError(t, err, "nothing of A runs: released")
	assert.Equal(t, 0, i)
}
