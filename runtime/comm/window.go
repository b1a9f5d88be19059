package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
)

// Windows (NCCL's ncclCommWindowRegister). Every rank registers a buffer
// of the same size, in the same order as every other registration and
// deregistration of the communicator (NCCL's rule); RegisterWindow is
// collective. Where DIRECT runs across processes (direct.go), each rank
// exports the allocation that holds its buffer (a legacy IPC handle: it
// works under MPS), the ranks exchange (handle, offset in the allocation,
// size) over the bootstrap network, and each maps its peers' windows and
// writes their addresses into row w of its device window table
// (DevComm.Direct[nRanks + w*nRanks + r]). A second exchange confirms
// that every rank mapped them, so a window is usable on every rank or on
// none. w, the window's row, is the lowest free one, the same on every
// rank since the registrations are ordered alike.
//
// A call whose sendbuff and recvbuff lie in windows with rows is planned
// with the window tuner, which may pick DIRECT; its works carry the rows
// and the device publishes (row, offset) references that peers resolve in
// their own tables (devicesrc/direct.h). A rank whose buffers lie in no
// window plans with the communicator's tuner, which has no DIRECT across
// processes: NCCL requires every rank's buffers of a call to be windows
// or none. Ranks that break it disagree on the algorithm; what the device
// can see it stops on every rank with NG_DEV_ERR_BAD_WORK (a reference
// that does not resolve), but a rank on DIRECT and a rank on the ring wait
// for each other until the communicator is aborted (ErrWindowMismatch's
// doc).
//
// Within one process DIRECT needs no window (every call may run it), and
// elsewhere (several hosts) none can help: registration there checks the
// sizes and records the window, and maps nothing.

// ErrWindowMismatch is wrapped by RegisterWindow's and DeregisterWindow's
// errors when the ranks did not call them alike (sizes, order).
//
// A call whose buffers lie in windows on some ranks and not on others is
// a usage error this package cannot see on the host (a rank does not
// know its peers' buffers): its DIRECT ranks wait at the call's first
// barrier for ranks that never arrive there, as the other ranks wait in
// their ring. Abort (or a context's end) ends both.
var ErrWindowMismatch = errors.New("ranks registered windows differently")

// Window is one registered window of a communicator.
type Window struct {
	e    *Engine
	seq  uint64 // registrations so far on the communicator, the same on every rank
	row  int    // the device table's row, or -1 (DIRECT does not run on it)
	buf  cuda.DevicePtr
	size uint64
	// opened are the handles of the peers' allocations this window mapped
	// here (IPC; Engine.openIPC counts them), to close.
	opened []cuda.IpcMemHandle
	closed bool
}

// Buf and Size are the window's buffer on this rank.
func (w *Window) Buf() cuda.DevicePtr { return w.buf }

// Size is the window's size in bytes, the same on every rank.
func (w *Window) Size() uint64 { return w.size }

// Row is the window's row in the device window table, or -1 when DIRECT
// does not run on it (one process, several hosts, or the table full).
func (w *Window) Row() int { return w.row }

// windowState is an Engine's windows, guarded by Engine.winMu.
type windowState struct {
	table cuda.DevicePtr // the device window table (0: DIRECT does not run across processes)
	seq   uint64
	rows  [generated.DirectMaxWindows]*Window
	live  []*Window
	gone  bool // closeWindows ran: no more registrations
	// maps are the peers' allocations open here, by handle: two windows
	// in one allocation (or one registered twice) share its mapping.
	maps map[cuda.IpcMemHandle]*ipcMapping
}

// ipcMapping is a peer's allocation opened here, and how many windows use
// it.
type ipcMapping struct {
	p    cuda.DevicePtr
	refs int
}

// openIPC maps the allocation of h, or counts one more user of its
// mapping.
func (e *Engine) openIPC(h cuda.IpcMemHandle) (cuda.DevicePtr, error) {
	if m := e.win.maps[h]; m != nil {
		m.refs++
		return m.p, nil
	}
	p, err := e.ipc.IpcOpenMemHandle(h)
	if err != nil {
		return 0, err
	}
	if e.win.maps == nil {
		e.win.maps = map[cuda.IpcMemHandle]*ipcMapping{}
	}
	e.win.maps[h] = &ipcMapping{p: p, refs: 1}
	return p, nil
}

