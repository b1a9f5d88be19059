package kernels

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/gen"
	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kset"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// gpuContext returns device 0's primary context, or skips.
func gpuContext(t *testing.T) *cuda.Context {
	t.Helper()
	if err := cuda.Init(); err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	n, err := cuda.DeviceCount()
	require.NoError(t, err)
	if n == 0 {
		t.Skip("no CUDA device")
	}
	dev, err := cuda.GetDevice(0)
	require.NoError(t, err)
	ctx, err := dev.PrimaryContext()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ctx.Release() })
	return ctx
}

// gpuImage returns the image from $NCCLGO_FATBIN (or the other places
// FindImage searches), or skips.
func gpuImage(t *testing.T) []byte {
	t.Helper()
	img, src, err := FindImage("")
	if errors.Is(err, ErrNoImage) && (os.Getenv(EnvFatbin) == "" || errors.Is(err, fs.ErrNotExist)) {
		t.Skipf("no kernel image (set %s to a fatbin built from this generated/ tree): %v", EnvFatbin, err)
	}
	require.NoError(t, err)
	t.Logf("image: %s (%d bytes)", src, len(img))
	return img
}

func TestGPULoadResolvesEverything(t *testing.T) {
	ctx := gpuContext(t)
	img := gpuImage(t)

	start := time.Now()
	set, err := Load(ctx, img)
	require.NoError(t, err)
	t.Logf("first Load: %v", time.Since(start))
	defer func() { assert.NoError(t, set.Release()) }()

	present := 0
	for i, k := range generated.Kernels {
		if set.Kernel(i) != nil {
			present++
		} else {
			t.Logf("absent on sm_%d: %s", set.Arch()/10, k.Symbol)
		}
	}
	t.Logf("%d of %d kernels present on sm_%d", present, len(generated.Kernels), set.Arch()/10)
	tab, err := set.FuncTable()
	require.NoError(t, err)
	assert.NotZero(t, tab)

	runnable := 0
	for _, f := range kspace.Rows() {
		e, err := set.Lookup(f)
		if _, rerr := Resolve(f); rerr != nil {
			assert.Error(t, err, "%v", f)
			continue
		}
		if err != nil {
			require.ErrorIs(t, err, ErrUnsupported, "%v", f)
			assert.Greater(t, generated.Funcs[mustResolve(t, f)].Req.Arch, set.Arch(), "%v: %v", f, err)
			continue
		}
		require.NotNil(t, e.Kernel, "%v", f)
		assert.Equal(t, generated.Kernels[generated.Funcs[e.FuncID].Kernel].Symbol, e.Kernel.Name())
		runnable++
	}
	t.Logf("%d rows runnable", runnable)

	for _, nt := range []int{64, 256, 512, generated.MaxNthreads} {
		n, err := set.MaxBlocksPerSM(nt)
		require.NoError(t, err)
		t.Logf("MaxBlocksPerSM(%d) = %d", nt, n)
		assert.Positive(t, n)
	}
	_, err = set.MaxBlocksPerSM(0)
	assert.Error(t, err)
}

func mustResolve(t *testing.T, f kspace.Func) int {
	id, err := Resolve(f)
	require.NoError(t, err)
	return id
}

func TestGPULoadIsSharedAcrossRanks(t *testing.T) {
	ctx := gpuContext(t)
	img := gpuImage(t)

	const ranks = 8
	sets := make([]*Set, ranks)
	errs := make([]error, ranks)
	start := time.Now()
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each rank reads its own copy, as separate communicators would:
			// the content hash, not the slice, keys the cache.
			mine := img
			if r%2 == 1 {
				mine = append([]byte(nil), img...)
			}
			sets[r], errs[r] = Load(ctx, mine)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	t.Logf("%d concurrent Loads: %v", ranks, elapsed)
	for r := range ranks {
		require.NoError(t, errs[r])
		assert.Same(t, sets[0].m, sets[r].m, "rank %d has its own module", r)
	}
	assert.Less(t, elapsed, 3*time.Second, "sanity bound; the init target for 8 ranks is 300 ms in all")

	e0, err := sets[0].Lookup(kspace.SendRecvFunc)
	require.NoError(t, err)
	for r := range ranks {
		require.NoError(t, sets[r].Release())
		require.NoError(t, sets[r].Release(), "Release is idempotent")
	}
	_, err = sets[0].Lookup(kspace.SendRecvFunc)
	assert.ErrorIs(t, err, ErrReleased)
	assert.NotNil(t, e0.Kernel)
	cache.mu.Lock()
	assert.Empty(t, cache.mods, "the last Release unloads the module")
	cache.mu.Unlock()
}

