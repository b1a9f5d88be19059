package main

import (
	"context"
	"fmt"
	"go/ast"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
)

// guardedExports are the names (without "nccl") of the exported functions
// that return an ncclResult_t: those that defer guard.
func guardedExports(t *testing.T) []string {
	t.Helper()
	_, fds := exports(t)
	var names []string
	for _, fd := range fds {
		if len(fd.Body.List) == 0 {
			continue
		}
		if ds, ok := fd.Body.List[0].(*ast.DeferStmt); ok {
			if fn, _ := ds.Call.Fun.(*ast.Ident); fn != nil && fn.Name == "guard" {
				names = append(names, apiName(fd.Name.Name))
			}
		}
	}
	return names
}

// TestLastErrorEveryFailure calls every exported entry point that returns
// an ncclResult_t on a failure path reachable without a GPU (bad
// arguments, a communicator still initializing, what ncclgo does not
// implement) and checks that each failure leaves a message in
// ncclGetLastError that names the call. A new entry point must be added
// here; only ncclGroupStart cannot fail.
func TestLastErrorEveryFailure(t *testing.T) {
	runtime.LockOSThread() // ncclGroupEnd: no group open on this thread
	defer runtime.UnlockOSThread()
	bogus := (&comm{}).h
	*(*uintptr)(unsafe.Pointer(&bogus)) = 0x7d0000000040
	var id uniqueID
	var out commHandle
	buf := unsafe.Pointer(&id)
	var sink unsafe.Pointer // what calls write through their out argument

	// A communicator still initializing: every call that needs it ready fails.
	busy := newComm(&comm{op: "CommInitRankConfig", rank: 1, nRanks: 2})
	defer busy.forget()
	hb := busy.h

	calls := map[string]func() result{
		"GetVersion":           func() result { return ncclGetVersion(nil) },
		"GetUniqueId":          func() result { return ncclGetUniqueId(nil) },
		"CommInitRank":         func() result { return ncclCommInitRank(&out, 0, id, 0) },
		"CommInitRankConfig":   func() result { return ncclCommInitRankConfig(&out, 2, id, 5, nil) },
		"CommInitRankScalable": func() result { return ncclCommInitRankScalable(&out, 2, 0, 1, nil, nil) },
		"CommInitAll":          func() result { return ncclCommInitAll(nil, 1, nil) },
		"CommFinalize":         func() result { return ncclCommFinalize(hb) },
		"CommDestroy":          func() result { return ncclCommDestroy(bogus) },
		"CommAbort":            func() result { return ncclCommAbort(bogus) },
		"CommGetAsyncError":    func() result { return ncclCommGetAsyncError(hb, nil) },
		"CommCount":            func() result { return ncclCommCount(bogus, nil) },
		"CommCuDevice":         func() result { return ncclCommCuDevice(hb, nil) },
		"CommUserRank":         func() result { return ncclCommUserRank(nil, nil) },
		"CommSplit":            func() result { return ncclCommSplit(hb, 0, 0, &out, nil) },
		"CommShrink":           func() result { return ncclCommShrink(hb, nil, 0, &out, nil, 0) },
		"CommRevoke":           func() result { return ncclCommRevoke(hb, 0) },
		"CommRegister":         func() result { return ncclCommRegister(hb, buf, 8, &sink) },
		"CommDeregister":       func() result { return ncclCommDeregister(hb, buf) },
		"CommWindowRegister":   func() result { return ncclCommWindowRegister(hb, buf, 8, &sink, 0) },
		"CommWindowDeregister": func() result { return ncclCommWindowDeregister(hb, buf) },
		"DevCommCreate":        func() result { return ncclDevCommCreate(hb, buf, buf) },
		"DevCommDestroy":       func() result { return ncclDevCommDestroy(hb, buf) },
		"RedOpCreatePreMulSum": func() result { return ncclRedOpCreatePreMulSum(nil, buf, cFloat32, 1, hb) },
		"RedOpDestroy":         func() result { return ncclRedOpDestroy(cNumOps, hb) },
		"AllReduce":            func() result { return capiAllReduce(buf, buf, 1, cFloat32, cSum, hb, nil, 0) },
		"Reduce":               func() result { return capiReduce(buf, buf, 1, cFloat32, cSum, 0, hb, nil, 0) },
		"ReduceScatter":        func() result { return capiReduceScatter(buf, buf, 1, cNumTypes, cSum, hb, nil, 0) },
		"AllGather":            func() result { return capiAllGather(buf, buf, 1, cFloat32, bogus, nil, 0) },
		"Broadcast":            func() result { return capiBroadcast(buf, buf, 1, cFloat32, 0, hb, nil, 0) },
		"Bcast":                func() result { return capiBcast(buf, 1, cFloat32, 0, hb, nil, 0) },
		"AlltoAll":             func() result { return capiAlltoAll(buf, buf, 1, cBfloat16, hb, nil, 0) },
		"Gather":               func() result { return capiGather(buf, buf, 1, cFloat32, 0, hb, nil, 0) },
		"Scatter":              func() result { return capiScatter(buf, buf, 1, cFloat32, 0, hb, nil, 0) },
		"Send":                 func() result { return capiSend(buf, 1, cFloat32, 1, hb, nil, 0) },
		"Recv":                 func() result { return capiRecv(buf, 1, cFloat32, 1, hb, nil, 0) },
		"MemAlloc":             func() result { return ncclMemAlloc(nil, 8) },
		"MemFree":              func() result { return ncclMemFree(addr(0x7d0000000080)) },
		"GroupEnd":             ncclGroupEnd,
		"GroupSimulateEnd":     func() result { return ncclGroupSimulateEnd(nil) },
	}
	for _, name := range guardedExports(t) {
		if name == "GroupStart" {
			continue
		}
		call, ok := calls[name]
		if !assert.True(t, ok, "nccl%s has no failure in this test: add one", name) {
			continue
		}
		setLastError("")
		r := call()
		assert.NotContains(t, []result{cSuccess, cInProgress}, r, "nccl%s did not fail", name)
		says := "nccl" + name + ": "
		if name == "Bcast" {
			says = "ncclBroadcast: " // ncclBcast is ncclBroadcast in place, and says so
		}
		assert.True(t, strings.HasPrefix(lastError(), says), "nccl%s failed (%d) with last error %q", name, r, lastError())
	}
}

