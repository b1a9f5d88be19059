package enqueue

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ncclgo/ncclgo/runtime/config"
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
//     device memory at capture time, instead of being copied from a reused
//     staging buffer by a copy node (Launcher.RunIn): a replay reads them
//     long after the staging buffer was reused. That memory lives as long
//     as the capture's graph (a CUDA user object tells when it is gone),
//     or, on drivers without user objects, until the launcher is closed.
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
// FIFOs of captured launches whose graphs the launcher cannot follow, and
// the most a held capture's chunks grow to.
const capturedChunk = 256 << 10

// heldChunk is the size of a held capture's first chunk: most captures
// hold a few FIFOs of a few KiB.
const heldChunk = 16 << 10

// capturedWorkAlign aligns each captured work FIFO (a DevWork's size).
const capturedWorkAlign = 64

// capturedFIFOs holds the work FIFOs of captured launches: device memory
// written once, at capture, and read at every replay of the graph.
//
// Each capture (a capture sequence, with the id CUDA gives it, across
// every stream it joins) has chunks of its own, and a hold on its graph
// (cuda.GraphHold, a CUDA user object the graph owns): once the graph and
// every executable graph made from it are destroyed and their launches
// done, CUDA marks the hold released, and the next captured upload takes
// the capture's chunks back into a spare pool, which later captures
// reuse. Nothing is freed while a capture may be under way (cuMemFree is
// refused during a stream capture in global mode, and would invalidate
// it); Close frees the spare pool with everything else. Chunks come in
// sizes that double from heldChunk, and a chunk is reused for the same
// size only, so the pool never holds more of a size than the captures
// alive at one time needed. A driver without user objects or capture ids
// (before CUDA 11.3) gets one set of chunks shared by every capture, freed
// by Close only, as a graph may replay any of it until then. Uploads go
// through a stream of the launcher's own, which no capture touches.
type capturedFIFOs struct {
	upload *cuda.Stream
	held   map[uint64]*heldFIFOs       // by capture id
	kept   fifoChunks                  // without holds: freed by Close
	noHold bool                        // the driver cannot hold graphs: every FIFO goes to kept
	bytes  uint64                      // bytes of all captured FIFOs alive
	spare  map[uint64][]cuda.DevicePtr // chunks of released captures, by size
	alloc  uint64                      // bytes of device memory allocated for FIFOs, spare included
}

// heldFIFOs are the FIFOs of one capture whose graph is held.
type heldFIFOs struct {
	hold *cuda.GraphHold
	fifoChunks
}

// fifoChunk is a chunk of device memory and its size.
type fifoChunk struct {
	p    cuda.DevicePtr
	size uint64
}

// fifoChunks are device memory chunks filled with FIFOs one after the
// other.
type fifoChunks struct {
	chunks []fifoChunk
	cur    cuda.DevicePtr // the chunk being filled
	off    uint64         // its bytes in use
	size   uint64         // its size
	bytes  uint64         // bytes of the FIFOs in all chunks
}

// chunk returns a chunk of size bytes: a spare one if there is one, else
// fresh device memory. held is for the error message.
func (f *capturedFIFOs) chunk(ctx *cuda.Context, size, held uint64) (cuda.DevicePtr, error) {
	if ps := f.spare[size]; len(ps) > 0 {
		p := ps[len(ps)-1]
		f.spare[size] = ps[:len(ps)-1]
		return p, nil
	}
	p, err := ctx.MemAlloc(size)
	if err != nil {
		return 0, fmt.Errorf("enqueue: captured work FIFO (%d bytes; %d held by earlier captures): %w", size, held, err)
	}
	f.alloc += size
	return p, nil
}

// put copies b through f's upload stream into the chunks, adding a chunk
// of first bytes (doubling up to capturedChunk, and beyond as b needs)
// when the current one is full, and returns its address.
func (c *fifoChunks) put(ctx *cuda.Context, f *capturedFIFOs, b []byte, first uint64) (cuda.DevicePtr, error) {
	n := uint64(len(b))
	off := (c.off + capturedWorkAlign - 1) &^ (capturedWorkAlign - 1)
	if c.cur == 0 || off+n > c.size {
		size := first
		if c.size > 0 {
			size = min(2*c.size, max(first, capturedChunk))
		}
		for size < n {
			size *= 2
		}
		p, err := f.chunk(ctx, size, f.bytes)
		if err != nil {
			return 0, err
		}
		c.chunks = append(c.chunks, fifoChunk{p, size})
		c.cur, c.size, off = p, size, 0
	}
	dst := c.cur + cuda.DevicePtr(off)
	if err := f.upload.MemcpyHtoDWait(dst, unsafe.Pointer(&b[0]), n); err != nil {
		return 0, fmt.Errorf("enqueue: captured work FIFO upload (%d bytes): %w", n, err)
	}
	c.off = off + n
	c.bytes += n
	f.bytes += n
	return dst, nil
}

