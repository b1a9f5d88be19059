// Package pattern makes test data that cannot hide a misplaced block, and
// checks outputs against it.
//
// Data-movement collectives (AllGather, Broadcast, AllToAll, Send/Recv,
// ...) carry Bytes: pseudo-random bytes unique to (seed, rank, byte index),
// so that a block that lands at the wrong rank's place or shifted by any
// number of elements differs from what is expected almost everywhere.
// Reductions carry Inputs: pseudo-random small integers per (seed, rank,
// element index), not periodic, drawn from ranges in which every partial
// sum or product over the ranks is exact in the element type (fp8, half
// and bfloat16 included), so that Result, rounded to the type, is the
// device's answer bit for bit (Exact says when it is not: a float Avg over
// a rank count that is not a power of two, whose results Bound brackets
// and CompareApprox checks).
//
// A run draws one seed (Seed: NCCLGO_TEST_SEED, or the clock), prints it,
// and derives one seed per call with Mix, so that an element left over from
// the previous call differs from the expected one too.
package pattern

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/internal/numfmt"
	"github.com/ncclgo/ncclgo/kspace"
)

// EnvSeed names the environment variable that fixes the seed of a run.
const EnvSeed = "NCCLGO_TEST_SEED"

// Seed returns the seed of this run: NCCLGO_TEST_SEED when it is set (a
// decimal or 0x-prefixed unsigned integer), else one drawn from the clock.
// fixed reports which.
func Seed() (seed uint64, fixed bool, err error) {
	if s, ok := os.LookupEnv(EnvSeed); ok && s != "" {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			return 0, false, fmt.Errorf("pattern: %s=%q: want an unsigned integer (decimal or 0x hex): %w", EnvSeed, s, err)
		}
		return v, true, nil
	}
	return mix64(uint64(time.Now().UnixNano())), false, nil
}

// mix64 is splitmix64's finalizer: a bijection of uint64 that spreads
// every input bit over every output bit.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// Mix derives a seed from seed and vs (a call index, a purpose): distinct
// inputs give unrelated seeds.
func Mix(seed uint64, vs ...uint64) uint64 {
	h := mix64(seed)
	for _, v := range vs {
		h = mix64(h ^ bits.RotateLeft64(v, 17) ^ 0x2545f4914f6cdd1d)
	}
	return h
}

// word is the 64-bit word number w of rank's stream under seed.
func word(seed uint64, rank int, w uint64) uint64 { return keyedWord(seed, rankKey(rank), w) }

// keyedWord is word w of the stream whose rankKey is key.
func keyedWord(seed, key, w uint64) uint64 { return mix64(seed ^ key ^ w*0xd6e8feb86659fd93) }

// Uint64 is word i of rank's pseudo-random stream under seed (Bytes are
// its little-endian bytes): for data of a caller's own shape.
func Uint64(seed uint64, rank int, i uint64) uint64 { return word(seed, rank, i) }

// FillBytes writes bytes off .. off+len(b)-1 of rank's data under seed
// into b.
func FillBytes(b []byte, seed uint64, rank int, off uint64) {
	i := 0
	for i < len(b) {
		pos := off + uint64(i)
		w := word(seed, rank, pos/8)
		if pos%8 == 0 && len(b)-i >= 8 {
			binary.LittleEndian.PutUint64(b[i:], w)
			i += 8
			continue
		}
		for k := pos % 8; k < 8 && i < len(b); k++ {
			b[i] = byte(w >> (8 * k))
			i++
		}
	}
}

// Bytes returns n bytes of rank's data under seed, starting at byte off.
func Bytes(seed uint64, rank int, off uint64, n int) []byte {
	b := make([]byte, n)
	// Chunks start on 8-byte positions, so each one fills whole words as
	// one FillBytes of all of b would.
	chunked((n+7)/8, func(lo, hi int) {
		a, z := min(lo*8, n), min(hi*8, n)
		FillBytes(b[a:z], seed, rank, off+uint64(a))
	})
	return b
}

// chunkMin is the least work, in elements, worth a goroutine of its own.
const chunkMin = 1 << 16

