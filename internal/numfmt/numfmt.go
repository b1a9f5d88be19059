// Package numfmt converts between float64 and the element encodings of
// nccl.h's data types (integers, IEEE half/single/double, bfloat16 and the
// two fp8 formats), for host-side reference checks in tests and benchmarks.
package numfmt

import (
	"encoding/binary"
	"math"
)

// Type is a data type with nccl.h's ncclDataType_t value.
type Type int

// The data types, with nccl.h's values.
const (
	Int8 Type = iota
	Uint8
	Int32
	Uint32
	Int64
	Uint64
	Float16
	Float32
	Float64
	Bfloat16
	Float8e4m3
	Float8e5m2
	NumTypes = iota
)

var names = [...]string{"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"}
var sizes = [...]int{1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1}

func (t Type) String() string { return names[t] }

// Size is the size of one element in bytes.
func (t Type) Size() int { return sizes[t] }

// IsFloat reports whether t is a floating-point type.
func (t Type) IsFloat() bool { return t >= Float16 }

// Encode writes vals as elements of type t (integers truncate; floats round
// to nearest).
func Encode(t Type, vals []float64) []byte {
	sz := t.Size()
	b := make([]byte, len(vals)*sz)
	for i, v := range vals {
		p := b[i*sz:]
		switch t {
		case Int8, Uint8:
			p[0] = byte(int64(v))
		case Int32, Uint32:
			binary.LittleEndian.PutUint32(p, uint32(int64(v)))
		case Int64, Uint64:
			binary.LittleEndian.PutUint64(p, uint64(int64(v)))
		case Float16:
			binary.LittleEndian.PutUint16(p, uint16(toMini(v, 5, 10)))
		case Float32:
			binary.LittleEndian.PutUint32(p, math.Float32bits(float32(v)))
		case Float64:
			binary.LittleEndian.PutUint64(p, math.Float64bits(v))
		case Bfloat16:
			binary.LittleEndian.PutUint16(p, bf16(v))
		case Float8e4m3:
			p[0] = byte(toMini(v, 4, 3))
		case Float8e5m2:
			p[0] = byte(toMini(v, 5, 2))
		}
	}
	return b
}

// Decode reads the elements of b as type t.
func Decode(t Type, b []byte) []float64 {
	sz := t.Size()
	out := make([]float64, len(b)/sz)
	for i := range out {
		p := b[i*sz:]
		switch t {
		case Int8:
			out[i] = float64(int8(p[0]))
		case Uint8:
			out[i] = float64(p[0])
		case Int32:
			out[i] = float64(int32(binary.LittleEndian.Uint32(p)))
		case Uint32:
			out[i] = float64(binary.LittleEndian.Uint32(p))
		case Int64:
			out[i] = float64(int64(binary.LittleEndian.Uint64(p)))
		case Uint64:
			out[i] = float64(binary.LittleEndian.Uint64(p))
		case Float16:
			out[i] = fromMini(uint32(binary.LittleEndian.Uint16(p)), 5, 10)
		case Float32:
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(p)))
		case Float64:
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(p))
		case Bfloat16:
			out[i] = float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(p)) << 16))
		case Float8e4m3:
			out[i] = fromMini(uint32(p[0]), 4, 3)
		case Float8e5m2:
			out[i] = fromMini(uint32(p[0]), 5, 2)
		}
	}
	return out
}

// Round returns v as type t would store it.
func Round(t Type, v float64) float64 { return Decode(t, Encode(t, []float64{v}))[0] }

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
func Epsilon(t Type) float64 {
	switch t {
	case Float16:
		return 1.0 / 1024
	case Bfloat16:
		return 1.0 / 128
	case Float32:
		return 1.0 / (1 << 23)
	case Float64:
		return 1.0 / (1 << 52)
	case Float8e4m3:
		return 1.0 / 8
	case Float8e5m2:
		return 1.0 / 4
	}
	return 0
}
