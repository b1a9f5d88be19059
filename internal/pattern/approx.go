package pattern

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/ncclgo/ncclgo/internal/numfmt"
	"github.com/ncclgo/ncclgo/kspace"
)

// A float Avg over a rank count that is not a power of two is the one
// reduction whose result the patterns cannot make exact: the device runs
// it as a PreMulSum by s = 1/nRanks rounded to the type (root coll.go),
// that is each rank's input x multiplied by s and rounded (or, where the
// compiler fuses the multiply into the next addition, not rounded), then
// the n products summed in the order of the ring or tree with a rounding
// after every addition (devicesrc/ng_reduce.h: half and bfloat16 natively,
// fp8 in float rounded back to fp8 after each operation).
//
// Bound gives, instead of one value, the exact sum c = Σ x·s and a radius
// E such that every one of those evaluation orders lands within E of c.
// The multiplications err by exactly |round(x·s) - x·s| each (0 where
// fused). Each addition errs by at most h(v), half the spacing of the
// type's values at the magnitude of its exact result v. Whatever the order
// or the shape of the tree, an addition's result is the sum of some subset
// of the products plus the error accumulated so far, and of the n-1
// additions the k-th largest covers at most n-k+1 ranks (a chain covers 2,
// 3, ..., n; in any tree, the k largest internal nodes form its top, off
// which hang k+1 subtrees of at least one rank each, two of them under
// the smallest). A subset of j products sums to at most M_j in magnitude,
// the larger of the j largest positive products' sum and the j largest
// negative ones' |sum|. Hence
//
//	E = Σ_i |round(x_i·s) - x_i·s| + Σ_{j=2..n} h(M_j + E)
//
// whose least solution a few iterations find (h is a non-decreasing step
// function). E depends on the magnitudes of the partial sums, not on the
// final value: a result near zero after partial sums near 200 in f16 may be
// off by several 1/64s.

// format is the shape of a binary floating-point type: mantissa (trailing
// significand) bits and the exponent of its smallest normal value.
func format(t kspace.Type) (mant, minExp int, ok bool) {
	switch t {
	case kspace.F16:
		return 10, -14, true
	case kspace.BF16:
		return 7, -126, true
	case kspace.F32:
		return 23, -126, true
	case kspace.F64:
		return 52, -1022, true
	case kspace.F8E4M3:
		return 3, -6, true
	case kspace.F8E5M2:
		return 2, -14, true
	default: // the integers
		return 0, 0, false
	}
}

// Spacing is the distance between consecutive values of the float type t
// in the binade of |v| (the subnormal spacing below the smallest normal).
// It panics for an integer type.
func Spacing(t kspace.Type, v float64) float64 {
	mant, minExp, ok := format(t)
	if !ok {
		panic(fmt.Sprintf("pattern: Spacing of %s, not a floating-point type", t))
	}
	e := minExp
	if v != 0 {
		_, x := math.Frexp(math.Abs(v)) // |v| = f·2^x, f in [0.5, 1)
		e = max(x-1, minExp)
	}
	return math.Ldexp(1, e-mant)
}

// RoundTo rounds v to the float type t, to nearest, ties to even, as the
// device's arithmetic does (no overflow handling: the patterns stay far
// from the types' largest values). It is numfmt.Round without its
// allocations, for the tests that enumerate evaluation orders.
func RoundTo(t kspace.Type, v float64) float64 {
	q := Spacing(t, v)
	return math.RoundToEven(v/q) * q // v/q is exact: q is a power of two
}

// Checkable reports whether the device's results of op over nRanks ranks
// in t can be checked: exactly (Exact), or within Bound, which needs the
// n-1 additions' rounding errors to grow slower than the error they add
// to, n-1 < 2^(mantissa bits+1). Only fp8 Avg over many ranks fails it: over
// more than 8 ranks in e5m2, 16 in e4m3.
func Checkable(t kspace.Type, op Op, nRanks int) bool {
	if Exact(t, op, nRanks) {
		return true
	}
	mant, _, _ := format(t)
	return nRanks-1 < 1<<(mant+1)
}

func mustCheck(t kspace.Type, op Op, nRanks int) {
	if !Checkable(t, op, nRanks) {
		panic(fmt.Sprintf("pattern: the device's %s %s over %d ranks cannot be checked: its rounding errors have no useful bound (see Checkable)", t, op, nRanks))
	}
}

// avgScalar is the device's PreMulSum scalar of a float Avg over nRanks
// ranks: 1/nRanks rounded to t.
func avgScalar(t kspace.Type, nRanks int) float64 {
	return numfmt.Round(t, 1/float64(nRanks))
}

// Bound returns element i's expected result as an interval: every result
// the device may produce lies within radius of center. It panics where
// Checkable does not hold. Where Exact holds,
// radius is 0 and center is Result rounded to t; otherwise (a float Avg
// over a rank count that is not a power of two) center is the exact sum
// of the inputs times the device's scalar (for f64, rounded once to
// float64, which radius allows for) and radius is the bound derived above.
func Bound(seed uint64, t kspace.Type, op Op, nRanks int, scalar float64, i uint64) (center, radius float64) {
	if Exact(t, op, nRanks) {
		return numfmt.Round(t, Result(seed, t, op, nRanks, scalar, i)), 0
	}
	mustCheck(t, op, nRanks)
	return avgBound(seed, t, nRanks, avgScalar(t, nRanks), i)
}

