package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
)

// TestFailedBlockingInit: a blocking init that fails returns its error,
// sets the caller's ncclComm_t back to NULL and forgets the handle, so a
// later call with it is an invalid argument instead of a use of a comm
// nobody will destroy.
func TestFailedBlockingInit(t *testing.T) {
	runtime.LockOSThread() // no group open on this thread
	defer runtime.UnlockOSThread()
	c := newComm(&comm{op: "CommInitRank", rank: 1, nRanks: 2, blocking: true})
	h := c.h
	out := h
	out = nil
	r := c.begin(&out, func(context.Context) (*ncclgo.Comm, error) {
		return nil, fmt.Errorf("rank 0 never came: %w", bootstrap.ErrTimeout)
	})
	assert.EqualValues(t, cRemoteError, r)
	assert.Nil(t, out, "the failed init's handle is still handed out")
	assert.Contains(t, lastError(), "ncclCommInitRank: rank 1: rank 0 never came")
	_, r = lookup("CommCount", h)
	assert.EqualValues(t, cInvalidArgument, r, "the failed init's handle is still registered")
}

// TestNonblockingInitKeepsHandle: a nonblocking init hands out its handle
// at once; its failure shows through ncclCommGetAsyncError and the handle
// stays until ncclCommDestroy.
func TestNonblockingInitKeepsHandle(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c := newComm(&comm{op: "CommInitRankConfig", rank: 0, nRanks: 2, blocking: false})
	out := c.h
	out = nil
	release := make(chan struct{})
	r := c.begin(&out, func(context.Context) (*ncclgo.Comm, error) {
		<-release
		return nil, fmt.Errorf("x: %w", bootstrap.ErrTimeout)
	})
	assert.EqualValues(t, cInProgress, r)
	assert.Equal(t, c.h, out)
	var async result
	assert.EqualValues(t, cSuccess, ncclCommGetAsyncError(out, &async))
	assert.EqualValues(t, cInProgress, async)
	close(release)
	<-c.done
	assert.EqualValues(t, cSuccess, ncclCommGetAsyncError(out, &async))
	assert.EqualValues(t, cRemoteError, async)
	assert.EqualValues(t, cSuccess, ncclCommDestroy(out))
	assert.EqualValues(t, cInvalidArgument, ncclCommDestroy(out))
}

// TestStaleHandle: a destroyed communicator's handle is never handed out
// again, so a call with it stays an invalid argument even after later
// communicators were made.
func TestStaleHandle(t *testing.T) {
	seen := map[unsafe.Pointer]bool{}
	var stale []unsafe.Pointer
	for range 100 {
		c := newComm(&comm{op: "CommInitRank", nRanks: 1, blocking: true})
		h := c.h
		assert.False(t, seen[unsafe.Pointer(h)], "handle %p handed out twice", h)
		seen[unsafe.Pointer(h)] = true
		stale = append(stale, unsafe.Pointer(h))
		assert.EqualValues(t, cSuccess, ncclCommDestroy(h))
	}
	live := newComm(&comm{op: "CommInitRank", nRanks: 1, blocking: true})
	defer ncclCommDestroy(live.h)
	for _, p := range stale {
		h := live.h
		*(*unsafe.Pointer)(unsafe.Pointer(&h)) = p
		assert.EqualValues(t, cInvalidArgument, ncclCommFinalize(h))
	}
}

// TestConcurrentDestroy: threads using a communicator while another
// destroys it get answers, never a crash or a race (run with -race): only
// one ncclCommDestroy succeeds, and calls after it are invalid arguments.
func TestConcurrentDestroy(t *testing.T) {
	for range 20 {
		c := newComm(&comm{op: "CommInitRankConfig", nRanks: 2, blocking: false})
		h := c.h
		results := make(chan result, 64)
		destroys := make(chan result, 4)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				var async result
				results <- ncclCommGetAsyncError(h, &async)
				results <- ncclCommFinalize(h)
				results <- ncclCommDeregister(h, nil)
			})
			wg.Go(func() { destroys <- ncclCommDestroy(h) })
		}
		wg.Wait()
		close(results)
		close(destroys)
		for r := range results {
			assert.Contains(t, []result{cSuccess, cInvalidArgument, cInvalidUsage}, r)
		}
		ok := 0
		for r := range destroys {
			if r == cSuccess {
				ok++
			} else {
				assert.Contains(t, []result{cInvalidArgument, cInvalidUsage}, r)
			}
		}
		assert.Equal(t, 1, ok, "ncclCommDestroy succeeded %d times on one communicator", ok)
		assert.EqualValues(t, cInvalidArgument, ncclCommDestroy(h))
	}
}

// TestGroupInitsRunTogether: inits queued in a group start together at
// ncclGroupEnd (ranks of one communicator wait for each other), and a
// failed one's error names the call that made it. Their handles stay
// until destroyed.
func TestGroupInitsRunTogether(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	assert.EqualValues(t, cSuccess, ncclGroupStart())
	var started sync.WaitGroup
	started.Add(2)
	var hs [2]*comm
	for i := range hs {
		c := newComm(&comm{op: "CommSplit", rank: -1, parentRank: i, blocking: true, derived: true})
		hs[i] = c
		out := c.h
		out = nil
		assert.EqualValues(t, cSuccess, c.begin(&out, func(context.Context) (*ncclgo.Comm, error) {
			started.Done()
			started.Wait() // both ranks run at once, or neither ends
			if i == 0 {
				return nil, &ncclgo.ArgError{Arg: "color", Value: -7, Want: "a color >= 0"}
			}
			return nil, fmt.Errorf("peer gone: %w", bootstrap.ErrPeerClosed)
		}))
		assert.Equal(t, c.h, out, "a queued init hands out its handle")
	}
	assert.EqualValues(t, cInvalidArgument, ncclGroupEnd(), "the first failure's code")
	assert.Contains(t, lastError(), "ncclCommSplit: the ncclCommSplit child of rank 1: peer gone", "the last failure's message")
	for _, c := range hs {
		assert.EqualValues(t, cSuccess, ncclCommDestroy(c.h))
	}
}

