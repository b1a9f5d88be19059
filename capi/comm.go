package main

/*
#include <stdlib.h>
#include "nccl.h"
*/
import "C"

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// comm is what an ncclComm_t stands for. The handle is an address from
// newHandle, unique for the life of the process, so that a lookup of an
// unknown or destroyed one fails instead of crashing or finding another.
type comm struct {
	h                    C.ncclComm_t
	rank, nRanks, device int
	blocking             bool
	cancel               context.CancelCauseFunc     // cancels the init (errInitAborted: ncclCommAbort)
	done                 chan struct{}               // closed when the init has ended
	ended                atomic.Bool                 // done is closed: goComm's check without a select
	forgotten            atomic.Bool                 // unregistered (forget): the hot cache must not find it
	c                    *ncclgo.Comm                // set when done and the init succeeded
	cctx                 *cuda.Context               // the device's primary context, for the caller's streams
	stream               atomic.Pointer[cuda.Stream] // the stream of the latest call, reused while callers pass the same (wrap)
	initErr              error
	mu                   sync.Mutex
	destroying           bool
	startOnce            sync.Once     // the init starts (or is cancelled) once
	derived              bool          // made by ncclCommSplit or ncclCommShrink: rank and size known once done (from c)
	parentRank           int           // derived: the parent's rank, which names it in messages
	op                   string        // the call that made it, for messages
	finalizing           bool          // ncclCommFinalize was called (under mu)
	finalDone            chan struct{} // a nonblocking comm's: closed when its Finalize has ended (set under mu)
	finalErr             error         // that Finalize's outcome (read once finalDone is closed)
}

// who names c in messages: "rank N", or for a communicator of
// ncclCommSplit or ncclCommShrink, whose rank is known only once it is
// made, the call and the parent's rank.
func (c *comm) who() string {
	if c.derived {
		return fmt.Sprintf("the nccl%s child of rank %d", c.op, c.parentRank)
	}
	return fmt.Sprintf("rank %d", c.rank)
}

// comms maps the live handles to their comms (C.ncclComm_t → *comm): a
// sync.Map, since every call looks its handle up and handles are written
// once and then read many times.
var comms sync.Map

// hot caches comms by handle in front of comms, whose Load hashes an
// interface: one slot per handle of a run of consecutive handles (a
// process's communicators), so threads calling on comms of their own do
// not share one. A slot may hold a forgotten comm, which find skips.
var hot [64]atomic.Pointer[comm]

func hotSlot(h C.ncclComm_t) *atomic.Pointer[comm] {
	return &hot[uintptr(unsafe.Pointer(h))/handleStep%uintptr(len(hot))]
}

// newComm registers c under a new handle: c is complete, since another
// thread may look the handle up from now on.
func newComm(c *comm) *comm {
	c.h = C.ncclComm_t(newHandle())
	c.done = make(chan struct{})
	comms.Store(c.h, c)
	profileStart()
	return c
}

// forget unregisters c and the ncclCommRegister handles the client did not
// deregister (handles are never reused: there is nothing to free).
func (c *comm) forget() {
	c.forgotten.Store(true) // before the Delete: a find that misses comms cannot meet it in hot
	comms.Delete(c.h)
	dropRegistrations(c.h)
}

// lookup returns the comm of a handle, or an invalid-argument result.
func lookup(op string, h C.ncclComm_t) (*comm, result) {
	if h == nil {
		return nil, argError(op, "comm", "NULL", "a communicator from ncclCommInitRank, ncclCommInitRankConfig or ncclCommInitAll")
	}
	c := find(h)
	if c == nil {
		return nil, argError(op, "comm", fmt.Sprintf("%p", unsafe.Pointer(h)), "a live communicator (this one was never created or is destroyed)")
	}
	return c, C.ncclSuccess
}

