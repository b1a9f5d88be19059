package transport

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// aheadStep is one step of TestNETReceiverAheadOverEmptyLLSteps: LL lines
// (0: a step with nothing to move) or SIMPLE bytes.
type aheadStep struct{ proto, n int }

// aheadPlan is a ring AllReduce of one element on a channel that carries
// none of it, then on one that does, as the hosts matrix runs them: runs
// of LL steps of no lines (every step of a collective on a channel with no
// data), between steps with data.
func aheadPlan() []aheadStep {
	var plan []aheadStep
	add := func(n int, st aheadStep) {
		for range n {
			plan = append(plan, st)
		}
	}
	add(20, aheadStep{0, 0})
	add(1, aheadStep{0, 3})
	add(3*generated.Steps+5, aheadStep{0, 0})
	add(1, aheadStep{2, 100})
	add(generated.Steps+3, aheadStep{0, 0})
	add(1, aheadStep{0, 2})
	return plan
}

// An LL receiver does not wait for a step of no lines (ng_prims.h: there
// is no line whose flag it would poll), so its head runs ahead of the
// sender, over every such step, by any number of steps: on a channel that
// carries nothing of a one-element AllReduce all of the collective's
// steps are empty. Its proxy then sees a head far beyond the credits the
// sender has, and must still credit it in a way the sender accepts (the
// sender takes a credit of more than a FIFO's depth for a protocol
// error); the sender must then ship the steps with data that follow.
//
// The fake receiving kernel stores head once at the end of each run of
// empty steps: its proxy sees the run's last store only, as it does on a
// GPU whose kernel runs the empty steps between two of the proxy's
// passes.
func TestNETReceiverAheadOverEmptyLLSteps(t *testing.T) {
	var errMu sync.Mutex
	var proxyErrs []error
	sets, mems := connectNET(t, loNet(t, 1, 1), 2, 1, func(r int, err error) {
		errMu.Lock()
		defer errMu.Unlock()
		proxyErrs = append(proxyErrs, fmt.Errorf("rank %d: %w", r, err))
	})
	send, recv := sets[0].Send[Key{0, 1}], sets[1].Recv[Key{0, 0}]
	require.NotZero(t, send.Flags&generated.ConnStepSizes)
	plan := aheadPlan()
	slotOf := func(m *hostMem, ci generated.ConnInfo, proto int, s uint64) []byte {
		slot := uint64(ci.BuffSizes[proto]) / generated.Steps
		return m.at(ci.Buffs[proto]+(s%generated.Steps)*slot, slot)
	}
	var stop atomic.Bool
	failed := func() bool {
		errMu.Lock()
		defer errMu.Unlock()
		if len(proxyErrs) > 0 {
			stop.Store(true)
		}
		return stop.Load()
	}
	// The receiver first: it runs through the first empty steps alone.
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		head, tail := mems[1].word(recv.Head), mems[1].word(recv.Tail)
		for s, st := range plan {
			s := uint64(s)
			buf := slotOf(mems[1], recv, st.proto, s)
			switch {
			case st.proto == 2:
				if !spin(t, fmt.Sprintf("recv step %d: tail", s), func() bool { return failed() || atomic.LoadUint64(tail) > s }) || stop.Load() {
					return
				}
				for i := range st.n {
					if buf[i] != stepByte(0, s, i) {
						t.Errorf("step %d (SIMPLE) byte %d: %d, want %d", s, i, buf[i], stepByte(0, s, i))
						return
					}
				}
			case st.n == 0:
				if int(s)+1 < len(plan) && plan[s+1] == st {
					continue // the run's stores are one to the proxy
				}
			default:
				for l := range st.n {
					if !spin(t, fmt.Sprintf("recv step %d line %d", s, l), func() bool { return failed() || llReady(buf[16*l:], llFlag(s)) }) || stop.Load() {
						return
					}
					if buf[16*l] != stepByte(0, s, 2*l) || buf[16*l+8] != stepByte(0, s, 2*l+1) {
						t.Errorf("step %d (LL) line %d differs", s, l)
						return
					}
				}
			}
			atomic.StoreUint64(head, s+1)
		}
	}()
	require.True(t, spin(t, "the receiver's empty steps", func() bool { return atomic.LoadUint64(mems[1].word(recv.Head)) >= 20 }))
	// Its proxy credits them before the sender's kernel starts.
	time.Sleep(20 * time.Millisecond)

	head, tail := mems[0].word(send.Head), mems[0].word(send.Tail)
	for s, st := range plan {
		s := uint64(s)
		if !spin(t, fmt.Sprintf("send step %d: credit", s), func() bool { return failed() || atomic.LoadUint64(head)+generated.Steps > s }) || stop.Load() {
			break
		}
		buf := slotOf(mems[0], send, st.proto, s)
		if st.proto == 2 {
			for i := range st.n {
				buf[i] = stepByte(0, s, i)
			}
			postSize(mems[0], send, s, st.n)
			atomic.StoreUint64(tail, s+1)
			continue
		}
		postLLSize(mems[0], send, s, st.n)
		f := uint64(llFlag(s))
		for l := range st.n {
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&buf[16*l+8])), uint64(stepByte(0, s, 2*l+1))|f<<32)
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&buf[16*l])), uint64(stepByte(0, s, 2*l))|f<<32)
		}
	}
	<-recvDone
	errMu.Lock()
	assert.Empty(t, proxyErrs, "proxy errors")
	errMu.Unlock()
	assert.Equal(t, uint64(len(plan)), atomic.LoadUint64(mems[1].word(recv.Head)), "steps the receiver consumed")
	for _, s := range sets {
		require.NoError(t, s.Close())
	}
}
