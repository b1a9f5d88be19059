// Package numfmt converts between float64 and the element encodings of the
// kernel space's data types (kspace.Type: integers, IEEE half/single/double,
// bfloat16 and the two fp8 formats), for host-side reference checks in tests
// and benchmarks.
package numfmt

import (
	"encoding/binary"
	"math"

	"github.com/ncclgo/ncclgo/gen/kspace"
)

// Encode writes vals as elements of type t (integers truncate; floats round
// to nearest).
func Encode(t kspace.Type, vals []float64) []byte {
	sz := t.Size()
	b := make([]byte, len(vals)*sz)
	for i, v := range vals {
		p := b[i*sz:]
		switch t {
		case kspace.I8, kspace.U8:
			p[0] = byte(int64(v))
		case kspace.I32, kspace.U32:
			binary.LittleEndian.PutUint32(p, uint32(int64(v)))
		case kspace.I64, kspace.U64:
			binary.LittleEndian.PutUint64(p, uint64(int64(v)))
		case kspace.F16:
			binary.LittleEndian.PutUint16(p, uint16(toMini(v, 5, 10)))
		case kspace.F32:
			binary.LittleEndian.PutUint32(p, math.Float32bits(float32(v)))
		case kspace.F64:
			binary.LittleEndian.PutUint64(p, math.Float64bits(v))
		case kspace.BF16:
			binary.LittleEndian.PutUint16(p, bf16(v))
		case kspace.F8E4M3:
			p[0] = byte(toMini(v, 4, 3))
		case kspace.F8E5M2:
			p[0] = byte(toMini(v, 5, 2))
		}
	}
	return b
}

// Decode reads the elements of b as type t.
func Decode(t kspace.Type, b []byte) []float64 {
	sz := t.Size()
	out := make([]float64, len(b)/sz)
	for i := range out {
		p := b[i*sz:]
		switch t {
		case kspace.I8:
			out[i] = float64(int8(p[0]))
		case kspace.U8:
			out[i] = float64(p[0])
		case kspace.I32:
			out[i] = float64(int32(binary.LittleEndian.Uint32(p)))
		case kspace.U32:
			out[i] = float64(binary.LittleEndian.Uint32(p))
		case kspace.I64:
			out[i] = float64(int64(binary.LittleEndian.Uint64(p)))
		case kspace.U64:
			out[i] = float64(binary.LittleEndian.Uint64(p))
		case kspace.F16:
			out[i] = fromMini(uint32(binary.LittleEndian.Uint16(p)), 5, 10)
		case kspace.F32:
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(p)))
		case kspace.F64:
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(p))
		case kspace.BF16:
			out[i] = float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(p)) << 16))
		case kspace.F8E4M3:
			out[i] = fromMini(uint32(p[0]), 4, 3)
		case kspace.F8E5M2:
			out[i] = fromMini(uint32(p[0]), 5, 2)
		}
	}
	return out
}

// Round returns v as type t would store it.
func Round(t kspace.Type, v float64) float64 { return Decode(t, Encode(t, []float64{v}))[0] }

func bf16(v float64) uint16 {
	bits := math.Float32bits(float32(v))
	bits += 0x7fff + (bits>>16)&1 // round to nearest even
	return uint16(bits >> 16)
}

// toMini encodes v in a small float format with e exponent and m mantissa
// bits, rounding to nearest, saturating at the largest finite value.
func toMini(v float64, e, m int) uint32 {
	sign := uint32(0)
	if v < 0 {
		sign, v = 1<<(e+m), -v
	}
	if v == 0 {
		return sign
	}
	bias := 1<<(e-1) - 1
	exp := int(math.Floor(math.Log2(v)))
	if exp < 1-bias {
		return sign | uint32(math.Round(v/math.Ldexp(1, 1-bias-m)))
	}
	mant := uint32(math.Round((v/math.Ldexp(1, exp) - 1) * float64(uint32(1)<<m)))
	if mant == 1<<m {
		mant, exp = 0, exp+1
	}
	maxExp := 1<<e - 2 - bias
	if e == 4 && m == 3 { // e4m3 has no infinities: the top exponent is finite
		maxExp++
	}
	if exp > maxExp {
		exp, mant = maxExp, 1<<m-1
		if e == 4 && m == 3 {
			mant = 1<<m - 2 // 0x7f is NaN in e4m3
		}
	}
	return sign | uint32(exp+bias)<<m | mant
}

func fromMini(x uint32, e, m int) float64 {
	bias := 1<<(e-1) - 1
	sign := 1.0
	if x>>(e+m)&1 == 1 {
		sign = -1
	}
	exp := int(x>>m) & (1<<e - 1)
	mant := float64(x & (1<<m - 1))
	if exp == 0 {
		return sign * mant * math.Ldexp(1, 1-bias-m)
	}
	return sign * (1 + mant/float64(uint32(1)<<m)) * math.Ldexp(1, exp-bias)
}

// Epsilon is the relative rounding unit of t (0 for integers).
func Epsilon(t kspace.Type) float64 {
	switch t {
	case kspace.F16:
		return 1.0 / 1024
	case kspace.BF16:
		return 1.0 / 128
	case kspace.F32:
		return 1.0 / (1 << 23)
	case kspace.F64:
		return 1.0 / (1 << 52)
	case kspace.F8E4M3:
		return 1.0 / 8
	case kspace.F8E5M2:
		return 1.0 / 4
	}
	return 0
}
