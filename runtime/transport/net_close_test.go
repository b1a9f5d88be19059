package transport

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	ncclnet "github.com/ncclgo/ncclgo/runtime/net"
)

// closeStep is what the close tests' fake kernel posts as step s: a
// whole SIMPLE slot (it travels apart from its header) or llLines LL lines.
const llLines = 300

func closeByte(s uint64, i int) byte { return byte(int(s)*31 + i*7 + 1) }

// postSteps posts k steps on ci as a sending kernel does, and returns
// without waiting for anything (k <= Steps need no credit).
func postSteps(t *testing.T, m *hostMem, ci generated.ConnInfo, ll bool, k uint64) {
	t.Helper()
	require.LessOrEqual(t, k, uint64(generated.Steps))
	for s := range k {
		if !ll {
			slot := uint64(ci.BuffSizes[2]) / generated.Steps
			buf := m.at(ci.Buffs[2]+(s%generated.Steps)*slot, slot)
			for i := range buf {
				buf[i] = closeByte(s, i)
			}
			postSize(m, ci, s, len(buf))
			atomic.StoreUint64(m.word(ci.Tail), s+1)
			continue
		}
		slot := uint64(ci.BuffSizes[0]) / generated.Steps
		buf := m.at(ci.Buffs[0]+(s%generated.Steps)*slot, slot)
		postLLSize(m, ci, s, llLines)
		f := uint64(llFlag(s))
		for l := range llLines {
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&buf[16*l+8])), uint64(closeByte(s, 2*l+1))|f<<32)
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&buf[16*l])), uint64(closeByte(s, 2*l))|f<<32)
		}
	}
}

// received waits (at most 10 s) for the k steps on ci and checks them; it
// returns how many arrived whole.
func received(m *hostMem, ci generated.ConnInfo, ll bool, k uint64) (uint64, error) {
	deadline := time.Now().Add(10 * time.Second)
	wait := func(cond func() bool) bool {
		for !cond() {
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(100 * time.Microsecond)
		}
		return true
	}
	for s := range k {
		if !ll {
			if !wait(func() bool { return atomic.LoadUint64(m.word(ci.Tail)) > s }) {
				return s, nil
			}
			slot := uint64(ci.BuffSizes[2]) / generated.Steps
			buf := m.at(ci.Buffs[2]+(s%generated.Steps)*slot, slot)
			for i := range buf {
				if buf[i] != closeByte(s, i) {
					return s, fmt.Errorf("SIMPLE step %d byte %d: %#x, want %#x", s, i, buf[i], closeByte(s, i))
				}
			}
			continue
		}
		slot := uint64(ci.BuffSizes[0]) / generated.Steps
		buf := m.at(ci.Buffs[0]+(s%generated.Steps)*slot, slot)
		for l := range llLines {
			if !wait(func() bool { return llReady(buf[16*l:], llFlag(s)) }) {
				return s, nil
			}
			if buf[16*l] != closeByte(s, 2*l) || buf[16*l+8] != closeByte(s, 2*l+1) {
				return s, fmt.Errorf("LL step %d line %d differs", s, l)
			}
		}
	}
	return k, nil
}

// A sending kernel is done once its steps are in the staging, so its rank
// may destroy the communicator at once: Close ships them first, and the
// receiver gets every step (before, it got 1 of 3 and no error, and its
// kernel waited for ever: the hosts matrix's last case).
func TestNETCloseShipsPostedSteps(t *testing.T) {
	for _, sock := range []struct{ threads, socks int }{{1, 1}, {4, 1}} {
		for _, ll := range []bool{false, true} {
			for _, k := range []uint64{1, 3, 8} {
				proto := map[bool]string{false: "SIMPLE", true: "LL"}[ll]
				t.Run(fmt.Sprintf("%dx%dsockets/%s/%dsteps", sock.threads, sock.socks, proto, k), func(t *testing.T) {
					errs := make(chan error, 8)
					sets, mems := connectNETSizes(t, loNet(t, sock.threads, sock.socks), 2, 1, p2pSizes, func(r int, err error) { errs <- fmt.Errorf("rank %d: %w", r, err) })
					sc := netConnOf(t, sets[1], true)
					postSteps(t, mems[1], sets[1].Send[Key{0, 0}], ll, k) // rank 1 -> rank 0
					start := time.Now()
					require.NoError(t, sets[1].Close()) // rank 1's Destroy: its kernel is done
					t.Logf("rank 1's Close took %v", time.Since(start))
					assert.Equal(t, uint64(1), sc.drainAsk.Load(), "Close asked its proxy to drain")
					got, err := received(mems[0], sets[0].Recv[Key{0, 1}], ll, k)
					require.NoError(t, err)
					assert.Equal(t, k, got, "steps that rank 0 received of the %d rank 1 posted before closing", k)
					require.NoError(t, sets[0].Close())
					select {
					case err := <-errs:
						t.Fatalf("proxy error: %v", err)
					default:
					}
				})
			}
		}
	}
}

