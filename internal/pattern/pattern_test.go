package pattern

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/numfmt"
	"github.com/ncclgo/ncclgo/kspace"
)

func TestSeed(t *testing.T) {
	t.Setenv(EnvSeed, "0x2a")
	s, fixed, err := Seed()
	require.NoError(t, err)
	assert.True(t, fixed)
	assert.EqualValues(t, 42, s)
	t.Setenv(EnvSeed, "12345")
	s, _, _ = Seed()
	assert.EqualValues(t, 12345, s)
	t.Setenv(EnvSeed, "x")
	_, _, err = Seed()
	require.ErrorContains(t, err, EnvSeed)
	t.Setenv(EnvSeed, "")
	a, fixed, err := Seed()
	require.NoError(t, err)
	assert.False(t, fixed)
	b, _, _ := Seed()
	assert.NotEqual(t, a, b, "clock seeds differ from run to run")
	assert.NotEqual(t, Mix(1, 0), Mix(1, 1))
	assert.NotEqual(t, Mix(1, 0), Mix(2, 0))
}

func TestBytes(t *testing.T) {
	whole := Bytes(7, 3, 0, 1000)
	for _, off := range []int{0, 1, 7, 8, 9, 511} {
		assert.Equal(t, whole[off:off+100], Bytes(7, 3, uint64(off), 100), "offset %d", off)
	}
	// Unique to (seed, rank), and not periodic.
	assert.NotEqual(t, whole, Bytes(7, 4, 0, 1000))
	assert.NotEqual(t, whole, Bytes(8, 3, 0, 1000))
	for shift := 1; shift <= 64; shift++ {
		assert.NotEqual(t, whole[:500], whole[shift:500+shift], "shift %d", shift)
	}
	// Roughly uniform bytes.
	var hist [256]int
	for _, b := range Bytes(1, 0, 0, 1<<16) {
		hist[b]++
	}
	for v, n := range hist {
		assert.InDelta(t, 256, n, 100, "byte %#x", v)
	}
}

var allTypes = []kspace.Type{kspace.I8, kspace.U8, kspace.I32, kspace.U32, kspace.I64, kspace.U64,
	kspace.F16, kspace.F32, kspace.F64, kspace.BF16, kspace.F8E4M3, kspace.F8E5M2}

// exact reports whether v is representable in t.
func exact(t kspace.Type, v float64) bool {
	if !t.IsInteger() {
		return numfmt.Round(t, v) == v
	}
	bits := float64(8 * t.Size())
	lo, hi := -math.Exp2(bits-1), math.Exp2(bits-1)-1
	if !signed(t) {
		lo, hi = 0, math.Exp2(bits)-1
	}
	return v >= lo && v <= hi && v == math.Trunc(v)
}

// TestReductionsExact: every input, and every partial result of every
// reduction the suite runs over 1..8 ranks (PreMulSum with a scalar of 2
// included), is exact in its type, so Result is the device's answer.
func TestReductionsExact(t *testing.T) {
	for _, ty := range allTypes {
		for n := 1; n <= 8; n++ {
			for op := Sum; op <= Avg; op++ {
				for _, scalar := range []float64{1, 2} {
					if scalar != 1 && op != Sum {
						continue
					}
					for i := range uint64(300) {
						acc, pos, neg := 0.0, 0.0, 0.0
						for r := range n {
							v := Input(99, ty, op, n, r, i)
							if !exact(ty, v) || !exact(ty, v*scalar) {
								t.Fatalf("%s %s n=%d: input %v (× %v) is not exact", ty, op, n, v, scalar)
							}
							v *= scalar
							if op == Sum || op == Avg {
								// Every subset sum lies in [-neg, pos]: all
								// exact when both ends are (integers).
								pos, neg = pos+max(v, 0), neg-min(v, 0)
								if !exact(ty, pos) || !exact(ty, -neg) {
									t.Fatalf("%s %s n=%d scalar %v: a subset of the inputs sums to %v or %v, not exact", ty, op, n, scalar, pos, -neg)
								}
							}
							if !Exact(ty, op, n) {
								continue
							}
							if op == Avg && !ty.IsInteger() {
								v /= float64(n) // the device's PreMulSum by 1/n
								if !exact(ty, v) {
									t.Fatalf("%s avg n=%d: input/n %v is not exact", ty, n, v)
								}
							}
							switch {
							case r == 0:
								acc = v
							case op == Prod:
								acc *= v
							case op == Max || op == Min:
							default:
								acc += v
							}
							if !exact(ty, acc) {
								t.Fatalf("%s %s n=%d scalar %v: partial result %v is not exact", ty, op, n, scalar, acc)
							}
						}
					}
				}
			}
		}
	}
}

