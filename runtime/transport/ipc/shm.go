package ipc

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// Segment is a shared memory segment mapped into this process.
type Segment struct {
	fd  int
	mem []byte
}

// CreateSegment makes a zeroed shared memory segment of size bytes, backed
// by an anonymous memory file (memfd_create; an unlinked file in /dev/shm
// where memfd is unavailable), and maps it.
func CreateSegment(name string, size int) (*Segment, error) {
	if size <= 0 {
		return nil, fmt.Errorf("ipc: segment %q of %d bytes: want a positive size", name, size)
	}
	fd, err := memfd(name)
	if err != nil {
		return nil, fmt.Errorf("ipc: creating segment %q: %w", name, err)
	}
	if err := syscall.Ftruncate(fd, int64(size)); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("ipc: sizing segment %q to %d bytes: %w", name, size, err)
	}
	return mapFD(fd, size)
}

// MapSegment maps size bytes of the segment behind fd (from CreateSegment,
// possibly in another process, passed with Fetch). The segment takes
// ownership of fd.
func MapSegment(fd, size int) (*Segment, error) {
	if fd < 0 || size <= 0 {
		return nil, fmt.Errorf("ipc: mapping fd %d, %d bytes: want a descriptor and a positive size", fd, size)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("ipc: fd %d: %w", fd, err)
	}
	if st.Size < int64(size) {
		syscall.Close(fd)
		return nil, fmt.Errorf("ipc: fd %d holds %d bytes, fewer than the %d to map", fd, st.Size, size)
	}
	return mapFD(fd, size)
}

func mapFD(fd, size int) (*Segment, error) {
	mem, err := syscall.Mmap(fd, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("ipc: mapping %d bytes of fd %d: %w", size, fd, err)
	}
	return &Segment{fd: fd, mem: mem}, nil
}

// Bytes is the mapped memory; it is invalid after Close.
func (s *Segment) Bytes() []byte { return s.mem }

// Ptr is the address of the mapping.
func (s *Segment) Ptr() unsafe.Pointer { return unsafe.Pointer(&s.mem[0]) }

// Size is the mapped length.
func (s *Segment) Size() int { return len(s.mem) }

// Dup returns a new descriptor of the segment, for a Server to hand out.
func (s *Segment) Dup() (int, error) {
	fd, err := syscall.Dup(s.fd)
	if err != nil {
		return -1, fmt.Errorf("ipc: duplicating segment fd %d: %w", s.fd, err)
	}
	syscall.CloseOnExec(fd)
	return fd, nil
}

// Close unmaps the segment and closes its descriptor; the memory is freed
// once every process has done so.
func (s *Segment) Close() error {
	if s == nil || s.mem == nil {
		return nil
	}
	err := syscall.Munmap(s.mem)
	s.mem = nil
	if cerr := syscall.Close(s.fd); err == nil {
		err = cerr
	}
	s.fd = -1
	if err != nil {
		return fmt.Errorf("ipc: closing segment: %w", err)
	}
	return nil
}

// memfd returns an anonymous memory file.
func memfd(name string) (int, error) {
	if sysMemfdCreate != 0 {
		p, err := syscall.BytePtrFromString(name)
		if err != nil {
			return -1, err
		}
		const mfdCloexec = 1
		fd, _, errno := syscall.Syscall(sysMemfdCreate, uintptr(unsafe.Pointer(p)), mfdCloexec, 0)
		if errno == 0 {
			return int(fd), nil
		}
		if errno != syscall.ENOSYS {
			return -1, fmt.Errorf("memfd_create: %w", errno)
		}
	}
	f, err := os.CreateTemp("/dev/shm", name+"-*")
	if err != nil {
		return -1, err
	}
	defer f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return -1, err
	}
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		return -1, err
	}
	syscall.CloseOnExec(fd)
	return fd, nil
}
