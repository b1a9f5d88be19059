package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/syncbuf"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/transport/ipc"
)

// fakeVMM is fakeWinIPC with VMM memory: when vmm, every buffer lies in a
// VMM mapping of fakeAlloc bytes (which legacy IPC refuses), exported as
// a real file descriptor (an unlinked file holding the exporter's base)
// that travels through the real descriptor servers; imports map at
// addresses of their own. It checks every release against what is live,
// so a double unmap or release fails, and what is left shows in
// leftovers.
type fakeVMM struct {
	*fakeWinIPC
	vmm         bool // buffers are VMM memory
	noFD        bool // export as a POSIX fd fails (allocated without that handle type)
	failImport  bool
	failMap     bool
	failAccess  bool
	failRelease bool // MemRelease fails (after releasing)
	ipcToo      bool // legacy IPC exports the memory even though it retains (a driver that retains cuMemAlloc's)

	next     uint64
	handles  map[cuda.MemHandle]uint64 // live handles → the exporter's base they name
	reserved map[cuda.DevicePtr]uint64 // reservations → size
	mapped   map[cuda.DevicePtr]uint64 // mappings → the exporter's base mapped there
	imports  int                       // successful imports
}

func newFakeVMM(f *fakeWinIPC, vmm bool) *fakeVMM {
	return &fakeVMM{fakeWinIPC: f, vmm: vmm, handles: map[cuda.MemHandle]uint64{},
		reserved: map[cuda.DevicePtr]uint64{}, mapped: map[cuda.DevicePtr]uint64{}}
}

func (v *fakeVMM) IpcGetMemHandle(p cuda.DevicePtr) (cuda.IpcMemHandle, error) {
	if v.vmm && !v.ipcToo {
		return cuda.IpcMemHandle{}, errors.New("CUDA_ERROR_INVALID_VALUE (fake: legacy IPC of VMM memory)")
	}
	return v.fakeWinIPC.IpcGetMemHandle(p)
}

func (v *fakeVMM) newHandle(base uint64) cuda.MemHandle {
	v.next++
	h := cuda.MemHandle(v.next)
	v.handles[h] = base
	return h
}

func (v *fakeVMM) MemRetainAllocationHandle(p cuda.DevicePtr) (cuda.MemHandle, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.vmm {
		return 0, errors.New("CUDA_ERROR_INVALID_VALUE (fake: not VMM memory)")
	}
	return v.newHandle(uint64(p &^ (fakeAlloc - 1))), nil
}

func (v *fakeVMM) MemExportToShareableHandle(mh cuda.MemHandle) (int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	base, ok := v.handles[mh]
	if !ok {
		return -1, fmt.Errorf("export of handle %d: not live", mh)
	}
	if v.noFD {
		return -1, errors.New("CUDA_ERROR_INVALID_VALUE (fake: no POSIX fd handle type)")
	}
	f, err := os.CreateTemp("", "fakevmm")
	if err != nil {
		return -1, err
	}
	defer f.Close()
	_ = os.Remove(f.Name())
	if _, err := f.Write(binary.LittleEndian.AppendUint64(nil, base)); err != nil {
		return -1, err
	}
	return syscall.Dup(int(f.Fd()))
}

func (v *fakeVMM) MemImportFromShareableHandle(fd int) (cuda.MemHandle, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.failImport {
		return 0, errors.New("CUDA_ERROR_NOT_PERMITTED (fake import)")
	}
	var b [8]byte
	if n, err := syscall.Pread(fd, b[:], 0); err != nil || n != 8 {
		return 0, fmt.Errorf("reading fd %d: %d bytes, %v", fd, n, err)
	}
	v.imports++
	return v.newHandle(binary.LittleEndian.Uint64(b[:])), nil
}

func (v *fakeVMM) MemGetAllocationGranularity(bool) (uint64, error) { return 1 << 16, nil }

