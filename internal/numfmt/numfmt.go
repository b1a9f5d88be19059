// Package numfmt converts between float64 and the element encodings of the
// kernel space's data types (kspace.Type: integers, IEEE half/single/double,
// bfloat16 and the two fp8 formats), for host-side reference checks in tests
// and benchmarks.
//
// The floating-point conversions are exact: encoding rounds to nearest, ties
// to even, in one step from the float64 value (a float32 converts to float64
// exactly, so float32 sources are rounded once too); subnormals are kept;
// decoding maps Inf and NaN codes to ±Inf and NaN. Overflow follows the
// device's conversions, so that a host reference predicts device results bit
// for bit: f16 and bf16 overflow to ±Inf as IEEE 754 and the device's
// __hadd/__float2bfloat16 do; both fp8 formats saturate to ±max finite
// (±448, ±57344; ±Inf too) as CUDA's __nv_fp8_e4m3/__nv_fp8_e5m2
// constructors do (__NV_SATFINITE), which is how ng_reduce.h and NCCL round
// fp8 results. Format.Encode with ToInf gives the IEEE/OCP non-saturating
// rule instead.
package numfmt

import (
	"encoding/binary"
	"math"

	"github.com/ncclgo/ncclgo/kspace"
)

// Encode writes vals as elements of type t: integers truncate toward zero
// and wrap; floats round to nearest even with the overflow rule of
// Overflows(t).
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
		case kspace.F16, kspace.BF16:
			f, _ := FormatOf(t)
			binary.LittleEndian.PutUint16(p, f.Encode(v, Overflows(t)))
		case kspace.F32:
			binary.LittleEndian.PutUint32(p, math.Float32bits(float32(v)))
		case kspace.F64:
			binary.LittleEndian.PutUint64(p, math.Float64bits(v))
		case kspace.F8E4M3, kspace.F8E5M2:
			f, _ := FormatOf(t)
			p[0] = byte(f.Encode(v, Overflows(t)))
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
		case kspace.F16, kspace.BF16:
			f, _ := FormatOf(t)
			out[i] = f.Decode(binary.LittleEndian.Uint16(p))
		case kspace.F32:
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(p)))
		case kspace.F64:
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(p))
		case kspace.F8E4M3, kspace.F8E5M2:
			f, _ := FormatOf(t)
			out[i] = f.Decode(uint16(p[0]))
		}
	}
	return out
}

// Round returns v as type t would store it.
func Round(t kspace.Type, v float64) float64 { return Decode(t, Encode(t, []float64{v}))[0] }

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
	default: // the integers
		return 0
	}
}

// FormatOf returns the format of a 16- or 8-bit floating-point type, and
// false for the other types.
func FormatOf(t kspace.Type) (Format, bool) {
	switch t {
	case kspace.F16:
		return Half, true
	case kspace.BF16:
		return BFloat16, true
	case kspace.F8E4M3:
		return E4M3, true
	case kspace.F8E5M2:
		return E5M2, true
	default: // the integers, f32 and f64
		return Format{}, false
	}
}

// Overflows is the overflow rule Encode applies to t: SatFinite for the fp8
// types (the device's __NV_SATFINITE conversion), ToInf otherwise.
func Overflows(t kspace.Type) Overflow {
	if t == kspace.F8E4M3 || t == kspace.F8E5M2 {
		return SatFinite
	}
	return ToInf
}
