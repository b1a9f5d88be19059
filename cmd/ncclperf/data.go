package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// dataType has nccl.h's ncclDataType_t values.
type dataType int

const (
	int8T dataType = iota
	uint8T
	int32T
	uint32T
	int64T
	uint64T
	float16T
	float32T
	float64T
	bfloat16T
	float8e4m3T
	float8e5m2T
)

var typeNames = []string{"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"}
var typeAliases = map[string]dataType{"char": int8T, "int": int32T, "float16": float16T, "float32": float32T, "float64": float64T, "bf16": bfloat16T, "f16": float16T, "f32": float32T, "f64": float64T, "i8": int8T, "u8": uint8T, "i32": int32T, "u32": uint32T, "i64": int64T, "u64": uint64T}
var typeSizes = []int{1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1}

func (t dataType) String() string { return typeNames[t] }
func (t dataType) size() int      { return typeSizes[t] }
func (t dataType) isFloat() bool  { return t >= float16T }

func parseType(s string) (dataType, error) {
	for i, n := range typeNames {
		if strings.EqualFold(n, s) {
			return dataType(i), nil
		}
	}
	if t, ok := typeAliases[strings.ToLower(s)]; ok {
		return t, nil
	}
	return 0, fmt.Errorf("-d %q: unknown type; valid types are %s", s, strings.Join(typeNames, ", "))
}

// redOp has nccl.h's ncclRedOp_t values.
type redOp int

const (
	opSum redOp = iota
	opProd
	opMax
	opMin
	opAvg
)

var opNames = []string{"sum", "prod", "max", "min", "avg"}

func (o redOp) String() string { return opNames[o] }

func parseOp(s string) (redOp, error) {
	for i, n := range opNames {
		if strings.EqualFold(n, s) {
			return redOp(i), nil
		}
	}
	return 0, fmt.Errorf("-o %q: unknown reduction op; valid ops are %s", s, strings.Join(opNames, ", "))
}

// fillValue is the value of element i on rank r: small non-negative
// integers, exact in every type, whose sums and products stay exact too.
func fillValue(r, i int, op redOp) float64 {
	if op == opProd {
		return float64(1 + (r+i)%2)
	}
	return float64((r*7+i)%3 + 1)
}

// encode writes vals in type t.
func encode(t dataType, vals []float64) []byte {
	sz := t.size()
	b := make([]byte, len(vals)*sz)
	for i, v := range vals {
		p := b[i*sz:]
		switch t {
		case int8T, uint8T:
			p[0] = byte(int64(v))
		case int32T, uint32T:
			binary.LittleEndian.PutUint32(p, uint32(int64(v)))
		case int64T, uint64T:
			binary.LittleEndian.PutUint64(p, uint64(int64(v)))
		case float16T:
			binary.LittleEndian.PutUint16(p, uint16(toMini(v, 5, 10)))
		case float32T:
			binary.LittleEndian.PutUint32(p, math.Float32bits(float32(v)))
		case float64T:
			binary.LittleEndian.PutUint64(p, math.Float64bits(v))
		case bfloat16T:
			binary.LittleEndian.PutUint16(p, uint16(math.Float32bits(float32(v))>>16))
		case float8e4m3T:
			p[0] = byte(toMini(v, 4, 3))
		case float8e5m2T:
			p[0] = byte(toMini(v, 5, 2))
		}
	}
	return b
}

// decode reads n values of type t.
func decode(t dataType, b []byte) []float64 {
	sz := t.size()
	out := make([]float64, len(b)/sz)
	for i := range out {
		p := b[i*sz:]
		switch t {
		case int8T:
			out[i] = float64(int8(p[0]))
		case uint8T:
			out[i] = float64(p[0])
		case int32T:
			out[i] = float64(int32(binary.LittleEndian.Uint32(p)))
		case uint32T:
			out[i] = float64(binary.LittleEndian.Uint32(p))
		case int64T:
			out[i] = float64(int64(binary.LittleEndian.Uint64(p)))
		case uint64T:
			out[i] = float64(binary.LittleEndian.Uint64(p))
		case float16T:
			out[i] = fromMini(uint32(binary.LittleEndian.Uint16(p)), 5, 10)
		case float32T:
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(p)))
		case float64T:
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(p))
		case bfloat16T:
			out[i] = float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(p)) << 16))
		case float8e4m3T:
			out[i] = fromMini(uint32(p[0]), 4, 3)
		case float8e5m2T:
			out[i] = fromMini(uint32(p[0]), 5, 2)
		}
	}
	return out
}

// toMini encodes a non-negative value in a small float format with e
// exponent bits and m mantissa bits, rounding to nearest.
func toMini(v float64, e, m int) uint32 {
	if v <= 0 {
		return 0
	}
	bias := 1<<(e-1) - 1
	exp := int(math.Floor(math.Log2(v)))
	if exp < 1-bias {
		exp = 1 - bias // subnormal
		mant := uint32(math.Round(v / math.Ldexp(1, exp-m)))
		return mant
	}
	mant := uint32(math.Round((v/math.Ldexp(1, exp) - 1) * float64(uint32(1)<<m)))
	if mant == 1<<m {
		mant, exp = 0, exp+1
	}
	return uint32(exp+bias)<<m | mant
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

// tolerance is the relative error accepted for a reduction of n values in t.
func tolerance(t dataType, n int) float64 {
	switch t {
	case float16T:
		return 1e-3 * float64(n)
	case bfloat16T:
		return 8e-3 * float64(n)
	case float8e4m3T:
		return 0.07 * float64(n)
	case float8e5m2T:
		return 0.13 * float64(n)
	case float32T:
		return 1e-6 * float64(n)
	case float64T:
		return 1e-12 * float64(n)
	}
	return 0
}