func (v *fakeVMM) MemAddressReserve(size, align uint64) (cuda.DevicePtr, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if align != 1<<16 {
		return 0, fmt.Errorf("reserve aligned to %d, want the granularity", align)
	}
	v.next++
	p := cuda.DevicePtr(0x5000_0000_0000 | uint64(v.rank+1)<<40 | v.next<<24)
	v.reserved[p] = size
	return p, nil
}

func (v *fakeVMM) MemMap(p cuda.DevicePtr, size uint64, mh cuda.MemHandle) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	base, ok := v.handles[mh]
	switch {
	case v.failMap:
		return errors.New("CUDA_ERROR_OUT_OF_MEMORY (fake map)")
	case !ok || v.reserved[p] != size || v.mapped[p] != 0:
		return fmt.Errorf("MemMap(%#x, %d, %d): handle live %v, reserved %d", uint64(p), size, mh, ok, v.reserved[p])
	}
	v.mapped[p] = base
	return nil
}

func (v *fakeVMM) MemSetAccess(p cuda.DevicePtr, size uint64, devices ...cuda.Device) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.failAccess {
		return errors.New("CUDA_ERROR_INVALID_DEVICE (fake access)")
	}
	if v.mapped[p] == 0 || len(devices) != 0 {
		return fmt.Errorf("MemSetAccess(%#x, %d, %v): not mapped, or other devices", uint64(p), size, devices)
	}
	return nil
}

func (v *fakeVMM) MemUnmap(p cuda.DevicePtr, size uint64) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.mapped[p] == 0 || v.reserved[p] != size {
		return fmt.Errorf("MemUnmap(%#x, %d): not mapped", uint64(p), size)
	}
	delete(v.mapped, p)
	return nil
}

func (v *fakeVMM) MemAddressFree(p cuda.DevicePtr, size uint64) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.reserved[p] != size || v.mapped[p] != 0 {
		return fmt.Errorf("MemAddressFree(%#x, %d): not reserved, or still mapped", uint64(p), size)
	}
	delete(v.reserved, p)
	return nil
}

func (v *fakeVMM) MemRelease(mh cuda.MemHandle) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.handles[mh]; !ok {
		return fmt.Errorf("MemRelease(%d): not live (a double release)", mh)
	}
	delete(v.handles, mh)
	if v.failRelease {
		return errors.New("CUDA_ERROR_UNKNOWN (fake release)")
	}
	return nil
}

// leftovers names what is still live: handles, reservations, mappings,
// legacy IPC opens.
func (v *fakeVMM) leftovers() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.handles)+len(v.reserved)+len(v.mapped)+len(v.open) == 0 {
		return ""
	}
	return fmt.Sprintf("handles %v, reserved %v, mapped %v, IPC opens %v", v.handles, v.reserved, v.mapped, v.open)
}

// vmmEngines is windowEngines with fakeVMM drivers (vmm[r]: rank r's
// buffers are VMM memory) and each rank's log in logs[r].
func vmmEngines(t *testing.T, pids []int, vmm []bool) ([]*Engine, []*fakeVMM, []*syncBuffer) {
	t.Helper()
	es, fs := windowEngines(t, len(pids), pids)
	vs := make([]*fakeVMM, len(es))
	logs := make([]*syncBuffer, len(es))
	for r, e := range es {
		vs[r] = newFakeVMM(fs[r], vmm[r])
		logs[r] = &syncBuffer{}
		e.ipc, e.log = vs[r], slog.New(slog.NewTextHandler(logs[r], nil))
	}
	return es, vs, logs
}

// syncBuffer is a bytes.Buffer for several goroutines.
type syncBuffer = syncbuf.Buffer

// openFDs counts this process's open descriptors, after the first use of
// the network poller (which keeps descriptors of its own).
func openFDs(t *testing.T) int {
	t.Helper()
	s, err := ipc.Listen(ipc.NewName("ncclgo-test"))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd: " + err.Error())
	}
	return len(ents)
}