// find returns the live comm of a handle, or nil; it reports nothing.
func find(h C.ncclComm_t) *comm {
	slot := hotSlot(h)
	if c := slot.Load(); c != nil && c.h == h && !c.forgotten.Load() {
		return c
	}
	v, _ := comms.Load(h)
	c, _ := v.(*comm)
	if c != nil {
		slot.Store(c)
	}
	return c
}

// lookupFor is lookup for a call that writes its answer through out, the
// argument arg: a NULL out is an invalid argument too.
func lookupFor(op string, h C.ncclComm_t, arg string, out unsafe.Pointer, want string) (*comm, result) {
	c, r := lookup(op, h)
	if r != C.ncclSuccess {
		return nil, r
	}
	if out == nil {
		return nil, argError(op, arg, "NULL", want)
	}
	return c, C.ncclSuccess
}

// ready returns c's Go communicator once its init has succeeded.
func (c *comm) ready(op string) (*ncclgo.Comm, result) {
	gc, err := c.goComm()
	if err != nil {
		return nil, fail(op, err)
	}
	return gc, C.ncclSuccess
}

// goComm returns c's Go communicator once its init has succeeded, or an
// error saying why not; it reports nothing.
func (c *comm) goComm() (*ncclgo.Comm, error) {
	if !c.ended.Load() {
		select {
		case <-c.done:
		default:
			return nil, fmt.Errorf("%s: %w: the communicator is still initializing (poll ncclCommGetAsyncError until ncclSuccess)", c.who(), ncclgo.ErrInvalidUsage)
		}
		c.ended.Store(true)
	}
	if c.initErr != nil {
		return nil, fmt.Errorf("%s: %w: the communicator's init failed: %v", c.who(), ncclgo.ErrInvalidUsage, c.initErr)
	}
	return c.c, nil
}

// lookupReady is lookup and ready: the comm of a handle and its Go
// communicator, once its init has succeeded.
func lookupReady(op string, h C.ncclComm_t) (*comm, *ncclgo.Comm, result) {
	c, r := lookup(op, h)
	if r != C.ncclSuccess {
		return nil, nil, r
	}
	gc, r := c.ready(op)
	return c, gc, r
}

// finish records the outcome of c's init.
func (c *comm) finish(gc *ncclgo.Comm, err error) {
	if err == nil && gc != nil {
		var dev cuda.Device
		if dev, err = cuda.GetDevice(c.device); err == nil {
			c.cctx, err = dev.PrimaryContext()
		}
		if err != nil {
			_ = gc.Destroy()
			gc = nil
		}
	}
	c.c, c.initErr = gc, err
	if err != nil {
		setLastError(fmt.Sprintf("nccl%s: %s: %v", c.op, c.who(), err))
	}
	close(c.done)
}

// free destroys (or aborts) the Go communicator and releases the handle.
func (c *comm) free(abort bool) error {
	c.mu.Lock()
	if c.destroying {
		c.mu.Unlock()
		if abort {
			// Another thread destroys (or aborts) c: stop what it may be
			// waiting for, as a watchdog's abort means to.
			c.abortRunning()
			return nil
		}
		return fmt.Errorf("%w: the communicator is already being destroyed", ncclgo.ErrInvalidUsage)
	}
	c.destroying = true
	c.mu.Unlock()
	if abort && c.cancel != nil {
		c.cancel(errInitAborted)
	}
	c.startOnce.Do(func() { // destroyed in a group that never ended
		c.initErr = fmt.Errorf("%w: destroyed before its group ended", ncclgo.ErrInvalidUsage)
		close(c.done)
	})
	<-c.done
	if c.cancel != nil {
		c.cancel(nil)
	}
	var err error
	if c.c != nil {
		if abort {
			c.c.Abort()
		}
		err = c.c.Destroy()
		if abort {
			err = nil // an aborted communicator's Destroy reports the abort
		}
	}
	c.mu.Lock()
	finalDone := c.finalDone
	c.mu.Unlock()
	if finalDone != nil {
		<-finalDone // a background Finalize: Destroy (or Abort) has ended its wait
	}
	if c.cctx != nil {
		_ = c.cctx.Release()
	}
	c.forget()
	profileStop()
	return err
}

