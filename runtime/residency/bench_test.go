package residency

import (
	"context"
	"testing"
)

// BenchmarkGroupOf8 is the launch path's cost when nothing waits: one
// communicator of 8 ranks on one GPU admitting a group per iteration.
func BenchmarkGroupOf8(b *testing.B) {
	l := New()
	local := map[string]int{"0": 8}
	s, err := l.Join("A", "0", 132, local, 16)
	if err != nil {
		b.Fatal(err)
	}
	done := &fake{}
	done.finish()
	reqs := make([]Request, 8)
	ctx := context.Background()
	var seq uint64
	for b.Loop() {
		for r := range reqs {
			reqs[r] = Request{Lease: s, Rank: r, Seq: seq, Blocks: 16}
		}
		tk, err := l.Acquire(reqs, nil)
		if err != nil {
			b.Fatal(err)
		}
		for range reqs {
			// as ncclgo's launch takes them: Next only when one waits
			i, ok := tk.TryNext()
			if !ok {
				if i, err = tk.Next(ctx); err != nil {
					b.Fatal(err)
				}
			}
			tk.Done(i, done)
		}
		tk.Close()
		seq++
	}
}
