package tune

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
)

// socketHosts is fakeHosts with the socket net's measured figures, as
// runtime/comm's withNodes sets them for a socket device of unknown speed.
func socketHosts(nRanks, nNodes int) Topology {
	tp := fakeHosts(nRanks, nNodes)
	tp.NetLLBW, tp.NetChannelBytes, tp.NetMaxChannels = SocketNetLLBW, SocketNetChannelBytes, SocketNetMaxChannels
	return tp
}

// TestSocketNetChoices: over the socket net, AllReduce between two hosts
// keeps LL only for the smallest calls and gives each channel at least
// SocketNetChannelBytes, at most SocketNetMaxChannels channels: what
// session 13 measured fastest.
func TestSocketNetChoices(t *testing.T) {
	tu := newTuner(t, socketHosts(2, 2), nil, noLL128)
	for _, c := range []struct {
		bytes int64
		proto kspace.Proto
		nc    int
	}{
		{8, kspace.LL, 1}, {1 << 10, kspace.LL, 1}, {4 << 10, kspace.Simple, 1}, {16 << 10, kspace.Simple, 1},
		{256 << 10, kspace.Simple, 1}, {1 << 20, kspace.Simple, 1}, {4 << 20, kspace.Simple, 2},
		{16 << 20, kspace.Simple, 8}, {128 << 20, kspace.Simple, 8}, {1 << 30, kspace.Simple, 8},
	} {
		ch, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, c.bytes)
		require.NoError(t, err)
		assert.Equal(t, c.proto, ch.Proto, "%d bytes: %v", c.bytes, ch)
		if c.bytes >= 256<<10 { // below, TREE and RING measured alike
			assert.Equal(t, kspace.Ring, ch.Algo, "%d bytes: %v", c.bytes, ch)
		}
		assert.Equal(t, c.nc, ch.NChannels, "%d bytes: %v", c.bytes, ch)
	}
	// Without the measured figures (a net of known speed), NCCL's model
	// alone: more channels, LL further up.
	plain := newTuner(t, fakeHosts(2, 2), nil, noLL128)
	ch, err := plain.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 1<<20)
	require.NoError(t, err)
	assert.Greater(t, ch.NChannels, 1, "%v", ch)
}

// TestSocketNetChannelsRespectSettings: NCCL_NCHANNELS and
// NCCL_MIN_NCHANNELS still win over the socket net's channel bounds.
func TestSocketNetChannelsRespectSettings(t *testing.T) {
	for _, c := range []struct {
		cfg  config.Config
		want int
	}{{config.Config{NChannels: 4}, 4}, {config.Config{MinNChannels: 2}, 2}} {
		tu, err := New(socketHosts(2, 2), c.cfg, noLL128)
		require.NoError(t, err)
		for _, bytes := range []int64{8, 64 << 10, 1 << 20} {
			ch, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, bytes)
			require.NoError(t, err)
			assert.Equal(t, c.want, ch.NChannels, "%+v, %d bytes: %v", c.cfg, bytes, ch)
		}
	}
}

// TestSocketNetInvalid: the new fields are checked.
func TestSocketNetInvalid(t *testing.T) {
	for _, tp := range []Topology{
		func() Topology { tp := socketHosts(2, 2); tp.NetLLBW = -1; return tp }(),
		func() Topology { tp := socketHosts(2, 2); tp.NetChannelBytes = -1; return tp }(),
		func() Topology { tp := socketHosts(2, 2); tp.NetMaxChannels = -2; return tp }(),
	} {
		_, err := New(tp, config.Config{}, noLL128)
		require.ErrorIs(t, err, ErrTopology, fmt.Sprintf("%+v", tp))
	}
}

// TestSocketNetSetsUpFewerChannels: a communicator across nodes sets up
// no more channels than a call over the socket net uses
// (SocketNetMaxChannels), unless a setting asks for more; on one node,
// or on a net without the bound, the residency cap alone.
func TestSocketNetSetsUpFewerChannels(t *testing.T) {
	one := newTuner(t, fakeHosts(2, 1), nil, noLL128)
	require.Greater(t, one.MaxChannels(), SocketNetMaxChannels, "the test needs a cap above the net's bound")
	assert.Equal(t, SocketNetMaxChannels, newTuner(t, socketHosts(2, 2), nil, noLL128).MaxChannels())
	assert.Equal(t, one.MaxChannels(), newTuner(t, fakeHosts(2, 2), nil, noLL128).MaxChannels(), "no NetMaxChannels: no bound")
	for _, c := range []struct {
		cfg  config.Config
		want int
	}{{config.Config{NChannels: 12}, 12}, {config.Config{MinNChannels: 10}, 10}, {config.Config{MaxNChannels: 4}, 4}} {
		tu, err := New(socketHosts(2, 2), c.cfg, noLL128)
		require.NoError(t, err)
		assert.Equal(t, c.want, tu.MaxChannels(), "%+v", c.cfg)
	}
}