// avgBound is Bound of a float Avg whose device scalar is s.
func avgBound(seed uint64, t kspace.Type, nRanks int, s float64, i uint64) (center, radius float64) {
	op := Avg
	h := func(v float64) float64 { return Spacing(t, v) / 2 }
	var bufs [3][16]float64 // no allocation for up to 16 ranks
	pos, neg := bufs[0][:0], bufs[1][:0]
	var premul, abs, comp float64
	// sum adds v to center, keeping in comp what the addition lost
	// (Neumaier): the products of every type but f64 and their sums are
	// exact in float64; an f64 product is p+e, both kept.
	sum := func(v float64) {
		c := center + v
		if math.Abs(center) >= math.Abs(v) {
			comp += center - c + v
		} else {
			comp += v - c + center
		}
		center = c
	}
	for r := range nRanks {
		x := Input(seed, t, op, nRanks, r, i)
		p := x * s
		e := math.FMA(x, s, -p) // x·s = p + e exactly; e is 0 but for f64
		sum(p)
		sum(e)
		abs += math.Abs(p)
		// The device's product rounds x·s to t (or, fused, not at all).
		premul += math.Abs(RoundTo(t, p)-p) + math.Abs(e)
		if p > 0 {
			pos = append(pos, p)
		} else {
			neg = append(neg, -p)
		}
	}
	center += comp
	// m[j] bounds the magnitude of a sum of j+1 of the products.
	slices.SortFunc(pos, func(a, b float64) int { return cmp.Compare(b, a) })
	slices.SortFunc(neg, func(a, b float64) int { return cmp.Compare(b, a) })
	var m []float64
	if nRanks <= len(bufs[2]) {
		m = bufs[2][:nRanks]
	} else {
		m = make([]float64, nRanks)
	}
	var sp, sn float64
	for j := range m {
		if j < len(pos) {
			sp += pos[j]
		}
		if j < len(neg) {
			sn += neg[j]
		}
		m[j] = max(sp, sn)
	}
	adds := func(e float64) float64 {
		sum := premul
		for _, mj := range m[1:] {
			sum += h(mj + e)
		}
		return sum
	}
	// The iteration rises to the least fixed point: h(v) <= |v|·2^-(mant+1)
	// above the subnormals, so adds grows slower than E where Checkable
	// holds, and its values are sums of spacings, a discrete set.
	radius = adds(0)
	for k := 0; ; k++ {
		next := adds(radius)
		if next <= radius {
			break
		}
		if k == 1000 {
			panic(fmt.Sprintf("pattern: the error bound of a %s Avg over %d ranks does not converge", t, nRanks))
		}
		radius = next
	}
	if t == kspace.F64 {
		// center is Σ x·s rounded to float64 once (comp's own error is
		// some 2^-100 of Σ|x·s|): allow for that rounding.
		radius += h(center) + Spacing(t, abs)*0x1p-40
	}
	return center, radius
}

// Approx is the expected output of a reduction as intervals: element k
// must lie within Radius[k] of Center[k] (Radius 0: equal to it).
type Approx struct {
	Center, Radius []float64
}

// Bounds returns Bound for n consecutive elements from off.
func Bounds(seed uint64, t kspace.Type, op Op, nRanks int, scalar float64, off uint64, n int) Approx {
	a := Approx{Center: make([]float64, n), Radius: make([]float64, n)}
	if Exact(t, op, nRanks) {
		a.Center = numfmt.Decode(t, Results(seed, t, op, nRanks, scalar, off, n))
		return a
	}
	mustCheck(t, op, nRanks)
	s := avgScalar(t, nRanks)
	chunked(n, func(lo, hi int) {
		for k := lo; k < hi; k++ {
			a.Center[k], a.Radius[k] = avgBound(seed, t, nRanks, s, off+uint64(k))
		}
	})
	return a
}

// Encoded is the centers rounded to t: the bytes a check window expects.
func (a Approx) Encoded(t kspace.Type) []byte { return numfmt.Encode(t, a.Center) }

// CompareApprox is Compare for an output whose elements must lie in the
// intervals of a: element k passes when it is a number within a.Radius[k]
// of a.Center[k]. got and want hold Guard bytes, the output, Guard bytes
// (want's output part is a.Encoded, for the report); the guard bytes must
// match exactly.
func CompareApprox(what string, t kspace.Type, got, want []byte, a Approx) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: read %d bytes, want %d", what, len(got), len(want))
	}
	es := t.Size()
	if n := (len(want) - 2*Guard) / es; n != len(a.Center) || len(a.Radius) != n {
		return fmt.Errorf("%s: %d elements between the guards, %d centers and %d radii", what, n, len(a.Center), len(a.Radius))
	}
	return compare(what, got, want, es, Guard, &approxCheck{t: t, a: a})
}

// approxCheck judges elements against intervals.
type approxCheck struct {
	t kspace.Type
	a Approx
}

func (c *approxCheck) ok(k int, g []byte) bool {
	v := numfmt.Decode(c.t, g)[0]
	return !math.IsNaN(v) && math.Abs(v-c.a.Center[k]) <= c.a.Radius[k]
}

func (c *approxCheck) describe(k int, g, w []byte) string {
	return fmt.Sprintf("[%d]=%x (%g) want %x (%g ± %g)", k, g, numfmt.Decode(c.t, g)[0], w, c.a.Center[k], c.a.Radius[k])
}
