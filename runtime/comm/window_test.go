package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/internal/testutil"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/transport"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// fakeWinIPC is one process's driver for windows: allocations of 1 MiB
// at a per-rank base, IPC handles naming (rank, allocation), opens at a
// per-opener address, and the device table as a map.
type fakeWinIPC struct {
	rank     int
	mu       sync.Mutex
	open     map[cuda.DevicePtr]bool
	table    map[cuda.DevicePtr]uint64 // 8-byte entries written by MemcpyHtoD
	nOpen    int
	failGet  bool // IpcGetMemHandle fails (a VMM allocation)
	failOpen bool
}

const fakeAlloc = 1 << 20

func fakeBase(rank int) cuda.DevicePtr { return cuda.DevicePtr(0x7000_0000_0000 + rank<<32) }

func (f *fakeWinIPC) MemGetAddressRange(p cuda.DevicePtr) (cuda.DevicePtr, uint64, error) {
	base := p &^ (fakeAlloc - 1)
	return base, fakeAlloc, nil
}

func (f *fakeWinIPC) IpcGetMemHandle(p cuda.DevicePtr) (cuda.IpcMemHandle, error) {
	if f.failGet {
		return cuda.IpcMemHandle{}, errors.New("CUDA_ERROR_INVALID_VALUE (fake VMM)")
	}
	var h cuda.IpcMemHandle
	binary.LittleEndian.PutUint64(h[:], uint64(p))
	return h, nil
}

func (f *fakeWinIPC) IpcOpenMemHandle(h cuda.IpcMemHandle) (cuda.DevicePtr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failOpen {
		return 0, errors.New("CUDA_ERROR_INVALID_HANDLE (fake)")
	}
	// Mapped here at another address than the exporter's: the opener's
	// high bits.
	p := cuda.DevicePtr(binary.LittleEndian.Uint64(h[:])) | cuda.DevicePtr(f.rank+1)<<44
	f.open[p] = true
	f.nOpen++
	return p, nil
}

func (f *fakeWinIPC) IpcCloseMemHandle(p cuda.DevicePtr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.open[p] {
		return fmt.Errorf("IpcCloseMemHandle(%#x): not open (a double close)", uint64(p))
	}
	delete(f.open, p)
	return nil
}

func (f *fakeWinIPC) MemcpyHtoD(dst cuda.DevicePtr, src unsafe.Pointer, n uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range n / 8 {
		f.table[dst+cuda.DevicePtr(8*i)] = *(*uint64)(unsafe.Add(src, 8*i))
	}
	return nil
}

const fakeTable = cuda.DevicePtr(0x9000_0000)

// windowEngines returns n device-less ranks, each in a process of its
// own (pids), set up as DIRECT across processes sets them up.
func windowEngines(t *testing.T, n int, pids []int) ([]*Engine, []*fakeWinIPC) {
	t.Helper()
	es := fakeParents(t, n, false)
	fs := make([]*fakeWinIPC, n)
	procs := make([]transport.Peer, n)
	for r := range n {
		procs[r] = transport.Peer{PID: pids[r], Host: "h"}
	}
	for r, e := range es {
		fs[r] = &fakeWinIPC{rank: r, open: map[cuda.DevicePtr]bool{}, table: map[cuda.DevicePtr]uint64{}}
		e.ipc, e.procs, e.win.table = fs[r], procs, fakeTable
		tp := tune.Topology{NRanks: n, NNodes: 1, NGPUs: 1, RanksPerGPU: n, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 8, Direct: true}
		var err error
		e.winTuner, err = tune.New(tp, config.Default(), nil)
		require.NoError(t, err)
	}
	return es, fs
}

func register(es []*Engine, buf func(r int) cuda.DevicePtr, size func(r int) uint64) ([]*Window, []error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return testutil.OnEveryRank(len(es), func(r int) (*Window, error) { return es[r].RegisterWindow(ctx, buf(r), size(r)) })
}

func deregister(es []*Engine, ws []*Window) []error {
	_, errs := testutil.OnEveryRank(len(es), func(r int) (struct{}, error) {
		return struct{}{}, es[r].DeregisterWindow(context.Background(), ws[r])
	})
	return errs
}

