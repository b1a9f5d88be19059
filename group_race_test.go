package ncclgo

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// Groups of several sizes, larger then smaller, run from several
// goroutines at once through the pooled memory of their calls, plans and
// admissions, some given up midway (Discard), some with a refused call
// among their calls, some nested. Every End reports exactly its own
// calls (on these driverless communicators each launch fails naming its
// rank): a pooled slice that a group kept after giving it back, or
// handed to two groups, would show as another group's rank (run it with
// -race).
func TestConcurrentGroupsPooled(t *testing.T) {
	const goroutines, perG = 4, 6
	const nRanks = goroutines * perG
	rankRE := regexp.MustCompile(`rank (\d+):`)
	var wg sync.WaitGroup
	for g := range goroutines {
		comms := make([]*Comm, perG)
		for i := range comms {
			comms[i] = fakeComm(t, g*perG+i, nRanks)
		}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			s := cuda.WrapStream(new(cuda.Context), 0x100)
			other := cuda.WrapStream(new(cuda.Context), 0x200)
			for it := range 150 {
				grp := NewGroup()
				nested := rng.IntN(4) == 0
				if nested {
					if !assert.NoError(t, grp.Start()) {
						return
					}
				}
				k := 1 + rng.IntN(perG)
				var want []int
				for _, c := range comms[:k] {
					calls := 1 + rng.IntN(3)
					for range calls {
						if err := grp.AllReduce(c, 0x1000, 0x2000, 2, Float32, Sum, s); !assert.NoError(t, err) {
							return
						}
					}
					want = append(want, c.rank)
					if rng.IntN(5) == 0 {
						var ae *ArgError
						err := grp.AllReduce(c, 0x1000, 0x2000, 2, Float32, Sum, other)
						assert.True(t, errors.As(err, &ae), "a second stream is refused: %v", err)
					}
				}
				if nested {
					if !assert.NoError(t, grp.End(), "an inner End") {
						return
					}
				}
				if rng.IntN(6) == 0 {
					grp.Discard()
					assert.Error(t, grp.End(), "a discarded group has ended")
					continue
				}
				err := grp.End()
				var got []int
				for _, m := range rankRE.FindAllStringSubmatch(fmt.Sprint(err), -1) {
					r, _ := strconv.Atoi(m[1])
					got = append(got, r)
				}
				slices.Sort(got)
				if !assert.Equal(t, want, got, "goroutine %d group %d: %v", g, it, err) {
					return
				}
			}
		})
	}
	wg.Wait()
}
