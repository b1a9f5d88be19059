package enqueue

import (
	"math/bits"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// PAT ("parallel aggregated trees") runs AllGather and ReduceScatter in
// about ceil(log2 n) network hops instead of a ring's n-1, for
// communicators with one rank per host. Its device code is
// devicesrc/pat.h; this file is the host's copy of its schedule, which the
// connection setup (runtime/comm), the tuner's limits and the tests use.
// The two must agree.
//
// Blocks travel along binomial trees over the distances 2^k < n; the block
// at offset o of a rank is block (rank+o) mod n, and h(o) = floor(log2 o)
// is the dimension over which offset o >= 1 arrives (AllGather) or leaves
// (ReduceScatter).
//
//   - AllGather, dimension by dimension (Bruck's order): the rank first
//     copies its input to its output block; then for k = 0, 1, ...:
//     with m = min(2^k, n-2^k), it sends its offsets 0..m-1 (read back
//     from its output) to rank - 2^k and receives offsets 2^k..2^k+m-1
//     from rank + 2^k into its output. Sends run up to PATWindow ahead of
//     the receives, so a dimension costs one hop when m <= PATWindow.
//     Each step waits on one connection only; the schedule needs no
//     scratch memory and no FIFO depth beyond one slot, for any n.
//   - ReduceScatter, offset by offset, o = n-1 down to 0 (the transpose of
//     a one-step-per-offset AllGather): the rank adds its input block to
//     the partial sums received from rank - 2^k for every k in
//     PATFan(n, o), and sends the sum to rank + 2^h(o), or, at offset 0,
//     applies the op's post step and writes the result. Partial sums wait
//     in the FIFO slots they arrived in, never in scratch memory, so a
//     connection must hold all of one dimension's messages at once:
//     min(2^k, n-2^k) <= PATWindow for every k, which holds up to
//     tune.PATMaxRanksReduceScatter ranks (tune.PATFits).
//
// A step waits for all its inputs and for a FIFO slot on all its outputs,
// then moves one chunk; both ends of every connection handle its messages
// in the same order. pat_test.go simulates both schedules for n up to 17
// (ReduceScatter up to its limit) with FIFO depths 1 to 8 and checks
// every value and the absence of deadlock.

// PATWindow is how many slots a PAT connection holds: the FIFO depth,
// NG_STEPS.
const PATWindow = generated.Steps

// PATHigh is floor(log2 o), the dimension over which offset o >= 1
// arrives (AllGather) or leaves (ReduceScatter).
func PATHigh(o int) int { return bits.Len(uint(o)) - 1 }

// PATFan returns the dimensions [begin, end) whose partial sums the
// ReduceScatter step at offset o receives from rank - 2^k on n ranks
// (in a one-step-per-offset AllGather, the dimensions over which offset o
// fans out): every k above
// PATHigh(o) (every k when o is 0) with 2^k < n - o.
func PATFan(n, o int) (begin, end int) {
	if o > 0 {
		begin = PATHigh(o) + 1
	}
	if m := n - o - 1; m >= 1 {
		end = PATHigh(m) + 1
	}
	return begin, max(begin, end)
}

// PATDistances lists the distances 2^k < n over which PAT connects a rank
// to rank ± 2^k.
func PATDistances(n int) []int {
	var ds []int
	for d := 1; d < n; d *= 2 {
		ds = append(ds, d)
	}
	return ds
}

// PATChannels is how many channels PAT works may use: the channels on
// which the communicator connects each rank to its PAT peers.
func PATChannels(c Comm) int { return max(0, min(c.NChannels, tune.PATMaxChannels)) }

// PATStep is one step of one rank's PAT schedule, by peer rank.
type PATStep struct {
	Offset int   // the block is (rank + Offset) mod n
	Recv   []int // the ranks whose data this step receives (and reduces)
	Send   []int // the ranks this step sends to
	Input  bool  // the step reads the rank's input block
	Output bool  // the step writes the block to the rank's output
	// FromOutput: the step reads the block back from the rank's output.
	FromOutput bool
}

// PATAllGather returns rank's AllGather steps on n ranks, in order, with
// sends up to window steps ahead of the receives.
func PATAllGather(rank, n, window int) []PATStep {
	steps := []PATStep{{Offset: 0, Input: true, Output: true}}
	for _, d := range PATDistances(n) {
		m := min(d, n-d)
		to, from := ((rank-d)%n+n)%n, (rank+d)%n
		send := func(j int) { steps = append(steps, PATStep{Offset: j, Send: []int{to}, FromOutput: true}) }
		for j := range min(window, m) {
			send(j)
		}
		for j := range m {
			steps = append(steps, PATStep{Offset: d + j, Recv: []int{from}, Output: true})
			if j+window < m {
				send(j + window)
			}
		}
	}
	return steps
}

// PATReduceScatter returns rank's ReduceScatter steps on n ranks, in order.
func PATReduceScatter(rank, n int) []PATStep {
	steps := make([]PATStep, 0, n)
	for o := n - 1; o >= 0; o-- {
		s := PATStep{Offset: o, Input: true, Output: o == 0}
		if o > 0 {
			s.Send = []int{(rank + 1<<PATHigh(o)) % n}
		}
		b, e := PATFan(n, o)
		for k := b; k < e; k++ {
			s.Recv = append(s.Recv, ((rank-1<<k)%n+n)%n)
		}
		steps = append(steps, s)
	}
	return steps
}
