package ncclgo

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/topo"
)

// TestDefaultStreamsAccepted: the legacy default stream (0 and
// CU_STREAM_LEGACY) and the per-thread default stream are accepted, as
// NCCL accepts them, also when ranks share a GPU (they launch on lanes).
func TestDefaultStreamsAccepted(t *testing.T) {
	c := fakeComm(t, 1, 4)
	c.layout = topo.NewLayout([]int{0, 0, 0, 0})
	for _, h := range []uintptr{0, cuda.StreamLegacy, cuda.StreamPerThread} {
		s := cuda.WrapStream(new(cuda.Context), h)
		assert.True(t, s.IsDefault(), "handle %#x", h)
		g := NewGroup()
		assert.NoError(t, g.AllReduce(c, 1, 2, 10, Float32, Sum, s), "handle %#x", h)
		assert.NoError(t, g.Send(c, 1, 10, Float32, 2, s), "handle %#x", h)
		g.Discard()
	}
	assert.False(t, cuda.WrapStream(nil, 0x7f0000001000).IsDefault())
}