func checkNothingLeft(t *testing.T, vs []*fakeVMM, fds int) {
	t.Helper()
	for r, v := range vs {
		assert.Empty(t, v.leftovers(), "rank %d", r)
	}
	assert.Equal(t, fds, openFDs(t), "open descriptors")
}

// Windows in VMM memory map through POSIX fds: every peer of another
// process is imported and mapped here (the same process's by address),
// the table's row holds the mapping plus the window's offset, the
// exporter keeps no descriptor or handle once every rank mapped it, two
// windows in one allocation share its import, and deregistration and
// Destroy unmap everything.
func TestRegisterWindowVMM(t *testing.T) {
	const n = 3
	fds := openFDs(t)
	es, vs, _ := vmmEngines(t, []int{10, 20, 10}, []bool{true, true, true})
	buf := func(r int) cuda.DevicePtr { return fakeBase(r) + 0x100*cuda.DevicePtr(r+1) }
	ws, errs := register(es, buf, func(int) uint64 { return 4096 })
	for r := range n {
		require.NoError(t, errs[r], "rank %d", r)
		assert.Equal(t, 0, ws[r].Row(), "rank %d", r)
	}
	entry := func(r, row, p int) uint64 { return vs[r].table[fakeTable+cuda.DevicePtr(8*(row*n+p))] }
	for _, p := range []int{0, 2} {
		e := entry(1, 0, p)
		off := 0x100 * uint64(p+1)
		assert.Equal(t, uint64(fakeBase(p)), vs[1].mapped[cuda.DevicePtr(e-off)], "rank 1's entry for rank %d: its allocation, at the window's offset", p)
		assert.Equal(t, uint64(fakeAlloc), vs[1].reserved[cuda.DevicePtr(e-off)], "the whole mapping reserved")
	}
	assert.Equal(t, uint64(buf(1)), entry(1, 0, 1), "its own")
	assert.Equal(t, uint64(buf(2)), entry(0, 0, 2), "the same process: by address")
	assert.Equal(t, uint64(fakeBase(1)), vs[0].mapped[cuda.DevicePtr(entry(0, 0, 1)-0x200)])
	assert.Equal(t, []int{1, 2, 1}, []int{vs[0].imports, vs[1].imports, vs[2].imports})
	for r := range n {
		assert.Len(t, vs[r].handles, vs[r].imports, "rank %d: the imports' handles only (the retained ones are released)", r)
	}
	assert.Equal(t, fds, openFDs(t), "no descriptor left: the servers closed, the imports' fds too")

	// A second window in the same allocations shares the mappings.
	ws2, errs := register(es, func(r int) cuda.DevicePtr { return fakeBase(r) + 0x80000 }, func(int) uint64 { return 0x10000 })
	for r := range n {
		require.NoError(t, errs[r])
		assert.Equal(t, 1, ws2[r].Row())
	}
	assert.Equal(t, []int{1, 2, 1}, []int{vs[0].imports, vs[1].imports, vs[2].imports}, "no new imports")
	assert.Equal(t, entry(1, 0, 0)-0x100+0x80000, entry(1, 1, 0))

	for r, err := range deregister(es, ws) {
		require.NoError(t, err, "rank %d", r)
	}
	assert.Len(t, vs[1].mapped, 2, "the second window keeps them")
	for r, err := range deregister(es, ws2) {
		require.NoError(t, err, "rank %d", r)
	}
	checkNothingLeft(t, vs, fds)

	// Destroy unmaps what is left.
	_, errs = register(es, buf, func(int) uint64 { return 4096 })
	require.NoError(t, errors.Join(errs...))
	assert.NotEmpty(t, vs[1].leftovers())
	for r, e := range es {
		e.Abort()
		require.NoError(t, e.Destroy(), "rank %d", r)
	}
	checkNothingLeft(t, vs, fds)
}