// abortRunning ends c's init if it runs, or aborts its Go communicator
// (its kernels stop waiting; Destroy then waits only for them to react).
func (c *comm) abortRunning() {
	if c.cancel != nil {
		c.cancel(errInitAborted)
	}
	select {
	case <-c.done:
		if c.c != nil {
			c.c.Abort()
		}
	default:
	}
}

//export ncclGetUniqueId
func ncclGetUniqueId(out *C.ncclUniqueId) (res result) {
	defer guard("GetUniqueId", &res)
	if out == nil {
		return argError("GetUniqueId", "uniqueId", "NULL", "a pointer to an ncclUniqueId")
	}
	id, err := ncclgo.GetUniqueID(context.Background())
	if err != nil {
		return fail("GetUniqueId", err)
	}
	*out = C.ncclUniqueId{}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&out.internal[0])), len(out.internal)), id[:])
	return C.ncclSuccess
}

// defaultOptions are the options of a communicator made through the C
// ABI before its config applies: the kernel set beside the library, and
// one-rank copies that nothing waits for (C has no ncclgo Wait, and NCCL's
// ncclCommFinalize and ncclCommDestroy do not wait for them).
func defaultOptions() *ncclgo.Options {
	return &ncclgo.Options{KernelImage: besideImage(), UntrackedOneRankCopies: true}
}

// config is what a ncclConfig_t asks for.
type config struct {
	blocking bool
	opts     *ncclgo.Options
}

// readConfig checks and reads cfg (NULL: the defaults).
func readConfig(op string, cfg *C.ncclConfig_t) (config, result) {
	out := config{blocking: true, opts: defaultOptions()}
	if cfg == nil {
		return out, C.ncclSuccess
	}
	if cfg.magic != 0xcafebeef {
		return out, argError(op, "config.magic", fmt.Sprintf("%#x", uint32(cfg.magic)), "0xcafebeef: initialize ncclConfig_t with NCCL_CONFIG_INITIALIZER")
	}
	size := uintptr(cfg.size)
	if size < unsafe.Offsetof(cfg.blocking)+unsafe.Sizeof(cfg.blocking) || size > 1<<16 {
		return out, argError(op, "config.size", size, fmt.Sprintf("sizeof(ncclConfig_t) of NCCL 2.14 or later (%d in this nccl.h)", unsafe.Sizeof(*cfg)))
	}
	cfg = effectiveConfig(cfg)
	switch cfg.blocking {
	case C.NCCL_CONFIG_UNDEF_INT, 1:
	case 0:
		out.blocking = false
	default:
		return out, argError(op, "config.blocking", int(cfg.blocking), "0 (nonblocking), 1 (blocking) or NCCL_CONFIG_UNDEF_INT")
	}
	ctas := func(name string, v C.int, dst **int) result {
		switch {
		case v == C.NCCL_CONFIG_UNDEF_INT:
		case v < 1:
			return argError(op, "config."+name, int(v), "a count >= 1 or NCCL_CONFIG_UNDEF_INT")
		default:
			n := min(int(v), 64) // NCCL caps both at its 64 channels
			*dst = &n
		}
		return C.ncclSuccess
	}
	if r := ctas("minCTAs", cfg.minCTAs, &out.opts.MinNChannels); r != C.ncclSuccess {
		return out, r
	}
	if r := ctas("maxCTAs", cfg.maxCTAs, &out.opts.MaxNChannels); r != C.ncclSuccess {
		return out, r
	}
	if mn, mx := out.opts.MinNChannels, out.opts.MaxNChannels; mn != nil && mx != nil && *mn > *mx {
		return out, argError(op, "config.minCTAs", *mn, fmt.Sprintf("at most config.maxCTAs (%d)", *mx))
	}
	// The other fields: configFields (config.go) says what each does.
	return out, checkHints(op, cfg)
}

