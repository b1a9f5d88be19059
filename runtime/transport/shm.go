package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/transport/ipc"
)

// SHM connects ranks of one host through host shared memory: the
// receiver's FIFOs and counters live in a memfd segment that both
// processes map and page-lock for their GPU (cuMemHostRegister with
// DEVICEMAP); the kernels store and load it over PCIe with system-scope
// fences. Ranks of one process use the receiver's mapping directly.
type SHM struct{}

// Name implements Transport.
func (SHM) Name() string { return "SHM" }

// CanConnect implements Transport: SHM needs the same host.
func (SHM) CanConnect(pol Policy, send, recv Peer, _ Link) (bool, string) {
	switch {
	case pol.SHMDisable:
		return false, "disabled by NCCL_SHM_DISABLE"
	case send.Host != recv.Host:
		return false, "different hosts"
	}
	return true, ""
}

// Flags implements Transport: no direct access to the peer's buffers; the
// FIFOs are host memory, so every fence is system-wide.
func (SHM) Flags(send, recv Peer) uint32 { return 0 }

// SetupRecv implements Transport. The connect info is the segment's size,
// the descriptor's key and its device address here (which a rank of this
// process uses as is).
func (SHM) SetupRecv(env *Env, send Peer, size uint64) (_ Region, err error) {
	m, err := env.IPC("SHM")
	if err != nil {
		return nil, err
	}
	n := roundUp(size, uint64(os.Getpagesize()))
	seg, err := ipc.CreateSegment(fmt.Sprintf("ncclgo-shm-r%d", env.Rank), int(n))
	if err != nil {
		return nil, err
	}
	r := &shmRegion{m: m, seg: seg}
	defer func() {
		if err != nil {
			_ = r.Close()
		}
	}()
	if err := r.register(); err != nil {
		return nil, err
	}
	var key uint64
	if !send.SameProcess(env.Self) {
		fd, err := seg.Dup()
		if err != nil {
			return nil, err
		}
		if key, err = env.Export(fd); err != nil {
			return nil, err
		}
	}
	info := binary.LittleEndian.AppendUint64(nil, n)
	info = binary.LittleEndian.AppendUint64(info, key)
	r.info = binary.LittleEndian.AppendUint64(info, uint64(r.addr))
	return r, nil
}

// ConnectSend implements Transport.
func (SHM) ConnectSend(ctx context.Context, env *Env, recv int, peer Peer, info []byte) (_ Region, err error) {
	if len(info) != 24 {
		return nil, fmt.Errorf("transport: SHM connect info from rank %d: %d bytes, want 24", recv, len(info))
	}
	n, key, addr := binary.LittleEndian.Uint64(info), binary.LittleEndian.Uint64(info[8:]), binary.LittleEndian.Uint64(info[16:])
	if peer.SameProcess(env.Self) {
		return &devRegion{addr: cuda.DevicePtr(addr), mode: "direct/direct"}, nil
	}
	m, err := env.IPC("SHM")
	if err != nil {
		return nil, err
	}
	fd, err := env.Import(ctx, recv, key)
	if err != nil {
		return nil, err
	}
	seg, err := ipc.MapSegment(fd, int(n))
	if err != nil {
		return nil, err
	}
	r := &shmRegion{m: m, seg: seg}
	if err := r.register(); err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("transport: registering rank %d's shared memory: %w", recv, err)
	}
	return r, nil
}

// shmRegion is a shared memory segment registered with this process's
// CUDA context.
type shmRegion struct {
	m          IPCMemory
	seg        *ipc.Segment
	addr       cuda.DevicePtr
	info       []byte
	registered bool
}

func (r *shmRegion) register() error {
	if err := r.m.MemHostRegister(r.seg.Ptr(), uint64(r.seg.Size())); err != nil {
		return err
	}
	r.registered = true
	p, err := r.m.HostDevicePointer(r.seg.Ptr())
	if err != nil {
		return err
	}
	r.addr = p
	return nil
}

// Host is the segment's memory in this process.
func (r *shmRegion) Host() unsafe.Pointer { return r.seg.Ptr() }

func (r *shmRegion) Addr() uint64       { return uint64(r.addr) }
func (r *shmRegion) mappedSize() uint64 { return uint64(r.seg.Size()) }
func (r *shmRegion) Info() []byte       { return r.info }
func (r *shmRegion) Mode() string       { return "direct/direct" }
func (r *shmRegion) Close() error {
	if r.seg == nil {
		return nil
	}
	var errs []error
	if r.registered {
		errs = append(errs, r.m.MemHostUnregister(r.seg.Ptr()))
		r.registered = false
	}
	errs = append(errs, r.seg.Close())
	r.seg, r.addr = nil, 0
	return errors.Join(errs...)
}