func TestGPUMismatchedImage(t *testing.T) {
	ctx := gpuContext(t)
	ptx := []byte(".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry ngSomethingElse()\n{\n\tret;\n}\n")
	_, err := Load(ctx, ptx)
	require.Error(t, err)
	var me *MismatchError
	require.ErrorAs(t, err, &me)
	assert.ErrorIs(t, err, ErrMismatch)
	assert.Contains(t, err.Error(), "no kernel-set manifest")
	t.Log(err)

	_, err = Load(ctx, []byte("\x7fELF not really"))
	require.Error(t, err)
	t.Log(err)
	cache.mu.Lock()
	assert.Empty(t, cache.mods, "failed loads leave nothing cached")
	cache.mu.Unlock()
}

// syntheticPTX is a stand-in kernel set: the generated tables' manifest
// around a PTX image with every symbol the tables name (empty kernels, a
// zeroed function table) except the kernels for which skip returns true.
// It exercises Load, Lookup, sharing and occupancy without the real device
// library.
func syntheticPTX(skip func(generated.KernelInfo) bool) []byte {
	s, err := kspace.NewSpace(kspace.MustParseFilter(generated.Filter))
	if err != nil {
		panic(err)
	}
	b, err := kset.Wrap(gen.KernelSet(s, []string{"sm_50"}), syntheticImage(skip))
	if err != nil {
		panic(err)
	}
	return b
}

func syntheticImage(skip func(generated.KernelInfo) bool) []byte {
	var b strings.Builder
	b.WriteString(".version 7.0\n.target sm_50\n.address_size 64\n")
	fmt.Fprintf(&b, ".visible .global .align 8 .u64 %s[%d];\n", generated.FuncTableSymbol, len(generated.Funcs)+1)
	for _, k := range generated.Kernels {
		if !skip(k) {
			fmt.Fprintf(&b, ".visible .entry %s()\n{\n\tret;\n}\n", k.Symbol)
		}
	}
	return []byte(b.String())
}