// release moves c's chunks into f's spare pool.
func (c *fifoChunks) release(f *capturedFIFOs) {
	if f.spare == nil {
		f.spare = map[uint64][]cuda.DevicePtr{}
	}
	for _, k := range c.chunks {
		f.spare[k.size] = append(f.spare[k.size], k.p)
	}
	f.bytes -= c.bytes
	*c = fifoChunks{}
}

// free frees the chunks.
func (c *fifoChunks) free(ctx *cuda.Context) error {
	var errs []error
	for _, k := range c.chunks {
		errs = append(errs, ctx.MemFree(k.p))
	}
	*c = fifoChunks{}
	return errors.Join(errs...)
}

// putCaptured uploads b, the work FIFO of a launch captured on s, into
// device memory that lives as long as the capture's graph (see
// capturedFIFOs) and returns its address. It first takes back the chunks
// of captures whose graphs are gone. l.mu is held.
func (l *Launcher) putCaptured(b []byte, s *cuda.Stream) (cuda.DevicePtr, error) {
	f := &l.captured
	l.reapCaptured()
	if f.upload == nil {
		up, err := l.ctx.NewStream(true)
		if err != nil {
			return 0, fmt.Errorf("enqueue: captured work FIFO: upload stream: %w", err)
		}
		f.upload = up
	}
	h, err := l.heldFor(s)
	if err != nil {
		return 0, err
	}
	if h == nil {
		return f.kept.put(l.ctx, f, b, capturedChunk)
	}
	return h.put(l.ctx, f, b, heldChunk)
}

// heldFor returns the FIFOs of the capture s is in, holding its graph the
// first time, or nil when the driver cannot hold graphs. l.mu is held.
func (l *Launcher) heldFor(s *cuda.Stream) (*heldFIFOs, error) {
	f := &l.captured
	if f.noHold {
		return nil, nil
	}
	id, err := s.CaptureID()
	if err == nil && id != 0 {
		if h := f.held[id]; h != nil {
			return h, nil
		}
	}
	var hold *cuda.GraphHold
	if err == nil {
		hold, err = s.HoldCapture()
	}
	if errors.Is(err, cuda.ErrNotSupported) {
		// A driver before CUDA 11.3: FIFOs stay until Close.
		f.noHold = true
		if l.Log != nil {
			l.Log.Debug("captured work FIFOs are kept until the communicator is destroyed: the driver has no CUDA user objects", config.SubsysGraph.Attr(), "err", err)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("enqueue: captured work FIFO: holding the capture's graph: %w", err)
	}
	if f.held == nil {
		f.held = map[uint64]*heldFIFOs{}
	}
	h := &heldFIFOs{hold: hold}
	f.held[hold.CaptureID()] = h
	return h, nil
}

// reapCaptured takes the chunks of the captures whose graphs are gone
// back into the spare pool. l.mu is held.
func (l *Launcher) reapCaptured() {
	f := &l.captured
	for id, h := range f.held {
		if !h.hold.Released() {
			continue
		}
		h.release(f)
		h.hold.Drop()
		delete(f.held, id)
	}
}

// CapturedBytes returns how many bytes of device memory hold the work
// FIFOs of captured launches whose graphs may still run: those of graphs
// found destroyed (at the next captured launch's upload) no longer count,
// though their chunks stay allocated for later captures until Close.
func (l *Launcher) CapturedBytes() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.captured.bytes
}

// closeCaptured frees every captured FIFO, whether its graph is gone or
// not, and the spare chunks, and drops the holds (a hold whose graph lives is freed with the
// graph). l.mu is held.
func (l *Launcher) closeCaptured() error {
	f := &l.captured
	var errs []error
	for _, h := range f.held {
		errs = append(errs, h.free(l.ctx))
		h.hold.Drop()
	}
	errs = append(errs, f.kept.free(l.ctx))
	for _, ps := range f.spare {
		for _, p := range ps {
			errs = append(errs, l.ctx.MemFree(p))
		}
	}
	if f.upload != nil {
		errs = append(errs, f.upload.Destroy())
	}
	*f = capturedFIFOs{}
	return errors.Join(errs...)
}
