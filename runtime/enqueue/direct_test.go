package enqueue

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// DIRECT AllReduce plans like any collective: one work per channel, with
// the user's own buffers (each rank's kernel finds its peers' through the
// mailboxes, not the plan), and every one-shot share within the device's
// NG_DIRECT_ONESHOT_BYTES.
func TestPlanDirectAllReduce(t *testing.T) {
	tp := tune.Topology{NRanks: 2, NNodes: 1, NGPUs: 1, RanksPerGPU: 2, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 32, Direct: true}
	tn, err := tune.New(tp, config.Config{}, nil)
	require.NoError(t, err)
	c := Comm{Rank: 1, NRanks: 2, NChannels: 32, P2PChannelsPerPeer: 2}
	lookup := func(f kspace.Func) (int, int, error) { return 7, 0, nil }
	for _, tc := range []struct {
		bytes   uint64
		nc      int
		oneShot bool
	}{{8, 1, true}, {4, 1, true}, {65536, 8, true}, {256 << 10, 32, true}, {256 << 20, 32, false}} {
		buf := uint64(0x7f00_0000_0000)
		task := Task{Coll: kspace.AllReduce, Send: buf, Recv: buf, Bytes: tc.bytes, Type: kspace.F32, Op: kspace.Sum}
		if tc.bytes%4 != 0 {
			task.Type = kspace.U8
		}
		p, err := Build(c, []Task{task}, tn, lookup)
		require.NoError(t, err)
		require.Len(t, p.Launches, 1, "%d bytes", tc.bytes)
		l := p.Launches[0]
		assert.Equal(t, kspace.Direct, l.Func.Algo, "%d bytes", tc.bytes)
		assert.Equal(t, kspace.Simple, l.Func.Proto)
		assert.Len(t, l.Works, tc.nc, "%d bytes", tc.bytes)
		assert.GreaterOrEqual(t, l.NThreads, 128)
		es := uint64(task.Type.Size())
		var covered uint64
		for _, w := range l.Works {
			assert.Equal(t, buf, w.Sendbuff)
			assert.Equal(t, buf, w.Recvbuff)
			assert.Equal(t, tc.bytes/es, w.Count)
			assert.Equal(t, covered, w.ChanOffset)
			covered += w.ChanCount
			if tc.oneShot {
				assert.LessOrEqual(t, w.ChanCount*es, uint64(generated.DirectOneshotBytes), "%d bytes: a one-shot share", tc.bytes)
			}
		}
		assert.Equal(t, tc.bytes/es, covered)
	}
}
