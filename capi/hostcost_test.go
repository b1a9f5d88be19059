//go:build ncclgo_hostcomm

package main

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/internal/benchguard"
	"github.com/ncclgo/ncclgo/internal/hostcomm"
	rtcomm "github.com/ncclgo/ncclgo/runtime/comm"
	rtconfig "github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// hostComm registers a one-rank communicator with no device (its init
// done) under a handle, as ncclCommInitRank would; destroy it with
// ncclCommDestroy.
func hostComm(tb testing.TB) *comm {
	tb.Helper()
	tn, err := tune.New(tune.Topology{NRanks: 1, RanksPerGPU: 1, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 8}, rtconfig.Default(), nil)
	require.NoError(tb, err)
	c := newComm(&comm{op: "CommInitRank", nRanks: 1, blocking: true})
	s := rtcomm.Settings{UntrackedOneRankCopies: defaultOptions().UntrackedOneRankCopies} // as the C ABI's comms
	c.c = hostcomm.Wrap(rtcomm.NewHostOnly(nil, 0, 1, 0, s, tn)).(*ncclgo.Comm)
	c.cctx = new(cuda.Context) // device 0, no handle: streams of it pass the stream check
	c.startOnce.Do(func() { close(c.done) })
	return c
}

// benchCAllReduceInPlace1 is ncclAllReduce's host path (as the Go function
// behind the export: the cgo transition from C is not in it) for an
// in-place 8-byte AllReduce on one rank, outside any group.
func benchCAllReduceInPlace1(b *testing.B) {
	runtime.LockOSThread() // as a cgo callback is
	defer runtime.UnlockOSThread()
	c := hostComm(b)
	defer ncclCommDestroy(c.h)
	// Addresses only: nothing reads through them without a device.
	var mem [8]byte
	var streamObj byte
	buf, stream := unsafe.Pointer(&mem[0]), unsafe.Pointer(&streamObj)
	for b.Loop() {
		if r := capiAllReduce(buf, buf, 2, cFloat32, cSum, c.h, stream, 1); r != cSuccess {
			b.Fatalf("ncclAllReduce: %d: %s", r, lastError())
		}
	}
}

// benchCAllReduceOutOfPlace1 is benchCAllReduceInPlace1 out of place:
// the Go side of the one-rank copy's path (the checks and the call into
// Engine.RunOneRankCopy), without the driver (a host-only engine queues
// nothing).
func benchCAllReduceOutOfPlace1(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c := hostComm(b)
	defer ncclCommDestroy(c.h)
	var mem [16]byte
	var streamObj byte
	send, recv, stream := unsafe.Pointer(&mem[0]), unsafe.Pointer(&mem[8]), unsafe.Pointer(&streamObj)
	for b.Loop() {
		if r := capiAllReduce(send, recv, 2, cFloat32, cSum, c.h, stream, 1); r != cSuccess {
			b.Fatalf("ncclAllReduce: %d: %s", r, lastError())
		}
	}
}

func BenchmarkCAllReduceOutOfPlace1(b *testing.B) {
	b.ReportAllocs()
	benchCAllReduceOutOfPlace1(b)
}

func BenchmarkCAllReduceInPlace1(b *testing.B) {
	b.ReportAllocs()
	benchCAllReduceInPlace1(b)
}

// TestHostCost fails when the C API's host path regresses past twice its
// committed baseline, or allocates more (internal/benchguard).
func TestHostCost(t *testing.T) {
	benchguard.Check(t, "capi/AllReduceInPlace1", benchCAllReduceInPlace1)
	benchguard.Check(t, "capi/AllReduceOutOfPlace1", benchCAllReduceOutOfPlace1)
}
