package tune

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
)

// TestSimpleOneHop: with Topology.SimpleOneHop a 2-rank RING/SIMPLE
// AllReduce whose channel share fits one slot is one hop (Choice.OneHop,
// half the ring's hops in the latency); a larger share, 3 ranks, another
// collective or the flag off are not.
func TestSimpleOneHop(t *testing.T) {
	on := socketHosts(2, 2)
	on.SimpleOneHop = true
	slot := int64(config.DefaultBuffSize) / generated.Steps
	tu := newTuner(t, on, map[string]string{"NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring"}, noLL128)
	for _, c := range []struct {
		bytes int64
		want  bool
	}{{8, true}, {64 << 10, true}, {slot, true}, {16 << 20, false}} {
		ch, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, c.bytes)
		require.NoError(t, err)
		share := (c.bytes + int64(ch.NChannels) - 1) / int64(ch.NChannels)
		assert.Equal(t, c.want, ch.OneHop, "%d bytes (%d a channel, slot %d): %v", c.bytes, share, slot, ch)
	}
	// Its latency counts one network hop, the ring's two.
	assert.Less(t, tu.latencyOn(kspace.AllReduce, kspace.Ring, kspace.Simple, 8, 1),
		tu.latencyOn(kspace.AllReduce, kspace.Ring, kspace.Simple, 16<<20, 1)-5, "one hop against two")
	ch, err := tu.Choose(kspace.AllGather, 0, 0, 8)
	require.NoError(t, err)
	assert.False(t, ch.OneHop, "AllGather: %v", ch)

	off := newTuner(t, socketHosts(2, 2), map[string]string{"NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring"}, noLL128)
	ch, err = off.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 8)
	require.NoError(t, err)
	assert.False(t, ch.OneHop, "SimpleOneHop unset: %v", ch)

	three := socketHosts(3, 3)
	three.SimpleOneHop = true
	ch, err = newTuner(t, three, map[string]string{"NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring"}, noLL128).Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 8)
	require.NoError(t, err)
	assert.False(t, ch.OneHop, "3 ranks: %v", ch)
}

// TestSimpleOneHopChosenAcrossHosts: across two hosts the tuner picks
// SIMPLE's one hop at the sizes where LL's network cost loses and the
// ring's two hops used to.
func TestSimpleOneHopChosenAcrossHosts(t *testing.T) {
	on := socketHosts(2, 2)
	on.SimpleOneHop = true
	tu := newTuner(t, on, nil, noLL128)
	for _, b := range []int64{8 << 10, 64 << 10, 256 << 10} {
		ch, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, b)
		require.NoError(t, err)
		assert.True(t, ch.Algo == kspace.Ring && ch.Proto == kspace.Simple && ch.OneHop, "%d bytes: %v", b, ch)
	}
}
