package cuda

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/fakecuda"
)

// TestGraphHold: with the fake driver, a hold made on a capturing stream
// reports the capture's id, one user object moved to the capture's graph,
// and turns released when that graph goes, not another's; a hold dropped
// while its graph lives is destroyed with the graph; without user
// objects, or when the graph refuses the reference, HoldCapture fails and
// leaves no user object behind.
func TestGraphHold(t *testing.T) {
	inFakeDriver(t, func(t *testing.T, d *fakecuda.Driver, dev Device) {
		c, err := dev.PrimaryContext()
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Release()) }()
		s, err := c.NewStream(true)
		require.NoError(t, err)
		defer func() { require.NoError(t, s.Destroy()) }()

		id, err := s.CaptureID()
		require.NoError(t, err)
		assert.Zero(t, id, "not capturing")
		_, err = s.HoldCapture()
		assert.ErrorContains(t, err, "CUDA_ERROR", "not capturing: no graph to hold")

		d.Set("capture_status", 1)
		defer d.Set("capture_status", 0)
		d.Set("capture_id", 7)
		id, err = s.CaptureID()
		require.NoError(t, err)
		assert.Equal(t, uint64(7), id)
		d.Reset()
		h7, err := s.HoldCapture()
		require.NoError(t, err)
		assert.Equal(t, uint64(7), h7.CaptureID())
		n := d.Counts()
		assert.Equal(t, 1, n["cuUserObjectCreate"])
		assert.Equal(t, 1, n["cuGraphRetainUserObject"])
		d.Set("capture_id", 8)
		h8, err := s.HoldCapture()
		require.NoError(t, err)
		assert.Equal(t, 2, d.Peek("user_objects"))
		assert.Equal(t, 2, GraphHoldsAlive())

		assert.False(t, h7.Released())
		d.Set("release_capture", 7)
		assert.True(t, h7.Released(), "capture 7's graph is gone")
		assert.False(t, h8.Released(), "capture 8's graph lives")
		h7.Drop()
		h8.Drop()
		h8.Drop() // a second Drop does nothing
		assert.Equal(t, 1, d.Peek("user_objects"), "capture 8's graph still holds its object")
		assert.Equal(t, 1, GraphHoldsAlive(), "h7 freed by Drop; h8 waits for its graph")
		d.Set("release_capture", 8) // the destructor frees the dropped hold
		assert.Zero(t, d.Peek("user_objects"))
		assert.Zero(t, GraphHoldsAlive())

		d.Set("graph_retain_result", int(ResultInvalidValue))
		_, err = s.HoldCapture()
		assert.True(t, errors.Is(err, ErrInvalidValue), "%v", err)
		assert.Zero(t, d.Peek("user_objects"), "the refused object was released")
		assert.Zero(t, GraphHoldsAlive(), "and its hold freed")
		d.Set("graph_retain_result", 0)

		d.Set("user_object_result", int(ResultNotSupported))
		_, err = s.HoldCapture()
		assert.True(t, errors.Is(err, ErrNotSupported), "%v", err)
		assert.Zero(t, GraphHoldsAlive())
		d.Set("user_object_result", 0)
		d.Set("capture_id", 0)
	})
}