// checkID validates a unique id's bytes.
func checkID(op string, id *C.ncclUniqueId) (bootstrap.UniqueID, result) {
	var u bootstrap.UniqueID
	copy(u[:], unsafe.Slice((*byte)(unsafe.Pointer(&id.internal[0])), len(id.internal)))
	if _, err := bootstrap.ParseUniqueID(hex.EncodeToString(u[:])); err != nil {
		return u, fail(op, fmt.Errorf("commId: %w", err))
	}
	return u, C.ncclSuccess
}

// currentDevice is the calling thread's device, as cudaGetDevice says.
func currentDevice(op string) (int, result) {
	d, ok, err := cuda.CurrentDevice()
	if err != nil {
		return 0, fail(op, fmt.Errorf("the calling thread's CUDA device: %w", err))
	}
	if !ok {
		return 0, C.ncclSuccess // no current context: cudart's device 0
	}
	return int(d), C.ncclSuccess
}

// initRank starts (in a group: queues) the init of one rank.
func initRank(op string, out *C.ncclComm_t, nRanks C.int, id *C.ncclUniqueId, rank C.int, cfg *C.ncclConfig_t) result {
	return initRanks(op, out, nRanks, unsafe.Slice(id, 1), rank, cfg)
}

// initRanks is initRank with the unique ids of several bootstrap roots
// (ncclCommInitRankScalable).
func initRanks(op string, out *C.ncclComm_t, nRanks C.int, ids []C.ncclUniqueId, rank C.int, cfg *C.ncclConfig_t) result {
	if out == nil {
		return argError(op, "comm", "NULL", "a pointer to an ncclComm_t")
	}
	*out = nil
	if nRanks < 1 || nRanks > bootstrap.MaxRanks {
		return argError(op, "nranks", int(nRanks), fmt.Sprintf("1..%d", bootstrap.MaxRanks))
	}
	if rank < 0 || rank >= nRanks {
		return argError(op, "rank", int(rank), fmt.Sprintf("0..%d", nRanks-1))
	}
	us := make([]ncclgo.UniqueID, len(ids))
	for i := range ids {
		u, r := checkID(op, &ids[i])
		if r != C.ncclSuccess {
			return r
		}
		us[i] = ncclgo.UniqueID(u)
	}
	conf, r := readConfig(op, cfg)
	if r != C.ncclSuccess {
		return r
	}
	dev, r := currentDevice(op)
	if r != C.ncclSuccess {
		return r
	}
	c := newComm(&comm{op: op, rank: int(rank), nRanks: int(nRanks), device: dev, blocking: conf.blocking})
	return c.begin(out, func(ctx context.Context) (*ncclgo.Comm, error) {
		return ncclgo.InitRankScalable(ctx, c.nRanks, us, c.rank, c.device, conf.opts)
	})
}

// begin runs c's init: at once, or at the thread's ncclGroupEnd within a
// group; blocking, or in the background for a nonblocking comm. It sets
// *out to c's handle (a comm without one, NCCL_SPLIT_NOCOLOR's, leaves it
// alone). A blocking init that fails at once sets *out back to NULL and
// forgets the handle, as NCCL does.
func (c *comm) begin(out *C.ncclComm_t, run func(context.Context) (*ncclgo.Comm, error)) result {
	ctx, cancel := context.WithCancelCause(context.Background())
	c.cancel = cancel
	start := func() {
		c.startOnce.Do(func() {
			go func() {
				gc, err := recovered(func() (*ncclgo.Comm, error) { return run(ctx) })
				if err != nil && errors.Is(context.Cause(ctx), errInitAborted) && !errors.Is(err, errInitAborted) {
					err = fmt.Errorf("%w (%v)", errInitAborted, err) // a step that reported ctx.Err()
				}
				c.finish(gc, err)
			}()
		})
	}
	if c.h != nil {
		*out = c.h
	}
	if g := threadGroup(false); g != nil {
		g.inits = append(g.inits, pendingInit{c: c, start: start})
		return C.ncclSuccess
	}
	start()
	r := c.wait(c.op)
	switch {
	case c.h == nil && r == C.ncclInProgress:
		return C.ncclSuccess // no communicator to poll: its part goes on in the background
	case c.h != nil && r != C.ncclSuccess && r != C.ncclInProgress:
		*out = nil
		cancel(nil)
		c.forget()
	}
	return r
}

