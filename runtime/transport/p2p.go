package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// P2P connects ranks whose GPUs can reach each other's memory: the sender
// stores straight into the receiver's device memory. Within one process
// the receiver's cuMemAlloc address is used as is; between processes the
// memory is exported (VMM file descriptor, or a legacy IPC handle) and
// mapped by the sender.
type P2P struct{}

// Name implements Transport.
func (P2P) Name() string { return "P2P" }

// CanConnect implements Transport: P2P needs the same host, the path
// within NCCL_P2P_LEVEL and, between two GPUs, peer access.
func (P2P) CanConnect(pol Policy, send, recv Peer, link Link) (bool, string) {
	switch {
	case pol.P2PDisable:
		return false, "disabled by NCCL_P2P_DISABLE"
	case send.Host != recv.Host:
		return false, "different hosts"
	case pol.Level() == PathLOC:
		return false, "disabled by NCCL_P2P_LEVEL=LOC"
	case link.Path > pol.Level():
		return false, fmt.Sprintf("path %v is beyond NCCL_P2P_LEVEL %v", link.Path, pol.Level())
	case link.Path != PathLOC && !link.PeerAccess:
		return false, fmt.Sprintf("device %d cannot access device %d's memory (no peer access)", send.Device, recv.Device)
	}
	return true, ""
}

// Flags implements Transport: in one process the peer's user buffers are
// reachable (direct mode); between processes they are not, the sender's
// fences are system-wide, and the connection is flagged ConnXproc: its
// control block (head, tail, ptrExchange) is memory both sides map, so a
// SendRecv may run by window over it (devicesrc/sendrecv.h).
func (P2P) Flags(send, recv Peer) uint32 {
	if !send.SameProcess(recv) {
		return generated.ConnXproc
	}
	f := uint32(generated.ConnDirect)
	if send.SameGPU(recv) {
		f |= generated.ConnSameGpu
	}
	return f
}

// The kinds of P2P connect info (its first byte).
const (
	p2pLocal = 1 // in-process: u64 address
	p2pCuMem = 2 // VMM: u64 size, u64 descriptor key
	p2pIPC   = 3 // legacy: u64 size, 64-byte cuIpcMemHandle
)

// SetupRecv implements Transport.
func (P2P) SetupRecv(env *Env, send Peer, size uint64) (Region, error) {
	if send.SameProcess(env.Self) {
		p, err := allocZeroed(env.Mem, size)
		if err != nil {
			return nil, err
		}
		info := binary.LittleEndian.AppendUint64([]byte{p2pLocal}, uint64(p))
		return &devRegion{mem: env.Mem, addr: p, info: info, mode: "direct pointer", owned: true}, nil
	}
	m, err := env.IPC("P2P between processes")
	if err != nil {
		return nil, err
	}
	// VMM first; legacy IPC handles where it fails (no POSIX descriptor
	// handles on this system) or NCCL_CUMEM_ENABLE=0.
	var vmmErr error
	if !env.Policy.NoCuMem {
		r, err := setupCuMem(env, m, size)
		if err == nil {
			return r, nil
		}
		vmmErr = fmt.Errorf("P2P/CUMEM: %w", err)
	}
	p, err := allocZeroed(m, size)
	if err != nil {
		return nil, errors.Join(vmmErr, err)
	}
	h, err := m.IpcGetMemHandle(p)
	if err != nil {
		_ = m.MemFree(p)
		return nil, errors.Join(vmmErr, fmt.Errorf("P2P/IPC: %w", err))
	}
	info := binary.LittleEndian.AppendUint64([]byte{p2pIPC}, size)
	info = append(info, h[:]...)
	return &devRegion{mem: m, addr: p, info: info, mode: "IPC", owned: true}, nil
}

func allocZeroed(m Memory, size uint64) (cuda.DevicePtr, error) {
	p, err := m.MemAlloc(size)
	if err != nil {
		return 0, err
	}
	if err := m.MemsetD8(p, 0, size); err != nil {
		_ = m.MemFree(p)
		return 0, err
	}
	return p, nil
}

// setupCuMem allocates size bytes (rounded up to the granularity) with
// cuMemCreate, maps them for this device, zeroes them and exports them.
func setupCuMem(env *Env, m IPCMemory, size uint64) (_ Region, err error) {
	gran, err := m.MemGetAllocationGranularity(false)
	if err != nil {
		return nil, err
	}
	n := roundUp(size, gran)
	h, err := m.MemCreate(n)
	if err != nil {
		return nil, err
	}
	r := &vmmRegion{m: m, h: h, size: n, mode: "CUMEM"}
	defer func() {
		if err != nil {
			_ = r.Close()
		}
	}()
	if err := r.mapHere(gran); err != nil {
		return nil, err
	}
	if err := m.MemsetD8(r.addr, 0, n); err != nil {
		return nil, err
	}
	fd, err := m.MemExportToShareableHandle(h)
	if err != nil {
		return nil, err
	}
	key, err := env.Export(fd)
	if err != nil {
		return nil, err
	}
	info := binary.LittleEndian.AppendUint64([]byte{p2pCuMem}, n)
	r.info = binary.LittleEndian.AppendUint64(info, key)
	return r, nil
}

