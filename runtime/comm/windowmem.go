package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/transport/ipc"
)

// A window's memory crosses processes in one of two ways, chosen by the
// exporting rank from what holds its buffer:
//
//   - memory from cuMemAlloc: a legacy IPC handle of the allocation
//     (cuIpcGetMemHandle), which the peers open (cuIpcOpenMemHandle);
//   - VMM memory (cuMemCreate and cuMemMap: ncclMemAlloc, PyTorch's
//     expandable segments), which legacy IPC cannot export: the
//     allocation mapped at the buffer (cuMemRetainAllocationHandle; its
//     range from cuMemGetAddressRange) exported as a POSIX file
//     descriptor (cuMemExportToShareableHandle; the allocation must have
//     been created with that handle type, as ncclMemAlloc does). The rank
//     serves the descriptor from a descriptor server of its own
//     (transport/ipc, as P2P/CUMEM passes its buffers) until every peer
//     mapped it; a peer fetches it, imports it, reserves an address
//     range, maps and grants itself access, and undoes all of that when
//     the window goes (deregistration, Destroy, Abort).
//
// Memory that neither exports (a VMM allocation without POSIX file
// descriptor handles, a window across two VMM mappings) leaves the window
// without a row: the calls on it run the other algorithms, and the
// window's INFO line says why. So does a VMM allocation a peer could not
// map (the driver may refuse an import that the exporter cannot foresee);
// a legacy IPC handle that does not open fails the registration, as it
// always did.

// vmmMemory is what windows in VMM memory ask of the driver besides
// ipcMemory: the communicator's context (*cuda.Context), or a fake in
// tests. A driver without it exports legacy IPC only.
type vmmMemory interface {
	MemRetainAllocationHandle(p cuda.DevicePtr) (cuda.MemHandle, error)
	MemExportToShareableHandle(mh cuda.MemHandle) (int, error)
	MemImportFromShareableHandle(fd int) (cuda.MemHandle, error)
	MemGetAllocationGranularity(recommended bool) (uint64, error)
	cuda.VMMapper
}

var _ vmmMemory = (*cuda.Context)(nil)

// How a rank exported its window's memory (its record's kind byte).
const (
	exportNone byte = 0 // not exported: the window gets no row
	exportIPC  byte = 1 // a legacy IPC handle of the allocation
	exportFD   byte = 2 // a VMM allocation, as a POSIX fd from the rank's descriptor server
	// exportFailed: the rank's registration failed (a bad argument, a
	// driver error); every rank's fails.
	exportFailed byte = 3
)

// windowRecordHead is the fixed part of a rank's record in
// RegisterWindow's exchange: size, buffer address, offset in its
// allocation, export kind. The kind's payload follows: exportIPC the
// 64-byte handle; exportFD the mapping's size, the descriptor's key and
// the server's address.
const windowRecordHead = 8 + 8 + 8 + 1

// maxServerAddr bounds the descriptor server address a peer may send.
const maxServerAddr = 512

// windowRecord is a rank's record in RegisterWindow's exchange.
type windowRecord struct {
	size, buf, off uint64
	kind           byte
	handle         cuda.IpcMemHandle // exportIPC
	mapSize, key   uint64            // exportFD: the VMM mapping's size, the descriptor's key
	server         string            // exportFD: the descriptor server's address
}

// base is the exporter's address of its allocation (or mapping).
func (x *windowRecord) base() uint64 { return x.buf - x.off }

func (x *windowRecord) encode() []byte {
	b := binary.LittleEndian.AppendUint64(nil, x.size)
	b = binary.LittleEndian.AppendUint64(b, x.buf)
	b = binary.LittleEndian.AppendUint64(b, x.off)
	b = append(b, x.kind)
	switch x.kind {
	case exportIPC:
		b = append(b, x.handle[:]...)
	case exportFD:
		b = binary.LittleEndian.AppendUint64(b, x.mapSize)
		b = binary.LittleEndian.AppendUint64(b, x.key)
		b = append(b, x.server...)
	}
	return b
}