// wait waits for a blocking comm's init (a nonblocking one reports
// ncclInProgress instead).
func (c *comm) wait(op string) result {
	if !c.blocking {
		select {
		case <-c.done:
		default:
			return C.ncclInProgress
		}
	}
	<-c.done
	if c.initErr != nil {
		r := resultOf(c.initErr)
		setLastError(fmt.Sprintf("nccl%s: %s: %v", op, c.who(), c.initErr))
		return r
	}
	return C.ncclSuccess
}

//export ncclCommInitRank
func ncclCommInitRank(out *C.ncclComm_t, nRanks C.int, id C.ncclUniqueId, rank C.int) (res result) {
	defer guard("CommInitRank", &res)
	return initRank("CommInitRank", out, nRanks, &id, rank, nil)
}

//export ncclCommInitRankConfig
func ncclCommInitRankConfig(out *C.ncclComm_t, nRanks C.int, id C.ncclUniqueId, rank C.int, cfg *C.ncclConfig_t) (res result) {
	defer guard("CommInitRankConfig", &res)
	return initRank("CommInitRankConfig", out, nRanks, &id, rank, cfg)
}

//export ncclCommInitRankScalable
func ncclCommInitRankScalable(out *C.ncclComm_t, nRanks, rank, nID C.int, ids *C.ncclUniqueId, cfg *C.ncclConfig_t) (res result) {
	defer guard("CommInitRankScalable", &res)
	const op = "CommInitRankScalable"
	if ids == nil {
		return argError(op, "commIds", "NULL", "an array of nId ncclUniqueIds")
	}
	if nID < 1 || nID > nRanks {
		return argError(op, "nId", int(nID), "1..nranks")
	}
	if maxIDs := min(C.int(bootstrap.MaxRoots), nRanks); nID > maxIDs {
		return argError(op, "nId", int(nID), fmt.Sprintf("1..%d (at most %d roots)", maxIDs, bootstrap.MaxRoots))
	}
	return initRanks(op, out, nRanks, unsafe.Slice(ids, nID), rank, cfg)
}

//export ncclCommInitAll
func ncclCommInitAll(out *C.ncclComm_t, nDev C.int, devList *C.int) (res result) {
	defer guard("CommInitAll", &res)
	const op = "CommInitAll"
	if out == nil {
		return argError(op, "comm", "NULL", "an array of ndev ncclComm_t")
	}
	if nDev < 1 || nDev > bootstrap.MaxRanks { // before ndev sizes anything
		return argError(op, "ndev", int(nDev), fmt.Sprintf("1..%d", bootstrap.MaxRanks))
	}
	devs := make([]int, nDev)
	for i := range devs {
		devs[i] = i
		if devList != nil {
			devs[i] = int(unsafe.Slice(devList, nDev)[i])
			if devs[i] < 0 {
				return argError(op, fmt.Sprintf("devlist[%d]", i), devs[i], "a device ordinal >= 0")
			}
		}
	}
	outs := unsafe.Slice(out, nDev)
	clear(outs)
	var gcs []*ncclgo.Comm
	var err error
	done := make(chan struct{})
	go func() { // off the caller's thread: its current context stays
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				err = panicError(p)
			}
		}()
		gcs, err = ncclgo.InitAll(context.Background(), devs, defaultOptions())
	}()
	<-done
	if err != nil {
		return fail(op, err)
	}
	// finish retains each device's primary context, and destroys on
	// failure, on this thread: keep the caller's context.
	return keepContext(func() result {
		made := make([]*comm, 0, len(gcs))
		for i, gc := range gcs {
			c := newComm(&comm{op: op, rank: i, nRanks: len(gcs), device: devs[i], blocking: true})
			made = append(made, c)
			c.startOnce.Do(func() { c.finish(gc, nil) })
			if c.initErr == nil {
				outs[i] = c.h
				continue
			}
			// Hand out none of them: free the ranks made so far (c's
			// init already destroyed its Go comm) and the Go comms not
			// yet wrapped.
			for _, m := range made {
				_ = m.free(true)
			}
			for _, gc := range gcs[i+1:] {
				gc.Abort()
				_ = gc.Destroy()
			}
			clear(outs)
			return fail(op, c.initErr)
		}
		return C.ncclSuccess
	})
}