// A sender whose peer vanished (its process killed, without goodbye)
// closes promptly: the proxy fails the connection, and Close does not
// wait for a drain that cannot finish.
func TestNETCloseAfterPeerVanished(t *testing.T) {
	errs := make(chan error, 8)
	sets, mems := connectNETSizes(t, loNet(t, 1, 1), 2, 1, p2pSizes, func(r int, err error) {
		if r == 1 {
			errs <- err
		}
	})
	for _, r := range sets[0].regions {
		if nr, ok := r.(*netRegion); ok {
			require.NoError(t, nr.pc.leave(nr.eng))
			nr.pc.killed = true
		}
	}
	require.NoError(t, sets[0].Close())
	postSteps(t, mems[1], sets[1].Send[Key{0, 0}], false, generated.Steps)
	start := time.Now()
	err := sets[1].Close()
	took := time.Since(start)
	assert.False(t, errors.Is(err, context.DeadlineExceeded), "Close waited out its drain: %v", err)
	assert.Less(t, took, netDrainWait/2, "Close after the peer vanished")
	t.Logf("Close took %v (%v)", took, err)
}

// An aborted communicator's Close does not drain (Abort stays fast): it
// neither asks the proxy nor waits, whatever the kernels posted.
func TestNETAbortedCloseDoesNotDrain(t *testing.T) {
	sets, mems := connectNETSizes(t, loNet(t, 1, 1), 2, 1, p2pSizes, func(int, error) {})
	var aborted atomic.Bool
	for _, set := range sets {
		for _, r := range set.regions {
			if nr, ok := r.(*netRegion); ok {
				nr.aborted = aborted.Load
			}
		}
	}
	// Rank 0's proxy stops serving its receiver, so that a drain could
	// not count on it.
	rc := netConnOf(t, sets[0], false)
	for _, r := range sets[0].regions {
		if nr, ok := r.(*netRegion); ok && nr.pc == rc {
			require.NoError(t, rc.leave(nr.eng))
		}
	}
	sc := netConnOf(t, sets[1], true)
	postSteps(t, mems[1], sets[1].Send[Key{0, 0}], false, generated.Steps)
	aborted.Store(true)
	start := time.Now()
	_ = sets[1].Close()
	assert.Zero(t, sc.drainAsk.Load(), "an aborted Close asked its proxy to drain")
	assert.Less(t, time.Since(start), time.Second, "an aborted Close")
	_ = sets[0].Close()
}

// A receiver that closes while its sender's kernel has posted steps it did
// not consume (mid-transfer) leaves the sender an error naming the peer,
// not a silent stop its kernel would wait on for ever; a receiver that
// consumed everything is no error (TestNETCleanCloseIsNoError, and the
// steps tests that close after their kernels).
func TestNETReceiverCloseMidTransferFailsSender(t *testing.T) {
	errs := make(chan error, 8)
	sets, mems := connectNETSizes(t, loNet(t, 1, 1), 2, 1, p2pSizes, func(r int, err error) {
		if r == 1 {
			errs <- err
		}
	})
	ci, in := sets[1].Send[Key{0, 0}], sets[0].Recv[Key{0, 1}]
	postSteps(t, mems[1], ci, false, 3)
	got, err := received(mems[0], in, false, 3)
	require.NoError(t, err)
	require.Equal(t, uint64(3), got)
	atomic.StoreUint64(mems[0].word(in.Head), 1) // rank 0's kernel consumed 1 of the 3
	require.NoError(t, sets[0].Close())
	select {
	case err := <-errs:
		require.ErrorIs(t, err, ncclnet.ErrPeer)
		require.ErrorContains(t, err, "rank 1 sending to rank 0")
		require.ErrorContains(t, err, "without consuming 2 step(s)")
	case <-time.After(10 * time.Second):
		t.Fatal("rank 1's proxy reported nothing within 10 s of its receiver's close mid-transfer")
	}
	require.NoError(t, sets[1].Close())
}