// Registration maps every peer's window (processes apart: through its
// handle, at its offset; the same process: its address) into the table's
// row, which is the lowest free one on every rank; deregistration clears
// it and unmaps; a second deregistration is refused.
func TestRegisterWindow(t *testing.T) {
	const n = 3
	es, fs := windowEngines(t, n, []int{10, 20, 10}) // ranks 0 and 2 share a process
	buf := func(r int) cuda.DevicePtr { return fakeBase(r) + 0x100*cuda.DevicePtr(r+1) }
	size := func(int) uint64 { return 4096 }
	ws, errs := register(es, buf, size)
	for r := range n {
		require.NoError(t, errs[r], "rank %d", r)
		assert.Equal(t, 0, ws[r].Row())
	}
	entry := func(r, row, p int) uint64 { return fs[r].table[fakeTable+cuda.DevicePtr(8*(row*n+p))] }
	// Rank 1 (its own process) maps 0 and 2 through their handles.
	for _, p := range []int{0, 2} {
		want := uint64(fakeBase(p)|cuda.DevicePtr(2)<<44) + 0x100*uint64(p+1)
		assert.Equal(t, want, entry(1, 0, p), "rank 1's view of rank %d's window", p)
	}
	assert.Equal(t, uint64(buf(1)), entry(1, 0, 1), "its own")
	// Rank 0 sees rank 2 (its process) by address, rank 1 through IPC.
	assert.Equal(t, uint64(buf(2)), entry(0, 0, 2))
	assert.Equal(t, uint64(fakeBase(1)|cuda.DevicePtr(1)<<44)+0x200, entry(0, 0, 1))
	assert.Equal(t, 1, fs[0].nOpen)
	assert.Equal(t, 2, fs[1].nOpen)

	// A second window takes row 1; calls on it get the window tuner.
	ws2, errs := register(es, func(r int) cuda.DevicePtr { return fakeBase(r) + 0x80000 }, func(int) uint64 { return 0x10000 })
	for r := range n {
		require.NoError(t, errs[r])
		assert.Equal(t, 1, ws2[r].Row())
	}
	tasks := []enqueue.Task{
		{Coll: kspace.AllReduce, Send: uint64(buf(0)), Recv: uint64(fakeBase(0) + 0x80000), Bytes: 4096},
		{Coll: kspace.AllReduce, Send: uint64(buf(0)), Recv: uint64(buf(0)), Bytes: 4097}, // past the window
		{Coll: kspace.AllGather, Send: uint64(fakeBase(0) + 0x80000), Recv: uint64(fakeBase(0) + 0x80000), Bytes: 0x10000 / n},
		{Coll: kspace.Broadcast, Root: 1, Send: 0, Recv: uint64(buf(0)), Bytes: 64}, // a non-root's sendbuff is not read
		{Coll: kspace.Reduce, Send: uint64(buf(0)), Recv: uint64(buf(0)), Bytes: 64},
	}
	marked := es[0].markWindows(tasks)
	assert.Zero(t, tasks[0].SendWin, "the caller's tasks stay as they are")
	assert.Equal(t, [2]int32{1, 2}, [2]int32{marked[0].SendWin, marked[0].RecvWin})
	assert.Same(t, es[0].winTuner, marked[0].Choose)
	assert.Zero(t, marked[1].SendWin, "a buffer past its window")
	assert.Nil(t, marked[1].Choose)
	assert.Equal(t, [2]int32{2, 2}, [2]int32{marked[2].SendWin, marked[2].RecvWin}, "AllGather's recvbuff holds n blocks")
	assert.Equal(t, [2]int32{1, 1}, [2]int32{marked[3].SendWin, marked[3].RecvWin})
	assert.Equal(t, marked[3].Recv, marked[3].Send)
	assert.Nil(t, marked[4].Choose, "Reduce has no DIRECT")

	// Deregistration clears the row everywhere and unmaps.
	for r, err := range deregister(es, ws) {
		require.NoError(t, err, "rank %d", r)
	}
	for r := range n {
		for p := range n {
			assert.Zero(t, entry(r, 0, p), "rank %d's row 0 after deregistration", r)
		}
	}
	assert.Len(t, fs[1].open, 2, "rank 1 keeps the second window's mappings of ranks 0 and 2 (the same allocations: opened once)")
	assert.Equal(t, 2, fs[1].nOpen)
	for r, err := range deregister(es, ws) {
		assert.ErrorIs(t, err, ErrInvalidUsage, "rank %d: twice", r)
	}
	// Row 0 is free again: the next window takes it on every rank.
	ws3, errs := register(es, buf, size)
	for r := range n {
		require.NoError(t, errs[r])
		assert.Equal(t, 0, ws3[r].Row())
	}
	// Destroy unmaps what is left, once.
	for r, e := range es {
		require.NoError(t, e.Destroy(), "rank %d", r)
		assert.Empty(t, fs[r].open, "rank %d: nothing left mapped", r)
	}
	_, err := es[0].RegisterWindow(context.Background(), buf(0), 64)
	assert.ErrorIs(t, err, ErrDestroyed)
	assert.ErrorIs(t, es[0].DeregisterWindow(context.Background(), ws2[0]), ErrInvalidUsage, "Destroy dropped it")
}

