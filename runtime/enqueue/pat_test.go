package enqueue

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/tune"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// patMsg is what one PAT step carries in the simulation: the block, the
// chunk, and (ReduceScatter) the set of ranks whose inputs it sums.
type patMsg struct {
	block, chunk int
	from         uint64 // contributors, one bit per rank
}

// errPATDeadlock is simulatePAT's answer when no rank can progress.
var errPATDeadlock = errors.New("deadlock")

// simulatePAT runs the schedules of all n ranks over FIFOs of depth slots
// per connection, chunks times over (as the device loops over chunks), a
// step only once all its inputs and output slots are there, and checks
// what arrives. It returns errPATDeadlock when no rank can progress, and
// an error for a message of the wrong block or chunk, a contribution
// counted twice, a block read back before it was written, and a result
// that misses a rank.
func simulatePAT(n, chunks, depth, window int, gather bool) error {
	type edge struct{ from, to int }
	fifo := map[edge][]patMsg{}
	sched := make([][]PATStep, n)
	for r := range n {
		if gather {
			sched[r] = PATAllGather(r, n, window)
		} else {
			sched[r] = PATReduceScatter(r, n)
		}
	}
	pc := make([]int, n) // next step of each rank, over all chunks
	got := make([][]uint64, n)
	for r := range got {
		got[r] = make([]uint64, n*chunks) // [chunk*n + block]: the ranks whose inputs the block holds
	}
	for {
		progress, done := false, 0
		for r := range n {
			total := len(sched[r]) * chunks
			for pc[r] < total {
				chunk, s := pc[r]/len(sched[r]), sched[r][pc[r]%len(sched[r])]
				block := (r + s.Offset) % n
				ready := true
				for _, p := range s.Recv {
					if len(fifo[edge{p, r}]) == 0 {
						ready = false
					}
				}
				for _, p := range s.Send {
					if len(fifo[edge{r, p}]) >= depth {
						ready = false
					}
				}
				if !ready {
					break
				}
				var sum uint64
				if s.Input {
					sum = 1 << r
				}
				if s.FromOutput {
					if sum = got[r][chunk*n+block]; sum == 0 {
						return fmt.Errorf("rank %d chunk %d: block %d read back before it was written", r, chunk, block)
					}
				}
				for _, p := range s.Recv {
					q := fifo[edge{p, r}]
					m := q[0]
					fifo[edge{p, r}] = q[1:]
					if m.block != block || m.chunk != chunk {
						return fmt.Errorf("rank %d offset %d chunk %d: got block %d chunk %d from %d", r, s.Offset, chunk, m.block, m.chunk, p)
					}
					if sum&m.from != 0 {
						return fmt.Errorf("rank %d block %d: contributions %#x counted twice", r, block, sum&m.from)
					}
					sum |= m.from
				}
				if s.Output {
					if got[r][chunk*n+block] != 0 {
						return fmt.Errorf("rank %d chunk %d: block %d written twice", r, chunk, block)
					}
					got[r][chunk*n+block] = sum
				}
				for _, p := range s.Send {
					fifo[edge{r, p}] = append(fifo[edge{r, p}], patMsg{block: block, chunk: chunk, from: sum})
				}
				pc[r]++
				progress = true
			}
			if pc[r] == total {
				done++
			}
		}
		if done == n {
			break
		}
		if !progress {
			return fmt.Errorf("%w at steps %v", errPATDeadlock, pc)
		}
	}
	for e, q := range fifo {
		if len(q) > 0 {
			return fmt.Errorf("%d messages left on %d->%d", len(q), e.from, e.to)
		}
	}
	all := uint64(1)<<n - 1
	for r := range n {
		for c := range chunks {
			if gather {
				for b := range n {
					if got[r][c*n+b] != 1<<b { // block b comes from rank b's input
						return fmt.Errorf("rank %d chunk %d: block %d holds %#x", r, c, b, got[r][c*n+b])
					}
				}
			} else if got[r][c*n+r] != all {
				return fmt.Errorf("rank %d chunk %d: result holds %#x, want %#x", r, c, got[r][c*n+r], all)
			}
		}
	}
	return nil
}

func TestPATScheduleSimulated(t *testing.T) {
	for n := 1; n <= 17; n++ {
		for _, depth := range []int{1, 2, 8} {
			for _, chunks := range []int{1, 3} {
				// The device's window is the FIFO depth (a larger one
				// deadlocks); a smaller one must work too.
				for _, window := range []int{1, depth} {
					require.NoError(t, simulatePAT(n, chunks, depth, window, true), "AllGather n=%d depth=%d window=%d chunks=%d", n, depth, window, chunks)
				}
			}
		}
		for _, chunks := range []int{1, 3} {
			require.NoError(t, simulatePAT(n, chunks, PATWindow, PATWindow, false), "ReduceScatter n=%d chunks=%d", n, chunks)
		}
	}
}

