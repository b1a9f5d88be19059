package main

import (
	"fmt"
	"strings"

	"github.com/ncclgo/ncclgo/internal/numfmt"
	"github.com/ncclgo/ncclgo/internal/pattern"
	"github.com/ncclgo/ncclgo/kspace"
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

// typeNames are nccl-tests' names of the types (kspace.Types).
var typeNames = kspace.TestsTypeNames()

func (t dataType) String() string { return typeNames[t] }
func (t dataType) size() int      { return kspace.Type(t).Size() }
func (t dataType) isFloat() bool  { return !kspace.Type(t).IsInteger() }

// parseType accepts any of a type's names in kspace.Types (nccl-tests',
// nccl.h's with or without "nccl", kspace's "f32"), case-insensitively.
func parseType(s string) (dataType, error) {
	if t, ok := kspace.LookupType(s); ok {
		return dataType(t), nil
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

// opNames are nccl-tests' names of the ops (kspace.APIRedOps).
var opNames = kspace.TestsRedOpNames()

func (o redOp) String() string { return opNames[o] }

func parseOp(s string) (redOp, error) {
	for i, n := range opNames {
		if strings.EqualFold(n, s) {
			return redOp(i), nil
		}
	}
	return 0, fmt.Errorf("-o %q: unknown reduction op; valid ops are %s", s, strings.Join(opNames, ", "))
}

// dataSeed is the seed of the check's data. A job has one: every rank
// fills its input from it and checks the others' data against it, so the
// ranks of a job in several processes take rank 0's (agreeSeed).
type dataSeed struct {
	Value uint64
	Fixed bool   // set by NCCLGO_TEST_SEED
	Err   string // why NCCLGO_TEST_SEED was ignored, if it was
}

// chooseSeed is this process's choice of seed: NCCLGO_TEST_SEED, or drawn
// from the clock.
func chooseSeed() dataSeed {
	v, fixed, err := pattern.Seed()
	s := dataSeed{Value: v, Fixed: fixed}
	if err != nil {
		s.Err = err.Error()
	}
	return s
}

// String says where the seed came from and how to replay the data, for
// the table's header.
func (s dataSeed) String() string {
	switch {
	case s.Err != "":
		return fmt.Sprintf("data seed %d (ignoring %s)", s.Value, s.Err)
	case s.Fixed:
		return fmt.Sprintf("data seed %d (%s)", s.Value, pattern.EnvSeed)
	}
	return fmt.Sprintf("data seed %d (replay with %s=%d)", s.Value, pattern.EnvSeed, s.Value)
}

// fillValue is the value of element i on rank r under seed: pseudo-random small
// positive integers (1..3; 1 or 2 for prod), exact in every type with sums
// and products that stay exact too, unique to (seed, r, i mod fillChunk):
// no other rank's data and no shift of fewer than fillChunk elements
// matches them. The period lets fill upload one chunk and copy it along.
func fillValue(seed uint64, r, i int, op redOp) float64 {
	h := pattern.Uint64(seed, r, uint64(i%fillChunk))
	if op == opProd {
		return float64(1 + h%2)
	}
	return float64(1 + h%3)
}

func encode(t dataType, vals []float64) []byte { return numfmt.Encode(kspace.Type(t), vals) }

func decode(t dataType, b []byte) []float64 { return numfmt.Decode(kspace.Type(t), b) }

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
