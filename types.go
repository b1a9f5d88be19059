package ncclgo

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/ncclgo/ncclgo/internal/numfmt"
	"github.com/ncclgo/ncclgo/kspace"
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

// The names, sizes and kinds of the data types and ops are kspace's
// vocabulary tables (kspace.Types, kspace.APIRedOps), whose rows sit at
// these constants' values; a test checks the constants against them.

// String returns the type's Go name ("Float32"), or "DataType(N)" for an
// invalid one.
func (t DataType) String() string {
	if t.valid() {
		return kspace.Types[t].GoName
	}
	return fmt.Sprintf("DataType(%d)", int(t))
}

func (t DataType) valid() bool { return t >= 0 && t < numDataTypes }

// validDataTypes describes the valid data types for an error text:
// "Int8 .. Float8e5m2 (0..11)".
func validDataTypes() string {
	return fmt.Sprintf("%s .. %s (0..%d)", DataType(0), numDataTypes-1, int(numDataTypes-1))
}

// Size is the size of one element in bytes (0 for an invalid type).
func (t DataType) Size() int {
	if !t.valid() {
		return 0
	}
	return kspace.Type(t).Size()
}

// IsFloat reports whether t is a floating-point type.
func (t DataType) IsFloat() bool { return t.valid() && kspace.Types[t].Float }

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

// String returns the op's name ("Sum"), "PreMulSum#N" for the N-th op of
// Comm.NewPreMulSum, or "RedOp(N)" for a negative one.
func (o RedOp) String() string {
	switch {
	case o >= 0 && o < NumRedOps:
		return kspace.APIRedOps[o].GoName
	case o >= NumRedOps:
		return fmt.Sprintf("PreMulSum#%d", int(o-NumRedOps))
	}
	return fmt.Sprintf("RedOp(%d)", int(o))
}

// builtinRedOps lists the built-in ops for an error text: "Sum, Prod, Max,
// Min, Avg".
func builtinRedOps() string {
	names := make([]string, NumRedOps)
	for o := range NumRedOps {
		names[o] = o.String()
	}
	return strings.Join(names, ", ")
}

// devOp is a reduction as the device runs it.
type devOp struct {
	op    kspace.RedOp
	arg   uint64
	isPtr bool
}

// scalarBits encodes v as the bits of one element of t, in the low bytes of
// a uint64: integers truncate toward zero and wrap, floats round to nearest
// even as the device converts them (internal/numfmt: f16 and bf16 overflow
// to Inf, the fp8 types saturate at their largest finite value).
func scalarBits(v float64, t DataType) uint64 {
	switch t {
	case Uint8, Uint32, Uint64:
		if v >= 0 {
			return uint64(v) & typeMask(t)
		}
		return uint64(int64(v)) & typeMask(t)
	case Int8, Int32, Int64:
		return uint64(int64(v)) & typeMask(t)
	default:
		if !t.valid() {
			return 0
		}
		var b [8]byte
		copy(b[:], numfmt.Encode(t.kspace(), []float64{v}))
		return binary.LittleEndian.Uint64(b[:])
	}
}

func typeMask(t DataType) uint64 {
	if t.Size() >= 8 {
		return ^uint64(0)
	}
	return 1<<(8*t.Size()) - 1
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