// Mismatched sizes fail on every rank, naming the ranks and sizes, and
// leave nothing registered.
func TestRegisterWindowSizeMismatch(t *testing.T) {
	es, fs := windowEngines(t, 2, []int{1, 2})
	defer destroyAll(t, es...)
	_, errs := register(es, fakeBase, func(r int) uint64 { return uint64(4096 * (r + 1)) })
	for r := range 2 {
		require.ErrorIs(t, errs[r], ErrWindowMismatch, "rank %d", r)
		assert.ErrorContains(t, errs[r], "rank 1 registered 8192 bytes, rank 0 4096")
		assert.Zero(t, fs[r].nOpen)
		assert.Empty(t, es[r].win.live)
	}
}

// A rank that cannot export (a VMM allocation) or map leaves the window
// without a row on every rank (export) or fails it on every rank (map),
// with nothing left mapped.
func TestRegisterWindowExportAndMapFailures(t *testing.T) {
	es, fs := windowEngines(t, 2, []int{1, 2})
	defer destroyAll(t, es...)
	fs[1].failGet = true
	ws, errs := register(es, fakeBase, func(int) uint64 { return 4096 })
	for r := range 2 {
		require.NoError(t, errs[r])
		assert.Equal(t, -1, ws[r].Row(), "rank %d: no DIRECT on it", r)
	}
	tasks := es[0].markWindows([]enqueue.Task{{Coll: kspace.AllReduce, Send: uint64(fakeBase(0)), Recv: uint64(fakeBase(0)), Bytes: 64}})
	assert.Nil(t, tasks[0].Choose, "a window without a row runs the other algorithms")
	fs[1].failGet = false

	fs[0].failOpen = true
	_, errs = register(es, fakeBase, func(int) uint64 { return 4096 })
	require.ErrorContains(t, errs[0], "mapping rank 1's window")
	require.ErrorContains(t, errs[1], "rank 0 failed")
	for r := range 2 {
		assert.Empty(t, fs[r].open, "rank %d", r)
		for p := range 2 {
			assert.Zero(t, fs[r].table[fakeTable+cuda.DevicePtr(8*p)], "rank %d's row 0 stays clear", r)
		}
	}
	assert.Nil(t, es[0].win.rows[0])
}

// Ranks that deregister different windows are told so.
func TestDeregisterWindowMismatch(t *testing.T) {
	es, _ := windowEngines(t, 2, []int{1, 2})
	defer destroyAll(t, es...)
	a, errs := register(es, fakeBase, func(int) uint64 { return 64 })
	require.NoError(t, errors.Join(errs...))
	b, errs := register(es, func(r int) cuda.DevicePtr { return fakeBase(r) + 4096 }, func(int) uint64 { return 64 })
	require.NoError(t, errors.Join(errs...))
	errs = deregister(es, []*Window{a[0], b[1]})
	for r := range 2 {
		assert.ErrorIs(t, errs[r], ErrWindowMismatch, "rank %d", r)
	}
	// buf=0 on one rank: it still takes part, and every rank fails.
	_, errs = register(es, func(r int) cuda.DevicePtr { return fakeBase(r) * cuda.DevicePtr(r) }, func(int) uint64 { return 64 })
	assert.ErrorIs(t, errs[0], ErrInvalidArgument)
	assert.ErrorIs(t, errs[1], ErrWindowMismatch)
	// A window past its allocation on one rank fails every rank at once.
	ws, errs := register(es, func(r int) cuda.DevicePtr { return fakeBase(r) + cuda.DevicePtr(1-r)*(fakeAlloc-8) }, func(int) uint64 { return 64 })
	assert.ErrorIs(t, errs[0], ErrInvalidArgument)
	assert.ErrorContains(t, errs[0], "runs past its allocation")
	assert.ErrorContains(t, errs[1], "rank 0 could not register its window")
	assert.Equal(t, []*Window{nil, nil}, ws)
	// The next registration is still in step.
	_, errs = register(es, fakeBase, func(int) uint64 { return 64 })
	require.NoError(t, errors.Join(errs...))
}

// A forced DIRECT on a call outside windows names why.
func TestWindowNoChoiceNamesWindows(t *testing.T) {
	es, _ := windowEngines(t, 2, []int{1, 2})
	defer destroyAll(t, es...)
	cfg := config.Default()
	var err error
	cfg.Algo, err = config.ParseAlgoSelection("direct")
	require.NoError(t, err)
	tp := tune.Topology{NRanks: 2, NNodes: 1, NGPUs: 1, RanksPerGPU: 2, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 8}
	es[0].tuner, err = tune.New(tp, cfg, nil)
	require.NoError(t, err)
	_, err = es[0].Plan([]enqueue.Task{{Coll: kspace.AllReduce, Send: 0x1000, Recv: 0x1000, Bytes: 64, Type: kspace.F32, Op: kspace.Sum}})
	require.ErrorIs(t, err, tune.ErrNoChoice)
	assert.ErrorContains(t, err, "DIRECT runs on calls whose buffers lie in registered windows")
	_ = generated.DirectMaxWindows
}