// ncclCommFinalize finalizes the communicator (ncclgo's Comm.Finalize):
// later calls with it are refused, and it waits for what the communicator
// launched. A blocking communicator waits here; a nonblocking one
// finalizes in the background and returns ncclInProgress, and
// ncclCommGetAsyncError reports ncclInProgress until it is done, then its
// outcome (as NCCL does). A second ncclCommFinalize is an invalid
// argument, as in NCCL.
//
//export ncclCommFinalize
func ncclCommFinalize(h C.ncclComm_t) (res result) {
	defer guard("CommFinalize", &res)
	const op = "CommFinalize"
	c, gc, r := lookupReady(op, h)
	if r != C.ncclSuccess {
		return r
	}
	c.mu.Lock()
	if c.finalizing {
		c.mu.Unlock()
		return argError(op, "comm", fmt.Sprintf("%p", unsafe.Pointer(h)), "a communicator not finalized yet (ncclCommFinalize was called on it before)")
	}
	c.finalizing = true
	if c.blocking {
		c.mu.Unlock()
		return keepContext(func() result { return fail(op, gc.Finalize(context.Background())) })
	}
	done := make(chan struct{})
	c.finalDone = done
	c.mu.Unlock()
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				c.finalErr = panicError(p)
			}
		}()
		c.finalErr = gc.Finalize(context.Background())
	}()
	return C.ncclInProgress
}

// finalizeState is what a nonblocking comm's ncclCommFinalize reports to
// ncclCommGetAsyncError: ncclInProgress while it runs, then its error (nil
// also when none was called).
func (c *comm) finalizeState() (inProgress bool, err error) {
	c.mu.Lock()
	done := c.finalDone
	c.mu.Unlock()
	if done == nil {
		return false, nil
	}
	select {
	case <-done:
		return false, c.finalErr
	default:
		return true, nil
	}
}

//export ncclCommDestroy
func ncclCommDestroy(h C.ncclComm_t) (res result) {
	defer guard("CommDestroy", &res)
	const op = "CommDestroy"
	if h == nil {
		return C.ncclSuccess // NCCL accepts a NULL communicator here
	}
	c, r := lookup(op, h)
	if r != C.ncclSuccess {
		return r
	}
	return keepContext(func() result { return fail(op, c.free(false)) })
}

//export ncclCommAbort
func ncclCommAbort(h C.ncclComm_t) (res result) {
	defer guard("CommAbort", &res)
	const op = "CommAbort"
	if h == nil {
		return C.ncclSuccess
	}
	c, r := lookup(op, h)
	if r != C.ncclSuccess {
		return r
	}
	return keepContext(func() result { return fail(op, c.free(true)) })
}

