package cuda

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/fakecuda"
)

// TestLaunchProgrammatic: Stream.LaunchProgrammatic and a launch that
// Ops.Programmatic marks go through cuLaunchKernelEx with programmatic
// stream serialization; Launch and unmarked launches stay on
// cuLaunchKernel; marking an operation that is not a launch fails the
// sequence without running it.
func TestLaunchProgrammatic(t *testing.T) {
	inFakeDriver(t, func(t *testing.T, d *fakecuda.Driver, dev Device) {
		c, err := dev.PrimaryContext()
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Release()) }()
		m, err := c.LoadModule([]byte("fake image"))
		require.NoError(t, err)
		fn, err := m.Function("fake")
		require.NoError(t, err)
		s, err := c.NewStream(true)
		require.NoError(t, err)
		defer func() { require.NoError(t, s.Destroy()) }()
		args := make([]byte, 16)

		d.Reset()
		require.NoError(t, s.Launch(fn, Dim1(2), Dim1(64), 0, args))
		require.NoError(t, s.LaunchProgrammatic(fn, Dim1(2), Dim1(64), 0, args))
		require.NoError(t, s.LaunchProgrammatic(fn, Dim1(1), Dim1(32), 0, nil))
		cn := d.Counts()
		assert.Equal(t, 1, cn["cuLaunchKernel"], "%v", cn)
		assert.Equal(t, 2, cn["cuLaunchKernelEx"], "%v", cn)
		assert.Equal(t, 2, d.Peek("programmatic_launches"))

		var o Ops
		d.Reset()
		o.Args(16)
		plain := o.Launch(s, fn, 2, 64, 0, OpSkip)
		marked := o.Launch(s, fn, 2, 64, 0, OpSkip)
		o.Programmatic(marked)
		require.NoError(t, o.Run())
		require.NoError(t, o.Err(plain))
		require.NoError(t, o.Err(marked))
		cn = d.Counts()
		assert.Equal(t, 1, cn["cuLaunchKernel"], "%v", cn)
		assert.Equal(t, 1, cn["cuLaunchKernelEx"], "%v", cn)
		assert.Equal(t, 1, d.Peek("programmatic_launches"))

		var bad Ops
		q := bad.Query(s, OpStop)
		bad.Programmatic(q)
		err = bad.Run()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "operation 0 is not a launch")
	})
}