// TestLastErrorAsync: failures reported after the call that caused them
// name it: a nonblocking init that fails in the background sets the last
// error when it fails, and ncclCommGetAsyncError, reporting it, names the
// rank and the init (it used to say only the bootstrap's error).
func TestLastErrorAsync(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c := newComm(&comm{op: "CommInitRankConfig", rank: 1, nRanks: 2})
	out := c.h
	release := make(chan struct{})
	assert.EqualValues(t, cInProgress, c.begin(&out, func(context.Context) (*ncclgo.Comm, error) {
		<-release
		return nil, fmt.Errorf("waiting for rank 0: %w", bootstrap.ErrTimeout)
	}))
	setLastError("")
	close(release)
	<-c.done
	assert.Equal(t, "ncclCommInitRankConfig: rank 1: waiting for rank 0: "+bootstrap.ErrTimeout.Error(), lastError())
	setLastError("")
	var async result
	assert.EqualValues(t, cSuccess, ncclCommGetAsyncError(out, &async))
	assert.EqualValues(t, cRemoteError, async)
	assert.Equal(t, "ncclCommGetAsyncError: rank 1: its ncclCommInitRankConfig failed: waiting for rank 0: "+bootstrap.ErrTimeout.Error(), lastError())

	// An aborted communicator's async error names its rank.
	r := readyComm(0)
	r.rank = 3
	r.c.Abort()
	setLastError("")
	assert.EqualValues(t, cSuccess, ncclCommGetAsyncError(r.h, &async))
	assert.EqualValues(t, cRemoteError, async)
	assert.True(t, strings.HasPrefix(lastError(), "ncclCommGetAsyncError: rank 3: "), lastError())
	assert.Contains(t, lastError(), "aborted")
	assert.EqualValues(t, cSuccess, ncclCommDestroy(r.h))
	assert.EqualValues(t, cSuccess, ncclCommDestroy(out))
}