//export ncclCommGetAsyncError
func ncclCommGetAsyncError(h C.ncclComm_t, out *C.ncclResult_t) (res result) {
	defer guard("CommGetAsyncError", &res)
	const op = "CommGetAsyncError"
	c, r := lookupFor(op, h, "asyncError", unsafe.Pointer(out), "a pointer to an ncclResult_t")
	if r != C.ncclSuccess {
		return r
	}
	select {
	case <-c.done:
	default:
		*out = C.ncclInProgress
		return C.ncclSuccess
	}
	err := c.initErr
	if err == nil {
		err = c.c.Err()
	}
	if err == nil {
		var busy bool
		if busy, err = c.finalizeState(); busy {
			*out = C.ncclInProgress
			return C.ncclSuccess
		}
	}
	if err != nil {
		if c.initErr != nil {
			err = fmt.Errorf("%s: its nccl%s failed: %w", c.who(), c.op, err)
		} else {
			err = fmt.Errorf("%s: %w", c.who(), err)
		}
		*out = fail(op, err)
	} else {
		*out = C.ncclSuccess
	}
	return C.ncclSuccess
}

func commInt(op, arg string, h C.ncclComm_t, out *C.int, get func(*comm) int) result {
	c, r := lookupFor(op, h, arg, unsafe.Pointer(out), "a pointer to an int")
	if r != C.ncclSuccess {
		return r
	}
	if c.derived {
		select {
		case <-c.done:
		default:
			return C.ncclInProgress // its rank and size are not known yet
		}
	}
	*out = C.int(get(c))
	return C.ncclSuccess
}

//export ncclCommCount
func ncclCommCount(h C.ncclComm_t, count *C.int) (res result) {
	defer guard("CommCount", &res)
	return commInt("CommCount", "count", h, count, func(c *comm) int {
		if c.derived && c.c != nil {
			return c.c.Size()
		}
		return c.nRanks
	})
}

//export ncclCommCuDevice
func ncclCommCuDevice(h C.ncclComm_t, device *C.int) (res result) {
	defer guard("CommCuDevice", &res)
	return commInt("CommCuDevice", "device", h, device, func(c *comm) int { return c.device })
}

//export ncclCommUserRank
func ncclCommUserRank(h C.ncclComm_t, rank *C.int) (res result) {
	defer guard("CommUserRank", &res)
	return commInt("CommUserRank", "rank", h, rank, func(c *comm) int {
		if c.derived && c.c != nil {
			return c.c.Rank()
		}
		return c.rank
	})
}

//export ncclCommSplit
func ncclCommSplit(h C.ncclComm_t, color, key C.int, newComm *C.ncclComm_t, cfg *C.ncclConfig_t) (res result) {
	defer guard("CommSplit", &res)
	// A bad color goes to Split all the same: the exchange tells the
	// other ranks, which then fail at once instead of waiting for this one.
	return deriveFrom("CommSplit", h, newComm, cfg, color == C.NCCL_SPLIT_NOCOLOR, func(gc *ncclgo.Comm) (deriveFunc, result) {
		return func(ctx context.Context, opts *ncclgo.Options) (*ncclgo.Comm, error) {
			return gc.Split(ctx, int(color), int(key), opts)
		}, C.ncclSuccess
	})
}

//export ncclCommShrink
func ncclCommShrink(h C.ncclComm_t, exclude *C.int, nExclude C.int, newComm *C.ncclComm_t, cfg *C.ncclConfig_t, flags C.int) (res result) {
	defer guard("CommShrink", &res)
	const op = "CommShrink"
	return deriveFrom(op, h, newComm, cfg, false, func(gc *ncclgo.Comm) (deriveFunc, result) {
		// The count bounds the read of the list: at most the parent's size.
		if n := gc.Size(); nExclude < 0 || int(nExclude) > n || (nExclude > 0 && exclude == nil) {
			return nil, argError(op, "excludeRanksCount", int(nExclude),
				fmt.Sprintf("0..%d (the parent's size), the length of a non-NULL excludeRanksList", n))
		}
		if flags != C.NCCL_SHRINK_DEFAULT && flags != C.NCCL_SHRINK_ABORT {
			return nil, argError(op, "shrinkFlags", int(flags), "NCCL_SHRINK_DEFAULT (0) or NCCL_SHRINK_ABORT (1)")
		}
		list := make([]int, nExclude)
		if nExclude > 0 {
			for i, r := range unsafe.Slice(exclude, nExclude) {
				list[i] = int(r)
			}
		}
		return func(ctx context.Context, opts *ncclgo.Options) (*ncclgo.Comm, error) {
			return gc.Shrink(ctx, list, opts, flags == C.NCCL_SHRINK_ABORT)
		}, C.ncclSuccess
	})
}

