package abi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDeclaredStructsCheck(t *testing.T) {
	for _, s := range Structs {
		require.NoError(t, s.Check(), s.Name)
	}
	assert.Equal(t, 4096, KernelArgs.Layout().Size)
}

func TestCheckRejectsImplicitPadding(t *testing.T) {
	s := &Struct{Name: "ngBad", Fields: []Field{{Name: "a", Scalar: U32}, {Name: "b", Scalar: U64}}}
	err := s.Check()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ngBad.b at offset 8 leaves 4 bytes of implicit padding")
	s = &Struct{Name: "ngTail", Fields: []Field{{Name: "a", Scalar: U64}, {Name: "b", Scalar: U32}}}
	assert.ErrorContains(t, s.Check(), "tail padding")
	s = &Struct{Name: "ngSized", Size: 8, Fields: []Field{{Name: "a", Scalar: U32}}}
	assert.ErrorContains(t, s.Check(), "declared 8")
}

func TestLayout(t *testing.T) {
	l := DevWork.Layout()
	assert.Equal(t, 64, l.Size)
	assert.Equal(t, 8, l.Align)
	assert.Equal(t, 48, l.Offsets[6]) // funcId
}

func TestNames(t *testing.T) {
	assert.Equal(t, "DevWork", GoName("ngDevWork"))
	assert.Equal(t, "Sendbuff", GoName("sendbuff"))
	assert.Equal(t, "MaxChannels", ConstGoName("NG_MAX_CHANNELS"))
	assert.Equal(t, "WorkInlineMax", ConstGoName("NG_WORK_INLINE_MAX"))
	assert.Equal(t, "CollAllReduce", ConstGoName("NG_COLL_AllReduce"))
	assert.Equal(t, "AlgoNvlsTree", ConstGoName("NG_ALGO_NVLS_TREE"))
}
