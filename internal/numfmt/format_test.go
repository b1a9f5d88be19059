package numfmt

import (
	"fmt"
	"math"
	"math/rand"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/kspace"
)

var formats = []Format{Half, BFloat16, E4M3, E5M2}

// refDecode is the test's independent decoder: it assembles the float64 bit
// pattern from the code's fields with integer arithmetic (normalizing
// subnormals by shifting), where Decode scales with math.Ldexp.
func refDecode(f Format, c uint16) float64 {
	neg := c>>(f.Exp+f.Mant)&1 == 1
	exp := int(c>>f.Mant) & (1<<f.Exp - 1)
	mant := uint64(c) & (1<<f.Mant - 1)
	allOnes := exp == 1<<f.Exp-1
	var bits uint64
	switch {
	case allOnes && !f.FN && mant == 0:
		bits = 0x7FF0000000000000
	case allOnes && !f.FN, allOnes && f.FN && mant == 1<<f.Mant-1:
		return math.NaN()
	case exp == 0 && mant == 0:
		bits = 0
	default:
		e := exp - (1<<(f.Exp-1) - 1) // unbiased
		if exp == 0 {
			e = 1 - (1<<(f.Exp-1) - 1)
			for mant&(1<<f.Mant) == 0 {
				mant <<= 1
				e--
			}
			mant &^= 1 << f.Mant
		}
		bits = uint64(e+1023)<<52 | mant<<(52-f.Mant)
	}
	if neg {
		bits |= 1 << 63
	}
	return math.Float64frombits(bits)
}

// table lists f's non-negative finite values in increasing order with their
// codes, from refDecode.
type table struct {
	vals  []float64
	codes []uint16
}

func newTable(f Format) table {
	var t table
	for c := 0; c < 1<<(f.Bits()-1); c++ {
		v := refDecode(f, uint16(c))
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		t.vals = append(t.vals, v)
		t.codes = append(t.codes, uint16(c))
	}
	if !sort.Float64sAreSorted(t.vals) {
		panic("codes of " + f.Name + " are not monotonic")
	}
	return t
}

// refEncode is the test's independent encoder: a binary search for the two
// representable neighbours of |v|, the nearer one, the one with the even code
// on a tie; beyond the largest finite value the next code up (Inf, or NaN for
// e4m3) competes as though its value were max + ulp.
func (t table) refEncode(f Format, v float64, o Overflow) uint16 {
	sign := uint16(0)
	if math.Signbit(v) {
		sign, v = 1<<(f.Exp+f.Mant), -v
	}
	n := len(t.vals)
	over := sign | f.InfCode()
	if f.FN {
		over = sign | f.NaNCode()
	}
	if o == SatFinite {
		over = sign | t.codes[n-1]
	}
	if math.IsNaN(v) {
		return sign | f.NaNCode()
	}
	i := sort.SearchFloat64s(t.vals, v) // first value >= v
	if i < n && t.vals[i] == v {
		return sign | t.codes[i]
	}
	loV, loC := t.vals[i-1], t.codes[i-1]
	var hiV float64
	var hiC uint16
	if i < n {
		hiV, hiC = t.vals[i], t.codes[i]
	} else {
		hiV, hiC = 2*t.vals[n-1]-t.vals[n-2], t.codes[n-1]+1
		if math.IsInf(v, 1) {
			return over
		}
	}
	var c uint16
	switch mid := loV + hiV; { // exact: few significant bits
	case 2*v < mid:
		c = loC
	case 2*v > mid:
		c = hiC
	case loC%2 == 0:
		c = loC
	default:
		c = hiC
	}
	if i == n && c == hiC {
		return over
	}
	return sign | c
}

func sameCode(t *testing.T, f Format, want, got uint16, msg string, args ...any) {
	t.Helper()
	if f.IsNaN(want) {
		if !f.IsNaN(got) || want>>(f.Bits()-1) != got>>(f.Bits()-1) {
			t.Fatalf("%s: %s: got %#x, want a NaN like %#x", f.Name, fmt.Sprintf(msg, args...), got, want)
		}
		return
	}
	if want != got {
		t.Fatalf("%s: %s: got %#x, want %#x", f.Name, fmt.Sprintf(msg, args...), got, want)
	}
}