// deriveFunc makes a communicator from a parent with the child's options.
type deriveFunc func(context.Context, *ncclgo.Options) (*ncclgo.Comm, error)

// deriveFrom is what ncclCommSplit and ncclCommShrink share: it checks the
// parent h and newComm, sets *newComm to NULL, and once the parent is
// ready, lets prepare check the call's own arguments against it; then it
// reads cfg (NULL inherits the parent's) and runs the derivation as an
// init (see derive). noComm: NCCL_SPLIT_NOCOLOR.
func deriveFrom(op string, h C.ncclComm_t, newComm *C.ncclComm_t, cfg *C.ncclConfig_t, noComm bool, prepare func(*ncclgo.Comm) (deriveFunc, result)) result {
	parent, r := lookupFor(op, h, "newcomm", unsafe.Pointer(newComm), "a pointer to an ncclComm_t")
	if r != C.ncclSuccess {
		return r
	}
	*newComm = nil
	gc, r := parent.ready(op)
	if r != C.ncclSuccess {
		return r
	}
	run, r := prepare(gc)
	if r != C.ncclSuccess {
		return r
	}
	blocking, opts, r := deriveConfig(op, parent, cfg)
	if r != C.ncclSuccess {
		return r
	}
	return derive(op, parent, newComm, noComm, blocking, func(ctx context.Context) (*ncclgo.Comm, error) {
		return run(ctx, opts)
	})
}

// deriveConfig reads the config of a communicator made by ncclCommSplit or
// ncclCommShrink: NULL inherits the parent's (its options, and whether it
// blocks).
func deriveConfig(op string, parent *comm, cfg *C.ncclConfig_t) (bool, *ncclgo.Options, result) {
	if cfg == nil {
		return parent.blocking, nil, C.ncclSuccess
	}
	conf, r := readConfig(op, cfg)
	return conf.blocking, conf.opts, r
}

// derive runs the making of a communicator from parent (a Split or
// Shrink), as an init: now, or at ncclGroupEnd within a group; blocking, or
// in the background for a nonblocking config. noComm: this rank gets no
// communicator (NCCL_SPLIT_NOCOLOR) but takes part all the same.
func derive(op string, parent *comm, out *C.ncclComm_t, noComm, blocking bool, run func(context.Context) (*ncclgo.Comm, error)) result {
	if noComm { // no handle; the parent's rank names it in messages
		c := &comm{op: op, rank: parent.rank, device: parent.device, blocking: blocking, done: make(chan struct{})}
		return c.begin(out, run)
	}
	c := newComm(&comm{op: op, rank: -1, parentRank: parent.rank, device: parent.device, blocking: blocking, derived: true})
	return c.begin(out, run)
}

//export ncclCommRevoke
func ncclCommRevoke(h C.ncclComm_t, flags C.int) (res result) {
	defer guard("CommRevoke", &res)
	const op = "CommRevoke"
	if _, r := lookup(op, h); r != C.ncclSuccess {
		return r
	}
	if flags != 0 {
		return argError(op, "revokeFlags", int(flags), "NCCL_REVOKE_DEFAULT (0)")
	}
	return notImplemented(op, "revoking a communicator")
}

// countArg converts a size_t count, failing on counts Go cannot index.
func countArg(op, arg string, n C.size_t) (int, result) {
	if uint64(n) > math.MaxInt64 {
		return 0, argError(op, arg, uint64(n), "a count below 2^63")
	}
	return int(n), C.ncclSuccess
}
