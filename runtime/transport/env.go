package transport

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"unsafe"

	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/transport/ipc"
)

// Memory is the device memory of one rank (*cuda.Context implements it).
type Memory interface {
	MemAlloc(n uint64) (cuda.DevicePtr, error)
	MemFree(p cuda.DevicePtr) error
	MemsetD8(p cuda.DevicePtr, v byte, n uint64) error
}

// IPCMemory is what the transports between processes need besides Memory:
// CUDA VMM with shareable handles, legacy IPC handles and registration of
// host memory. *cuda.Context implements it.
type IPCMemory interface {
	Memory
	Device() cuda.Device
	MemGetAllocationGranularity(recommended bool) (uint64, error)
	MemCreate(size uint64) (cuda.MemHandle, error)
	cuda.VMMapper
	MemExportToShareableHandle(mh cuda.MemHandle) (int, error)
	MemImportFromShareableHandle(fd int) (cuda.MemHandle, error)
	IpcGetMemHandle(p cuda.DevicePtr) (cuda.IpcMemHandle, error)
	IpcOpenMemHandle(h cuda.IpcMemHandle) (cuda.DevicePtr, error)
	IpcCloseMemHandle(p cuda.DevicePtr) error
	MemGetAddressRange(p cuda.DevicePtr) (base cuda.DevicePtr, size uint64, err error)
	MemHostRegister(p unsafe.Pointer, n uint64) error
	MemHostUnregister(p unsafe.Pointer) error
	HostDevicePointer(p unsafe.Pointer) (cuda.DevicePtr, error)
}

var _ IPCMemory = (*cuda.Context)(nil)

// Env is what a transport sees of the rank it sets up: its memory, where
// it runs, the policy, and the descriptor exchange with the other ranks.
type Env struct {
	Mem    Memory
	Rank   int
	Self   Peer
	Policy Policy

	sizes      Sizes        // the FIFO sizes (NET lays its staging out alike)
	proxyError func(error)  // Options.ProxyError
	aborted    func() bool  // Options.Aborted
	abortCause func() error // Options.AbortCause
	netLog     *slog.Logger // Options.NetLog

	mu      sync.Mutex
	server  *ipc.Server
	nextKey uint64
	names   []string // every rank's descriptor server address ("" for none)
}

// IPC returns the memory as an IPCMemory, or an error naming op when it
// lacks the cross-process operations.
func (e *Env) IPC(op string) (IPCMemory, error) {
	m, ok := e.Mem.(IPCMemory)
	if !ok {
		return nil, fmt.Errorf("transport: %s needs CUDA IPC and VMM operations, which %T lacks", op, e.Mem)
	}
	return m, nil
}

// Export hands fd (which Export now owns) to the other processes: it
// returns the key under which the rank's descriptor server serves it.
func (e *Env) Export(fd int) (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.server == nil {
		s, err := ipc.Listen(ipc.NewName("ncclgo"))
		if err != nil {
			ipcClose(fd)
			return 0, fmt.Errorf("transport: rank %d: starting the descriptor server: %w", e.Rank, err)
		}
		e.server = s
	}
	e.nextKey++
	if err := e.server.Add(e.nextKey, fd); err != nil {
		ipcClose(fd)
		return 0, err
	}
	return e.nextKey, nil
}

// Import fetches the descriptor that rank exported under key; the caller
// owns it.
func (e *Env) Import(ctx context.Context, rank int, key uint64) (int, error) {
	e.mu.Lock()
	name := ""
	if rank >= 0 && rank < len(e.names) {
		name = e.names[rank]
	}
	e.mu.Unlock()
	if name == "" {
		return -1, fmt.Errorf("transport: rank %d exported no descriptors (asked for key %d)", rank, key)
	}
	fds, err := ipc.Fetch(ctx, name, key)
	if err != nil {
		return -1, fmt.Errorf("transport: fetching rank %d's descriptor %d: %w", rank, key, err)
	}
	return fds[0], nil
}

// serverAddr is the address other ranks fetch from ("" before any
// Export): the server's name and secret, which Connect sends to the other
// ranks over the bootstrap only.
func (e *Env) serverAddr() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.server == nil {
		return ""
	}
	return e.server.Addr()
}

func (e *Env) setNames(names []string) {
	e.mu.Lock()
	e.names = names
	e.mu.Unlock()
}

// closeServer stops the descriptor server and closes the exported
// descriptors (the importers hold their own by then).
func (e *Env) closeServer() error {
	e.mu.Lock()
	s := e.server
	e.server = nil
	e.mu.Unlock()
	if s == nil {
		return nil
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("transport: rank %d: closing the descriptor server: %w", e.Rank, err)
	}
	return nil
}
