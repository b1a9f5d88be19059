package cuda

import (
	"testing"

	"github.com/ncclgo/ncclgo/internal/fakecuda"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The stream memory operations reach their driver entry points, and
// Ops makes waits in a row on one stream one call.
func TestStreamMemOps(t *testing.T) {
	inFakeDriver(t, func(t *testing.T, d *fakecuda.Driver, dev Device) {
		c, err := dev.PrimaryContext()
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Release()) }()
		s, err := c.NewStream(true)
		require.NoError(t, err)
		defer func() { require.NoError(t, s.Destroy()) }()

		d.Reset()
		require.NoError(t, s.WriteValue32(0x1000, 1))
		require.NoError(t, s.WaitValue32(0x1000, 1))
		n := d.Counts()
		assert.Equal(t, 1, n["cuStreamWriteValue32_v2"], "%v", n)
		assert.Equal(t, 1, n["cuStreamWaitValue32_v2"], "%v", n)

		// In Ops: waits in a row on one stream are one batch; another
		// stream's wait starts another; a conditional wait runs alone.
		s2, err := c.NewStream(true)
		require.NoError(t, err)
		defer func() { require.NoError(t, s2.Destroy()) }()
		var o Ops
		w := o.WriteValue32(s2, 0x1000, 5, OpStop)
		w1 := o.WaitValue32(s, 0x1000, 5, OpStop)
		o.WaitValue32(s, 0x1004, 5, OpStop)
		w3 := o.WaitValue32(s, 0x1008, 5, OpStop)
		o.WaitValue32(s2, 0x1000, 5, OpStop)
		o.WaitValue32(s2, 0x1004, 5, OpStop|OpIfPrevOK)
		d.Reset()
		require.NoError(t, o.Run())
		for i := range o.Len() {
			require.NoError(t, o.Err(i), "op %d", i)
		}
		assert.True(t, o.Ran(w) && o.Ran(w1) && o.Ran(w3))
		n = d.Counts()
		assert.Equal(t, 1, n["cuStreamWriteValue32_v2"], "%v", n)
		assert.Equal(t, 1, n["cuStreamBatchMemOp_v2"], "the three waits on s: %v", n)
		assert.Equal(t, 2, n["cuStreamWaitValue32_v2"], "s2's two, the second conditional: %v", n)
	})
}
