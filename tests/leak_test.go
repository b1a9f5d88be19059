package tests

// The GPU half of issue 13's leak test: communicators created, used and
// destroyed over and over leave GPU memory, pinned host memory, file
// descriptors, goroutines and OS threads at their baseline. The CPU half
// is the root package's leak_test.go.
//
//	NCCLGO_LEAK_CYCLES       cycles (default 1000 for InitAll, 100 for
//	                         InitRank across processes; a fifth with
//	                         -test.short)
//	NCCLGO_LEAK_HOLD_MODULE  "1": the test holds a reference on the kernel
//	                         module, so that the cycles do not load and
//	                         unload it each time (faster; the load itself
//	                         is then left out of the check)
//	NCCLGO_TEST_DEVICES      devices of the two processes (default "0":
//	                         both on GPU 0, which needs MPS)

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/internal/leakcheck"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/kernels"
	"github.com/ncclgo/ncclgo/runtime/topo"
)

// gpuLeakTolerance: goroutines and descriptors back exactly, pinned
// memory back exactly, device memory within 32 MiB (allocation
// granularity, the driver's own pools), a few threads more than after the
// warm-up (the Go runtime and the driver keep idle threads).
var gpuLeakTolerance = leakcheck.Tolerance{Threads: 8, DeviceMem: 32 << 20, Settle: 15 * time.Second}

// The environment of TestLeakGPUChild.
const (
	leakEnvRole   = "NCCLGO_LEAK_ROLE" // "rank"
	leakEnvRank   = "NCCLGO_LEAK_RANK"
	leakEnvDevice = "NCCLGO_LEAK_DEVICE"
	leakEnvDir    = "NCCLGO_LEAK_DIR"
	leakEnvCycles = "NCCLGO_LEAK_CHILD_CYCLES"
	leakCount     = 1 << 16 // AllReduce elements (float32)
)

func leakCycles(t *testing.T, def int) int {
	t.Helper()
	if os.Getenv("NCCLGO_LEAK_CYCLES") != "" {
		n := envInt(t, "NCCLGO_LEAK_CYCLES", def)
		require.Positive(t, n, "NCCLGO_LEAK_CYCLES")
		return n
	}
	if testing.Short() {
		return max(def/5, 1)
	}
	return def
}

// leakGPU is what the GPU leak tests need: the kernel image, device d's
// primary context and the probe of its memory.
type leakGPU struct {
	image []byte
	cctx  *cuda.Context
	probe leakcheck.Probe
}

func newLeakGPU(t *testing.T, dev int) *leakGPU {
	t.Helper()
	image, _, err := kernels.FindImage("")
	require.NoError(t, err)
	d, err := cuda.GetDevice(dev)
	require.NoError(t, err)
	cctx, err := d.PrimaryContext()
	require.NoError(t, err)
	t.Cleanup(func() { cctx.Release() })
	g := &leakGPU{image: image, cctx: cctx}
	g.probe = leakcheck.Probe{
		DeviceMem: func() (uint64, error) {
			free, total, err := cctx.MemGetInfo()
			return total - free, err
		},
		Pinned: func() uint64 { b, _ := cuda.PinnedHostMemory(); return b },
	}
	if os.Getenv("NCCLGO_LEAK_HOLD_MODULE") == "1" {
		set, err := kernels.Load(cctx, image)
		require.NoError(t, err)
		t.Cleanup(func() { set.Release() })
	}
	return g
}

// leakBuffers allocates a stream and float32 buffers of leakCount
// elements, the send buffer filled with rank+1.
func (g *leakGPU) buffers(t *testing.T, rank int) (*cuda.Stream, cuda.DevicePtr, cuda.DevicePtr) {
	t.Helper()
	st, err := g.cctx.NewStream(true)
	require.NoError(t, err)
	send, err := g.cctx.MemAlloc(4 * leakCount)
	require.NoError(t, err)
	recv, err := g.cctx.MemAlloc(4 * leakCount)
	require.NoError(t, err)
	t.Cleanup(func() { g.cctx.MemFree(send); g.cctx.MemFree(recv); st.Destroy() })
	v := make([]float32, leakCount)
	for i := range v {
		v[i] = float32(rank + 1)
	}
	require.NoError(t, g.cctx.MemcpyHtoD(send, unsafe.Pointer(&v[0]), 4*leakCount))
	return st, send, recv
}

