package transport

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	ncclnet "github.com/ncclgo/ncclgo/runtime/net"
)

// abortRank is one rank of the abort tests as runtime/comm runs it: a
// proxy error aborts it (its kernels stop, its proxy says why to its
// peers), as does the test, for the rank's own reason.
type abortRank struct {
	stop    atomic.Bool // the kernels' abort flag
	aborted atomic.Bool
	cause   atomic.Pointer[error]
	mu      sync.Mutex
	err     error // the first proxy error
	at      time.Time
}

func (a *abortRank) abort(err error) {
	a.cause.CompareAndSwap(nil, &err)
	a.aborted.Store(true)
	a.stop.Store(true)
}

func (a *abortRank) proxyError(err error) {
	a.mu.Lock()
	if a.err == nil {
		a.err, a.at = err, time.Now()
	}
	a.mu.Unlock()
	a.abort(err)
}

func (a *abortRank) options() Options {
	return Options{ProxyError: a.proxyError, Aborted: a.aborted.Load, AbortCause: func() error {
		if p := a.cause.Load(); p != nil {
			return *p
		}
		return nil
	}}
}

func (a *abortRank) first() (time.Time, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.at, a.err
}

// roundSteps is how many steps one round of ops takes on a connection.
func roundSteps(sizes Sizes, ops []p2pOp) uint64 {
	var n uint64
	for _, op := range ops {
		c := stepCap(sizes, op.proto)
		n += uint64((op.bytes + c - 1) / c)
	}
	return n
}

// A rank that aborts mid-collective (for its own reason, after a protocol
// error on one of its connections, or as its process vanishes) makes every
// rank of a 3-rank ring that waits on it fail within a bound, with an
// error naming it and its cause: its receiver (data direction) and its
// sender (credit direction), on every channel, and the third rank through
// the abort that follows. Before, the aborting rank's goodbye was taken
// for a clean close and the survivors' kernels waited for ever (the
// hosts matrix's h4r2 run: rank 3's abort left process 4 mid-kernel).
// Nothing is left behind: no goroutine, no descriptor.
func TestNETPeerAbortFailsWaiters(t *testing.T) {
	const ranks, nch, victim, rounds = 3, 2, 1, 40
	bound := 2 * time.Second // the issue asks for 10 s; a goodbye takes milliseconds
	for _, mode := range []string{"abort", "protocol error", "vanish"} {
		t.Run(mode, func(t *testing.T) {
			fds, gs := openFDs(t), runtime.NumGoroutine()
			rs := make([]*abortRank, ranks)
			for r := range rs {
				rs[r] = &abortRank{}
			}
			sets, mems := connectNETOpts(t, loNet(t, 2, 1), ranks, nch, p2pSizes, func(r int) Options { return rs[r].options() })
			round := roundSteps(p2pSizes, p2pSteps)
			inject := make(chan struct{}) // protocol error: the bad step may go
			closeInject := sync.OnceFunc(func() { close(inject) })
			wgs := make([]sync.WaitGroup, ranks) // each rank's fake kernels
			// A failed require ends the test early: stop the kernels
			// before the connections' memory goes (cleanups run last
			// registered first).
			t.Cleanup(func() {
				closeInject()
				for r := range wgs {
					rs[r].stop.Store(true)
					wgs[r].Wait()
				}
			})
			for r := range ranks {
				wg := &wgs[r]
				next, prev := (r+1)%ranks, (r+ranks-1)%ranks
				for ch := range nch {
					wg.Go(func() {
						ci := sets[r].Send[Key{ch, next}]
						if r != victim || ch != 0 || mode != "protocol error" {
							p2pKernel(t, mems[r], ci, p2pSizes, ch, true, p2pSteps, rounds, &rs[r].stop)
							return
						}
						// One round, then a step that no kernel posts:
						// more lines than its slot holds.
						p2pKernel(t, mems[r], ci, p2pSizes, ch, true, p2pSteps, 1, &rs[r].stop)
						<-inject
						if spin(t, "victim's bad step: credit", func() bool {
							return rs[r].stop.Load() || atomic.LoadUint64(mems[r].word(ci.Head))+generated.Steps > round
						}) && !rs[r].stop.Load() {
							postLLSize(mems[r], ci, round, 4000)
						}
					})
					wg.Go(func() {
						p2pKernel(t, mems[r], sets[r].Recv[Key{ch, prev}], p2pSizes, ch, false, p2pSteps, rounds, &rs[r].stop)
					})
				}
			}
			// Mid-collective: the victim's receiver has consumed some steps.
			in := sets[victim].Recv[Key{1, (victim + ranks - 1) % ranks}]
			require.True(t, spin(t, "the victim's progress", func() bool { return atomic.LoadUint64(mems[victim].word(in.Head)) > round/2 }))
			var start time.Time
			switch mode {
			case "abort":
				start = time.Now()
				rs[victim].abort(errors.New("test: the victim's own reason"))
			case "protocol error":
				start = time.Now()
				closeInject()
			case "vanish":
				// Its process is killed: its kernels stop (with it: they
				// write its buffers, which Close unmaps), its sockets
				// close, no goodbye.
				rs[victim].stop.Store(true)
				wgs[victim].Wait()
				for _, rg := range sets[victim].regions {
					if nr, ok := rg.(*netRegion); ok {
						require.NoError(t, nr.pc.leave(nr.eng))
						nr.pc.killed = true
					}
				}
				start = time.Now()
				_ = sets[victim].Close()
			}
			for r := range ranks {
				if r == victim {
					continue
				}
				var err error
				var at time.Time
				for d := time.Now().Add(bound + time.Second); ; time.Sleep(time.Millisecond) {
					if at, err = rs[r].first(); err != nil || time.Now().After(d) {
						break
					}
				}
				require.Error(t, err, "rank %d was told nothing of rank %d within %v", r, victim, bound+time.Second)
				took := at.Sub(start)
				t.Logf("rank %d after %v: %v", r, took.Round(time.Microsecond), err)
				assert.Less(t, took, bound, "rank %d's error", r)
				assert.ErrorIs(t, err, ncclnet.ErrPeer)
				switch mode {
				case "abort":
					assert.ErrorIs(t, err, ErrPeerAborted)
					assert.ErrorContains(t, err, fmt.Sprintf("rank %d aborted: test: the victim's own reason", victim))
				case "protocol error":
					assert.ErrorIs(t, err, ErrPeerAborted)
					assert.ErrorContains(t, err, fmt.Sprintf("rank %d aborted: transport: rank %d sending to rank %d", victim, victim, victim+1))
					assert.ErrorContains(t, err, "4000 lines, more than its")
				case "vanish":
					// Rank 2 sees the EOF; rank 0 that, or rank 2's abort
					// naming rank 1's host.
					assert.ErrorContains(t, err, "host1")
				}
			}
			if mode != "protocol error" {
				closeInject()
			}
			for r := range wgs {
				wgs[r].Wait() // every kernel saw its abort flag
			}
			for r := range ranks {
				_ = sets[r].Close() // errors: the failed connections'
			}
			for d := time.Now().Add(5 * time.Second); (runtime.NumGoroutine() > gs || openFDs(t) > fds) && time.Now().Before(d); {
				time.Sleep(10 * time.Millisecond)
			}
			if g, f := runtime.NumGoroutine(), openFDs(t); g > gs || f > fds {
				buf := make([]byte, 1<<16)
				t.Errorf("left behind: goroutines %d (before %d), descriptors %d (before %d)\n%s", g, gs, f, fds, buf[:runtime.Stack(buf, true)])
			}
		})
	}
}

