package enqueue

import (
	"testing"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
)

// BenchmarkSmallAllReduce measures the host cost of planning and packing
// one 8-byte AllReduce (the latency-bound case), without the launch itself.
func BenchmarkSmallAllReduce(b *testing.B) {
	c := Comm{Rank: 0, NRanks: 2, NChannels: 32, P2PChannelsPerPeer: 2}
	tasks := []Task{{Coll: kspace.AllReduce, Send: 1 << 20, Recv: 2 << 20, Bytes: 2 * 4, Type: kspace.F32, Op: kspace.Sum}}
	ch := fixedChooser{algo: kspace.Ring, proto: kspace.LL, nc: 1, nt: 128}
	var args generated.KernelArgs
	b.ReportAllocs()
	for b.Loop() {
		p, err := Build(c, tasks, ch, GeneratedLookup)
		if err != nil {
			b.Fatal(err)
		}
		p.Launches[0].PutArgs(&args, 0x1000, 0)
	}
}
