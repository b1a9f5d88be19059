package cuda

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// captureChain captures n launches of add1 on p (one block of size
// threads) on s, each followed by a record of done as mode says:
// "none", "chain" (RecordExternal), "beside" (RecordBeside: the record
// node moved after each launch, one in all) or "kept" (RecordBeside with
// each record Kept: a node per launch, each after the one before). It
// checks the graph's node count and returns the instantiated graph.
func captureChain(tb testing.TB, s *Stream, add1 *Function, p DevicePtr, size uint32, done *Event, n int, mode string) *GraphExec {
	tb.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := s.BeginCapture(CaptureModeGlobal); err != nil {
		tb.Fatal(err)
	}
	var a packArgs
	a.u64(uint64(p))
	a.u32(size)
	var prev GraphRecord
	for i := range n {
		if err := s.Launch(add1, Dim1(1), Dim1(size), 0, a.b); err != nil {
			tb.Fatal(err)
		}
		var err error
		switch mode {
		case "chain":
			err = done.RecordExternal(s)
		case "kept":
			var r GraphRecord
			r, err = done.RecordBeside(s, prev.Kept())
			if err == nil && !r.Beside() {
				err = fmt.Errorf("record %d: the driver put it in the chain", i)
			}
			prev = r
		case "beside":
			var r GraphRecord
			r, err = done.RecordBeside(s, prev)
			if err == nil && i > 0 && r.node != prev.node {
				err = fmt.Errorf("record %d: a new node, not the record before it moved", i)
			}
			if err == nil && !r.Beside() {
				err = fmt.Errorf("record %d: the driver put it in the chain", i)
			}
			prev = r
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	g, err := s.EndCapture()
	if err != nil {
		tb.Fatal(err)
	}
	defer g.Destroy()
	nodes, err := g.NodeCount()
	if err != nil {
		tb.Fatal(err)
	}
	want := map[string]int{"none": n, "chain": 2 * n, "kept": 2 * n, "beside": n + 1}[mode]
	if nodes != want {
		tb.Fatalf("%s: %d nodes, want %d", mode, nodes, want)
	}
	x, err := g.Instantiate()
	if err != nil {
		tb.Fatal(err)
	}
	return x
}

// TestGPUGraphRecordBeside captures kernels each followed by a record
// beside the stream's chain, moved after each launch (one record node in
// all) or kept (a node per launch), and checks that the capture ends
// (records that nothing follows are allowed), that every replay runs
// every kernel once, and that the event, recorded by each replay,
// completes.
func TestGPUGraphRecordBeside(t *testing.T) {
	const n, size, replays = 10, 256, 50
	c, f, p, s, done := graphFixture(t, size)

	for i, mode := range []string{"beside", "kept"} {
		x := captureChain(t, s, f, p, size, done, n, mode)
		for range replays {
			require.NoError(t, x.Launch(s))
		}
		waitReplays(t, done)
		require.NoError(t, s.Synchronize())
		assert.NoError(t, x.Destroy())
		requireInts(t, c, p, size, func(int) int32 { return int32((i + 1) * n * replays) })
	}
	// Outside a capture the record is refused.
	_, err := done.RecordBeside(s, GraphRecord{})
	assert.Error(t, err)
}

// BenchmarkGPUGraphReplay measures what a replayed graph of 100 one-block
// kernels costs per kernel with no record after each kernel, with an
// external record in the stream's chain after each
// (NCCLGO_CAPTURE_RECORD=chain), with a record node beside the chain
// after each ("kept") and with one record beside it, moved after each
// kernel (ncclgo's default): the GPU-side gap the record nodes add
// between two captured collectives.
func BenchmarkGPUGraphReplay(b *testing.B) {
	c := gpu(b)
	m := loadTestModule(b, c)
	add1, err := m.Function("add1")
	if err != nil {
		b.Fatal(err)
	}
	const size = 32
	p, err := c.MemAlloc(4 * size)
	if err != nil {
		b.Fatal(err)
	}
	defer c.MemFree(p)
	s, err := c.NewStream(true)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destroy()
	done, err := c.NewEvent(true)
	if err != nil {
		b.Fatal(err)
	}
	defer done.Destroy()
	const kernels = 100
	for _, mode := range []string{"none", "chain", "kept", "beside"} {
		b.Run(mode, func(b *testing.B) {
			x := captureChain(b, s, add1, p, size, done, kernels, mode)
			defer x.Destroy()
			if err := x.Launch(s); err != nil { // warm-up: the first launch uploads the graph
				b.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			for b.Loop() {
				if err := x.Launch(s); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*kernels), "ns/kernel")
		})
	}
}