// TestInputsNotPeriodic: no shift of up to 64 elements, and no other rank,
// reproduces a rank's reduction inputs.
func TestInputsNotPeriodic(t *testing.T) {
	for _, ty := range allTypes {
		for _, op := range []Op{Sum, Prod} {
			a := Encoded(5, ty, op, 8, 2, 0, 600)
			for shift := 1; shift <= 64; shift++ {
				assert.NotEqual(t, a[:400*ty.Size()], Encoded(5, ty, op, 8, 2, uint64(shift), 400), "%s %s shift %d", ty, op, shift)
			}
			for r := range 8 {
				if r != 2 {
					assert.NotEqual(t, a, Encoded(5, ty, op, 8, r, 0, 600), "%s %s rank %d", ty, op, r)
				}
			}
		}
	}
}

// corruptions are the ways real bugs corrupt an output of n blocks of cnt
// elements of es bytes inside a window with Guard bytes on each side; prev
// is what the previous call left in the output.
func corruptions(win, prev []byte, n, cnt, es int) map[string][]byte {
	out := map[string][]byte{}
	blk := func(w []byte, b int) []byte { return w[Guard+b*cnt*es : Guard+(b+1)*cnt*es] }
	if n > 3 {
		w := bytes.Clone(win)
		b0, b3 := bytes.Clone(blk(w, 0)), bytes.Clone(blk(w, 3))
		copy(blk(w, 0), b3)
		copy(blk(w, 3), b0)
		out["blocks of ranks 0 and 3 swapped"] = w
	}
	for _, k := range []int{1, 3, 6} {
		if k >= cnt {
			continue
		}
		b := min(1, n-1)
		// Written k elements late: the block's first k elements keep the
		// old contents, its tail spills into what follows.
		w := bytes.Clone(win)
		src := bytes.Clone(blk(win, b))
		at := Guard + b*cnt*es + k*es
		copy(w[Guard+b*cnt*es:at], prev[Guard+b*cnt*es:at])
		copy(w[at:], src)
		out[fmt.Sprintf("block %d shifted by +%d elements", b, k)] = w
		// Written k elements early.
		w = bytes.Clone(win)
		copy(w[Guard+b*cnt*es-k*es:], src)
		out[fmt.Sprintf("block %d shifted by -%d elements", b, k)] = w
	}
	// One element stale from the previous call: the first that differs.
	for e := range n * cnt {
		p := prev[Guard+e*es : Guard+(e+1)*es]
		if !bytes.Equal(p, win[Guard+e*es:Guard+(e+1)*es]) {
			w := bytes.Clone(win)
			copy(w[Guard+e*es:], p)
			out[fmt.Sprintf("element %d stale from the previous call", e)] = w
			break
		}
	}
	// One element written past the end, and one before the start.
	w := bytes.Clone(win)
	end := Guard + n*cnt*es
	for i := range es {
		w[end+i] ^= 0xff
	}
	out["one element written past the end"] = w
	w = bytes.Clone(win)
	w[Guard-1] ^= 0x01
	out["one byte written before the start"] = w
	return out
}