// closeIPC drops one user of h's mapping and closes it after the last.
func (e *Engine) closeIPC(h cuda.IpcMemHandle) error {
	m := e.win.maps[h]
	if m == nil {
		return fmt.Errorf("closing a peer's window: its allocation is not mapped here")
	}
	if m.refs--; m.refs > 0 {
		return nil
	}
	delete(e.win.maps, h)
	return e.ipc.IpcCloseMemHandle(m.p)
}

// windowRecordBytes is one rank's record in RegisterWindow's exchange:
// size, buffer address, offset in its allocation, its state (a
// windowRecord* constant), and the allocation's IPC handle.
const windowRecordBytes = 8 + 8 + 8 + 1 + len(cuda.IpcMemHandle{})

// A rank's window as its record states it.
const (
	windowRecordLocal    = 0 // not exported: DIRECT does not run on it
	windowRecordExported = 1 // the handle maps it
	windowRecordInvalid  = 2 // its arguments are invalid: it fails on every rank
)

// RegisterWindow registers size bytes at buf as a window, collectively:
// every rank calls it, in the same order, with the same size. See the
// windows' description above. A rank whose arguments are invalid still
// takes part in the exchange and fails after it, so that its peers fail
// at once too (wrapping ErrWindowMismatch) rather than wait for it, and
// the ranks' next registrations pair up. Abort ends the exchange.
func (e *Engine) RegisterWindow(ctx context.Context, buf cuda.DevicePtr, size uint64) (*Window, error) {
	var argErr error
	if buf == 0 {
		argErr = fmt.Errorf("%w: buf=0: want a device buffer", ErrInvalidArgument)
	}
	ctx, release := e.life.bind(ctx) // Abort ends the exchange
	defer release()
	e.winMu.Lock()
	defer e.winMu.Unlock()
	if e.isDestroyed() || e.win.gone {
		return nil, fmt.Errorf("ncclgo: rank %d: %w", e.rank, ErrDestroyed)
	}
	st := &e.win
	if e.net == nil { // no peers (a device-less engine): nothing to exchange
		if argErr != nil {
			return nil, argErr
		}
		st.seq++
		w := &Window{e: e, seq: st.seq, row: -1, buf: buf, size: size}
		st.live = append(st.live, w)
		return w, nil
	}
	across := st.table != 0
	// This rank's record.
	var h cuda.IpcMemHandle
	var off uint64
	state := byte(windowRecordLocal)
	var exportErr error
	if across && argErr == nil {
		base, n, err := e.ipc.MemGetAddressRange(buf)
		switch {
		case err != nil:
			exportErr = fmt.Errorf("the allocation holding %#x: %w", uint64(buf), err)
		case buf < base || uint64(buf-base) >= n || size > n-uint64(buf-base):
			argErr = fmt.Errorf("%w: the window [%#x, +%d) runs past its allocation (%d bytes at %#x)",
				ErrInvalidArgument, uint64(buf), size, n, uint64(base))
		default:
			off = uint64(buf - base)
			if h, err = e.ipc.IpcGetMemHandle(base); err != nil {
				exportErr = fmt.Errorf("exporting the allocation at %#x (legacy IPC; a VMM allocation cannot be): %w", uint64(base), err)
			} else {
				state = windowRecordExported
			}
		}
	}
	if argErr != nil {
		state, h, off = windowRecordInvalid, cuda.IpcMemHandle{}, 0
	}
	rec := binary.LittleEndian.AppendUint64(nil, size)
	rec = binary.LittleEndian.AppendUint64(rec, uint64(buf))
	rec = binary.LittleEndian.AppendUint64(rec, off)
	rec = append(rec, state)
	rec = append(rec, h[:]...)
	all, err := e.net.AllGather(ctx, rec)
	if err != nil {
		return nil, errors.Join(argErr, fmt.Errorf("ncclgo: rank %d: registering a window: %w", e.rank, err))
	}
	if argErr != nil {
		return nil, fmt.Errorf("ncclgo: rank %d: registering a window: %w", e.rank, argErr)
	}
	recs, err := parseWindowRecords(all)
	if err != nil {
		return nil, fmt.Errorf("ncclgo: rank %d: registering a window: %w", e.rank, err)
	}
	st.seq++
	w := &Window{e: e, seq: st.seq, row: -1, buf: buf, size: size}
	if !across {
		st.live = append(st.live, w)
		return w, nil
	}
	allExported := true
	for _, r := range recs {
		allExported = allExported && r.exported
	}
	row := -1
	for i, x := range st.rows {
		if x == nil {
			row = i
			break
		}
	}
	if !allExported || row < 0 {
		// Every rank sees the same records and rows: none maps it.
		why := fmt.Sprintf("the table's %d rows are taken", generated.DirectMaxWindows)
		if !allExported {
			why = "a rank could not export its memory"
			if exportErr != nil {
				why = exportErr.Error()
			}
		}
		e.log.Info(fmt.Sprintf("window %d (%d bytes at %#x): DIRECT will not run on it: %s", w.seq, size, uint64(buf), why))
		st.live = append(st.live, w)
		return w, nil
	}
	// Map the peers' windows: the same process's by address, the others'
	// through their handles.
	bases := make([]uint64, e.nRanks)
	var mapErr error
	for r, x := range recs {
		switch {
		case r == e.rank:
			bases[r] = uint64(buf)
		case e.sameProcess(r):
			bases[r] = x.buf
		default:
			p, err := e.openIPC(x.handle)
			if err != nil {
				mapErr = fmt.Errorf("mapping rank %d's window: %w", r, err)
			} else {
				w.opened = append(w.opened, x.handle)
				bases[r] = uint64(p) + x.off
			}
		}
		if mapErr != nil {
			break
		}
	}
	if mapErr == nil {
		mapErr = e.ipc.MemcpyHtoD(st.table+cuda.DevicePtr(8*row*e.nRanks), unsafe.Pointer(&bases[0]), uint64(8*e.nRanks))
	}
	if err := agreeAll(ctx, e.net, e.rank, mapErr == nil, mapErr, fmt.Sprintf("ncclgo: rank %d: mapping window %d", e.rank, w.seq)); err != nil {
		return nil, errors.Join(err, e.clearRow(row, mapErr == nil), e.unmap(w))
	}
	w.row = row
	st.rows[row] = w
	st.live = append(st.live, w)
	return w, nil
}

