package hostpath

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/gen"
	"github.com/ncclgo/ncclgo/internal/benchguard"
	"github.com/ncclgo/ncclgo/internal/fakecuda"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// Set by TestMain: the fake driver as loaded, the fake kernel set, or why
// there are none.
var (
	driver    *fakecuda.Driver
	kernelSet []byte
	noFake    string
)

// TestMain builds the fake driver and points runtime/cuda at it before
// any test initializes CUDA: every test of this package runs on the fake.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hostpath")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	noFake = setup(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// setup builds the fake driver in dir, loads it and makes the kernel set;
// it returns why it could not ("" when it did).
func setup(dir string) string {
	lib, err := fakecuda.Build(dir)
	if err != nil {
		return "no fake CUDA driver (it needs the module's tree and the C compiler cgo uses): " + err.Error()
	}
	if err := os.Setenv(cuda.LibraryEnv, lib); err != nil {
		return err.Error()
	}
	if err := cuda.Init(); err != nil {
		return "the fake driver does not load: " + err.Error()
	}
	if driver, err = fakecuda.Loaded(lib); err != nil {
		return err.Error()
	}
	s, err := kspace.NewSpace(kspace.Filter{})
	if err != nil {
		return err.Error()
	}
	if kernelSet, err = fakecuda.KernelSet(gen.KernelSet(s, []string{"sm_90"})); err != nil {
		return err.Error()
	}
	return ""
}

// ranks are n ranks of one communicator in this process, on the fake's
// one device, each with its own stream and 8-byte send and receive
// buffers: ncclperf -g n.
type ranks struct {
	comms      []*ncclgo.Comm
	streams    []*cuda.Stream
	send, recv []cuda.DevicePtr
}

func open(tb testing.TB, n int) *ranks {
	tb.Helper()
	return openWith(tb, n, ncclgo.Options{})
}