// TestCheckerCatchesCorruption feeds the checker AllGather outputs (bytes)
// and AllReduce/ReduceScatter outputs (reduction results) of every type,
// corrupted the ways real bugs corrupt them; each must be caught, and the
// correct output must pass.
func TestCheckerCatchesCorruption(t *testing.T) {
	const seed = 0x15
	for _, n := range []int{2, 4, 8} {
		for _, ty := range allTypes {
			es := ty.Size()
			for _, cnt := range []int{7, 37} {
				poison := Bytes(Mix(seed, 1000), 0, 0, 2*Guard+n*cnt*es)
				// AllGather: block r is rank r's bytes; the previous call
				// used another seed.
				gather := func(s uint64) []byte {
					var o []byte
					for r := range n {
						o = append(o, Bytes(s, r, 0, cnt*es)...)
					}
					return Expect(poison, Guard, o)
				}
				// AllReduce over n*cnt elements, every op.
				reduce := func(s uint64, op Op) []byte {
					return Expect(poison, Guard, Results(s, ty, op, n, 1, 0, n*cnt))
				}
				cases := map[string][2][]byte{"allgather": {gather(Mix(seed, 2)), gather(Mix(seed, 1))}}
				// A reduction's element carries a few bits at most (fp8 over
				// 8 ranks, products of ±1 and ±2): a shift over a handful
				// of elements can hide by chance, over dozens it cannot.
				for _, op := range []Op{Sum, Prod, Max, Min, Avg} {
					if cnt < 37 {
						break
					}
					cases["allreduce "+op.String()] = [2][]byte{reduce(Mix(seed, 2), op), reduce(Mix(seed, 1), op)}
				}
				for name, c := range cases {
					want, prev := c[0], c[1]
					what := fmt.Sprintf("%s %s n=%d cnt=%d", name, ty, n, cnt)
					require.NoError(t, Compare(what, bytes.Clone(want), want, es), "a correct output")
					for how, bad := range corruptions(want, prev, n, cnt, es) {
						err := Compare(what, bad, want, es)
						var m *Mismatch
						if !errors.As(err, &m) {
							t.Errorf("%s: %s was not caught", what, how)
							continue
						}
					}
				}
			}
		}
	}
}

func TestCompareReports(t *testing.T) {
	want := Expect(make([]byte, 2*Guard+16), Guard, []byte{1, 0, 2, 0, 3, 0, 4, 0})
	got := bytes.Clone(want)
	got[Guard+2] = 9
	got[Guard+8] = 1
	err := Compare("x", got, want, 2)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "1 of 4 elements wrong")
	assert.Contains(t, err.Error(), "1 guard bytes")
	assert.Contains(t, err.Error(), "[1]=0900 want 0200")
	assert.Contains(t, err.Error(), "guard byte 0 after the output")
	assert.Panics(t, func() { Expect(make([]byte, 10), 0, nil) })
	err = CompareBare("y", []byte{1, 2, 3, 4}, []byte{1, 2, 3, 5}, 2)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "1 of 2 elements wrong")
	assert.NotContains(t, err.Error(), "guard")
}

// TestChunkedMatchesSerial: the parallel paths give the bytes a serial
// computation gives, for lengths around the chunk size and odd offsets.
func TestChunkedMatchesSerial(t *testing.T) {
	for _, n := range []int{0, 1, 7, chunkMin - 1, 3*chunkMin + 5, 8*chunkMin + 3} {
		for _, off := range []uint64{0, 3, 8} {
			got := Bytes(11, 2, off, n)
			want := make([]byte, n)
			for i := range want {
				want[i] = byte(word(11, 2, (off+uint64(i))/8) >> (8 * ((off + uint64(i)) % 8)))
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("Bytes(n=%d, off=%d) differs from the serial bytes", n, off)
			}
			in := Inputs(5, kspace.F32, Sum, 4, 1, off, n)
			res := Results(5, kspace.I32, Max, 4, 1, off, n)
			wantRes := make([]float64, n)
			for k := range n {
				if in[k] != Input(5, kspace.F32, Sum, 4, 1, off+uint64(k)) {
					t.Fatalf("Inputs(n=%d, off=%d)[%d] differs", n, off, k)
				}
				wantRes[k] = Result(5, kspace.I32, Max, 4, 1, off+uint64(k))
			}
			if !bytes.Equal(res, numfmt.Encode(kspace.I32, wantRes)) {
				t.Fatalf("Results(n=%d, off=%d) differs from the serial results", n, off)
			}
		}
	}
}
