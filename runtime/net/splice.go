package net

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// Sending without the sender's copy. A loopback (or any) TCP write copies
// the bytes from user memory into the socket's buffers; vmsplice(2) puts
// references to the user pages into a pipe instead (no SPLICE_F_GIFT: the
// pages stay the caller's), and splice(2) moves those references from the
// pipe into the socket, whose segments then point at the caller's pages
// until the receiver's read copies them out. Only the receiver copies.
//
// What it asks of the caller: the bytes of a spliced message are read by
// the kernel until the receiver has read them, which can be after the
// send completed; so the buffer must not change until the receiver has
// the message, not merely until the send completes, and it must not be
// Go heap memory (the collector could reuse it). The comm therefore
// splices only chunks of buffers registered with its RegMr (the caller's
// declaration), and only when the socket options allow it. The NET
// transport's staging satisfies this: it is mmap'd, and the kernel writes
// a slot again only after the receiver credited that step, which the
// receiver does only after its read has copied the step out of the
// socket.
//
// Memory going away under the kernel: the pipe and the socket buffers
// hold page references of their own (vmsplice takes them as
// get_user_pages does), so munmap of the buffer, or the CUDA driver's
// unregistration of it, while data is in flight leaves those pages
// allocated until the kernel drops them; what is sent is their last
// content. Closing a comm closes its pipes (dropping what they hold) and
// its sockets.
//
// Failures: a vmsplice or splice that fails with anything but EAGAIN
// (ENOSYS, EINVAL or EFAULT on memory the kernel will not reference, such
// as a device mapping) turns splicing off for the comm; the bytes not yet
// in the socket go by writev from the buffer (the pipe's content is a
// copy of references to those same bytes, so it is discarded).

// Splice modes of SocketOptions.Splice (NCCLGO_SOCKET_SPLICE).
const (
	SpliceAuto = "" // the default: see spliceDefault
	SpliceOn   = "1"
	SpliceOff  = "0"
)

// spliceDefault is whether SpliceAuto splices: not yet. On the 2-core
// development box splicing halves the sender's CPU per byte but adds
// 35-65 % to the receiver's (its read now copies from the sender's pages,
// which the sender's copy no longer brought into the caches), so the two
// together cost about the same and the throughput is the same
// (notes/20261201-net.md, "Splicing the sender's copy"); the GPU host
// decides.
const spliceDefault = false

// spliceEnabled resolves a mode.
func spliceEnabled(mode string) bool {
	m, _ := parseSplice(mode)
	switch m {
	case SpliceOn:
		return true
	case SpliceOff:
		return false
	}
	return spliceDefault
}

func parseSplice(s string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return SpliceAuto, nil
	case "1", "on", "true":
		return SpliceOn, nil
	case "0", "off", "false":
		return SpliceOff, nil
	}
	return "", errors.New("want 1 (splice registered buffers), 0 (writev) or empty (the default)")
}

const (
	spliceFMove     = 0x1
	spliceFNonblock = 0x2
	spliceFMore     = 0x4
	fSetPipeSz      = 1031 // F_SETPIPE_SZ
	msgMore         = 0x8000
	msgDontwait     = 0x40
	msgNosignal     = 0x4000
)

// maxPipe is the pipe capacity asked for: the largest chunk most messages
// have; /proc/sys/fs/pipe-max-size may be lower.
const maxPipe = 1 << 20

// pipeCap returns the capacity to ask for: maxPipe, or pipe-max-size when
// it is lower.
func pipeCap() int {
	b, err := os.ReadFile("/proc/sys/fs/pipe-max-size")
	if err != nil {
		return maxPipe
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return maxPipe
	}
	return min(n, maxPipe)
}

// newPipe returns a non-blocking pipe grown towards want bytes (a pipe
// that cannot grow, past the user's pipe-user-pages limits, keeps its
// size: splicing works with any).
func newPipe(want int) (r, w int, err error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		return -1, -1, err
	}
	for n := want; n >= 64<<10; n /= 2 {
		if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(p[1]), fSetPipeSz, uintptr(n)); e == 0 {
			break
		}
	}
	return p[0], p[1], nil
}

// vmspliceFn and spliceFn are the system calls (tests replace them to
// see the fallback).
var (
	vmspliceFn = vmsplice
	spliceFn   = spliceOut
)

// vmsplice puts references to b's pages into the pipe w without
// blocking: 0, nil when the pipe is full.
func vmsplice(w int, b []byte) (int, error) {
	iov := iovec(b)
	for {
		r, _, e := syscall.Syscall6(syscall.SYS_VMSPLICE, uintptr(w), uintptr(unsafe.Pointer(&iov)), 1, spliceFNonblock, 0, 0)
		if n, err, again := settle(r, e); !again {
			return n, err
		}
	}
}

// spliceOut moves up to n bytes from the pipe r into the socket fd
// without blocking: 0, nil when the socket is full.
func spliceOut(r, fd, n int, more bool) (int, error) {
	flags := spliceFMove | spliceFNonblock
	if more {
		flags |= spliceFMore
	}
	for {
		k, err := syscall.Splice(r, nil, fd, nil, n, flags)
		switch {
		case err == nil:
			return int(k), nil
		case err == syscall.EINTR:
			continue
		case errAgain(err):
			return 0, nil
		}
		return 0, err
	}
}

// sendMore writes b to the socket fd with MSG_MORE (more follows: the
// kernel may hold it for the next segment) without blocking: 0, nil when
// the socket is full.
func sendMore(fd int, b []byte) (int, error) {
	for {
		r, _, e := syscall.Syscall6(syscall.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), msgMore|msgDontwait|msgNosignal, 0, 0)
		if n, err, again := settle(r, e); !again {
			return n, err
		}
	}
}

// drainPipe empties the pipe r (its content is dropped).
func drainPipe(r int) {
	var b [64 << 10]byte
	for {
		if n, err := syscall.Read(r, b[:]); n <= 0 || err != nil {
			return
		}
	}
}