// openWith is open with the options o (their kernel set the fake's).
func openWith(tb testing.TB, n int, o ncclgo.Options) *ranks {
	tb.Helper()
	if noFake != "" {
		tb.Skip(noFake)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o.KernelImageBytes = kernelSet
	comms, err := ncclgo.InitAll(ctx, make([]int, n), &o)
	require.NoError(tb, err)
	tb.Cleanup(func() {
		for _, c := range comms {
			require.NoError(tb, c.Destroy())
		}
	})
	dev, err := cuda.GetDevice(0)
	require.NoError(tb, err)
	cctx, err := dev.PrimaryContext()
	require.NoError(tb, err)
	r := &ranks{comms: comms}
	for range n {
		s, err := cctx.NewStream(true)
		require.NoError(tb, err)
		send, err := cctx.MemAlloc(8)
		require.NoError(tb, err)
		recv, err := cctx.MemAlloc(8)
		require.NoError(tb, err)
		r.streams, r.send, r.recv = append(r.streams, s), append(r.send, send), append(r.recv, recv)
	}
	return r
}

// allReduce is one iteration of ncclperf's ncclgo backend: every rank's
// 8-byte out-of-place AllReduce in one group.
func (r *ranks) allReduce() error {
	g := ncclgo.NewGroup()
	for i, c := range r.comms {
		if err := g.AllReduce(c, r.send[i], r.recv[i], 2, ncclgo.Float32, ncclgo.Sum, r.streams[i]); err != nil {
			g.Discard()
			return err
		}
	}
	return g.End()
}

func benchGroupAllReduce(b *testing.B, n int) {
	r := open(b, n)
	for b.Loop() {
		if err := r.allReduce(); err != nil {
			b.Fatal(err)
		}
	}
}

// benchOneRankOfTwo is one process's iteration of ncclperf -np 2: a
// group of one rank's 8-byte AllReduce whose kernel waits for a rank of
// another process (here the other rank of InitAll's pair, which never
// calls: on the fake driver nothing waits), through the residency ledger.
func benchOneRankOfTwo(b *testing.B) {
	r := open(b, 2)
	one := &ranks{comms: r.comms[:1], streams: r.streams[:1], send: r.send[:1], recv: r.recv[:1]}
	for b.Loop() {
		if err := one.allReduce(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOneRankOfTwo is ncclperf -np 2's iteration on the fake driver.
func BenchmarkOneRankOfTwo(b *testing.B) {
	b.ReportAllocs()
	benchOneRankOfTwo(b)
}

// BenchmarkGroupAllReduce is ncclperf -g N -b 8 -e 8 -hosttime -c 0 on
// the fake driver: the host's cost of one iteration.
func BenchmarkGroupAllReduce(b *testing.B) {
	for _, n := range []int{1, 2, 8} {
		b.Run(fmt.Sprintf("ranks=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			benchGroupAllReduce(b, n)
		})
	}
}

// TestGroupAllReduceLaunches checks that the benchmarked path is the real
// one: n ranks' group makes one kernel launch (one multi-rank launch for
// n > 1, through the launcher's launch graph), and a one-rank out-of-place
// call one copy (a launch of the copy kernel, NCCLGO_COPY_API's default
// for small copies).
func TestGroupAllReduceLaunches(t *testing.T) {
	for _, n := range []int{1, 2, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			r := open(t, n)
			require.NoError(t, r.allReduce()) // first use makes events
			driver.Reset()
			const iters = 16
			for range iters {
				require.NoError(t, r.allReduce())
			}
			calls := driver.Counts().Div(iters)
			t.Logf("%d ranks: %v", n, calls)
			// A kernel launch: a collective's through its launch graph
			// (NCCLGO_KERNEL_GRAPH's default), the copy kernel's directly.
			if n == 1 {
				require.Equal(t, 1, calls["cuLaunchKernel"], "%v", calls)
			} else {
				require.Equal(t, 1, calls["cuGraphLaunch"], "%v", calls)
				require.Zero(t, calls["cuLaunchKernel"], "%v", calls)
			}
			require.Zero(t, calls["cuMemcpyAsync"], "%v", calls)
			copies := driver.Peek("copy_launches")
			if n == 1 {
				require.Equal(t, iters, copies, "one rank: the copy kernel's launch")
			} else {
				require.Zero(t, copies, "%d ranks: a collective kernel's launch", n)
			}
		})
	}
}

// TestFirstGroupCaptured is ncclperf -G -c 1's start: the first group of
// fresh communicators comes while their streams are being captured. The
// launch graphs made then are made in relaxed capture mode (a global-mode
// capture refuses graph building otherwise, and the capture is lost), and
// the eager groups after the capture go through them.
func TestFirstGroupCaptured(t *testing.T) {
	for _, n := range []int{2, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			r := open(t, n)
			driver.Set("capture_status", 1)
			driver.Reset()
			err := r.allReduce()
			refused := driver.Peek("capture_refused")
			driver.Set("capture_status", 0)
			require.NoError(t, err, "the captured group")
			require.Zero(t, refused, "graphs built outside relaxed mode under capture")
			driver.Reset()
			require.NoError(t, r.allReduce())
			calls := driver.Counts()
			require.Equal(t, 1, calls["cuGraphLaunch"], "eager after the capture: %v", calls)
			require.Zero(t, calls["cuLaunchKernel"], "eager after the capture: %v", calls)
		})
	}
}