// Ranks may export differently: legacy IPC (cuMemAlloc) on one, VMM on
// the other; each maps the other's the way it came.
func TestRegisterWindowMixedExports(t *testing.T) {
	fds := openFDs(t)
	es, vs, _ := vmmEngines(t, []int{1, 2}, []bool{false, true})
	ws, errs := register(es, fakeBase, func(int) uint64 { return 4096 })
	for r := range 2 {
		require.NoError(t, errs[r])
		assert.Equal(t, 0, ws[r].Row())
	}
	assert.Equal(t, 1, vs[0].imports, "rank 0 imports rank 1's fd")
	assert.Equal(t, 1, vs[1].nOpen, "rank 1 opens rank 0's IPC handle")
	assert.Zero(t, vs[1].imports)
	for r, err := range deregister(es, ws) {
		require.NoError(t, err, "rank %d", r)
	}

	// Memory that retains but does not export as a fd, which legacy IPC
	// exports, goes by legacy IPC.
	vs[1].noFD, vs[1].ipcToo = true, true
	ws, errs = register(es, fakeBase, func(int) uint64 { return 4096 })
	for r := range 2 {
		require.NoError(t, errs[r])
		assert.Equal(t, 0, ws[r].Row())
	}
	assert.Equal(t, 1, vs[0].imports, "no new import")
	assert.Equal(t, 1, vs[0].nOpen, "rank 0 opens rank 1's IPC handle")
	destroyAll(t, es...)
	checkNothingLeft(t, vs, fds)
}

// Memory that exports neither way (a VMM allocation without POSIX fd
// handles; a window across two VMM mappings) leaves the window without a
// row on every rank, the exporter's INFO line saying why, and nothing
// behind.
func TestRegisterWindowVMMNotExported(t *testing.T) {
	fds := openFDs(t)
	es, vs, logs := vmmEngines(t, []int{1, 2}, []bool{true, true})
	defer destroyAll(t, es...)
	vs[1].noFD = true
	ws, errs := register(es, fakeBase, func(int) uint64 { return 4096 })
	for r := range 2 {
		require.NoError(t, errs[r])
		assert.Equal(t, -1, ws[r].Row(), "rank %d", r)
	}
	assert.Contains(t, logs[1].String(), "as a POSIX file descriptor")
	assert.Contains(t, logs[0].String(), "DIRECT will not run on it: a rank could not export its memory")
	assert.Zero(t, vs[0].imports)
	checkNothingLeft(t, vs, fds)
	for r, err := range deregister(es, ws) {
		require.NoError(t, err, "rank %d", r)
	}

	vs[1].noFD = false
	ws, errs = register(es, func(r int) cuda.DevicePtr { return fakeBase(r) + fakeAlloc - 64 }, func(int) uint64 { return 128 })
	for r := range 2 {
		require.NoError(t, errs[r], "a VMM window past its mapping is no bad argument (expandable segments map several)")
		assert.Equal(t, -1, ws[r].Row())
	}
	assert.Contains(t, logs[1].String(), "spans more than the VMM mapping")
	checkNothingLeft(t, vs, fds)
	for r, err := range deregister(es, ws) {
		require.NoError(t, err, "rank %d", r)
	}

	// A driver failure while exporting fails every rank at once, its
	// descriptor server and fd closed.
	vs[1].failRelease = true
	_, errs = register(es, fakeBase, func(int) uint64 { return 4096 })
	vs[1].failRelease = false
	assert.ErrorContains(t, errs[1], "fake release")
	assert.ErrorContains(t, errs[0], "rank 1 could not register its window")
	checkNothingLeft(t, vs, fds)
}

