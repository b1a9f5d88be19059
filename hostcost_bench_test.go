package ncclgo

import (
	"testing"

	"github.com/ncclgo/ncclgo/runtime/cuda"
)

func BenchmarkHostAllReduceInPlace1(b *testing.B) {
	c := fakeComm(b, 0, 1)
	s := cuda.WrapStream(new(cuda.Context), 0x100)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.AllReduce(0x1000, 0x1000, 2, Float32, Sum, s); err != nil {
			b.Fatal(err)
		}
	}
}