func TestDecodeEveryCode(t *testing.T) {
	for _, f := range formats {
		nan, inf := 0, 0
		for c := 0; c < 1<<f.Bits(); c++ {
			want, got := refDecode(f, uint16(c)), f.Decode(uint16(c))
			if math.IsNaN(want) {
				nan++
				require.True(t, math.IsNaN(got), "%s %#x: got %v, want NaN", f.Name, c, got)
				require.True(t, f.IsNaN(uint16(c)), "%s %#x", f.Name, c)
				continue
			}
			if math.IsInf(want, 0) {
				inf++
			}
			require.False(t, f.IsNaN(uint16(c)), "%s %#x", f.Name, c)
			require.Equal(t, math.Float64bits(want), math.Float64bits(got), "%s %#x: got %v, want %v", f.Name, c, got, want)
		}
		// NaN and Inf counts: 2 NaN codes for e4m3 (0x7f, 0xff), no Inf;
		// 2*(2^Mant-1) NaNs and 2 Infs for the IEEE-like formats.
		if f.FN {
			assert.Equal(t, 2, nan, f.Name)
			assert.Equal(t, 0, inf, f.Name)
		} else {
			assert.Equal(t, 2*(1<<f.Mant-1), nan, f.Name)
			assert.Equal(t, 2, inf, f.Name)
		}
	}
	// bf16 is binary32's top half: a third, unrelated decoder.
	for c := 0; c < 1<<16; c++ {
		want := float64(math.Float32frombits(uint32(c) << 16))
		got := BFloat16.Decode(uint16(c))
		if math.IsNaN(want) {
			require.True(t, math.IsNaN(got), "bf16 %#x", c)
			continue
		}
		require.Equal(t, math.Float64bits(want), math.Float64bits(got), "bf16 %#x", c)
	}
}

func TestKnownValues(t *testing.T) {
	for _, tc := range []struct {
		f    Format
		code uint16
		v    float64
	}{
		{Half, 0x3c00, 1}, {Half, 0x7bff, 65504}, {Half, 0x0001, 0x1p-24}, {Half, 0x0400, 0x1p-14},
		{Half, 0x03ff, 1023 * 0x1p-24}, {Half, 0xc000, -2}, {Half, 0x7c00, math.Inf(1)}, {Half, 0xfc00, math.Inf(-1)},
		{BFloat16, 0x3f80, 1}, {BFloat16, 0x7f7f, 0xff * 0x1p120}, {BFloat16, 0x0001, 0x1p-133}, {BFloat16, 0x7f80, math.Inf(1)},
		{E4M3, 0x38, 1}, {E4M3, 0x7e, 448}, {E4M3, 0x78, 256}, {E4M3, 0x01, 0x1p-9}, {E4M3, 0x08, 0x1p-6}, {E4M3, 0xfe, -448},
		{E5M2, 0x3c, 1}, {E5M2, 0x7b, 57344}, {E5M2, 0x01, 0x1p-16}, {E5M2, 0x7c, math.Inf(1)}, {E5M2, 0xfc, math.Inf(-1)},
	} {
		assert.Equal(t, tc.v, tc.f.Decode(tc.code), "%s %#x", tc.f.Name, tc.code)
		assert.Equal(t, tc.code, tc.f.Encode(tc.v, ToInf), "%s %v", tc.f.Name, tc.v)
	}
	for _, c := range []uint16{0x7e00, 0xfe00, 0x7c01, 0x7fff} {
		assert.True(t, math.IsNaN(Half.Decode(c)), "%#x", c)
	}
	for _, c := range []uint16{0x7f, 0xff} {
		assert.True(t, math.IsNaN(E4M3.Decode(c)), "%#x", c)
	}
	for _, c := range []uint16{0x7d, 0x7e, 0x7f, 0xfd} {
		assert.True(t, math.IsNaN(E5M2.Decode(c)), "%#x", c)
	}
	assert.Equal(t, []float64{65504, 0xff * 0x1p120, 448, 57344}, []float64{Half.Max(), BFloat16.Max(), E4M3.Max(), E5M2.Max()})
}

