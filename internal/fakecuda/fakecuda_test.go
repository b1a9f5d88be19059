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