// ConnectSend implements Transport.
func (P2P) ConnectSend(ctx context.Context, env *Env, recv int, peer Peer, info []byte) (Region, error) {
	peer.Rank = recv
	if len(info) < 9 {
		return nil, fmt.Errorf("transport: P2P connect info from rank %d: %d bytes, want at least 9", recv, len(info))
	}
	kind, a := info[0], binary.LittleEndian.Uint64(info[1:9])
	switch {
	case kind == p2pLocal && len(info) == 9:
		if !peer.SameProcess(env.Self) {
			return nil, fmt.Errorf("transport: %s published an in-process P2P address to a rank of another process", peer)
		}
		return &devRegion{addr: cuda.DevicePtr(a), mode: "direct pointer"}, nil
	case kind == p2pCuMem && len(info) == 17:
		m, err := env.IPC("P2P/CUMEM")
		if err != nil {
			return nil, err
		}
		gran, err := m.MemGetAllocationGranularity(false)
		if err != nil {
			return nil, err
		}
		fd, err := env.Import(ctx, recv, binary.LittleEndian.Uint64(info[9:]))
		if err != nil {
			return nil, err
		}
		h, err := m.MemImportFromShareableHandle(fd)
		ipcClose(fd)
		if err != nil {
			return nil, err
		}
		r := &vmmRegion{m: m, h: h, size: a, mode: "CUMEM"}
		if err := r.mapHere(gran); err != nil {
			_ = r.Close()
			return nil, fmt.Errorf("transport: mapping rank %d's buffers: %w", recv, err)
		}
		return r, nil
	case kind == p2pIPC && len(info) == 9+64:
		m, err := env.IPC("P2P/IPC")
		if err != nil {
			return nil, err
		}
		var h cuda.IpcMemHandle
		copy(h[:], info[9:])
		p, err := m.IpcOpenMemHandle(h)
		if err != nil {
			return nil, fmt.Errorf("transport: opening rank %d's IPC handle: %w", recv, err)
		}
		// The handle names the exporter's allocation, which the range
		// that holds p bounds: so the size rank recv published must fit
		// in it from p on, and so must the offsets it publishes later
		// (sizedRegion). The range may start before p: the driver
		// sub-allocates small allocations from larger blocks, which IPC
		// then maps whole. A driver that cannot tell the range leaves the
		// published size unchecked, as before this check.
		r := &ipcRegion{m: m, addr: p, size: a}
		if base, n, err := m.MemGetAddressRange(p); err == nil && (p < base || uint64(p-base) > n || a > n-uint64(p-base)) {
			_ = r.Close()
			return nil, fmt.Errorf("transport: rank %d's IPC buffers: it published %d bytes at its IPC handle, mapped at %#x, but the allocation opened is %d bytes at %#x",
				recv, a, uint64(p), n, uint64(base))
		}
		return r, nil
	}
	return nil, fmt.Errorf("transport: P2P connect info from rank %d: kind %d, %d bytes: malformed", recv, kind, len(info))
}

// devRegion is device memory from MemAlloc (owned) or a peer's address in
// this process (not owned).
type devRegion struct {
	mem   Memory
	addr  cuda.DevicePtr
	info  []byte
	mode  string
	owned bool
}

func (r *devRegion) Addr() uint64 { return uint64(r.addr) }
func (r *devRegion) Info() []byte { return r.info }
func (r *devRegion) Mode() string { return r.mode }
func (r *devRegion) Close() error {
	if !r.owned || r.addr == 0 {
		r.addr = 0
		return nil
	}
	p := r.addr
	r.addr = 0
	return r.mem.MemFree(p)
}

// vmmRegion is a VMM allocation (created here or imported) mapped at addr.
type vmmRegion struct {
	m    IPCMemory
	h    cuda.MemHandle
	addr cuda.DevicePtr
	size uint64
	info []byte
	mode string

	reserved, mapped bool
}

// mapHere reserves an address range, maps the allocation there and grants
// this device read-write access.
func (r *vmmRegion) mapHere(gran uint64) error {
	p, err := r.m.MemAddressReserve(r.size, gran)
	if err != nil {
		return err
	}
	r.addr, r.reserved = p, true
	if err := r.m.MemMap(p, r.size, r.h); err != nil {
		return err
	}
	r.mapped = true
	return r.m.MemSetAccess(p, r.size, r.m.Device())
}

func (r *vmmRegion) Addr() uint64       { return uint64(r.addr) }
func (r *vmmRegion) mappedSize() uint64 { return r.size }
func (r *vmmRegion) Info() []byte       { return r.info }
func (r *vmmRegion) Mode() string       { return r.mode }
func (r *vmmRegion) Close() error {
	var errs []error
	if r.mapped {
		errs = append(errs, r.m.MemUnmap(r.addr, r.size))
		r.mapped = false
	}
	if r.h != 0 {
		errs = append(errs, r.m.MemRelease(r.h))
		r.h = 0
	}
	if r.reserved {
		errs = append(errs, r.m.MemAddressFree(r.addr, r.size))
		r.reserved = false
	}
	r.addr = 0
	return errors.Join(errs...)
}

// ipcRegion is a peer's memory opened from a legacy IPC handle, size
// bytes (checked against the allocation when opened).
type ipcRegion struct {
	m    IPCMemory
	addr cuda.DevicePtr
	size uint64
}

func (r *ipcRegion) Addr() uint64       { return uint64(r.addr) }
func (r *ipcRegion) mappedSize() uint64 { return r.size }
func (r *ipcRegion) Info() []byte       { return nil }
func (r *ipcRegion) Mode() string       { return "IPC" }
func (r *ipcRegion) Close() error {
	if r.addr == 0 {
		return nil
	}
	p := r.addr
	r.addr = 0
	return r.m.IpcCloseMemHandle(p)
}