func TestOverflowAndSpecials(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	for _, tc := range []struct {
		f    Format
		v    float64
		o    Overflow
		want uint16
	}{
		{Half, 65519.99, ToInf, 0x7bff}, {Half, 65520, ToInf, 0x7c00}, {Half, -65520, ToInf, 0xfc00},
		{Half, 65520, SatFinite, 0x7bff}, {Half, 1e300, ToInf, 0x7c00}, {Half, inf, ToInf, 0x7c00},
		{Half, -inf, ToInf, 0xfc00}, {Half, nan, ToInf, 0x7e00}, {Half, -nan, ToInf, 0xfe00},
		{Half, math.Copysign(0, -1), ToInf, 0x8000}, {Half, 0x1p-25, ToInf, 0}, {Half, -0x1p-25, ToInf, 0x8000},
		{Half, 0x1.0000000001p-25, ToInf, 1}, {Half, 3 * 0x1p-25, ToInf, 2}, // subnormal ties to even
		{Half, 1 + 0x1p-11, ToInf, 0x3c00}, {Half, 1 + 3*0x1p-11, ToInf, 0x3c02}, // normal ties to even
		{Half, 0x1p-14 - 0x1p-25, ToInf, 0x0400}, // subnormal rounding up into the smallest normal
		{BFloat16, 0x1.ff8p127, ToInf, 0x7f80}, {BFloat16, 0x1.feffffp127, ToInf, 0x7f7f}, {BFloat16, inf, ToInf, 0x7f80},
		{BFloat16, nan, ToInf, 0x7fc0}, {BFloat16, 1 + 0x1p-8, ToInf, 0x3f80}, {BFloat16, 1 + 3*0x1p-8, ToInf, 0x3f82},
		{E4M3, 464, SatFinite, 0x7e}, {E4M3, 464, ToInf, 0x7e}, // the tie above 448 goes to even 0x7e
		{E4M3, 464.0001, SatFinite, 0x7e}, {E4M3, 464.0001, ToInf, 0x7f}, {E4M3, -1e9, SatFinite, 0xfe},
		{E4M3, inf, SatFinite, 0x7e}, {E4M3, -inf, SatFinite, 0xfe}, {E4M3, inf, ToInf, 0x7f},
		{E4M3, nan, SatFinite, 0x7f}, {E4M3, -nan, SatFinite, 0xff}, {E4M3, 0x1p-10, SatFinite, 0}, {E4M3, 0x1.8p-9, SatFinite, 2},
		{E5M2, 61440, SatFinite, 0x7b}, {E5M2, 61440, ToInf, 0x7c}, {E5M2, 61439.99, ToInf, 0x7b},
		{E5M2, inf, SatFinite, 0x7b}, {E5M2, -inf, SatFinite, 0xfb}, {E5M2, inf, ToInf, 0x7c}, {E5M2, nan, SatFinite, 0x7e},
	} {
		sameCode(t, tc.f, tc.want, tc.f.Encode(tc.v, tc.o), "%v overflow %d", tc.v, tc.o)
	}
	// The package-level API: IEEE overflow for f16/bf16, device saturation for fp8.
	assert.Equal(t, math.Inf(1), Round(kspace.F16, 65520))
	assert.Equal(t, math.Inf(-1), Round(kspace.BF16, math.Inf(-1)))
	assert.Equal(t, 448.0, Round(kspace.F8E4M3, math.Inf(1)))
	assert.Equal(t, -57344.0, Round(kspace.F8E5M2, -1e6))
	assert.True(t, math.IsNaN(Round(kspace.F16, math.NaN())))
	assert.True(t, math.IsNaN(Decode(kspace.F8E4M3, []byte{0x7f})[0]))
	assert.True(t, math.IsInf(Decode(kspace.F16, []byte{0x00, 0x7c})[0], 1))
}