// windowRecord is a rank's record in RegisterWindow's exchange.
type windowRecord struct {
	size, buf, off uint64
	exported       bool
	invalid        bool // the rank's arguments were invalid
	handle         cuda.IpcMemHandle
}

// parseWindowRecords checks the ranks' records: their lengths and that
// every rank registered the same size.
func parseWindowRecords(all [][]byte) ([]windowRecord, error) {
	recs := make([]windowRecord, len(all))
	for r, b := range all {
		if len(b) != windowRecordBytes {
			return nil, fmt.Errorf("rank %d's window record: %d bytes, want %d", r, len(b), windowRecordBytes)
		}
		x := &recs[r]
		x.size = binary.LittleEndian.Uint64(b)
		x.buf = binary.LittleEndian.Uint64(b[8:])
		x.off = binary.LittleEndian.Uint64(b[16:])
		x.exported = b[24] == windowRecordExported
		x.invalid = b[24] == windowRecordInvalid
		copy(x.handle[:], b[25:])
	}
	var bad []string
	for r, x := range recs {
		if x.invalid {
			bad = append(bad, fmt.Sprint(r))
		}
	}
	if len(bad) > 0 {
		who := "rank " + bad[0]
		if len(bad) > 1 {
			who = "ranks " + strings.Join(bad, ", ")
		}
		return nil, fmt.Errorf("%w: %s passed an invalid window (its RegisterWindow's error says why); registration fails on every rank",
			ErrWindowMismatch, who)
	}
	for r := range recs {
		if recs[r].size != recs[0].size {
			var sizes []string
			for q, x := range recs {
				sizes = append(sizes, fmt.Sprintf("rank %d: %d", q, x.size))
			}
			return nil, fmt.Errorf("%w: rank %d registered %d bytes, rank 0 %d (window sizes: %s); every rank registers the same size",
				ErrWindowMismatch, r, recs[r].size, recs[0].size, strings.Join(sizes, ", "))
		}
	}
	return recs, nil
}

// sameProcess reports whether rank r is in this process.
func (e *Engine) sameProcess(r int) bool {
	return r < len(e.procs) && e.procs[r].SameProcess(e.procs[e.rank])
}

// clearRow zeroes row of the device table (when write) and frees it.
func (e *Engine) clearRow(row int, write bool) error {
	if row < 0 {
		return nil
	}
	e.win.rows[row] = nil
	if !write || e.win.table == 0 {
		return nil
	}
	zero := make([]uint64, e.nRanks)
	return e.ipc.MemcpyHtoD(e.win.table+cuda.DevicePtr(8*row*e.nRanks), unsafe.Pointer(&zero[0]), uint64(8*e.nRanks))
}

// unmap closes the peers' allocations mapped for w.
func (e *Engine) unmap(w *Window) error {
	var errs []error
	for _, h := range w.opened {
		errs = append(errs, e.closeIPC(h))
	}
	w.opened = nil
	return errors.Join(errs...)
}