// parseWindowRecords checks the ranks' records: their lengths, that
// every rank registered the same size, and that an exported window lies
// in what its rank exported.
func parseWindowRecords(all [][]byte) ([]windowRecord, error) {
	recs := make([]windowRecord, len(all))
	for r, b := range all {
		if len(b) < windowRecordHead {
			return nil, fmt.Errorf("rank %d's window record: %d bytes, want at least %d", r, len(b), windowRecordHead)
		}
		x := &recs[r]
		x.size = binary.LittleEndian.Uint64(b)
		x.buf = binary.LittleEndian.Uint64(b[8:])
		x.off = binary.LittleEndian.Uint64(b[16:])
		x.kind = b[24]
		tail := b[windowRecordHead:]
		switch {
		case x.kind == exportNone && len(tail) == 0:
		case x.kind == exportFailed && len(tail) == 0:
			return nil, fmt.Errorf("%w: rank %d could not register its window (its error says why)", ErrWindowMismatch, r)
		case x.kind == exportIPC && len(tail) == len(x.handle):
			copy(x.handle[:], tail)
		case x.kind == exportFD && len(tail) > 16 && len(tail) <= 16+maxServerAddr:
			x.mapSize = binary.LittleEndian.Uint64(tail)
			x.key = binary.LittleEndian.Uint64(tail[8:])
			x.server = string(tail[16:])
			if x.off >= x.mapSize || x.size > x.mapSize-x.off || x.off > x.buf {
				return nil, fmt.Errorf("rank %d's window record: %d bytes at offset %d of a %d-byte mapping at %#x: it does not fit",
					r, x.size, x.off, x.mapSize, x.buf-min(x.off, x.buf))
			}
		default:
			return nil, fmt.Errorf("rank %d's window record: export kind %d with %d bytes after the head: malformed", r, x.kind, len(tail))
		}
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

// windowExport is what exportWindow made of this rank's buffer.
type windowExport struct {
	rec windowRecord
	srv *ipc.Server // exportFD: serves the descriptor until closed
	why error       // rec.kind == exportNone: why
}

// close stops the descriptor server, closing the exported descriptor
// (the peers hold their own mappings by then).
func (x *windowExport) close() error {
	if x.srv == nil {
		return nil
	}
	err := x.srv.Close()
	x.srv = nil
	return err
}

// exportWindow exports the memory that holds [buf, buf+size) for window
// seq. An error is a bad argument (a window past its cuMemAlloc
// allocation) or a driver failure on memory that did export; memory that
// cannot be exported gives exportNone and why.
func (e *Engine) exportWindow(seq uint64, buf cuda.DevicePtr, size uint64) (windowExport, error) {
	x := windowExport{rec: windowRecord{size: size, buf: uint64(buf)}}
	base, n, err := e.ipc.MemGetAddressRange(buf)
	if err != nil {
		x.why = fmt.Errorf("the allocation holding %#x: %w", uint64(buf), err)
		return x, nil
	}
	inside := buf >= base && uint64(buf-base) < n && size <= n-uint64(buf-base)
	var retainErr, vmmWhy error
	if vm, ok := e.ipc.(vmmMemory); ok {
		mh, err := vm.MemRetainAllocationHandle(buf)
		if err == nil {
			err = errors.Join(e.exportVMM(&x, vm, mh, seq, base, n, inside), vm.MemRelease(mh))
			if err != nil {
				return x, errors.Join(err, x.close())
			}
			if x.rec.kind == exportFD || !inside {
				return x, err
			}
			// Not exported as a fd: legacy IPC may still take it.
			vmmWhy, x.why = x.why, nil
		} else {
			retainErr = err
		}
	}
	if !inside {
		return x, fmt.Errorf("%w: the window [%#x, +%d) runs past its allocation (%d bytes at %#x)",
			ErrInvalidArgument, uint64(buf), size, n, uint64(base))
	}
	h, err := e.ipc.IpcGetMemHandle(base)
	if err != nil {
		x.why = fmt.Errorf("exporting the allocation at %#x: legacy IPC: %w", uint64(base), err)
		switch {
		case vmmWhy != nil:
			x.why = fmt.Errorf("%w; %w", vmmWhy, x.why)
		case retainErr != nil:
			x.why = fmt.Errorf("%w; and it is no VMM allocation: %w", x.why, retainErr)
		}
		return x, nil
	}
	x.rec.off, x.rec.kind, x.rec.handle = uint64(buf-base), exportIPC, h
	return x, nil
}

// exportVMM exports VMM allocation mh, mapped as the n bytes at base, for
// x's window: a POSIX fd under key seq on a descriptor server of its own.
func (e *Engine) exportVMM(x *windowExport, vm vmmMemory, mh cuda.MemHandle, seq uint64, base cuda.DevicePtr, n uint64, inside bool) error {
	if !inside {
		x.why = fmt.Errorf("the window [%#x, +%d) spans more than the VMM mapping that holds its start (%d bytes at %#x)",
			x.rec.buf, x.rec.size, n, uint64(base))
		return nil
	}
	fd, err := vm.MemExportToShareableHandle(mh)
	if err != nil {
		x.why = fmt.Errorf("exporting the VMM allocation mapped at %#x as a POSIX file descriptor (allocated without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR?): %w", uint64(base), err)
		return nil
	}
	srv, err := ipc.Listen(ipc.NewName("ncclgo-win"))
	if err != nil {
		_ = syscall.Close(fd)
		x.why = fmt.Errorf("serving the VMM allocation's descriptor: %w", err)
		return nil
	}
	if err := srv.Add(seq, fd); err != nil {
		_ = syscall.Close(fd)
		return errors.Join(err, srv.Close())
	}
	if addr := srv.Addr(); len(addr) > maxServerAddr {
		return errors.Join(fmt.Errorf("the descriptor server's address is %d bytes, more than %d", len(addr), maxServerAddr), srv.Close())
	}
	x.srv = srv
	x.rec.off, x.rec.kind, x.rec.mapSize, x.rec.key, x.rec.server = x.rec.buf-uint64(base), exportFD, n, seq, srv.Addr()
	return nil
}

// peerAlloc names a peer's allocation mapped here: by its legacy IPC
// handle, or (VMM) by its rank and its mapping there.
type peerAlloc struct {
	ipc  cuda.IpcMemHandle
	rank int // VMM: the exporting rank; -1 for IPC
	base uint64
	size uint64
}

// peerMapping is a peer's allocation mapped here, and how many windows
// use it.
type peerMapping struct {
	p    cuda.DevicePtr
	refs int
	mh   cuda.MemHandle // VMM: the imported allocation, mapped at p
}

// fetchFDs fetches descriptors from a peer's server (a variable for
// tests that make it fail).
var fetchFDs = ipc.Fetch

// errVMMImport marks a VMM allocation that did not map here: the window
// runs without a row rather than failing.
var errVMMImport = errors.New("a peer's VMM allocation did not map")

// openPeer maps rank r's window memory described by x, or counts one
// more user of its mapping; it returns the mapping's address and its key.
func (e *Engine) openPeer(ctx context.Context, r int, x *windowRecord) (cuda.DevicePtr, peerAlloc, error) {
	k := peerAlloc{rank: -1}
	switch x.kind {
	case exportIPC:
		k.ipc = x.handle
	case exportFD:
		k.rank, k.base, k.size = r, x.base(), x.mapSize
	default:
		return 0, k, fmt.Errorf("rank %d exported nothing", r)
	}
	if m := e.win.maps[k]; m != nil {
		m.refs++
		return m.p, k, nil
	}
	var m *peerMapping
	if x.kind == exportIPC {
		p, err := e.ipc.IpcOpenMemHandle(x.handle)
		if err != nil {
			return 0, k, err
		}
		m = &peerMapping{p: p}
	} else {
		var err error
		if m, err = e.importVMM(ctx, r, x); err != nil {
			return 0, k, fmt.Errorf("%w: %w", errVMMImport, err)
		}
	}
	m.refs = 1
	if e.win.maps == nil {
		e.win.maps = map[peerAlloc]*peerMapping{}
	}
	e.win.maps[k] = m
	return m.p, k, nil
}

// importVMM fetches rank r's descriptor, imports it and maps it here; a
// failed step undoes the ones before it. The descriptor is closed once
// imported.
func (e *Engine) importVMM(ctx context.Context, r int, x *windowRecord) (*peerMapping, error) {
	vm, ok := e.ipc.(vmmMemory)
	if !ok {
		return nil, fmt.Errorf("this rank's driver (%T) cannot import VMM allocations", e.ipc)
	}
	fds, err := fetchFDs(ctx, x.server, x.key)
	if err != nil {
		return nil, fmt.Errorf("fetching rank %d's descriptor: %w", r, err)
	}
	mh, err := vm.MemImportFromShareableHandle(fds[0])
	cerr := syscall.Close(fds[0])
	if err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, errors.Join(fmt.Errorf("closing rank %d's descriptor: %w", r, cerr), vm.MemRelease(mh))
	}
	gran, err := vm.MemGetAllocationGranularity(false)
	if err != nil {
		return nil, errors.Join(err, vm.MemRelease(mh))
	}
	p, err := vm.MemAddressReserve(x.mapSize, gran)
	if err != nil {
		return nil, errors.Join(err, vm.MemRelease(mh))
	}
	if err := vm.MemMap(p, x.mapSize, mh); err != nil {
		return nil, errors.Join(err, vm.MemAddressFree(p, x.mapSize), vm.MemRelease(mh))
	}
	if err := vm.MemSetAccess(p, x.mapSize); err != nil {
		return nil, errors.Join(err, vm.MemUnmap(p, x.mapSize), vm.MemAddressFree(p, x.mapSize), vm.MemRelease(mh))
	}
	return &peerMapping{p: p, mh: mh}, nil
}

// closePeer drops one user of k's mapping and unmaps it after the last.
func (e *Engine) closePeer(k peerAlloc) error {
	m := e.win.maps[k]
	if m == nil {
		return fmt.Errorf("closing a peer's window: its allocation is not mapped here")
	}
	if m.refs--; m.refs > 0 {
		return nil
	}
	delete(e.win.maps, k)
	if k.rank < 0 {
		return e.ipc.IpcCloseMemHandle(m.p)
	}
	vm := e.ipc.(vmmMemory) // importVMM had it
	return errors.Join(vm.MemUnmap(m.p, k.size), vm.MemRelease(m.mh), vm.MemAddressFree(m.p, k.size))
}

// agreeWindow tells every rank how the mapping of a window went on every
// rank (mapErr is this rank's): an error when a rank failed other than by
// errVMMImport (this rank's own error, or one naming the rank), else the
// lowest rank whose VMM import failed (-1: every rank mapped it).
func agreeWindow(ctx context.Context, net bootstrap.Network, rank int, mapErr error, what string) (int, error) {
	const (
		failed   = 0
		mapped   = 1
		noImport = 2
	)
	b := []byte{mapped}
	switch {
	case errors.Is(mapErr, errVMMImport):
		b[0] = noImport
	case mapErr != nil:
		b[0] = failed
	}
	all, err := net.AllGather(ctx, b)
	if err != nil {
		return -1, fmt.Errorf("%s: agreeing: %w", what, err)
	}
	soft := -1
	for r, v := range all {
		switch {
		case len(v) == 1 && v[0] == mapped:
		case len(v) == 1 && v[0] == noImport:
			if soft < 0 {
				soft = r
			}
		case r == rank && mapErr != nil:
			return -1, fmt.Errorf("%s: %w", what, mapErr)
		default:
			return -1, fmt.Errorf("%s: rank %d failed", what, r)
		}
	}
	return soft, nil
}
