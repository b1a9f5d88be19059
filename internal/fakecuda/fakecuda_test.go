package fakecuda

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSourceCoversTheShim(t *testing.T) {
	shim, err := os.ReadFile("../../runtime/cuda/shim.c")
	require.NoError(t, err)
	syms := symbols(string(shim))
	require.Contains(t, syms, "cuLaunchKernel")
	require.Contains(t, syms, "cuOccupancyMaxActiveBlocksPerMultiprocessor") // name on the next line
	src := source(syms)
	for _, s := range syms {
		require.True(t, strings.Contains(src, "CUresult "+s+"("), s)
	}
	lib, err := Build(t.TempDir())
	require.NoError(t, err)
	require.FileExists(t, lib)
}

func TestImage(t *testing.T) {
	b, err := Image("ngDevFuncTable", 5888)
	require.NoError(t, err)
	require.Len(t, b, imageSize)
	require.Equal(t, []byte{0x50, 0xed, 0x55, 0xba}, b[:4], "the fatbin magic, little-endian")
	require.Equal(t, imageMark, string(b[8:16]))
	_, err = Image("", 8)
	require.ErrorContains(t, err, `global name ""`)
	_, err = Image(strings.Repeat("x", 40), 8)
	require.ErrorContains(t, err, "want 1 to 39 bytes")
}
