package ncclgo

import (
	"testing"

	"github.com/ncclgo/ncclgo/internal/benchguard"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// The host path of one call, from the API to the launch, on a one-rank
// communicator with no device (fakeComm): an in-place AllReduce plans no
// copy and no kernel, so everything it costs is the host's (argument
// checks, planning, admission). docs/notes/20261201-hostcost.md has the
// figures.

func benchAllReduceInPlace1(b *testing.B) {
	c := fakeComm(b, 0, 1)
	s := cuda.WrapStream(new(cuda.Context), 0x100)
	for b.Loop() {
		if err := c.AllReduce(0x1000, 0x1000, 2, Float32, Sum, s); err != nil {
			b.Fatal(err)
		}
	}
}

// benchGroupAllReduceInPlace1 is the same call through a Group of its own.
func benchGroupAllReduceInPlace1(b *testing.B) {
	c := fakeComm(b, 0, 1)
	s := cuda.WrapStream(new(cuda.Context), 0x100)
	for b.Loop() {
		g := NewGroup()
		if err := g.AllReduce(c, 0x1000, 0x1000, 2, Float32, Sum, s); err != nil {
			b.Fatal(err)
		}
		if err := g.End(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHostAllReduceInPlace1(b *testing.B) {
	b.ReportAllocs()
	benchAllReduceInPlace1(b)
}

func BenchmarkHostGroupAllReduceInPlace1(b *testing.B) {
	b.ReportAllocs()
	benchGroupAllReduceInPlace1(b)
}

// TestHostCost fails when the host path of a call regresses past twice
// its committed baseline, or allocates more (internal/benchguard).
func TestHostCost(t *testing.T) {
	benchguard.Check(t, "ncclgo/AllReduceInPlace1", benchAllReduceInPlace1)
	benchguard.Check(t, "ncclgo/GroupAllReduceInPlace1", benchGroupAllReduceInPlace1)
}