// TestAbandonedGroup: a thread that ends with a group open leaves it to
// no later thread.
func TestAbandonedGroup(t *testing.T) {
	done := make(chan uint64)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		assert.EqualValues(t, cSuccess, ncclGroupStart())
		done <- threadID()
	}()
	abandoned := <-done
	for range 50 {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			assert.NotEqual(t, abandoned, threadID())
			assert.Nil(t, threadGroup(false), "a new thread found an open group")
			done <- 0
		}()
		<-done
	}
}

// TestDerivedStillInitializing: a call on a child of ncclCommSplit or
// ncclCommShrink whose making has not ended names the call that makes it
// and the parent's rank (its own rank is not known yet); it used to say
// "rank -1".
func TestDerivedStillInitializing(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, op := range []string{"CommSplit", "CommShrink"} {
		parent := &comm{op: "CommInitRank", rank: 3, nRanks: 4}
		out := (&comm{}).h // a NULL ncclComm_t
		release := make(chan struct{})
		r := derive(op, parent, &out, false, false, func(context.Context) (*ncclgo.Comm, error) {
			<-release
			return nil, fmt.Errorf("peer gone: %w", bootstrap.ErrPeerClosed)
		})
		assert.EqualValues(t, cInProgress, r)
		assert.EqualValues(t, cInvalidUsage, ncclRedOpDestroy(cNumOps, out))
		msg := lastError()
		assert.Contains(t, msg, "ncclRedOpDestroy: the nccl"+op+" child of rank 3: invalid usage")
		assert.Contains(t, msg, "still initializing")
		assert.NotContains(t, msg, "rank -1")
		close(release)
		var async result
		for ncclCommGetAsyncError(out, &async) == cSuccess && async == cInProgress {
			runtime.Gosched()
		}
		assert.EqualValues(t, cRemoteError, async)
		assert.EqualValues(t, cInvalidUsage, ncclRedOpDestroy(cNumOps, out))
		assert.Contains(t, lastError(), "the nccl"+op+" child of rank 3: invalid usage")
		assert.EqualValues(t, cSuccess, ncclCommDestroy(out))
	}
}

// TestFinalize: ncclCommFinalize is ncclgo's Finalize, so later calls with
// the communicator are refused (it used to be Wait, which refused
// nothing); on a nonblocking communicator it returns ncclInProgress and
// ncclCommGetAsyncError reports when it is done, as NCCL's does. A second
// ncclCommFinalize is an invalid argument.
func TestFinalize(t *testing.T) {
	for _, blocking := range []bool{true, false} {
		c := newComm(&comm{op: "CommInitRankConfig", nRanks: 1, blocking: blocking})
		c.startOnce.Do(func() {})
		c.c = new(ncclgo.Comm) // a communicator with nothing launched
		close(c.done)
		h := c.h
		assert.EqualValues(t, cInvalidArgument, ncclRedOpDestroy(cNumOps, h), "before: not a PreMulSum op of the comm")
		if blocking {
			assert.EqualValues(t, cSuccess, ncclCommFinalize(h))
		} else {
			assert.EqualValues(t, cInProgress, ncclCommFinalize(h))
			var async result
			for ncclCommGetAsyncError(h, &async) == cSuccess && async == cInProgress {
				runtime.Gosched()
			}
			assert.EqualValues(t, cSuccess, async, "the finalize's outcome")
		}
		assert.EqualValues(t, cInvalidUsage, ncclRedOpDestroy(cNumOps, h), "a call after ncclCommFinalize")
		assert.Contains(t, lastError(), "finalized")
		assert.EqualValues(t, cInvalidArgument, ncclCommFinalize(h), "a second ncclCommFinalize")
		assert.Contains(t, lastError(), "not finalized yet")
		c.forget() // a Go communicator without resources: nothing to destroy
	}
}

// TestAbortDuringInit: ncclCommAbort from another thread ends a blocking
// init, which returns ncclInternalError, the code NCCL returns there, with
// ncclGetLastError saying that the abort ended it (it used to say only
// "context canceled", an unexplained internal error).
func TestAbortDuringInit(t *testing.T) {
	for _, why := range []string{"ctx.Err", "context.Cause"} {
		started := make(chan commHandle)
		res := make(chan result)
		go func() {
			runtime.LockOSThread() // no group open on this thread
			defer runtime.UnlockOSThread()
			c := newComm(&comm{op: "CommInitRank", rank: 1, nRanks: 2, blocking: true})
			out := c.h
			res <- c.begin(&out, func(ctx context.Context) (*ncclgo.Comm, error) {
				started <- c.h
				<-ctx.Done()
				if why == "ctx.Err" {
					return nil, fmt.Errorf("waiting for rank 0: %w", ctx.Err())
				}
				return nil, fmt.Errorf("bootstrap: waiting for rank 0: %w", context.Cause(ctx))
			})
		}()
		h := <-started
		assert.EqualValues(t, cSuccess, ncclCommAbort(h))
		assert.EqualValues(t, cInternalError, <-res, why)
		msg := lastError()
		assert.Contains(t, msg, "ncclCommInitRank: rank 1: ", why)
		assert.Contains(t, msg, "the init was aborted by ncclCommAbort", why)
		assert.Contains(t, msg, "waiting for rank 0", why)
		assert.EqualValues(t, cInvalidArgument, ncclCommDestroy(h), "the aborted comm is forgotten")
	}
}
