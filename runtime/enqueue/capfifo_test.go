package enqueue

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/internal/fakecuda"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// inFakeDriver runs child in a child process of the test binary that
// loads the counting fake driver (internal/fakecuda) in place of libcuda:
// here it builds the fake and runs t's test there; there it calls child
// with the fake, a context and a launcher whose kernels are a fake
// function.
func inFakeDriver(t *testing.T, child func(t *testing.T, d *fakecuda.Driver, ctx *cuda.Context, l *Launcher)) {
	lib, ok := fakecuda.InChild(t, t.Name(), cuda.LibraryEnv, nil)
	if !ok {
		return
	}
	require.NoError(t, cuda.Init())
	d, err := fakecuda.Loaded(lib)
	require.NoError(t, err)
	dev, err := cuda.GetDevice(0)
	require.NoError(t, err)
	ctx, err := dev.PrimaryContext()
	require.NoError(t, err)
	defer func() { require.NoError(t, ctx.Release()) }()
	m, err := ctx.LoadModule([]byte("fake image"))
	require.NoError(t, err)
	fn, err := m.Function("fake")
	require.NoError(t, err)
	l := NewLauncher(ctx, 0x7000_0000, func(kspace.Func) (*cuda.Function, error) { return fn, nil })
	d.Set("capture_status", 1)
	defer d.Set("capture_status", 0)
	child(t, d, ctx, l)
}

// fifoPlan is a plan of one launch whose works do not fit in the kernel
// arguments, and the bytes of its work FIFO.
func fifoPlan() (*Plan, uint64) {
	ln := Launch{NThreads: 256, ChannelMask: 1, Works: make([]generated.DevWork, generated.WorkInlineMax+1)}
	ln.ChanWorkStart[generated.MaxChannels] = uint16(len(ln.Works))
	return &Plan{Launches: []Launch{ln}}, uint64(len(WorkBytes(ln.Works)))
}

// captureIn runs p on s as a launch captured in capture id.
func captureIn(t *testing.T, d *fakecuda.Driver, l *Launcher, s *cuda.Stream, p *Plan, id int) {
	t.Helper()
	d.Set("capture_id", id)
	require.NoError(t, l.RunIn(p, s, Capture(true)))
}

// TestCapturedFIFOFreedWithGraph: two captures each with a work FIFO hold
// their graphs (one user object each, however many FIFOs); once capture
// 1's graph is gone, the next captured upload takes capture 1's chunk back
// and reuses it (nothing is freed during a capture: CUDA refuses
// cuMemFree then), not capture 2's; Close frees every chunk and drops the
// holds, which are freed as their graphs go.
func TestCapturedFIFOFreedWithGraph(t *testing.T) {
	inFakeDriver(t, func(t *testing.T, d *fakecuda.Driver, ctx *cuda.Context, l *Launcher) {
		s, err := ctx.NewStream(true)
		require.NoError(t, err)
		defer func() { require.NoError(t, s.Destroy()) }()
		p, n := fifoPlan()

		d.Reset()
		captureIn(t, d, l, s, p, 1)
		captureIn(t, d, l, s, p, 1) // the same capture: its chunk, its hold
		captureIn(t, d, l, s, p, 2)
		c := d.Counts()
		assert.Equal(t, 2, c["cuUserObjectCreate"], "one user object per capture")
		assert.Equal(t, 2, c["cuGraphRetainUserObject"])
		assert.Equal(t, 2, c["cuMemAlloc_v2"], "a chunk per capture")
		assert.Equal(t, 3, c["cuLaunchKernel"])
		assert.Equal(t, 3*n, l.CapturedBytes())
		assert.Equal(t, 2, cuda.GraphHoldsAlive())

		d.Set("release_capture", 1) // capture 1's graph and its execs are gone
		assert.Equal(t, 3*n, l.CapturedBytes(), "freed lazily, at the next captured upload")
		d.Reset()
		captureIn(t, d, l, s, p, 3)
		c = d.Counts()
		assert.Zero(t, c["cuMemFree_v2"], "nothing freed while capturing (CUDA refuses it)")
		assert.Zero(t, c["cuMemAlloc_v2"], "capture 3 reuses capture 1's chunk")
		assert.Equal(t, 2*n, l.CapturedBytes(), "captures 2 and 3")
		assert.Equal(t, 2*uint64(heldChunk), l.captured.alloc, "two chunks allocated in all")
		assert.Equal(t, 2, cuda.GraphHoldsAlive(), "capture 1's hold freed")

		d.Reset()
		require.NoError(t, l.Close())
		c = d.Counts()
		assert.Equal(t, 2, c["cuMemFree_v2"], "captures 2 and 3, graphs alive or not")
		assert.Equal(t, 1, c["cuStreamDestroy_v2"], "the upload stream")
		assert.Zero(t, l.CapturedBytes())
		assert.Equal(t, 2, cuda.GraphHoldsAlive(), "dropped holds wait for their graphs")
		d.Set("release_user_objects", 1) // the graphs go after the communicator
		assert.Zero(t, cuda.GraphHoldsAlive())
		assert.Zero(t, d.Peek("user_objects"))
	})
}

