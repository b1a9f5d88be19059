package cuda

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGPUGraphHold: a hold made during a global-mode capture keeps the
// capture's id, does not invalidate the capture, stays unreleased while
// the graph or an executable graph made from it lives (and after the
// graph alone is destroyed), and turns released once both are destroyed
// and the replays done (CUDA destroys user objects asynchronously: polled
// for up to 10 s); a hold dropped while its graph lives is freed with it.
func TestGPUGraphHold(t *testing.T) {
	const n = 256
	c, f, p, s, _ := graphFixture(t, n)
	capture := func() (*Graph, *GraphHold) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		require.NoError(t, s.BeginCapture(CaptureModeGlobal))
		id, err := s.CaptureID()
		require.NoError(t, err)
		require.NotZero(t, id)
		h, err := s.HoldCapture()
		require.NoError(t, err)
		assert.Equal(t, id, h.CaptureID())
		var a packArgs
		a.u64(uint64(p))
		a.u32(n)
		require.NoError(t, s.Launch(f, Dim1(1), Dim1(n), 0, a.b))
		st, err := s.CaptureStatus()
		require.NoError(t, err)
		require.Equal(t, CaptureActive, st, "the hold invalidated the capture")
		g, err := s.EndCapture()
		require.NoError(t, err)
		return g, h
	}
	released := func(h *GraphHold) bool {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if h.Released() {
				return true
			}
		}
		return false
	}
	base := GraphHoldsAlive()

	g, h := capture()
	x, err := g.Instantiate()
	require.NoError(t, err)
	require.NoError(t, g.Destroy())
	for range 10 {
		require.NoError(t, x.Launch(s))
	}
	time.Sleep(50 * time.Millisecond)
	assert.False(t, h.Released(), "the executable graph still holds it")
	require.NoError(t, x.Destroy())
	require.NoError(t, s.Synchronize())
	assert.True(t, released(h), "graph and exec destroyed")
	requireInts(t, c, p, n, func(int) int32 { return 10 })
	h.Drop()

	g, h = capture()
	h.Drop()
	assert.Equal(t, base+1, GraphHoldsAlive(), "dropped, its graph alive")
	require.NoError(t, g.Destroy())
	for deadline := time.Now().Add(10 * time.Second); GraphHoldsAlive() > base && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	assert.Equal(t, base, GraphHoldsAlive(), "freed by the destructor")
}
