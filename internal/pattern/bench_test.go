package pattern

import (
	"testing"

	"github.com/ncclgo/ncclgo/kspace"
)

// BenchmarkEncoded and BenchmarkResults8 time the suite's reference for a
// 1 Mi-element f32 Sum: one rank's inputs, and the results over 8 ranks
// (what an 8-rank case computes besides its inputs).
func BenchmarkEncoded(b *testing.B) {
	for b.Loop() {
		_ = Encoded(1, kspace.F32, Sum, 8, 3, 0, 1<<20)
	}
}

func BenchmarkResults8(b *testing.B) {
	for b.Loop() {
		_ = Results(1, kspace.F32, Sum, 8, 1, 0, 1<<20)
	}
}