// check compares a few elements of recv with want.
func (g *leakGPU) check(recv cuda.DevicePtr, want float32) error {
	v := make([]float32, leakCount)
	if err := g.cctx.MemcpyDtoH(unsafe.Pointer(&v[0]), recv, 4*leakCount); err != nil {
		return err
	}
	for _, i := range []int{0, 1, leakCount / 2, leakCount - 1} {
		if v[i] != want {
			return fmt.Errorf("recv[%d] = %v, want %v", i, v[i], want)
		}
	}
	return nil
}

// TestLeakGPUInitAll: NCCLGO_LEAK_CYCLES (1000) cycles of InitAll of two
// ranks on GPU 0, an AllReduce, Wait and Destroy.
func TestLeakGPUInitAll(t *testing.T) {
	if os.Getenv(leakEnvRole) != "" {
		t.Skip("child process")
	}
	mpGPU(t)
	n := leakCycles(t, 1000)
	g := newLeakGPU(t, 0)
	var streams [2]*cuda.Stream
	var send, recv [2]cuda.DevicePtr
	for r := range 2 {
		streams[r], send[r], recv[r] = g.buffers(t, r)
	}
	opts := &ncclgo.Options{KernelImageBytes: g.image, BootstrapTimeout: time.Minute}
	cycle := func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		comms, err := ncclgo.InitAll(ctx, []int{0, 0}, opts)
		require.NoError(t, err, "cycle %d", i)
		defer func() {
			for r, c := range comms {
				require.NoError(t, c.Destroy(), "cycle %d rank %d: Destroy", i, r)
			}
		}()
		grp := ncclgo.NewGroup()
		for r, c := range comms {
			require.NoError(t, grp.AllReduce(c, send[r], recv[r], leakCount, ncclgo.Float32, ncclgo.Sum, streams[r]), "cycle %d rank %d", i, r)
		}
		require.NoError(t, grp.End(), "cycle %d", i)
		for r, c := range comms {
			require.NoError(t, c.Wait(ctx), "cycle %d rank %d: Wait", i, r)
		}
		require.NoError(t, g.check(recv[i&1], 3), "cycle %d rank %d", i, i&1)
	}
	for i := range 2 { // warm-up: module, driver threads, pools
		cycle(-1 - i)
	}
	ctx := context.Background()
	base, err := leakcheck.Baseline(ctx, g.probe, 200*time.Millisecond)
	require.NoError(t, err)
	start := time.Now()
	for i := range n {
		cycle(i)
	}
	elapsed := time.Since(start)
	now, err := leakcheck.Settle(ctx, base, g.probe, gpuLeakTolerance)
	line := fmt.Sprintf("LEAK cycles=%d %s elapsed=%v (InitAll [0 0] + AllReduce + Wait + Destroy)", n, leakcheck.Figures(base, now), elapsed.Round(time.Millisecond))
	fmt.Println(line)
	t.Log(line)
	require.NoError(t, err)
}