// A VMM allocation a peer cannot fetch, import, map or access leaves the
// window without a row on every rank, with every step undone; a legacy
// IPC handle that does not open still fails the registration everywhere,
// and the VMM imports made before it are undone.
func TestRegisterWindowVMMImportFailures(t *testing.T) {
	fds := openFDs(t)
	es, vs, logs := vmmEngines(t, []int{1, 2}, []bool{true, true})
	defer destroyAll(t, es...)
	fetch := fetchFDs
	defer func() { fetchFDs = fetch }()
	for _, tc := range []struct {
		name string
		set  func(bool)
		want string
	}{
		{"fetch", func(on bool) {
			fetchFDs = fetch
			if on {
				fetchFDs = func(context.Context, string, ...uint64) ([]int, error) {
					return nil, errors.New("ipc: dialing: connection refused (fake)")
				}
			}
		}, "fetching rank 1's descriptor"}, // on both ranks: each names the other

		{"import", func(on bool) { vs[0].failImport = on }, "fake import"},
		{"map", func(on bool) { vs[0].failMap = on }, "fake map"},
		{"access", func(on bool) { vs[0].failAccess = on }, "fake access"},
	} {
		tc.set(true)
		ws, errs := register(es, fakeBase, func(int) uint64 { return 4096 })
		tc.set(false)
		for r := range 2 {
			require.NoError(t, errs[r], "%s: rank %d", tc.name, r)
			assert.Equal(t, -1, ws[r].Row(), "%s: rank %d", tc.name, r)
			for p := range 2 {
				assert.Zero(t, vs[r].table[fakeTable+cuda.DevicePtr(8*p)], "%s: rank %d's row 0 stays clear", tc.name, r)
			}
		}
		assert.Contains(t, logs[0].String(), tc.want, tc.name)
		if tc.name == "fetch" {
			assert.Contains(t, logs[1].String(), "fetching rank 0's descriptor")
		} else {
			assert.Contains(t, logs[1].String(), "rank 0 could not map a peer's VMM allocation", tc.name)
		}
		checkNothingLeft(t, vs, fds)
		for r, err := range deregister(es, ws) {
			require.NoError(t, err, "%s: rank %d", tc.name, r)
		}
	}
	assert.Nil(t, es[0].win.rows[0])

	// Three processes: rank 2 legacy, ranks 0 and 1 VMM; rank 1 imports
	// rank 0 and then fails to open rank 2's handle.
	es3, vs3, _ := vmmEngines(t, []int{1, 2, 3}, []bool{true, true, false})
	defer destroyAll(t, es3...)
	vs3[1].failOpen = true
	_, errs := register(es3, fakeBase, func(int) uint64 { return 4096 })
	require.ErrorContains(t, errs[1], "mapping rank 2's window")
	require.ErrorContains(t, errs[0], "rank 1 failed")
	assert.Equal(t, 1, vs3[1].imports)
	checkNothingLeft(t, vs3, fds)
}

// A peer's record is checked before use: its length for its kind, and
// that a VMM window lies in the mapping it exports.
func TestParseWindowRecordsHostile(t *testing.T) {
	ok := windowRecord{size: 64, buf: 0x10100, off: 0x100, kind: exportFD, mapSize: 0x10000, key: 1, server: "@s#00"}
	_, err := parseWindowRecords([][]byte{ok.encode(), ok.encode()})
	require.NoError(t, err)
	past := ok
	past.size = 0x10000
	wrap := ok
	wrap.off = 0x20000
	ipcRec := windowRecord{size: 64, buf: 0x100, kind: exportIPC}
	for name, b := range map[string][]byte{
		"short":          make([]byte, windowRecordHead-1),
		"past its map":   past.encode(),
		"offset past":    wrap.encode(),
		"no server":      ok.encode()[:windowRecordHead+16],
		"long server":    append(ok.encode(), make([]byte, maxServerAddr)...),
		"short handle":   ipcRec.encode()[:windowRecordHead+10],
		"unknown kind":   append(make([]byte, 24), 9),
		"none with tail": append(append(make([]byte, 24), exportNone), 1),
	} {
		_, err := parseWindowRecords([][]byte{ok.encode(), b})
		assert.ErrorContains(t, err, "rank 1's window record", name)
	}
}
