package ncclgo

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/gen"
	"github.com/ncclgo/ncclgo/kset"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/kernels"
)

func TestKernelImageBytesWins(t *testing.T) {
	s, err := kspace.NewSpace(kspace.MustParseFilter("AllReduce Sum f32 * *"))
	require.NoError(t, err)
	set, err := kset.Wrap(gen.KernelSet(s, []string{"sm_90"}), []byte{0x50, 0xed, 0x55, 0xba, 0, 0, 0, 0})
	require.NoError(t, err)
	st, err := (&Options{KernelImage: "/nonexistent/kernels.fatbin", KernelImageBytes: set}).resolve()
	require.NoError(t, err)
	img, src, err := st.FindImage()
	require.NoError(t, err)
	assert.Equal(t, set, img)
	assert.Equal(t, "image supplied by the program", src)

	st, err = (&Options{KernelImageBytes: []byte("not a kernel set")}).resolve()
	require.NoError(t, err)
	_, _, err = st.FindImage()
	assert.ErrorIs(t, err, kernels.ErrNoImage)

	st, err = (&Options{KernelImage: "/nonexistent/kernels.fatbin"}).resolve()
	require.NoError(t, err)
	_, _, err = st.FindImage()
	assert.ErrorContains(t, err, "/nonexistent/kernels.fatbin")
}