func TestGPUSyntheticImage(t *testing.T) {
	ctx := gpuContext(t)
	fp8 := func(k generated.KernelInfo) bool { return k.Req.Arch >= 900 }
	img := syntheticPTX(fp8)

	const ranks = 8
	sets := make([]*Set, ranks)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, ranks)
	for r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sets[r], errs[r] = Load(ctx, append([]byte(nil), img...))
		}()
	}
	wg.Wait()
	t.Logf("%d concurrent Loads of a %d-byte PTX image: %v", ranks, len(img), time.Since(start))
	for r := range ranks {
		require.NoError(t, errs[r])
		assert.Same(t, sets[0].m, sets[r].m)
	}
	set := sets[0]

	e, err := set.Lookup(kspace.SendRecvFunc)
	require.NoError(t, err)
	assert.Equal(t, "ngDevKernel_SendRecv", e.Kernel.Name())
	assert.True(t, e.Specialized)

	f := kspace.Func{Coll: kspace.AllReduce, RedOp: kspace.Sum, Type: kspace.I32, Algo: kspace.Ring, Proto: kspace.Simple}
	e, err = set.Lookup(f)
	require.NoError(t, err)
	assert.Equal(t, "ngDevKernel_AllReduce_Sum_u32_RING_LL", e.Kernel.Name())
	assert.False(t, e.Specialized)
	assert.Equal(t, mustResolve(t, f), e.FuncID)

	// The fp8 kernels were left out: their functions are unsupported, the
	// others unaffected.
	_, err = set.Lookup(kspace.Func{Coll: kspace.AllReduce, RedOp: kspace.Sum, Type: kspace.F8E4M3, Algo: kspace.Ring, Proto: kspace.LL})
	require.ErrorIs(t, err, ErrUnsupported)
	assert.Contains(t, err.Error(), "not in the image")
	t.Log(err)

	_, err = set.Lookup(kspace.Func{Coll: kspace.AllReduce, RedOp: kspace.Sum, Type: kspace.F32, Algo: kspace.NVLS, Proto: kspace.Simple})
	assert.ErrorIs(t, err, ErrUnsupported)

	n, err := set.MaxBlocksPerSM(generated.MaxNthreads)
	require.NoError(t, err)
	t.Logf("MaxBlocksPerSM(%d) = %d for empty kernels", generated.MaxNthreads, n)
	assert.Positive(t, n)

	for _, s := range sets {
		require.NoError(t, s.Release())
	}
	cache.mu.Lock()
	assert.Empty(t, cache.mods)
	cache.mu.Unlock()

	// A kernel with no requirement missing is a mismatch naming it.
	img = syntheticPTX(func(k generated.KernelInfo) bool { return k.Symbol == "ngDevKernel_AllReduce_Sum_f32_RING_LL" })
	_, err = Load(ctx, img)
	require.ErrorIs(t, err, ErrMismatch)
	assert.Contains(t, err.Error(), "image lacks ngDevKernel_AllReduce_Sum_f32_RING_LL, which its manifest lists")

	// A function table of the wrong size is a mismatch too.
	s, err := kspace.NewSpace(kspace.MustParseFilter(generated.Filter))
	require.NoError(t, err)
	img, err = kset.Wrap(gen.KernelSet(s, []string{"sm_50"}),
		[]byte(strings.Replace(string(syntheticImage(fp8)), fmt.Sprintf("[%d]", len(generated.Funcs)+1), "[3]", 1)))
	require.NoError(t, err)
	_, err = Load(ctx, img)
	require.ErrorIs(t, err, ErrMismatch)
	assert.Contains(t, err.Error(), "bytes of ngDevFuncTable, not the")

	// A set of another ABI is refused at load, naming both versions.
	m := gen.KernelSet(s, []string{"sm_50"})
	m.ABI = "00000000deadbeef"
	img, err = kset.Wrap(m, syntheticImage(fp8))
	require.NoError(t, err)
	_, err = Load(ctx, img)
	require.ErrorIs(t, err, ErrABI)
	assert.Contains(t, err.Error(), "00000000deadbeef")
	assert.Contains(t, err.Error(), generated.ABIVersion)
	t.Log(err)
}

// TestGPUSlimSet loads a synthetic slim set: init-time work succeeds, the
// functions it has resolve to its own ids, and one it lacks is an error
// naming the function and the filter only when asked for.
func TestGPUSlimSet(t *testing.T) {
	ctx := gpuContext(t)
	m := manifestOf(t, slimFilter)
	var b strings.Builder
	b.WriteString(".version 7.0\n.target sm_50\n.address_size 64\n")
	fmt.Fprintf(&b, ".visible .global .align 8 .u64 %s[%d];\n", m.FuncTable, len(m.Funcs)+1)
	for _, k := range m.Kernels {
		fmt.Fprintf(&b, ".visible .entry %s()\n{\n\tret;\n}\n", k.Symbol)
	}
	img, err := kset.Wrap(m, []byte(b.String()))
	require.NoError(t, err)
	set, err := Load(ctx, img)
	require.NoError(t, err)
	defer func() { assert.NoError(t, set.Release()) }()
	n, err := set.MaxBlocksPerSM(generated.MaxNthreads)
	require.NoError(t, err)
	assert.Positive(t, n)
	e, err := set.Lookup(parse(t, "AllReduce Sum f32 RING LL"))
	require.NoError(t, err)
	assert.Equal(t, "ngDevKernel_AllReduce_Sum_f32_RING_LL", e.Kernel.Name())
	assert.Equal(t, "AllReduce Sum f32 RING LL", m.Funcs[e.FuncID].Name)
	_, err = set.Lookup(parse(t, "AllGather RING LL"))
	require.ErrorIs(t, err, ErrNotBuilt)
	assert.Contains(t, err.Error(), slimFilter)
	t.Log(err)
}