// TestLeakGPUMultiProcess: two processes (this binary re-executed), each
// doing NCCLGO_LEAK_CYCLES (100) cycles of InitRank, AllReduce, Wait and
// Destroy, and each checking itself against its baseline.
func TestLeakGPUMultiProcess(t *testing.T) {
	if os.Getenv(leakEnvRole) != "" {
		t.Skip("child process")
	}
	mpGPU(t)
	n := leakCycles(t, 100)
	devs := mpDevices(t)
	count, err := cuda.DeviceCount()
	require.NoError(t, err)
	l := mpLayout{nProcs: 2, perProc: 1}
	for p := range 2 {
		d := devs[p%len(devs)]
		if d >= count {
			t.Skipf("NCCLGO_TEST_DEVICES names device %d, but there are %d devices", d, count)
		}
		l.devs = append(l.devs, d)
	}
	if l.devs[0] == l.devs[1] && !topo.MPSActive(os.Getenv) {
		t.Skipf("both processes would run on GPU %d, which needs MPS (not running); set NCCLGO_TEST_DEVICES=0,1", l.devs[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir := t.TempDir()
	kids := make([]*mpChild, 2)
	for p := range 2 {
		kids[p] = leakStart(t, ctx, p, l.devs[p], dir, n)
	}
	re := regexp.MustCompile(`LEAK cycles=.*`)
	for p, k := range kids {
		err := <-k.done
		out := k.output()
		require.NoError(t, err, "process %d:\n%s", p, out)
		m := re.FindString(out)
		require.NotEmpty(t, m, "process %d printed no LEAK line:\n%s", p, out)
		fmt.Printf("process %d (GPU %d): %s\n", p, l.devs[p], m)
		t.Logf("process %d (GPU %d): %s", p, l.devs[p], m)
	}
}

// leakStart starts rank process p of TestLeakGPUMultiProcess.
func leakStart(t *testing.T, ctx context.Context, p, dev int, dir string, cycles int) *mpChild {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NCCLGO_LEAK_") || strings.HasPrefix(kv, "NCCLGO_LEAK_HOLD_MODULE=") {
			env = append(env, kv)
		}
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLeakGPUChild$", "-test.count=1", "-test.v", "-test.timeout=30m")
	cmd.Env = append(env, leakEnvRole+"=rank", leakEnvRank+"="+strconv.Itoa(p), leakEnvDevice+"="+strconv.Itoa(dev),
		leakEnvDir+"="+dir, leakEnvCycles+"="+strconv.Itoa(cycles))
	k := startChild(t, cmd)
	return k
}

// TestLeakGPUChild is a rank process of TestLeakGPUMultiProcess. Rank 0
// starts each cycle's root and hands its id to rank 1 through a file.
func TestLeakGPUChild(t *testing.T) {
	if os.Getenv(leakEnvRole) == "" {
		t.Skip("only runs as a child of TestLeakGPUMultiProcess")
	}
	rank := envInt(t, leakEnvRank, -1)
	dev := envInt(t, leakEnvDevice, 0)
	n := envInt(t, leakEnvCycles, 100)
	dir := os.Getenv(leakEnvDir)
	require.Contains(t, []int{0, 1}, rank)
	g := newLeakGPU(t, dev)
	st, send, recv := g.buffers(t, rank)
	opts := &ncclgo.Options{KernelImageBytes: g.image, BootstrapTimeout: time.Minute}
	cycle := func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		idFile := filepath.Join(dir, fmt.Sprintf("id-%d", i))
		var id ncclgo.UniqueID
		if rank == 0 {
			root, err := ncclgo.StartRoot(ctx, opts)
			require.NoError(t, err, "cycle %d", i)
			defer func() {
				require.NoError(t, root.Wait(ctx), "cycle %d: the root", i)
				require.NoError(t, root.Close())
			}()
			id = root.ID()
			require.NoError(t, os.WriteFile(idFile+".tmp", []byte(id.String()), 0o600))
			require.NoError(t, os.Rename(idFile+".tmp", idFile))
		} else {
			id = leakReadID(t, ctx, idFile)
		}
		c, err := ncclgo.InitRank(ctx, 2, id, rank, dev, opts)
		require.NoError(t, err, "cycle %d", i)
		defer func() { require.NoError(t, c.Destroy(), "cycle %d: Destroy", i) }()
		require.NoError(t, c.AllReduce(send, recv, leakCount, ncclgo.Float32, ncclgo.Sum, st), "cycle %d", i)
		require.NoError(t, c.Wait(ctx), "cycle %d: Wait", i)
		require.NoError(t, g.check(recv, 3), "cycle %d", i)
	}
	cycle(-2) // warm-up
	cycle(-1)
	ctx := context.Background()
	base, err := leakcheck.Baseline(ctx, g.probe, 200*time.Millisecond)
	require.NoError(t, err)
	start := time.Now()
	for i := range n {
		cycle(i)
	}
	elapsed := time.Since(start)
	now, err := leakcheck.Settle(ctx, base, g.probe, gpuLeakTolerance)
	fmt.Printf("LEAK cycles=%d %s elapsed=%v (InitRank rank %d of 2 processes, GPU %d, + AllReduce + Wait + Destroy)\n",
		n, leakcheck.Figures(base, now), elapsed.Round(time.Millisecond), rank, dev)
	require.NoError(t, err)
}

// leakReadID waits for rank 0 to write the id file.
func leakReadID(t *testing.T, ctx context.Context, path string) ncclgo.UniqueID {
	t.Helper()
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			id, err := ncclgo.ParseUniqueID(string(b))
			require.NoError(t, err, "%s", path)
			return id
		}
		require.True(t, errors.Is(err, os.ErrNotExist), "%s: %v", path, err)
		select {
		case <-ctx.Done():
			t.Fatalf("no id in %s: %v", path, context.Cause(ctx))
		case <-time.After(time.Millisecond):
		}
	}
}