// TestPATFits checks tune.PATFits against the simulation at the device's FIFO
// depth: ReduceScatter runs exactly where it says, and AllGather on any
// rank count tried.
func TestPATFits(t *testing.T) {
	for n := 1; n <= 40; n++ {
		err := simulatePAT(n, 2, PATWindow, PATWindow, false)
		if tune.PATFits(kspace.ReduceScatter, n) {
			require.NoError(t, err, "ReduceScatter n=%d", n)
		} else {
			require.ErrorIs(t, err, errPATDeadlock, "ReduceScatter n=%d", n)
		}
		require.Equal(t, n <= tune.PATMaxRanksReduceScatter, tune.PATFits(kspace.ReduceScatter, n), "n=%d", n)
		require.True(t, tune.PATFits(kspace.AllGather, n))
		require.NoError(t, simulatePAT(n, 2, PATWindow, PATWindow, true), "AllGather n=%d", n)
	}
	require.False(t, tune.PATFits(kspace.AllReduce, 4))
}

// TestPATAllGatherHops checks the AllGather schedule's structure: every
// block but the rank's own arrives exactly once, a step sends at most
// once, and the network hops of a block are at most ceil(log2 n).
func TestPATAllGatherHops(t *testing.T) {
	for n := 1; n <= 64; n++ {
		dims := len(PATDistances(n))
		for r := range n {
			recvs := 0
			for _, s := range PATAllGather(r, n, PATWindow) {
				recvs += len(s.Recv)
				require.LessOrEqual(t, len(s.Send), 1)
			}
			require.Equal(t, n-1, recvs, "n=%d rank %d", n, r)
		}
		// The hops of offset o: o's bits, one hop each.
		for o := 1; o < n; o++ {
			hops := 0
			for x := o; x > 0; x -= 1 << PATHigh(x) {
				hops++
			}
			require.LessOrEqual(t, hops, dims, "n=%d offset %d", n, o)
		}
	}
}

// TestPATPeersAreDistances checks that every peer of the schedules is at a
// distance ±2^k of PATDistances: the connections runtime/comm sets up.
func TestPATPeersAreDistances(t *testing.T) {
	for n := 1; n <= 33; n++ {
		peers := map[int]bool{}
		for _, d := range PATDistances(n) {
			peers[d%n], peers[(n-d)%n] = true, true
		}
		for r := range n {
			for _, sch := range [][]PATStep{PATAllGather(r, n, 3), PATReduceScatter(r, n)} {
				for _, s := range sch {
					for _, p := range append(append([]int{}, s.Recv...), s.Send...) {
						require.True(t, peers[(p-r+n)%n], "n=%d rank %d: peer %d is not at a PAT distance", n, r, p)
						require.NotEqual(t, r, p)
					}
				}
			}
		}
	}
}

func TestPATFan(t *testing.T) {
	for _, c := range []struct{ n, o, b, e int }{
		{1, 0, 0, 0}, {2, 0, 0, 1}, {2, 1, 1, 1}, {4, 0, 0, 2}, {4, 1, 1, 2}, {4, 2, 2, 2}, {4, 3, 2, 2},
		{5, 0, 0, 3}, {5, 1, 1, 2}, {17, 0, 0, 5}, {17, 1, 1, 4}, {17, 12, 4, 4},
	} {
		b, e := PATFan(c.n, c.o)
		require.Equal(t, [2]int{c.b, c.e}, [2]int{b, e}, "PATFan(%d, %d)", c.n, c.o)
	}
	require.Equal(t, 1, PATChannels(Comm{NChannels: 1}))
	require.Equal(t, 4, PATChannels(Comm{NChannels: 32}))
}

// TestPATPlanChannels checks that a PAT call lands on the PAT channels
// only, whatever the tuner asks, and runs the PAT function.
func TestPATPlanChannels(t *testing.T) {
	c := Comm{Rank: 1, NRanks: 4, NChannels: 32, P2PChannelsPerPeer: 2}
	ch := fixedChooser{algo: kspace.PAT, proto: kspace.Simple, nc: 16, nt: 256}
	for _, coll := range []kspace.Coll{kspace.AllGather, kspace.ReduceScatter} {
		p, err := Build(c, []Task{{Coll: coll, Type: kspace.F32, Op: kspace.Sum, Send: 0x1000, Recv: 0x100000, Bytes: 1 << 20}}, ch, nil)
		require.NoError(t, err)
		require.Len(t, p.Launches, 1)
		l := p.Launches[0]
		assert.Equal(t, uint64(1)<<PATChannels(c)-1, l.ChannelMask, "%s", coll)
		assert.Equal(t, kspace.PAT, l.Func.Algo)
		assert.Equal(t, PATChannels(c), p.Decisions[0].NChannels)
	}
}
