package residency

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// spinning is a launch whose kernel spins until every rank of its
// communicator has launched the same sequence number (its peers are
// resident), after the rank's previous launch (stream order).
type spinning struct {
	prev     *spinning
	launched *atomic.Int32 // ranks of the communicator that launched this sequence number
	ranks    int32
	done     atomic.Bool // finished, cached
}

func (s *spinning) Query() (bool, error) {
	if s.done.Load() {
		return true, nil
	}
	if s.launched.Load() < s.ranks {
		return false, nil
	}
	if s.prev != nil {
		if ok, _ := s.prev.Query(); !ok {
			return false, nil
		}
	}
	s.done.Store(true)
	return true, nil
}

// stressComm is a communicator of the stress test: its lease, its ranks,
// and per sequence number how many ranks launched it.
type stressComm struct {
	lease    *Lease
	ranks    int
	width    int
	mu       sync.Mutex
	launched map[uint64]*atomic.Int32
}

func (c *stressComm) counter(seq uint64) *atomic.Int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.launched[seq]
	if n == nil {
		n = new(atomic.Int32)
		c.launched[seq] = n
	}
	return n
}

// blocks is the launch width of every rank of c at seq (a collective's).
func (c *stressComm) blocks(seq uint64) int { return 1 + int(seq*7+uint64(len(c.lease.key)))%c.width }

// Communicators whose ranks spin on each other are driven concurrently,
// some rank by rank from goroutines of their own, one as a group of all
// its ranks, through tickets acquired into again and again (AcquireInto),
// TryNextAll and DoneEach, and tickets closed before their request is
// taken (withdrawn). Nothing deadlocks (a kernel whose peers are never
// admitted would spin forever: Next's bound fails the test), no joined
// GPU is ever over its budget, and at the end every block is given back.
func TestStressSpinningPeers(t *testing.T) {
	l := New()
	budgets := map[string]int{"0": 8, "1": 6}
	layouts := []map[string]int{{"0": 2}, {"0": 1, "1": 1}, {"1": 2}, {"0": 1}}
	var comms []*stressComm
	for i, local := range layouts {
		width := 4
		for g, n := range local {
			width = min(width, budgets[g]/n)
		}
		key := fmt.Sprint("C", i)
		var s *Lease
		for g := range local {
			var err error
			s, err = l.Join(key, g, budgets[g], local, width)
			require.NoError(t, err)
		}
		ranks := 0
		for _, n := range local {
			ranks += n
		}
		comms = append(comms, &stressComm{lease: s, ranks: ranks, width: width, launched: map[uint64]*atomic.Int32{}})
	}
	check := func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		for g, st := range l.gpus {
			if st.joined {
				assert.LessOrEqual(t, st.used, st.budget, "GPU %s", g)
			}
		}
	}
	const iters = 300
	var wg sync.WaitGroup
	var all sync.Mutex
	var launches []*spinning
	launch := func(c *stressComm, seq uint64, prev *spinning) *spinning {
		s := &spinning{prev: prev, launched: c.counter(seq), ranks: int32(c.ranks)}
		s.launched.Add(1)
		all.Lock()
		launches = append(launches, s)
		all.Unlock()
		return s
	}
	// Rank by rank: communicators 0, 2 and 3.
	for _, ci := range []int{0, 2, 3} {
		c := comms[ci]
		for rank := range c.ranks {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(ci), uint64(rank)))
				var tk Ticket
				var prev *spinning
				reqs := make([]Request, 1)
				for seq := uint64(0); seq < iters; {
					reqs[0] = Request{Lease: c.lease, Rank: rank, Seq: seq, Blocks: c.blocks(seq)}
					if err := l.AcquireInto(&tk, reqs, nil); !assert.NoError(t, err) {
						return
					}
					if rng.IntN(8) == 0 {
						tk.Close() // given back untaken (or withdrawn): try again
						continue
					}
					i, ok := tk.TryNext()
					if !ok && rng.IntN(2) == 0 {
						tk.Close() // withdrawn from the queue: try again
						continue
					}
					if !ok {
						var err error
						i, err = tk.Next(long(t))
						if !assert.NoError(t, err, "communicator %d rank %d launch %d", ci, rank, seq) {
							tk.Close()
							return
						}
					}
					prev = launch(c, seq, prev)
					tk.Done(i, prev)
					tk.Close()
					check()
					seq++
				}
			})
		}
	}
	// As a group: communicator 1.
	wg.Go(func() {
		c := comms[1]
		var tk Ticket
		prev := make([]*spinning, c.ranks)
		reqs := make([]Request, c.ranks)
		var ks []int
		for seq := range uint64(iters) {
			for r := range reqs {
				reqs[r] = Request{Lease: c.lease, Rank: r, Seq: seq, Blocks: c.blocks(seq)}
			}
			if err := l.AcquireInto(&tk, reqs, nil); !assert.NoError(t, err) {
				return
			}
			for taken := 0; taken < len(reqs); {
				ks = tk.TryNextAll(ks[:0])
				if len(ks) == 0 {
					k, err := tk.Next(long(t))
					if !assert.NoError(t, err, "communicator 1 launch %d", seq) {
						tk.Close()
						return
					}
					ks = append(ks, k)
				}
				evs := make([]*spinning, len(ks))
				for j, k := range ks {
					evs[j] = launch(c, seq, prev[k])
					prev[k] = evs[j]
				}
				tk.DoneEach(ks, func(j int) Completion { return evs[j] })
				taken += len(ks)
				check()
			}
			tk.Close()
		}
	})
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range launches {
		for ok, _ := s.Query(); !ok; ok, _ = s.Query() {
			require.True(t, time.Now().Before(deadline), "a launch never finished: its peers never launched")
			time.Sleep(100 * time.Microsecond)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pass(true)
	for g, st := range l.gpus {
		assert.Zero(t, st.used, "GPU %s", g)
	}
	assert.Empty(t, l.queue)
	assert.Empty(t, l.held)
}
