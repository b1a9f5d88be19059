package cuda

import (
	"testing"

	"github.com/ncclgo/ncclgo/internal/fakecuda"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The stream memory operations reach their driver entry points, the
// batched waits in one call, and WaitValues32 refuses a bad batch before
// calling the driver.
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
		require.NoError(t, s.WaitValues32([]DevicePtr{0x1000, 0x1004, 0x1008}, []uint32{1, 2, 3}))
		n := d.Counts()
		assert.Equal(t, 1, n["cuStreamWriteValue32_v2"], "%v", n)
		assert.Equal(t, 1, n["cuStreamWaitValue32_v2"], "%v", n)
		assert.Equal(t, 1, n["cuStreamBatchMemOp_v2"], "three waits, one call: %v", n)

		d.Reset()
		for _, bad := range []struct {
			ps []DevicePtr
			vs []uint32
		}{
			{nil, nil},
			{[]DevicePtr{0x1000}, []uint32{1, 2}},
			{make([]DevicePtr, MaxWaitValues+1), make([]uint32, MaxWaitValues+1)},
		} {
			err := s.WaitValues32(bad.ps, bad.vs)
			require.Error(t, err, "%d words, %d values", len(bad.ps), len(bad.vs))
			assert.Contains(t, err.Error(), "Stream.WaitValues32")
		}
		assert.Zero(t, d.Counts()["cuStreamBatchMemOp_v2"], "refused before the driver")
	})
}
