package comm

import (
	"slices"

	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/transport"
)

// withPATEdges adds to es, when the communicator has one rank per host
// (onePerHost, from the agreed tuning inputs, so every rank decides
// alike), the connections PAT needs (runtime/enqueue's pat.go,
// devicesrc/pat.h): on each of the first enqueue.PATChannels channels,
// both directions between the rank and rank ± d for every distance d of
// enqueue.PATDistances. The result is sorted and without duplicates, like
// edges'.
func withPATEdges(es []transport.Edge, plan enqueue.Comm, onePerHost bool) []transport.Edge {
	me, n := plan.Rank, plan.NRanks
	if !onePerHost || n < 2 {
		return es
	}
	out := slices.Clone(es)
	for ch := range enqueue.PATChannels(plan) {
		for _, d := range enqueue.PATDistances(n) {
			for _, p := range []int{(me + d) % n, (me - d + n) % n} {
				out = append(out, transport.Edge{Channel: ch, From: me, To: p}, transport.Edge{Channel: ch, From: p, To: me})
			}
		}
	}
	slices.SortFunc(out, func(a, b transport.Edge) int {
		return slices.Compare([]int{a.Channel, a.From, a.To}, []int{b.Channel, b.From, b.To})
	})
	return slices.Compact(out)
}
