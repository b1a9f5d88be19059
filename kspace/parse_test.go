package kspace

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseFunc(t *testing.T) {
	f, err := ParseFunc("allreduce sum BF16 ring ll128")
	require.NoError(t, err)
	assert.Equal(t, "AllReduce Sum bf16 RING LL128", f.String())
	f, err = ParseFunc("SendRecv")
	require.NoError(t, err)
	assert.Equal(t, SendRecvFunc, f)

	for in, want := range map[string]string{
		"Gather":                      "valid collectives are Broadcast, Reduce",
		"AllReduce Sum f33 RING LL":   "valid types are i8",
		"AllReduce Avg f32 RING LL":   "valid reduction ops are Sum",
		"AllReduce Sum f32 RING LL64": "valid protocols are LL, LL128, SIMPLE",
		"AllReduce Sum f32 SPIRAL LL": "valid algorithms are TREE, RING",
		"AllGather TREE LL":           "its algorithms are RING, COLLNET_DIRECT, NVLS, PAT",
		"AllReduce Sum f32 RING":      "takes 5 words",
		"":                            "empty function",
	} {
		_, err := ParseFunc(in)
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), want, in)
	}
}

func TestRequirements(t *testing.T) {
	must := func(s string) Func { f, err := ParseFunc(s); require.NoError(t, err); return f }
	r, _, ok := Requirements(must("AllReduce Sum f8e4m3 RING LL"))
	assert.True(t, ok)
	assert.Equal(t, Req{CUDART: 11080, Arch: 900}, r)
	r, _, ok = Requirements(must("AllReduce Sum bf16 NVLS SIMPLE"))
	assert.True(t, ok)
	assert.Equal(t, Req{CUDART: 12010, Arch: 900}, r)
	_, why, ok := Requirements(must("AllReduce Prod f32 NVLS SIMPLE"))
	assert.False(t, ok)
	assert.Contains(t, why, "NVLS does not support Prod on f32")
	_, why, ok = Requirements(must("AllReduce SumPostDiv f32 RING SIMPLE"))
	assert.False(t, ok)
	assert.Contains(t, why, "only for integer")
	_, _, ok = Requirements(must("AllGather NVLS LL"))
	assert.False(t, ok)
}

func TestEquivalence(t *testing.T) {
	must := func(s string) Func { f, err := ParseFunc(s); require.NoError(t, err); return f }
	assert.Equal(t, must("AllReduce Sum u32 RING LL"), Primary(must("AllReduce Sum i32 RING LL")))
	assert.Equal(t, must("AllReduce MinMax u8 RING LL"), Primary(must("AllReduce MinMax i8 RING LL")))
	assert.Equal(t, must("AllReduce MinMax i32 NVLS SIMPLE"), Primary(must("AllReduce MinMax i32 NVLS SIMPLE")))
	assert.Equal(t, must("AllReduce Sum f32 RING LL"), Primary(must("AllReduce Sum f32 RING LL")))
}

func TestKernelsAreSpecializedPrimaries(t *testing.T) {
	s, err := NewSpace(Filter{})
	require.NoError(t, err)
	for _, k := range s.Kernels {
		id := s.FuncID(k)
		require.GreaterOrEqual(t, id, 0, k.String())
		assert.True(t, s.Specialized(id), k.String())
	}
	assert.Equal(t, -1, s.KernelID(GenericKernel))
}