// TestCapturedFIFOWithoutUserObjects: a driver without user objects keeps
// today's behaviour: one set of chunks shared by every capture, freed by
// Close only; it is asked once.
func TestCapturedFIFOWithoutUserObjects(t *testing.T) {
	inFakeDriver(t, func(t *testing.T, d *fakecuda.Driver, ctx *cuda.Context, l *Launcher) {
		s, err := ctx.NewStream(true)
		require.NoError(t, err)
		defer func() { require.NoError(t, s.Destroy()) }()
		p, n := fifoPlan()
		d.Set("user_object_result", int(cuda.ResultNotSupported))
		defer d.Set("user_object_result", 0)

		d.Reset()
		for id := 1; id <= 4; id++ {
			captureIn(t, d, l, s, p, id)
		}
		d.Set("release_user_objects", 1)
		captureIn(t, d, l, s, p, 5)
		c := d.Counts()
		assert.Equal(t, 1, c["cuUserObjectCreate"], "asked once")
		assert.Equal(t, 1, c["cuMemAlloc_v2"], "one chunk shared by the captures")
		assert.Zero(t, c["cuMemFree_v2"], "kept until Close")
		assert.Equal(t, 5*n, l.CapturedBytes())
		assert.Zero(t, cuda.GraphHoldsAlive())

		d.Reset()
		require.NoError(t, l.Close())
		assert.Equal(t, 1, d.Counts()["cuMemFree_v2"])
		assert.Zero(t, l.CapturedBytes())
	})
}

// TestCapturedFIFOReleaseRace: graphs destroyed on other threads while
// captures upload (run with -race): every capture's memory is taken back
// once its graph is gone, and only then, and reused; Close frees it all.
func TestCapturedFIFOReleaseRace(t *testing.T) {
	inFakeDriver(t, func(t *testing.T, d *fakecuda.Driver, ctx *cuda.Context, l *Launcher) {
		s, err := ctx.NewStream(true)
		require.NoError(t, err)
		defer func() { require.NoError(t, s.Destroy()) }()
		p, n := fifoPlan()
		const captures = 300

		d.Reset()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					d.Set("release_user_objects", 1)
					_ = l.CapturedBytes()
				}
			}
		}()
		for id := 1; id <= captures; id++ {
			captureIn(t, d, l, s, p, id)
		}
		close(stop)
		wg.Wait()
		d.Set("release_user_objects", 1)
		allocs := d.Counts()["cuMemAlloc_v2"]
		captureIn(t, d, l, s, p, captures+1)
		c := d.Counts()
		assert.Equal(t, n, l.CapturedBytes(), "only the last capture's FIFO")
		assert.Equal(t, captures+1, c["cuUserObjectCreate"])
		assert.Zero(t, c["cuMemFree_v2"], "nothing freed while capturing")
		// How many chunks the race needed depends on the scheduling; once
		// every graph is gone a capture takes a spare one.
		assert.Equal(t, allocs, c["cuMemAlloc_v2"], "the last capture reuses a released chunk")
		assert.Equal(t, uint64(c["cuMemAlloc_v2"])*heldChunk, l.captured.alloc)
		assert.Equal(t, 1, cuda.GraphHoldsAlive())
		d.Reset()
		require.NoError(t, l.Close())
		assert.Equal(t, c["cuMemAlloc_v2"], d.Counts()["cuMemFree_v2"], "every chunk freed by Close")
		d.Set("release_user_objects", 1)
		assert.Zero(t, cuda.GraphHoldsAlive())
	})
}