// TestOneRankOps counts what each collective of a one-rank communicator
// of the C ABI's kind (UntrackedOneRankCopies) asks of the driver outside
// a group: out of place a copy (the copy kernel's launch by default), a
// collective kernel where the op scales (Avg of a floating-point type,
// PreMulSum), in place nothing but that kernel.
func TestOneRankOps(t *testing.T) {
	r := openWith(t, 1, ncclgo.Options{UntrackedOneRankCopies: true})
	c, s := r.comms[0], r.streams[0]
	pre, err := c.NewPreMulSum(2.0, ncclgo.Float32)
	require.NoError(t, err)
	calls := map[string]func(send, recv cuda.DevicePtr) error{
		"Sum":       func(sb, rb cuda.DevicePtr) error { return c.AllReduce(sb, rb, 2, ncclgo.Float32, ncclgo.Sum, s) },
		"Prod":      func(sb, rb cuda.DevicePtr) error { return c.AllReduce(sb, rb, 2, ncclgo.Float32, ncclgo.Prod, s) },
		"Min":       func(sb, rb cuda.DevicePtr) error { return c.AllReduce(sb, rb, 2, ncclgo.Int32, ncclgo.Min, s) },
		"Max":       func(sb, rb cuda.DevicePtr) error { return c.AllReduce(sb, rb, 2, ncclgo.Float32, ncclgo.Max, s) },
		"AvgInt":    func(sb, rb cuda.DevicePtr) error { return c.AllReduce(sb, rb, 2, ncclgo.Int32, ncclgo.Avg, s) },
		"Reduce":    func(sb, rb cuda.DevicePtr) error { return c.Reduce(sb, rb, 2, ncclgo.Float32, ncclgo.Sum, 0, s) },
		"RS":        func(sb, rb cuda.DevicePtr) error { return c.ReduceScatter(sb, rb, 2, ncclgo.Float32, ncclgo.Sum, s) },
		"AllGather": func(sb, rb cuda.DevicePtr) error { return c.AllGather(sb, rb, 2, ncclgo.Float32, s) },
		"Broadcast": func(sb, rb cuda.DevicePtr) error { return c.Broadcast(sb, rb, 2, ncclgo.Float32, 0, s) },
		"AvgFloat":  func(sb, rb cuda.DevicePtr) error { return c.AllReduce(sb, rb, 2, ncclgo.Float32, ncclgo.Avg, s) },
		"PreMulSum": func(sb, rb cuda.DevicePtr) error { return c.AllReduce(sb, rb, 2, ncclgo.Float32, pre, s) },
	}
	for name, call := range calls {
		scales := name == "AvgFloat" || name == "PreMulSum"
		for _, inPlace := range []bool{false, true} {
			recv := r.recv[0]
			if inPlace {
				recv = r.send[0]
			}
			require.NoError(t, call(r.send[0], recv), name) // first use makes events
			driver.Reset()
			require.NoError(t, call(r.send[0], recv), name)
			got := driver.Counts()
			t.Logf("%s in place %v: %v", name, inPlace, got)
			copies := driver.Peek("copy_launches")
			switch {
			case scales:
				// A one-rank communicator's kernels are programmatic
				// launches by default (NCCLGO_PDL=auto): cuLaunchKernelEx.
				assert.Equal(t, 1, got["cuLaunchKernel"]+got["cuLaunchKernelEx"], "%s in place %v: %v", name, inPlace, got)
				assert.Zero(t, copies, "%s in place %v: a collective kernel, not the copy kernel", name, inPlace)
				assert.Zero(t, got["cuMemcpyAsync"], "%s in place %v: %v", name, inPlace, got)
			case inPlace:
				assert.Zero(t, got.Total(), "%s in place: %v", name, got)
			default:
				assert.Equal(t, map[string]int{"cuCtxGetCurrent": 1, "cuLaunchKernel": 1}, map[string]int(got), name)
				assert.Equal(t, 1, copies, "%s: the copy kernel's launch", name)
			}
		}
	}
	require.NoError(t, c.Wait(context.Background()))
}

// TestHostCost fails when the host path of ncclperf -g 1, 2 or 8's
// iteration, or of one process's of -np 2, regresses past twice its committed baseline, or allocates
// more (internal/benchguard).
func TestHostCost(t *testing.T) {
	if noFake != "" {
		t.Skip(noFake)
	}
	for _, n := range []int{1, 2, 8} {
		benchguard.Check(t, fmt.Sprintf("hostpath/GroupAllReduce%d", n), func(b *testing.B) { benchGroupAllReduce(b, n) })
	}
	benchguard.Check(t, "hostpath/OneRankOfTwo", benchOneRankOfTwo)
}

// Groups of several communicators' ranks run concurrently from several
// goroutines: they share the pools of group, admission and merge memory
// and the process's residency ledger (run it with -race).
func TestConcurrentGroups(t *testing.T) {
	sets := []*ranks{open(t, 2), open(t, 8), open(t, 1), open(t, 2)}
	var wg sync.WaitGroup
	errs := make([]error, len(sets))
	for i, r := range sets {
		wg.Go(func() {
			for range 200 {
				if err := r.allReduce(); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "set %d", i)
	}
	for _, r := range sets {
		for _, c := range r.comms {
			require.NoError(t, c.Err())
		}
	}
}