// DeregisterWindow deregisters w, collectively: every rank deregisters
// the same window (in registration order, NCCL's rule), after the calls
// on it ended. It unmaps the peers' windows whatever the exchange says.
func (e *Engine) DeregisterWindow(ctx context.Context, w *Window) error {
	if w == nil || w.e != e {
		return fmt.Errorf("%w: a window of another communicator, or nil", ErrInvalidArgument)
	}
	ctx, release := e.life.bind(ctx) // Abort ends the exchange
	defer release()
	e.winMu.Lock()
	defer e.winMu.Unlock()
	if w.closed {
		return fmt.Errorf("%w: window %d (%d bytes at %#x) was deregistered already", ErrInvalidUsage, w.seq, w.size, uint64(w.buf))
	}
	var agreeErr error
	if e.net != nil && !e.win.gone {
		all, err := e.net.AllGather(ctx, binary.LittleEndian.AppendUint64(nil, w.seq))
		if err != nil {
			agreeErr = fmt.Errorf("ncclgo: rank %d: deregistering window %d: %w", e.rank, w.seq, err)
		} else {
			for r, b := range all {
				if len(b) != 8 || binary.LittleEndian.Uint64(b) != w.seq {
					agreeErr = fmt.Errorf("ncclgo: rank %d: %w: it deregisters window %d, rank %d another (record %x)", e.rank, ErrWindowMismatch, w.seq, r, b)
					break
				}
			}
		}
	}
	return errors.Join(agreeErr, e.dropWindow(w, !e.win.gone))
}

// dropWindow forgets w and unmaps it; write clears its table row.
func (e *Engine) dropWindow(w *Window, write bool) error {
	w.closed = true
	var err error
	if w.row >= 0 && e.win.rows[w.row] == w {
		err = e.clearRow(w.row, write)
	}
	for i, x := range e.win.live {
		if x == w {
			e.win.live = append(e.win.live[:i], e.win.live[i+1:]...)
			break
		}
	}
	return errors.Join(err, e.unmap(w))
}

// closeWindows drops every window (Destroy, Abort): the device memory is
// about to go, so the table is not written.
func (e *Engine) closeWindows() error {
	e.winMu.Lock()
	defer e.winMu.Unlock()
	e.win.gone = true
	var errs []error
	for len(e.win.live) > 0 {
		errs = append(errs, e.dropWindow(e.win.live[0], false))
	}
	return errors.Join(errs...)
}

// windowRow returns the row of the window holding [p, p+n), or -1.
func (e *Engine) windowRow(p, n uint64) int {
	for _, w := range e.win.rows {
		if w != nil && p >= uint64(w.buf) && n <= w.size && p-uint64(w.buf) <= w.size-n {
			return w.row
		}
	}
	return -1
}

// markWindows returns tasks with the collectives that DIRECT can run
// across processes and whose buffers lie in windows given their rows and
// the window tuner (enqueue.Task's SendWin, RecvWin, Choose); tasks
// itself is left as it is.
func (e *Engine) markWindows(tasks []enqueue.Task) []enqueue.Task {
	if e.winTuner == nil {
		return tasks
	}
	e.winMu.Lock()
	defer e.winMu.Unlock()
	if len(e.win.live) == 0 {
		return tasks
	}
	tasks = append([]enqueue.Task(nil), tasks...)
	for i := range tasks {
		t := &tasks[i]
		n := uint64(e.nRanks)
		var sendBytes, recvBytes uint64
		switch t.Coll {
		case kspace.AllReduce, kspace.Broadcast:
			sendBytes, recvBytes = t.Bytes, t.Bytes
		case kspace.AllGather:
			sendBytes, recvBytes = t.Bytes, t.Bytes*n
		case kspace.ReduceScatter:
			sendBytes, recvBytes = t.Bytes*n, t.Bytes
		default:
			continue
		}
		send := t.Send
		if t.Coll == kspace.Broadcast && t.Root != e.rank {
			send = t.Recv // a non-root's sendbuff is not read
		}
		rs, rr := e.windowRow(send, sendBytes), e.windowRow(t.Recv, recvBytes)
		if rs < 0 || rr < 0 {
			continue
		}
		t.Send = send
		t.SendWin, t.RecvWin, t.Choose = int32(rs+1), int32(rr+1), e.winTuner
	}
	return tasks
}

// isDestroyed reports whether Destroy or Abort ran.
func (e *Engine) isDestroyed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.destroyed
}