// TestEveryHalfway encodes every exact midpoint between adjacent values of
// each format, both signs, and its float64 neighbours: the midpoint must go
// to the even code (upwards or downwards, whichever is even), the neighbours
// to the nearer value.
func TestEveryHalfway(t *testing.T) {
	for _, f := range formats {
		tab := newTable(f)
		n := len(tab.vals)
		up, down := 0, 0
		for i := 0; i < n; i++ {
			lo, loC := tab.vals[i], tab.codes[i]
			hi, hiC := 0.0, loC+1
			if i+1 < n {
				hi = tab.vals[i+1]
			} else {
				hi = 2*lo - tab.vals[i-1] // the value the next code would have
			}
			mid := (lo + hi) / 2
			even := loC
			if loC%2 == 1 {
				even, up = hiC, up+1
			} else {
				down++
			}
			for _, o := range []Overflow{ToInf, SatFinite} {
				limit := func(c uint16) uint16 {
					if c <= f.MaxCode() {
						return c
					}
					if o == SatFinite {
						return f.MaxCode()
					}
					return f.InfCode()
				}
				for _, s := range []float64{1, -1} {
					sb := uint16(0)
					if s < 0 {
						sb = f.signBit()
					}
					sameCode(t, f, sb|limit(even), f.Encode(s*mid, o), "midpoint %v", s*mid)
					sameCode(t, f, sb|limit(loC), f.Encode(s*math.Nextafter(mid, lo), o), "below midpoint %v", s*mid)
					sameCode(t, f, sb|limit(hiC), f.Encode(s*math.Nextafter(mid, hi), o), "above midpoint %v", s*mid)
					// The same through float32, where the midpoint is one.
					if m32 := float32(s * mid); float64(m32) == s*mid {
						sameCode(t, f, sb|limit(even), f.Encode(float64(m32), o), "float32 midpoint %v", m32)
					}
				}
			}
		}
		// Both tie directions occur, about equally often.
		assert.Greater(t, up, n/3, f.Name)
		assert.Greater(t, down, n/3, f.Name)
	}
}

func TestRoundTripEveryCode(t *testing.T) {
	for _, f := range formats {
		for c := 0; c < 1<<f.Bits(); c++ {
			code := uint16(c)
			v := f.Decode(code)
			for _, o := range []Overflow{ToInf, SatFinite} {
				want := code
				if math.IsInf(v, 0) && o == SatFinite {
					want = code&f.signBit() | f.MaxCode()
				}
				if math.IsNaN(v) {
					want = code&f.signBit() | f.NaNCode()
				}
				sameCode(t, f, want, f.Encode(v, o), "round trip of %#x", c)
			}
		}
	}
}

func TestEncodeRandom(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	const n = 1 << 18
	for _, f := range formats {
		tab := newTable(f)
		minExp, maxExp := 1-(1<<(f.Exp-1)-1)-f.Mant-2, 1<<(f.Exp-1)+1
		for i := 0; i < n; i++ {
			var v float64
			switch i % 3 {
			case 0: // any float32 bit pattern
				v = float64(math.Float32frombits(rng.Uint32()))
			case 1: // a float32 in and around the format's range
				m := 1 + float64(rng.Int63n(1<<23))/(1<<23)
				v = float64(float32(math.Ldexp(m, minExp+rng.Intn(maxExp-minExp+1))))
				if rng.Intn(2) == 0 {
					v = -v
				}
			default: // a float64 there
				v = math.Ldexp(1+rng.Float64(), minExp+rng.Intn(maxExp-minExp+1))
			}
			for _, o := range []Overflow{ToInf, SatFinite} {
				sameCode(t, f, tab.refEncode(f, v, o), f.Encode(v, o), "encode %v (%x)", v, math.Float64bits(v))
			}
		}
	}
}

// TestEncodeFloat32Sweep checks f16 against the reference for every
// float32 whose magnitude is in [2^-26, 2^17): all of f16's range, its
// subnormals, underflow and overflow, one float32 binade at a time with a
// stride that varies the low bits.
func TestEncodeFloat32Sweep(t *testing.T) {
	tab := newTable(Half)
	lo, hi := math.Float32bits(0x1p-26), math.Float32bits(0x1p17)
	for b := lo; b < hi; b += 151 {
		v := float64(math.Float32frombits(b))
		sameCode(t, Half, tab.refEncode(Half, v, ToInf), Half.Encode(v, ToInf), "encode %v", v)
	}
}
