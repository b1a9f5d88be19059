package enqueue

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// Capture says whether the stream a rank's launch goes to is being
// captured into a CUDA graph (cuStreamBeginCapture): its work is then
// recorded, not run, and runs at every launch of the graph (a replay),
// with the arguments and device memory it was captured with.
//
// What a launch queues must therefore not depend on host state that
// changes after the call. For ncclgo's launches that holds: the kernel
// arguments are copied into the graph's kernel node; the device
// communicator's step counters live in device memory and advance on every
// replay exactly as on eager launches, so the ranks' replays stay matched
// as long as every rank replays its graph alike; copies between device
// buffers become copy nodes. Three things differ, and Capture handles
// them:
//
//   - Work FIFOs that do not fit in the kernel arguments are uploaded into
//     device memory the launcher keeps until it is closed, at capture time,
//     instead of being copied from a reused staging buffer by a copy node
//     (Launcher.RunIn): a replay reads them long after the staging buffer
//     was reused.
//   - Events that order a rank's launches across streams are recorded and
//     waited for as the graph's external event nodes (Record, Wait): an
//     event last recorded in a capturing stream cannot be queried or
//     waited for by eager work (CUDA_ERROR_CAPTURED_EVENT), and eager
//     events cannot be waited for inside a capture
//     (CUDA_ERROR_STREAM_CAPTURE_ISOLATION). External nodes record and wait
//     at replay time, so a replay still runs after the rank's previous
//     launch and before its next one, as NCCL's strong stream orders them.
//   - The driver calls the launch path makes that CUDA calls potentially
//     unsafe during a global-mode capture (allocations, event queries) run
//     in relaxed capture mode (runtime/cuda's shim), so they neither fail
//     nor invalidate the caller's capture.
//
// A stream whose capture was invalidated is refused (CaptureOf). Nothing
// per call runs on the host besides the launch itself: the one transport
// that needs host progress, NET, has its proxy (runtime/proxy) follow the
// steps that kernels post in host-pinned staging memory, not the calls, so
// a replay drives it as an eager launch does, and nothing is refused for
// it.
//
// A graph uses the communicator's device memory and connections: it must
// not be launched after the communicator is destroyed, as in NCCL.
type Capture bool

// ErrCaptureInvalidated reports a launch on a stream whose capture was
// invalidated by an earlier illegal call: CUDA refuses all work on it
// until the capture is ended.
var ErrCaptureInvalidated = errors.New("enqueue: the stream's CUDA graph capture was invalidated by an earlier error; end the capture (cuStreamEndCapture) and capture again")

// CaptureOf returns s's capture state for a launch: Capture(true) while
// s captures. An invalidated capture is an error matching
// ErrCaptureInvalidated. Asking about the legacy default stream while a
// blocking stream of its context is being captured fails with the driver's
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: the legacy stream cannot take work
// then.
func CaptureOf(s *cuda.Stream) (Capture, error) {
	st, err := s.CaptureStatus()
	if err != nil {
		return false, fmt.Errorf("enqueue: stream %#x: %w", s.Handle(), err)
	}
	switch st {
	case cuda.CaptureNone:
		return false, nil
	case cuda.CaptureActive:
		return true, nil
	}
	return false, fmt.Errorf("stream %#x (%v): %w", s.Handle(), st, ErrCaptureInvalidated)
}

// Wait makes the work queued on s from now on wait for e's latest record:
// the one at the time of the call (cuStreamWaitEvent), or, under capture,
// the one at each replay (an external event wait node).
func (c Capture) Wait(s *cuda.Stream, e *cuda.Event) error {
	if c {
		return s.WaitEventExternal(e)
	}
	return s.WaitEvent(e)
}

// Record records e after the work queued on s so far: now (cuEventRecord),
// or, under capture, at each replay (an external event record node; e
// keeps its earlier state until the first replay reaches it).
func (c Capture) Record(e *cuda.Event, s *cuda.Stream) error {
	if c {
		return e.RecordExternal(s)
	}
	return e.Record(s)
}

// String says "captured" or "eager".
func (c Capture) String() string {
	if c {
		return "captured"
	}
	return "eager"
}

// capturedChunk is the size of the device memory chunks that hold the work
// FIFOs of captured launches.
const capturedChunk = 256 << 10

// capturedWorkAlign aligns each captured work FIFO (a DevWork's size).
const capturedWorkAlign = 64

// capturedFIFOs holds the work FIFOs of captured launches: device memory
// that is written once, at capture, and never reused, since any graph
// captured so far may replay it; it is freed by Launcher.Close. Uploads go
// through a stream of the launcher's own, which no capture touches.
type capturedFIFOs struct {
	upload *cuda.Stream
	chunks []cuda.DevicePtr
	cur    cuda.DevicePtr // the chunk being filled
	off    uint64         // its bytes in use
	size   uint64         // its size
	bytes  uint64         // bytes of all captured FIFOs
}

// putCaptured uploads b into fresh device memory and returns its address. l.mu is
// held.
func (l *Launcher) putCaptured(b []byte) (cuda.DevicePtr, error) {
	f := &l.captured
	n := uint64(len(b))
	if f.upload == nil {
		s, err := l.ctx.NewStream(true)
		if err != nil {
			return 0, fmt.Errorf("enqueue: captured work FIFO: upload stream: %w", err)
		}
		f.upload = s
	}
	off := (f.off + capturedWorkAlign - 1) &^ (capturedWorkAlign - 1)
	if f.cur == 0 || off+n > f.size {
		size := uint64(capturedChunk)
		for size < n {
			size *= 2
		}
		p, err := l.ctx.MemAlloc(size)
		if err != nil {
			return 0, fmt.Errorf("enqueue: captured work FIFO (%d bytes; %d held by earlier captures): %w", size, f.bytes, err)
		}
		f.chunks = append(f.chunks, p)
		f.cur, f.size, off = p, size, 0
	}
	dst := f.cur + cuda.DevicePtr(off)
	if err := f.upload.MemcpyHtoDWait(dst, unsafe.Pointer(&b[0]), n); err != nil {
		return 0, fmt.Errorf("enqueue: captured work FIFO upload (%d bytes): %w", n, err)
	}
	f.off = off + n
	f.bytes += n
	return dst, nil
}

// CapturedBytes returns how many bytes of device memory hold the work
// FIFOs of captured launches (kept until Close).
func (l *Launcher) CapturedBytes() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.captured.bytes
}

// closeCaptured frees the captured FIFOs; l.mu is held.
func (l *Launcher) closeCaptured() error {
	f := &l.captured
	var errs []error
	for _, p := range f.chunks {
		errs = append(errs, l.ctx.MemFree(p))
	}
	if f.upload != nil {
		errs = append(errs, f.upload.Destroy())
	}
	*f = capturedFIFOs{}
	return errors.Join(errs...)
}