// chunked calls fn over [0, n) in consecutive ranges, in parallel when n
// is large; every element is computed on its own, so the result does not
// depend on how the range is cut.
func chunked(n int, fn func(lo, hi int)) {
	parts := min(runtime.GOMAXPROCS(0), n/chunkMin)
	if parts <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	for p := range parts {
		wg.Go(func() { fn(n*p/parts, n*(p+1)/parts) })
	}
	wg.Wait()
}

// Op is a reduction as the patterns know it.
type Op int

// The reductions. PreMulSum is Sum with a scalar (see Result).
const (
	Sum Op = iota
	Prod
	Max
	Min
	Avg
)

var opNames = [...]string{"sum", "prod", "max", "min", "avg"}

func (o Op) String() string {
	if o < 0 || int(o) >= len(opNames) {
		return fmt.Sprintf("Op(%d)", int(o))
	}
	return opNames[o]
}

// exactLimit is the largest E such that every integer in [-E, E] (or
// [0, E] for unsigned types) is exact in t, halved for the integer types
// so that a PreMulSum scalar of 2 cannot overflow; capped at 2^20.
func exactLimit(t kspace.Type) int64 {
	switch t {
	case kspace.I8:
		return 63
	case kspace.U8:
		return 127
	case kspace.F16:
		return 2048
	case kspace.BF16:
		return 256
	case kspace.F8E4M3:
		return 16
	case kspace.F8E5M2:
		return 8
	default: // the 32- and 64-bit types: the cap
		return 1 << 20
	}
}

func signed(t kspace.Type) bool {
	switch t {
	case kspace.U8, kspace.U32, kspace.U64:
		return false
	default: // the signed integers and the floats
		return true
	}
}

// Range returns the interval [lo, hi] that Sum, Max, Min and Avg inputs of
// t over nRanks ranks are drawn from: every partial sum of nRanks of them,
// and twice it (a PreMulSum scalar of 2), is an exact integer in t.
func Range(t kspace.Type, nRanks int) (lo, hi int64) {
	hi = max(1, exactLimit(t)/int64(max(nRanks, 1)))
	if signed(t) {
		return -hi, hi
	}
	return 0, hi
}

// Input is element i of rank's input to a reduction op of type t over
// nRanks ranks, under seed.
//
// Sum and Avg inputs are uniform over Range. For Max (Min), one rank,
// drawn per index, holds a value drawn from Range and the others values
// at most (at least) it, so that the result is as random as an input
// rather than nearly always the end of the range. Prod inputs are ±1 or
// ±2 (1 or 2 unsigned) with zero, one or two ranks, drawn per index,
// holding a 2, so that products stay within 4 in magnitude.
func Input(seed uint64, t kspace.Type, op Op, nRanks, rank int, i uint64) float64 {
	d := newDraw(seed, t, op, nRanks)
	return d.input(rankKey(rank), rank, i, d.indexWord(i))
}

// draw is Input for one seed, type, op and rank count, with what does not
// depend on the rank or the element computed once: the reference (Result,
// Inputs) draws millions of elements.
type draw struct {
	seed   uint64
	op     Op
	signed bool
	n      uint64 // ranks, at least 1
	lo     int64  // Range
	span   uint64 // hi - lo + 1
	index  uint64 // the key of the per-index stream (word's rank -1)
}

func newDraw(seed uint64, t kspace.Type, op Op, nRanks int) draw {
	lo, hi := Range(t, nRanks)
	return draw{seed: seed, op: op, signed: signed(t), n: uint64(max(nRanks, 1)), lo: lo, span: uint64(hi - lo + 1),
		index: rankKey(-1)}
}

// rankKey is word's key of rank's stream.
func rankKey(rank int) uint64 { return mix64(uint64(rank) + 0x632be59bd9b4e019) }

// indexWord is element i's word of the per-index stream, the same on every
// rank.
func (d *draw) indexWord(i uint64) uint64 { return keyedWord(d.seed, d.index, i) }

