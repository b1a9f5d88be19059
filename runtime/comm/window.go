package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
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
// exports the allocation that holds its buffer (a legacy IPC handle, or a
// VMM allocation's POSIX fd: windowmem.go), the ranks exchange (export,
// offset in the allocation, size) over the bootstrap network, and each
// maps its peers' windows and writes their addresses into row w of its
// device window table (DevComm.Direct[nRanks + w*nRanks + r]). A second
// exchange confirms that every rank mapped them, so a window is usable on
// every rank or on none. w, the window's row, is the lowest free one, the same on every
// rank since the registrations are ordered alike.
//
// A call whose sendbuff and recvbuff lie in windows with rows is planned
// with the window tuner, which may pick DIRECT; its works carry the rows
// and the device publishes (row, offset) references that peers resolve in
// their own tables (devicesrc/direct.h). A rank whose buffers lie in no
// window plans with the communicator's tuner, whose DIRECT across
// processes is AllReduce's LL one-shot alone (direct.go's
// llAcrossTopology; at those sizes both tuners choose alike, and the LL
// one-shot reads no window): NCCL requires every rank's buffers of a call
// to be windows or none. Ranks that break it may disagree on the
// algorithm; what the device
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
	// opened are the peers' allocations this window mapped here
	// (Engine.openPeer counts them), to close.
	opened []peerAlloc
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
	// maps are the peers' allocations open here: two windows in one
	// allocation (or one registered twice) share its mapping.
	maps map[peerAlloc]*peerMapping
}

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
	x := windowExport{rec: windowRecord{size: size, buf: uint64(buf)}}
	var exportErr error
	if argErr != nil {
		// Still in the exchange, so that the peers fail now too.
		x = windowExport{rec: windowRecord{size: size, buf: uint64(buf), kind: exportFailed}}
	} else if across {
		if x, exportErr = e.exportWindow(st.seq+1, buf, size); exportErr != nil {
			// Still in the exchange, so that the peers fail now too.
			x = windowExport{rec: windowRecord{size: size, buf: uint64(buf), kind: exportFailed}}
		}
		defer func() { _ = x.close() }() // the peers mapped it (or gave up) by the time this returns
	}
	all, err := e.net.AllGather(ctx, x.rec.encode())
	if err != nil || exportErr != nil || argErr != nil {
		if err != nil {
			err = fmt.Errorf("ncclgo: rank %d: registering a window: %w", e.rank, err)
		}
		if argErr != nil {
			argErr = fmt.Errorf("ncclgo: rank %d: registering a window: %w", e.rank, argErr)
		}
		return nil, errors.Join(argErr, exportErr, err)
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
		allExported = allExported && r.kind != exportNone
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
			if x.why != nil {
				why = x.why.Error()
			}
		}
		e.log.Info(fmt.Sprintf("window %d (%d bytes at %#x): DIRECT will not run on it: %s", w.seq, size, uint64(buf), why))
		st.live = append(st.live, w)
		return w, nil
	}
	// Map the peers' windows: the same process's by address, the others'
	// through what they exported (windowmem.go).
	bases := make([]uint64, e.nRanks)
	var mapErr error
	for r, x := range recs {
		switch {
		case r == e.rank:
			bases[r] = uint64(buf)
		case e.sameProcess(r):
			bases[r] = x.buf
		default:
			p, k, err := e.openPeer(ctx, r, &x)
			if err != nil {
				mapErr = fmt.Errorf("mapping rank %d's window: %w", r, err)
			} else {
				w.opened = append(w.opened, k)
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
	soft, err := agreeWindow(ctx, e.net, e.rank, mapErr, fmt.Sprintf("ncclgo: rank %d: mapping window %d", e.rank, w.seq))
	if err != nil {
		return nil, errors.Join(err, e.clearRow(row, mapErr == nil), e.unmap(w))
	}
	if soft >= 0 {
		// A VMM allocation did not map somewhere: no row on any rank.
		why := fmt.Sprintf("rank %d could not map a peer's VMM allocation", soft)
		if mapErr != nil {
			why = mapErr.Error()
		}
		if err := errors.Join(e.clearRow(row, mapErr == nil), e.unmap(w)); err != nil {
			return nil, fmt.Errorf("ncclgo: rank %d: window %d: undoing its mappings: %w", e.rank, w.seq, err)
		}
		e.log.Info(fmt.Sprintf("window %d (%d bytes at %#x): DIRECT will not run on it: %s", w.seq, size, uint64(buf), why))
		st.live = append(st.live, w)
		return w, nil
	}
	w.row = row
	st.rows[row] = w
	st.live = append(st.live, w)
	return w, nil
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
	for _, k := range w.opened {
		errs = append(errs, e.closePeer(k))
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
// the window tuner (enqueue.Task's SendWin, RecvWin, Choose), and the
// Sends whose buffers lie in windows given SendWin (the receiver copies
// from the window; a Recv needs none, and the device falls back to the FIFO
// for the others, see devicesrc/sendrecv.h); tasks itself is left as it
// is.
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
		if t.Coll == kspace.SendRecv {
			if r := e.windowRow(t.Send, t.Bytes); t.IsSend && t.Bytes > 0 && r >= 0 {
				t.SendWin = int32(r + 1)
			}
			continue
		}
		if !kspace.Implemented(t.Coll, kspace.Direct) {
			continue
		}
		sendBytes, recvBytes := t.Coll.Extents(t.Bytes, e.nRanks)
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
