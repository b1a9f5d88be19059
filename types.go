package ncclgo

import (
	"fmt"
	"math"

	"github.com/ncclgo/ncclgo/gen/kspace"
)

// DataType is an element type, with nccl.h's ncclDataType_t values.
type DataType int

// The data types, with nccl.h's values.
const (
	Int8 DataType = iota
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
	numDataTypes
)

// nccl.h's aliases.
const (
	Char   = Int8
	Int    = Int32
	Half   = Float16
	Float  = Float32
	Double = Float64
)

var dataTypeNames = [...]string{"Int8", "Uint8", "Int32", "Uint32", "Int64", "Uint64", "Float16", "Float32", "Float64", "Bfloat16", "Float8e4m3", "Float8e5m2"}

func (t DataType) String() string {
	if t.valid() {
		return dataTypeNames[t]
	}
	return fmt.Sprintf("DataType(%d)", int(t))
}

func (t DataType) valid() bool { return t >= 0 && t < numDataTypes }

// Size is the size of one element in bytes (0 for an invalid type).
func (t DataType) Size() int {
	if !t.valid() {
		return 0
	}
	return kspace.Type(t).Size()
}

// IsFloat reports whether t is a floating-point type.
func (t DataType) IsFloat() bool { return t.valid() && !kspace.Type(t).IsInteger() }

func (t DataType) kspace() kspace.Type { return kspace.Type(t) }

// RedOp is a reduction operation, with nccl.h's ncclRedOp_t values for the
// built-in ones. Values from NumRedOps up are the PreMulSum operations of
// one communicator (Comm.NewPreMulSum).
type RedOp int

// The built-in reduction ops.
const (
	Sum RedOp = iota
	Prod
	Max
	Min
	Avg
	// NumRedOps is the number of built-in ops; user ops start here.
	NumRedOps
)

var redOpNames = [...]string{"Sum", "Prod", "Max", "Min", "Avg"}

func (o RedOp) String() string {
	switch {
	case o >= 0 && o < NumRedOps:
		return redOpNames[o]
	case o >= NumRedOps:
		return fmt.Sprintf("PreMulSum#%d", int(o-NumRedOps))
	}
	return fmt.Sprintf("RedOp(%d)", int(o))
}

// devOp is a reduction as the device runs it.
type devOp struct {
	op    kspace.RedOp
	arg   uint64
	isPtr bool
}

// scalarBits encodes v as the bits of one element of t, in the low bytes of
// a uint64, rounding to nearest even (and saturating for Float8e4m3, which
// has no infinity).
func scalarBits(v float64, t DataType) uint64 {
	switch t {
	case Int8, Int32, Int64:
		return uint64(int64(v)) & typeMask(t)
	case Uint8, Uint32, Uint64:
		if v < 0 {
			return uint64(int64(v)) & typeMask(t)
		}
		return uint64(v) & typeMask(t)
	case Float16:
		return minifloat(v, 5, 10, false)
	case Bfloat16:
		return minifloat(v, 8, 7, false)
	case Float8e4m3:
		return minifloat(v, 4, 3, true)
	case Float8e5m2:
		return minifloat(v, 5, 2, false)
	case Float32:
		return uint64(math.Float32bits(float32(v)))
	case Float64:
		return math.Float64bits(v)
	}
	return 0
}

func typeMask(t DataType) uint64 {
	if t.Size() >= 8 {
		return ^uint64(0)
	}
	return 1<<(8*t.Size()) - 1
}

// minifloat encodes v in a binary float of expBits exponent bits and
// manBits mantissa bits (IEEE-like: bias 2^(expBits-1)-1, subnormals).
// fn selects the OCP E4M3 variant: no infinities, the all-ones exponent
// holds normal numbers except the NaN pattern, overflow saturates.
func minifloat(v float64, expBits, manBits int, fn bool) uint64 {
	bias := 1<<(expBits-1) - 1
	maxExp := 1<<expBits - 2 // largest exponent field of a normal number
	if fn {
		maxExp = 1<<expBits - 1
	}
	var sign uint64
	if math.Signbit(v) {
		sign = 1 << (expBits + manBits)
		v = -v
	}
	nan := uint64(1<<(expBits+manBits) - 1)
	inf := uint64(1<<expBits-1) << manBits
	switch {
	case math.IsNaN(v):
		if fn {
			return nan
		}
		return inf | 1<<(manBits-1)
	case v == 0:
		return sign
	}
	maxMan := uint64(1<<manBits - 1)
	if fn {
		maxMan-- // S.1111.111 is NaN
	}
	maxFinite := sign | uint64(maxExp)<<manBits | maxMan
	overflow := func() uint64 {
		if fn {
			return maxFinite
		}
		return sign | inf
	}
	if math.IsInf(v, 0) {
		return overflow()
	}
	frac, e := math.Frexp(v) // v = frac × 2^e, frac in [0.5, 1)
	e--                      // v = (2·frac) × 2^e, 2·frac in [1, 2)
	if e < 1-bias {
		// Subnormal: v / 2^(1-bias-manBits), rounded; a carry into the
		// exponent field is the right encoding.
		m := uint64(math.RoundToEven(math.Ldexp(v, bias-1+manBits)))
		return sign | m
	}
	m := uint64(math.RoundToEven((2*frac - 1) * float64(uint64(1)<<manBits)))
	if m == 1<<manBits {
		m = 0
		e++
	}
	ef := e + bias
	if ef > maxExp || (ef == maxExp && m > maxMan) {
		return overflow()
	}
	return sign | uint64(ef)<<manBits | m
}

// toFloat64 converts a Go number to float64 for a PreMulSum scalar.
func toFloat64(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int:
		return float64(x), true
	case int8:
		return float64(x), true
	case int16:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint:
		return float64(x), true
	case uint8:
		return float64(x), true
	case uint16:
		return float64(x), true
	case uint32:
		return float64(x), true
	case uint64:
		return float64(x), true
	}
	return 0, false
}
