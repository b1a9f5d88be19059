package comm

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/residency"
)

type fakeDone struct {
	done atomic.Bool
	err  error
}

func (f *fakeDone) Query() (bool, error) { return f.done.Load(), f.err }

// Destroy's wait: bounded, reports what did not finish and, apart, what
// could not be queried (with the error).
func TestAwaitEvents(t *testing.T) {
	a, b, c := &fakeDone{}, &fakeDone{}, &fakeDone{err: errors.New("context lost")}
	a.done.Store(true)
	start := time.Now()
	pending, failed, err := awaitEvents([]residency.Completion{a, b, c}, 30*time.Millisecond)
	assert.Equal(t, []int{1}, pending)
	assert.Equal(t, []int{2}, failed)
	require.ErrorContains(t, err, "context lost")
	assert.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)
	assert.Less(t, time.Since(start), 2*time.Second)

	time.AfterFunc(5*time.Millisecond, func() { b.done.Store(true) })
	pending, failed, err = awaitEvents([]residency.Completion{a, b}, 10*time.Second)
	assert.Empty(t, pending)
	assert.Empty(t, failed)
	require.NoError(t, err)
}

// The communicator's timeout: the option, else NCCL_BOOTSTRAP_TIMEOUT as
// runtime/config parses it (the one parser of the variable), else the
// bootstrap's default.
func TestCommTimeout(t *testing.T) {
	load := func() Settings {
		t.Helper()
		cfg, err := config.Load()
		require.NoError(t, err)
		return Settings{Config: cfg}
	}
	t.Setenv("NCCL_BOOTSTRAP_TIMEOUT", "")
	assert.Equal(t, bootstrap.DefaultTimeout, load().Timeout())
	t.Setenv("NCCL_BOOTSTRAP_TIMEOUT", "2.5")
	assert.Equal(t, 2500*time.Millisecond, load().Timeout())
	s := load()
	s.Bootstrap.Timeout = time.Second
	assert.Equal(t, time.Second, s.Timeout(), "the option wins")
	t.Setenv("NCCL_BOOTSTRAP_TIMEOUT", "1e12")
	_, err := config.Load()
	require.Error(t, err, "out of bounds: refused where it is parsed, not ignored here")
}

// A launch asks for its widest kernel; point-to-point work asks for every
// channel, since its blocks differ between ranks.
func TestResidencyRequest(t *testing.T) {
	l := residency.New()
	lease, err := l.Join("k", "0", 100, map[string]int{"0": 2}, 8)
	require.NoError(t, err)
	c := &Engine{rank: 1, nChannels: 8}
	_, ok := c.request(&enqueue.Plan{}, nil)
	assert.False(t, ok, "no lease")
	c.res.lease, c.res.seq = lease, 5
	p := &enqueue.Plan{Launches: []enqueue.Launch{{ChannelMask: 0b1011}, {ChannelMask: 0b1}}}
	r, ok := c.request(p, []enqueue.Task{{Coll: kspace.AllReduce}})
	require.True(t, ok)
	assert.Equal(t, residency.Request{Lease: lease, Rank: 1, Seq: 5, Blocks: 3}, r)
	r, _ = c.request(p, []enqueue.Task{{Coll: kspace.AllReduce}, {Coll: kspace.SendRecv}})
	assert.Equal(t, 8, r.Blocks)
	r, _ = c.request(&enqueue.Plan{Copies: []enqueue.Copy{{Bytes: 4}}}, []enqueue.Task{{Coll: kspace.SendRecv}})
	assert.Equal(t, 0, r.Blocks, "copies only: no kernel")
}

func TestGPUName(t *testing.T) {
	assert.Equal(t, "0000:1b:00.0", gpuName(residencyInfo{Device: 3, BusID: "0000:1b:00.0"}))
	assert.Equal(t, "3", gpuName(residencyInfo{Device: 3}))
}

// TestDestroyDuringRequest: Destroy took c off the ledger writing
// c.res.lease without c.mu while a Group.End on another goroutine read it
// under c.mu (a data race; run with -race).
func TestDestroyDuringRequest(t *testing.T) {
	for range 20 {
		l := residency.New()
		lease, err := l.Join("k", "0", 100, map[string]int{"0": 1}, 8)
		require.NoError(t, err)
		c := fakeEngine(t, 0, 1)
		c.res.lease = lease
		c.addColocated()
		p := &enqueue.Plan{Launches: []enqueue.Launch{{ChannelMask: 1}}}
		start := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			<-start
			for range 200 {
				if _, ok := c.request(p, nil); !ok {
					return
				}
			}
		}()
		close(start)
		require.NoError(t, c.Destroy())
		<-done
		_, ok := c.request(p, nil)
		assert.False(t, ok, "off the ledger after Destroy")
	}
}

// TestAdmissionWaitEnds: a launch waiting for room on its GPU ends as soon
// as its communicator is aborted or destroyed, naming why, and leaves the
// ledger as it found it.
func TestAdmissionWaitEnds(t *testing.T) {
	for _, how := range []string{"Abort", "Destroy"} {
		t.Run(how, func(t *testing.T) {
			l := residency.Default()
			gpu := "admission-test-" + how
			// Another communicator holds the whole GPU with a launch that
			// never finishes.
			other, err := l.Join(gpu+"/other", gpu, 4, map[string]int{gpu: 1}, 4)
			require.NoError(t, err)
			tk, err := l.Acquire([]residency.Request{{Lease: other, Blocks: 4}}, nil)
			require.NoError(t, err)
			k, err := tk.Next(context.Background())
			require.NoError(t, err)
			running := &fakeDone{}
			tk.Done(k, running)
			tk.Close()

			c := fakeEngine(t, 0, 1)
			c.net = bootstrap.NewInProcess(1)[0]
			c.res.timeout = 30 * time.Second
			c.res.lease, err = l.Join(gpu+"/c", gpu, 4, map[string]int{gpu: 1}, 4)
			require.NoError(t, err)
			c.addColocated()
			plan := enqueue.Plan{Launches: []enqueue.Launch{{ChannelMask: 0b11}}}
			usable := func() error {
				if d, _ := c.State(); d {
					return ErrDestroyed
				}
				if c.Aborted() {
					return ErrAborted
				}
				return nil
			}
			launch := Launch{Engine: c, Plan: &plan, Tasks: []enqueue.Task{{Coll: kspace.AllReduce}}, Usable: usable}
			time.AfterFunc(50*time.Millisecond, func() {
				if how == "Abort" {
					c.Abort()
				} else {
					assert.NoError(t, c.Destroy())
				}
			})
			start := time.Now()
			err = AdmitAndRun([]Launch{launch})
			assert.Less(t, time.Since(start), 10*time.Second)
			require.ErrorContains(t, err, "waiting for room on the GPU")
			if how == "Abort" {
				require.ErrorIs(t, err, ErrAborted)
				require.NoError(t, c.Destroy())
			} else {
				require.ErrorIs(t, err, ErrDestroyed)
			}
			used, budget := l.Used(gpu)
			assert.Equal(t, 4, budget)
			assert.Equal(t, 4, used, "only the other communicator's launch")
			running.done.Store(true)
			other.Leave(0)
		})
	}
}