// input is Input of rank (whose key is key) at element i, whose per-index
// word is g.
func (d *draw) input(key uint64, rank int, i, g uint64) float64 {
	h := keyedWord(d.seed, key, i)
	n := d.n
	if d.op == Prod {
		v := 1.0
		k := g % 3
		if k >= 1 && uint64(rank) == (g>>8)%n || k == 2 && uint64(rank) == (g>>40)%n {
			v = 2
		}
		if d.signed && h&1 == 1 {
			v = -v
		}
		return v
	}
	lo, span := d.lo, d.span
	if d.op == Max || d.op == Min {
		top := lo + int64((g>>8)%span) // the result
		if uint64(rank) == g%n {
			return float64(top)
		}
		hi := lo + int64(span) - 1
		if d.op == Max {
			return float64(lo + int64(h%uint64(top-lo+1)))
		}
		return float64(top + int64(h%uint64(hi-top+1)))
	}
	return float64(lo + int64(h%span))
}

// Inputs returns n consecutive inputs from element off (see Input).
func Inputs(seed uint64, t kspace.Type, op Op, nRanks, rank int, off uint64, n int) []float64 {
	out := make([]float64, n)
	d := newDraw(seed, t, op, nRanks)
	key := rankKey(rank)
	chunked(n, func(lo, hi int) {
		for k := lo; k < hi; k++ {
			i := off + uint64(k)
			out[k] = d.input(key, rank, i, d.indexWord(i))
		}
	})
	return out
}

// Encoded is Inputs encoded as elements of t.
func Encoded(seed uint64, t kspace.Type, op Op, nRanks, rank int, off uint64, n int) []byte {
	return numfmt.Encode(t, Inputs(seed, t, op, nRanks, rank, off, n))
}

// Result is the reduction of element i over the nRanks ranks' inputs: each
// input multiplied by scalar first (a PreMulSum; pass 1 otherwise), Avg
// dividing the sum by nRanks (towards zero for the integer types, as the
// device does).
func Result(seed uint64, t kspace.Type, op Op, nRanks int, scalar float64, i uint64) float64 {
	d := newDraw(seed, t, op, nRanks)
	keys := make([]uint64, max(nRanks, 0))
	for r := range keys {
		keys[r] = rankKey(r)
	}
	return d.result(keys, t, scalar, i)
}

// result is Result at element i, keys holding every rank's key.
func (d *draw) result(keys []uint64, t kspace.Type, scalar float64, i uint64) float64 {
	g := d.indexWord(i)
	var acc float64
	for r := range len(keys) {
		v := d.input(keys[r], r, i, g) * scalar
		switch {
		case r == 0:
			acc = v
		case d.op == Prod:
			acc *= v
		case d.op == Max:
			acc = math.Max(acc, v)
		case d.op == Min:
			acc = math.Min(acc, v)
		default:
			acc += v
		}
	}
	if d.op == Avg {
		acc /= float64(len(keys))
		if t.IsInteger() {
			acc = math.Trunc(acc)
		}
	}
	return acc
}

// Results returns n consecutive results from element off, encoded in t.
func Results(seed uint64, t kspace.Type, op Op, nRanks int, scalar float64, off uint64, n int) []byte {
	vals := make([]float64, n)
	d := newDraw(seed, t, op, nRanks)
	keys := make([]uint64, max(nRanks, 0))
	for r := range keys {
		keys[r] = rankKey(r)
	}
	chunked(n, func(lo, hi int) {
		for k := lo; k < hi; k++ {
			vals[k] = d.result(keys, t, scalar, off+uint64(k))
		}
	})
	return numfmt.Encode(t, vals)
}

// Exact reports whether the device's result is Result rounded to t bit for
// bit. Only a float Avg over a rank count that is not a power of two is
// not: the device multiplies every input by 1/nRanks rounded to t, and the
// rounding depends on the order of the additions (see Bound).
func Exact(t kspace.Type, op Op, nRanks int) bool {
	if op != Avg || t.IsInteger() {
		return true
	}
	return nRanks > 0 && nRanks&(nRanks-1) == 0
}