// A rank that aborts at its end, once every collective is done (as
// programs that end with ncclCommAbort do): its idle peers' connections to
// it are marked dead at once with an error naming it (their communicators
// keep it for the next call: runtime/comm), and, as they do not abort,
// their Close is clean: nothing was lost that they needed.
func TestNETPeerAbortWhileIdle(t *testing.T) {
	const ranks, nch, victim, rounds = 3, 2, 1, 5
	fds, gs := openFDs(t), runtime.NumGoroutine()
	rs := make([]*abortRank, ranks)
	var mu sync.Mutex
	errs := make([][]error, ranks)
	for r := range rs {
		rs[r] = &abortRank{}
	}
	sets, mems := connectNETOpts(t, loNet(t, 2, 1), ranks, nch, p2pSizes, func(r int) Options {
		o := rs[r].options()
		o.ProxyError = func(err error) { // an idle communicator: no abort
			mu.Lock()
			errs[r] = append(errs[r], err)
			mu.Unlock()
		}
		return o
	})
	var wg sync.WaitGroup
	for r := range ranks {
		next, prev := (r+1)%ranks, (r+ranks-1)%ranks
		for ch := range nch {
			wg.Go(func() {
				p2pKernel(t, mems[r], sets[r].Send[Key{ch, next}], p2pSizes, ch, true, p2pSteps, rounds, &rs[r].stop)
			})
			wg.Go(func() {
				p2pKernel(t, mems[r], sets[r].Recv[Key{ch, prev}], p2pSizes, ch, false, p2pSteps, rounds, &rs[r].stop)
			})
		}
	}
	wg.Wait() // every collective is done on every rank
	start := time.Now()
	rs[victim].abort(errors.New("communicator aborted"))
	for r := range ranks {
		if r == victim {
			continue
		}
		// Its connection to the victim (data from it on one side,
		// credits on the other).
		require.True(t, spin(t, fmt.Sprintf("rank %d told of rank %d's abort", r, victim), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(errs[r]) > 0
		}), "rank %d: %v", r, errs[r])
		t.Logf("rank %d after %v: %v", r, time.Since(start).Round(time.Microsecond), errs[r][0])
		mu.Lock()
		got := slices.Clone(errs[r])
		mu.Unlock()
		for _, err := range got {
			assert.ErrorIs(t, err, ErrPeerAborted)
			assert.ErrorIs(t, err, ncclnet.ErrPeer)
			assert.ErrorContains(t, err, fmt.Sprintf("rank %d aborted: communicator aborted", victim))
		}
		assert.False(t, rs[r].aborted.Load())
	}
	_ = sets[victim].Close()
	for r := range ranks {
		if r != victim {
			assert.NoError(t, sets[r].Close(), "rank %d: a clean close", r)
		}
	}
	for d := time.Now().Add(5 * time.Second); (runtime.NumGoroutine() > gs || openFDs(t) > fds) && time.Now().Before(d); {
		time.Sleep(10 * time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), gs)
	assert.LessOrEqual(t, openFDs(t), fds)
}
