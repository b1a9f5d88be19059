package net

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	gonet "net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// The data path of a socket comm: once the hellos are done, the sockets
// are driven by non-blocking system calls on their descriptors.
//
//   - The control socket carries each message's header and, for a message
//     of at most the connection's inline bound (SocketOptions.Inline), its
//     payload right behind it (one writev).
//     It is driven by the caller's thread (the proxy's) inside Isend,
//     Irecv and Test: a small message costs one writev on one side and,
//     often shared with the messages around it, one read on the other.
//   - Longer messages go in chunks (a 16-byte chunk header, then the bytes,
//     received straight into the posted buffer) over the data sockets,
//     chunk i of message m on socket (m+i) mod the sockets. Each of
//     NThreads helper goroutines owns NSocksPerThread data sockets; it
//     works while it has chunks and its sockets make progress. With no
//     chunk it parks on its queue (a channel). With a chunk whose socket
//     is not ready it parks in Go's network poller on that socket (the
//     default, SocketOptions.Wait, one socket per helper), which gives
//     its P back, or else sleeps in ppoll(2) on its sockets and a wake
//     pipe. The control socket stays out of the poller: the proxy's
//     thread reads it without a wakeup.

// ctrlBufSize is the receiver's buffer for the control socket: headers and
// inline payloads, read as much as comes at once.
const ctrlBufSize = 256 << 10

// helperPoll bounds a helper's sleep (it is woken earlier by its sockets
// and its pipe; the bound only limits what a lost wakeup could cost).
const helperPoll = 100 * time.Millisecond

// maxIov is the most iovecs one writev gets.
const maxIov = 64

// comm is what both sides share: sockets, helper goroutines, the first
// error.
type comm struct {
	peer   string
	ctrlFD int   // the control socket, out of Go's poller (detach)
	dataFD []int // the data sockets, likewise
	ndata  int
	chunk  int // the smallest piece of a message on one data socket
	inline int // the largest message that goes on the control socket
	// poller: the data sockets stay in Go's network poller (dataConn,
	// dataRC) and a helper waits on its socket there, which gives its P
	// back, rather than in ppoll (SocketOptions.Wait).
	poller   bool
	dataConn []*gonet.TCPConn
	dataRC   []syscall.RawConn
	nThreads int
	helpers  []*helper
	wg       sync.WaitGroup // the helpers
	closed   atomic.Bool
	failed   atomic.Bool
	mu       sync.Mutex // err
	err      error
	inflight atomic.Int32

	// Splicing (splice.go), the sending side's: a pipe per data socket
	// (nil when the comm does not splice), splice whether it still does
	// (a failure turns it off), spliced the bytes it moved so.
	pipes   [][2]int
	splice  atomic.Bool
	spliced atomic.Uint64
	spErr   atomic.Pointer[error] // why splicing was turned off

	// The helpers' system calls on the data sockets (SocketStats).
	dataWrites, dataReads, dataEmpty atomic.Uint64

	// pmu serializes the control socket's progress and the queues below;
	// Close takes it too.
	pmu      sync.Mutex
	stats    SocketStats
	seq      uint32 // the next message's number
	sendSide *sendComm
	recvSide *recvComm
}

// request is a message being sent or received: its control part and its
// chunks.
type request struct {
	c       *comm
	pending atomic.Int32 // parts not done yet
	ctrl    atomic.Bool  // the control part is done: only helpers can move it on
	size    int          // set before the control part is done
}

// Test implements Request.
func (r *request) Test() (bool, int, error) {
	for try := 0; ; try++ {
		// Completion first: a part that fails records the failure before it
		// counts as done, so a request seen complete here cannot hide it.
		done := r.pending.Load() == 0
		if err := r.c.failure(); err != nil {
			return false, 0, err
		}
		if done {
			return true, r.size, nil
		}
		if try > 0 || r.ctrl.Load() {
			// The control socket no longer concerns r: a read there would
			// be a system call for nothing.
			return false, 0, nil
		}
		r.c.progress()
	}
}

// ctrlDone completes r's control part.
func (r *request) ctrlDone() {
	r.ctrl.Store(true)
	r.finish()
}

func (r *request) finish() {
	if r.pending.Add(-1) == 0 {
		r.c.inflight.Add(-1)
	}
}

func (c *comm) failure() error {
	if c.closed.Load() {
		return ErrClosed
	}
	if !c.failed.Load() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fail records the comm's first error and shuts its sockets down, which
// wakes every helper: the comm is dead.
func (c *comm) fail(op string, err error) {
	if c.closed.Load() {
		return
	}
	c.mu.Lock()
	first := c.err == nil
	if first {
		c.err = &PeerError{Peer: c.peer, Op: op, Err: err}
		c.failed.Store(true)
	}
	c.mu.Unlock()
	if first {
		c.shutdown()
	}
}

func (c *comm) shutdown() {
	_ = syscall.Shutdown(c.ctrlFD, syscall.SHUT_RDWR)
	for _, fd := range c.dataFD {
		_ = syscall.Shutdown(fd, syscall.SHUT_RDWR)
	}
	for _, h := range c.helpers {
		h.wake()
	}
}

// detach takes c's socket out of Go's network poller: it returns a
// duplicate of c's descriptor (close-on-exec, non-blocking) and closes c,
// which removes the original from the poller's epoll set. A descriptor
// left in that set costs every message that arrives on it a wakeup of the
// thread parked in epoll_wait (when one is): work that loopback delivery
// does inside the sender's system call. The caller owns the descriptor.
func detach(c *gonet.TCPConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	if err := rc.Control(func(f uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, f, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			derr = e
			return
		}
		fd = int(r)
	}); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, fmt.Errorf("duplicating the socket's descriptor: %w", derr)
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	if err := c.Close(); err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

// keep is detach's counterpart for a data socket that stays in Go's
// poller: it records the conn and returns its descriptor.
func (c *comm) keep(s *gonet.TCPConn) (int, error) {
	rc, fd, err := rawConn(s)
	if err != nil {
		return -1, err
	}
	c.dataConn, c.dataRC = append(c.dataConn, s), append(c.dataRC, rc)
	return fd, nil
}

// rawConn returns s's raw connection and its descriptor, which stays in
// Go's poller and s's to close.
func rawConn(s *gonet.TCPConn) (syscall.RawConn, int, error) {
	rc, err := s.SyscallConn()
	if err != nil {
		return nil, -1, err
	}
	fd := -1
	if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
		return nil, -1, err
	}
	return rc, fd, nil
}

// newComm takes over ctrl and data: on success their descriptors are the
// comm's, out of Go's poller (detach); on failure the caller still closes
// them.
func newComm(peer string, ctrl *gonet.TCPConn, data []*gonet.TCPConn, nThreads, bufSize, chunk, inline int, send, splice, poller bool) (*comm, error) {
	c := &comm{peer: peer, nThreads: nThreads, ndata: len(data), chunk: chunk, inline: inline, ctrlFD: -1}
	// Waiting in the poller needs one socket per helper: a goroutine
	// parks on one descriptor's readiness.
	c.poller = poller && len(data) == nThreads
	if send && splice && len(data) > 0 {
		c.openPipes(len(data))
	}
	for i, s := range data {
		_ = s.SetNoDelay(true)
		if bufSize > 0 {
			var err error
			if send {
				err = s.SetWriteBuffer(bufSize)
			} else {
				err = s.SetReadBuffer(bufSize)
			}
			if err != nil {
				return nil, fmt.Errorf("net: data socket %d to %s: a %d-byte buffer: %w", i, peer, bufSize, err)
			}
		}
	}
	_ = ctrl.SetNoDelay(true)
	per := len(data) / nThreads
	for t := range nThreads {
		h := &helper{c: c, send: send, q: make(chan task, MaxRequests*per), wakeR: -1, wakeW: -1}
		for s := t * per; s < (t+1)*per; s++ {
			h.socks = append(h.socks, s)
		}
		var p [2]int
		if err := syscall.Pipe2(p[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
			c.closeHelpers()
			c.closePipes()
			return nil, fmt.Errorf("net: a wake pipe for a socket thread: %w", err)
		}
		h.wakeR, h.wakeW = p[0], p[1]
		c.helpers = append(c.helpers, h)
	}
	// The descriptors last: once one is detached its conn is closed.
	fds := make([]int, 0, 1+len(data))
	for i, s := range append([]*gonet.TCPConn{ctrl}, data...) {
		detachOrRaw := detach
		if c.poller && i > 0 {
			detachOrRaw = c.keep
		}
		fd, err := detachOrRaw(s)
		if err != nil {
			for k, fd := range fds {
				if k == 0 || !c.poller {
					_ = syscall.Close(fd)
				}
			}
			for _, dc := range c.dataConn {
				_ = dc.Close()
			}
			c.closeHelpers()
			c.closePipes()
			return nil, fmt.Errorf("net: socket %d (0: control) to %s: %w", i, peer, err)
		}
		fds = append(fds, fd)
	}
	c.ctrlFD, c.dataFD = fds[0], fds[1:]
	c.wg.Add(len(c.helpers))
	for _, h := range c.helpers {
		go h.run()
	}
	return c, nil
}

// chunks splits a message of n bytes over the data sockets: at least
// c.chunk each (but one), as evenly as that allows.
func (c *comm) chunks(n int) (size, count int) {
	if n == 0 {
		return 0, 0
	}
	size = max(c.chunk, (n+c.ndata-1)/c.ndata)
	return size, (n + size - 1) / size
}

// openPipes gives each of n data sockets a pipe to splice through, or
// none when a pipe cannot be had (the comm then writes).
func (c *comm) openPipes(n int) {
	want := pipeCap()
	c.pipes = make([][2]int, 0, n)
	for range n {
		r, w, err := newPipe(want)
		if err != nil {
			c.closePipes()
			c.setSpliceOff(fmt.Errorf("a pipe: %w", err))
			return
		}
		c.pipes = append(c.pipes, [2]int{r, w})
	}
	c.splice.Store(true)
}

func (c *comm) closePipes() {
	for _, p := range c.pipes {
		_ = syscall.Close(p[0])
		_ = syscall.Close(p[1])
	}
	c.pipes = nil
}

// setSpliceOff turns splicing off for good, remembering why.
func (c *comm) setSpliceOff(err error) {
	c.spErr.CompareAndSwap(nil, &err)
	c.splice.Store(false)
}

// SpliceError is why the comm stopped splicing (or could not start); nil
// when it splices or was not asked to.
func (c *comm) SpliceError() error {
	if p := c.spErr.Load(); p != nil {
		return *p
	}
	return nil
}

// postChunks hands message seq's chunks of buf to the helpers (spliced
// when splice says buf may be, splice.go). pmu is held.
func (c *comm) postChunks(seq uint32, buf []byte, r *request, splice bool) {
	size, count := c.chunks(len(buf))
	r.pending.Add(int32(count))
	per := c.ndata / c.nThreads
	for i := range count {
		s := (int(seq) + i) % c.ndata
		c.helpers[s/per].post(task{sock: s, seq: seq, buf: buf[i*size : min(len(buf), (i+1)*size)], req: r, splice: splice})
	}
}

// close stops the helpers, failing what they still hold, and closes the
// sockets.
func (c *comm) close() error {
	c.pmu.Lock()
	if c.closed.Load() {
		c.pmu.Unlock()
		return nil
	}
	c.closed.Store(true)
	for _, h := range c.helpers {
		close(h.q)
	}
	c.pmu.Unlock()
	c.shutdown()
	c.wg.Wait()
	c.closeHelpers()
	c.closePipes()
	var errs []error
	errs = append(errs, syscall.Close(c.ctrlFD))
	if c.poller {
		for _, dc := range c.dataConn {
			errs = append(errs, dc.Close())
		}
	} else {
		for _, fd := range c.dataFD {
			errs = append(errs, syscall.Close(fd))
		}
	}
	return errors.Join(errs...)
}

func (c *comm) closeHelpers() {
	for _, h := range c.helpers {
		for _, fd := range []*int{&h.wakeR, &h.wakeW} {
			if *fd >= 0 {
				_ = syscall.Close(*fd)
				*fd = -1
			}
		}
	}
}

func (c *comm) Peer() string { return c.peer }

// SocketStats counts the system calls on a socket comm's control socket,
// which the caller's thread makes, and the helpers' on the data sockets.
type SocketStats struct {
	Writes     uint64 // writev calls (the sending side)
	Reads      uint64 // read calls (the receiving side)
	EmptyReads uint64 // reads that found nothing
	// SplicedBytes are the message bytes the data sockets were given by
	// splice rather than writev (the sending side, splice.go).
	SplicedBytes uint64
	// The helpers' writev and read calls on the data sockets, and the
	// reads that found nothing.
	DataWrites, DataReads, DataEmptyReads uint64
}

// Stats returns the comm's counts so far.
func (c *comm) Stats() SocketStats {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	st := c.stats
	st.SplicedBytes = c.spliced.Load()
	st.DataWrites, st.DataReads, st.DataEmptyReads = c.dataWrites.Load(), c.dataReads.Load(), c.dataEmpty.Load()
	return st
}

// progress advances the control socket: the sender's or the receiver's.
func (c *comm) progress() {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if c.closed.Load() || c.failed.Load() {
		return
	}
	if c.sendSide != nil {
		c.sendSide.progress()
	} else if c.recvSide != nil {
		c.recvSide.progress()
	}
}

// socketMem is the socket backend's registration: the kernel needs none;
// it marks buffers that a sending comm may splice (splice.go).
type socketMem struct{ c *comm }

func (c *comm) RegMr(buf []byte, t PtrType) (MemHandle, error) {
	if t != PtrHost {
		return nil, fmt.Errorf("net: socket connection to %s registering memory of type %d: only host memory (%d) is supported", c.peer, t, PtrHost)
	}
	return &socketMem{c: c}, nil
}

// registered reports whether mh is one of c's registrations.
func (c *comm) registered(mh MemHandle) bool {
	m, ok := mh.(*socketMem)
	return ok && m.c == c
}

func (c *comm) DeregMr(MemHandle) error { return nil }

// ---- non-blocking system calls ----

// errAgain reports a call that would block.
func errAgain(err error) bool { return err == syscall.EAGAIN || err == syscall.EWOULDBLOCK }

// settle turns a non-blocking system call's result into the wrappers'
// convention: n, nil on success; 0, nil when the call would block; 0, the
// error otherwise. again reports EINTR: the caller repeats the call.
func settle(n uintptr, e syscall.Errno) (_ int, _ error, again bool) {
	switch {
	case e == 0:
		return int(n), nil, false
	case e == syscall.EINTR:
		return 0, nil, true
	case errAgain(e):
		return 0, nil, false
	}
	return 0, e, false
}

// writev writes bufs to fd without blocking; 0, nil when it would block.
func writev(fd int, iov []syscall.Iovec) (int, error) {
	for {
		r, _, e := syscall.Syscall(syscall.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
		if n, err, again := settle(r, e); !again {
			return n, err
		}
	}
}

// read reads into p without blocking: 0, nil when it would block;
// io.EOF when the peer closed.
func read(fd int, p []byte) (int, error) {
	for {
		n, err := syscall.Read(fd, p)
		switch {
		case err == nil && n == 0 && len(p) > 0:
			return 0, io.EOF
		case err == nil:
			return n, nil
		case err == syscall.EINTR:
			continue
		case errAgain(err):
			return 0, nil
		}
		return 0, err
	}
}

type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

const (
	pollIn  = 0x1
	pollOut = 0x4
)

// ppoll waits until one of fds is ready or d passed; it reports whether
// one is (the fds' revents say which).
func ppoll(fds []pollFd, d time.Duration) bool {
	for i := range fds {
		fds[i].revents = 0
	}
	ts := syscall.NsecToTimespec(int64(d))
	n, _, e := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)), uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	return e == 0 && n > 0
}

func iovec(b []byte) syscall.Iovec {
	v := syscall.Iovec{Base: &b[0]}
	v.SetLen(len(b))
	return v
}

// ---- helpers ----

// task is one chunk of a message on one data socket.
type task struct {
	sock int
	seq  uint32
	buf  []byte
	req  *request
	// splice: the buffer was registered (RegMr), so the chunk may be
	// spliced (splice.go).
	splice bool
}

// helper moves the chunks of its data sockets.
type helper struct {
	c            *comm
	send         bool
	socks        []int
	q            chan task
	sleeping     atomic.Bool
	wakeR, wakeW int
}

func (h *helper) post(t task) {
	h.q <- t
	if h.sleeping.Load() {
		h.wake()
	}
}

func (h *helper) wake() {
	if h.wakeW >= 0 {
		_, _ = syscall.Write(h.wakeW, []byte{1})
	}
}

// chunkState is a data socket's chunk in progress.
type chunkState struct {
	queue   []task
	hdr     [chunkSize]byte
	hdrDone int
	done    int
	inPipe  int // bytes after done in the socket's pipe (spliced chunks)
	// blocked: the socket's last read or write moved less than it asked,
	// so the next would find it empty (or full); the helper waits in
	// ppoll for it rather than try again.
	blocked bool
}

func (h *helper) run() {
	defer h.c.wg.Done()
	c := h.c
	st := make([]chunkState, len(h.socks))
	local := make(map[int]int, len(h.socks))
	for i, s := range h.socks {
		local[s] = i
	}
	fds := make([]pollFd, 0, len(h.socks)+1)
	idx := make([]int, len(h.socks)+1) // fds[k]'s socket in st
	var drain [64]byte
	add := func(t task) {
		s := &st[local[t.sock]]
		s.queue = append(s.queue, t)
	}
	// dropAll finishes every chunk held: the comm failed or closed.
	dropAll := func() {
		for i := range st {
			for _, t := range st[i].queue {
				t.req.finish()
			}
			st[i] = chunkState{}
		}
	}
	open := true
	for {
		// New chunks.
	take:
		for open {
			select {
			case t, ok := <-h.q:
				if !ok {
					open = false
					break take
				}
				add(t)
			default:
				break take
			}
		}
		if !open || c.failed.Load() {
			dropAll()
			if !open {
				return
			}
		}
		busy, waiting := false, false
		for i := range st {
			s := &st[i]
			if s.blocked && len(s.queue) > 0 {
				// Its last call moved less than it asked: the socket was
				// drained (or full) then; ppoll says when that changes.
				waiting = true
				continue
			}
			s.blocked = false
			for len(s.queue) > 0 {
				adv, blocked, err := h.advance(s, h.socks[i])
				if err != nil {
					c.fail(fmt.Sprintf("%s message %d on socket %d", map[bool]string{true: "sending", false: "receiving"}[h.send], s.queue[0].seq, h.socks[i]), err)
					break
				}
				if adv {
					busy = true
				}
				if blocked || !adv {
					s.blocked = blocked
					waiting = true
					break
				}
			}
		}
		if busy {
			continue
		}
		if !waiting && c.failed.Load() && slices.ContainsFunc(st, func(s chunkState) bool { return len(s.queue) > 0 }) {
			continue // drop what is held (above) before parking
		}
		if !waiting {
			// Nothing on a socket: park on the queue, which gives the
			// goroutine's P back. A helper asleep in a system call keeps
			// its P until sysmon takes it (up to 10 ms when the process
			// has been quiet), so with helpers idle in ppoll a process of
			// few Ps left its runnable goroutines, the proxy among them,
			// waiting for milliseconds (BenchmarkSocketPingPong: a chunked
			// 32 KiB round trip 2.0–2.3 ms on 2 CPUs, 84–121 µs parked).
			t, ok := <-h.q
			if !ok {
				open = false
			} else {
				add(t)
			}
			continue
		}
		if c.poller {
			// One socket (newComm): park until it is ready. Close and
			// fail shut the socket down, which makes it ready.
			h.waitPoller()
			st[0].blocked = false
			continue
		}
		// Sleep on the sockets that wait and the wake pipe.
		h.sleeping.Store(true)
		select {
		case t, ok := <-h.q:
			h.sleeping.Store(false)
			if !ok {
				open = false
			} else {
				add(t)
			}
			continue
		default:
		}
		fds = append(fds[:0], pollFd{fd: int32(h.wakeR), events: pollIn})
		if waiting {
			ev := int16(pollIn)
			if h.send {
				ev = pollOut
			}
			for i := range st {
				if len(st[i].queue) > 0 {
					fds = append(fds, pollFd{fd: int32(c.dataFD[h.socks[i]]), events: ev})
					idx[len(fds)-1] = i
				}
			}
		}
		if !ppoll(fds, helperPoll) {
			// Timed out (or failed): look at every socket again.
			for i := range st {
				st[i].blocked = false
			}
		}
		for k := 1; k < len(fds); k++ {
			if fds[k].revents != 0 {
				st[idx[k]].blocked = false
			}
		}
		h.sleeping.Store(false)
		for {
			if n, _ := syscall.Read(h.wakeR, drain[:]); n <= 0 {
				break
			}
		}
	}
}

// waitPoller parks until the helper's one data socket is readable (a
// receiving helper) or writable (a sending one), through Go's poller, or
// until helperPoll has passed (as ppoll's wait is bounded: a lost wakeup
// costs at most that).
func (h *helper) waitPoller() {
	rc := h.c.dataRC[h.socks[0]]
	conn := h.c.dataConn[h.socks[0]]
	deadline := time.Now().Add(helperPoll)
	ev := int16(pollIn)
	if h.send {
		ev = pollOut
	}
	// The poller forgets an edge that came before the wait began (the
	// raw conn resets it), so each call looks at the socket itself: a
	// zero-timeout ppoll, true when it is ready or shut down.
	fds := []pollFd{{events: ev}}
	ready := func(fd uintptr) bool {
		fds[0].fd = int32(fd)
		ppoll(fds, 0)
		return fds[0].revents != 0
	}
	if h.send {
		_ = conn.SetWriteDeadline(deadline)
		_ = rc.Write(ready)
	} else {
		_ = conn.SetReadDeadline(deadline)
		_ = rc.Read(ready)
	}
}

// advance moves the chunk at the head of s's queue on socket sock as far
// as the socket allows; it reports whether anything moved (and pops the
// chunk when it is done), and whether the socket moved less than was
// asked of it (blocked: a read or write now would find it drained or
// full).
func (h *helper) advance(s *chunkState, sock int) (moved, blocked bool, err error) {
	if t := s.queue[0]; s.hdrDone == 0 && s.done == 0 && h.send {
		binary.LittleEndian.PutUint32(s.hdr[0:], chunkMagic)
		binary.LittleEndian.PutUint32(s.hdr[4:], t.seq)
		binary.LittleEndian.PutUint64(s.hdr[8:], uint64(len(t.buf)))
	}
	if h.send && s.queue[0].splice && h.c.pipes != nil && (s.inPipe > 0 || h.c.splice.Load()) {
		moved, err = h.advanceSplice(s, sock)
		return moved, false, err
	}
	return h.advanceCopy(s, sock)
}

// advanceCopy is advance by writev and read.
func (h *helper) advanceCopy(s *chunkState, sock int) (moved, blocked bool, err error) {
	t := s.queue[0]
	fd := h.c.dataFD[sock]
	var n, asked int
	c := h.c
	if h.send {
		// The chunk's header and bytes in one writev.
		iov := make([]syscall.Iovec, 0, 2)
		if s.hdrDone < chunkSize {
			iov = append(iov, iovec(s.hdr[s.hdrDone:]))
		}
		if s.done < len(t.buf) {
			iov = append(iov, iovec(t.buf[s.done:]))
		}
		asked = chunkSize - s.hdrDone + len(t.buf) - s.done
		n, err = writev(fd, iov)
		c.dataWrites.Add(1)
		if err != nil {
			return false, false, err
		}
		h1 := min(n, chunkSize-s.hdrDone)
		s.hdrDone += h1
		s.done += n - h1
	} else if s.hdrDone < chunkSize {
		// The header alone first: nothing lands in the buffer before the
		// header is checked.
		asked = chunkSize - s.hdrDone
		n, err = read(fd, s.hdr[s.hdrDone:])
		c.countRead(n)
		if err != nil {
			return false, false, vanished(err)
		}
		if s.hdrDone += n; s.hdrDone == chunkSize {
			if err := checkChunk(s.hdr[:], t); err != nil {
				return false, false, err
			}
		}
	} else {
		asked = len(t.buf) - s.done
		n, err = read(fd, t.buf[s.done:])
		c.countRead(n)
		if err != nil {
			return false, false, vanished(err)
		}
		s.done += n
	}
	blocked = n < asked
	if s.hdrDone == chunkSize && s.done == len(t.buf) {
		t.req.finish()
		s.queue = s.queue[1:]
		s.hdrDone, s.done = 0, 0
		return true, blocked, nil
	}
	return n > 0, blocked, nil
}

// countRead counts a data socket read of n bytes.
func (c *comm) countRead(n int) {
	c.dataReads.Add(1)
	if n == 0 {
		c.dataEmpty.Add(1)
	}
}

// advanceSplice is advance for a chunk that is spliced: the header by
// send(MSG_MORE), the bytes through the socket's pipe (splice.go). A
// splice failure turns splicing off and leaves the rest to advance.
func (h *helper) advanceSplice(s *chunkState, sock int) (bool, error) {
	t := s.queue[0]
	c := h.c
	fd, pr, pw := c.dataFD[sock], c.pipes[sock][0], c.pipes[sock][1]
	moved := false
	if s.hdrDone < chunkSize {
		n, err := sendMore(fd, s.hdr[s.hdrDone:])
		if err != nil {
			return false, vanished(err)
		}
		s.hdrDone += n
		if s.hdrDone < chunkSize {
			return n > 0, nil
		}
		moved = true
	}
	for s.done < len(t.buf) {
		if fill := s.done + s.inPipe; fill < len(t.buf) && c.splice.Load() {
			n, err := vmspliceFn(pw, t.buf[fill:])
			if err != nil {
				c.setSpliceOff(fmt.Errorf("vmsplice of %d bytes: %w", len(t.buf)-fill, err))
			}
			s.inPipe += n
		}
		if s.inPipe == 0 {
			if c.splice.Load() {
				return moved, nil
			}
			// Splicing is off and the pipe is empty: the rest is writev's.
			adv, _, err := h.advanceCopy(s, sock)
			return moved || adv, err
		}
		more := s.done+s.inPipe < len(t.buf) || len(s.queue) > 1
		n, err := spliceFn(pr, fd, s.inPipe, more)
		if err != nil {
			if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || c.failed.Load() {
				return moved, vanished(err)
			}
			// The pipe holds references to t.buf[done:done+inPipe]:
			// dropped, those bytes go by writev.
			c.setSpliceOff(fmt.Errorf("splice of %d bytes into a socket: %w", s.inPipe, err))
			drainPipe(pr)
			s.inPipe = 0
			adv, _, err := h.advanceCopy(s, sock)
			return moved || adv, err
		}
		if n == 0 {
			return moved, nil
		}
		s.done += n
		s.inPipe -= n
		c.spliced.Add(uint64(n))
		moved = true
	}
	t.req.finish()
	s.queue = s.queue[1:]
	s.hdrDone, s.done = 0, 0
	return true, nil
}

func checkChunk(hdr []byte, t task) error {
	magic, seq, n := binary.LittleEndian.Uint32(hdr), binary.LittleEndian.Uint32(hdr[4:]), binary.LittleEndian.Uint64(hdr[8:])
	switch {
	case magic != chunkMagic:
		return fmt.Errorf("chunk magic %#x, want %#x (garbage on the connection)", magic, chunkMagic)
	case seq != t.seq:
		return fmt.Errorf("a chunk of message %d where message %d's was due", seq, t.seq)
	case n != uint64(len(t.buf)):
		return fmt.Errorf("a chunk of %d bytes where %d were due", n, len(t.buf))
	}
	return nil
}

// vanished names a connection that the peer closed. A peer that
// destroys its communicator says goodbye above this layer before it
// closes, so a closed connection here means its process went away.
func vanished(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("the peer closed the connection: its process exited without destroying the communicator, or was killed: %w", err)
	}
	return err
}

// ---- the sending side ----

type sendComm struct {
	*comm
	sendQ []ctrlOut // headers (and inline payloads) not fully written
	iov   []syscall.Iovec
}

// ctrlOut is a message's header and inline payload on the control socket.
type ctrlOut struct {
	hdr     [msgSize]byte
	payload []byte // inline; nil when the message goes in chunks
	off     int    // bytes of hdr+payload written
	req     *request
}

func newSendComm(peer string, ctrl *gonet.TCPConn, data []*gonet.TCPConn, nThreads, bufSize, chunk, inline int, splice, poller bool) (*sendComm, error) {
	c, err := newComm(peer, ctrl, data, nThreads, bufSize, chunk, inline, true, splice, poller)
	if err != nil {
		return nil, err
	}
	s := &sendComm{comm: c, iov: make([]syscall.Iovec, 0, maxIov)}
	c.sendSide = s
	return s, nil
}

// Isend implements SendComm: the message's header (and payload, if small)
// is written right away when the socket takes it.
func (s *sendComm) Isend(buf []byte, tag int, mh MemHandle) (Request, error) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if err := s.failure(); err != nil {
		return nil, err
	}
	if s.inflight.Load() >= MaxRequests {
		return nil, nil
	}
	s.inflight.Add(1)
	seq := s.seq
	s.seq++
	r := &request{c: s.comm, size: len(buf)}
	r.pending.Store(1)
	o := ctrlOut{req: r}
	binary.LittleEndian.PutUint32(o.hdr[0:], msgMagic)
	binary.LittleEndian.PutUint32(o.hdr[4:], uint32(int32(tag)))
	binary.LittleEndian.PutUint64(o.hdr[8:], uint64(len(buf)))
	if len(buf) <= s.inline {
		o.payload = buf
	} else {
		s.postChunks(seq, buf, r, s.pipes != nil && s.registered(mh))
	}
	s.sendQ = append(s.sendQ, o)
	s.progress()
	return r, nil
}

// progress writes the queued headers and inline payloads, as many as one
// writev takes. pmu is held.
func (s *sendComm) progress() {
	for len(s.sendQ) > 0 {
		iov := s.iov[:0]
		for i := range s.sendQ {
			if len(iov)+2 > maxIov {
				break
			}
			o := &s.sendQ[i]
			off := o.off
			if off < msgSize {
				iov = append(iov, iovec(o.hdr[off:]))
				off = msgSize
			}
			if p := off - msgSize; p < len(o.payload) {
				iov = append(iov, iovec(o.payload[p:]))
			}
		}
		n, err := writev(s.ctrlFD, iov)
		s.stats.Writes++
		if err != nil {
			s.fail("sending a message header", vanished(err))
			return
		}
		if n == 0 {
			return
		}
		for n > 0 {
			o := &s.sendQ[0]
			k := min(n, msgSize+len(o.payload)-o.off)
			o.off += k
			n -= k
			if o.off == msgSize+len(o.payload) {
				o.req.ctrlDone()
				s.sendQ[0] = ctrlOut{}
				s.sendQ = s.sendQ[1:]
			}
		}
	}
}

// Close implements SendComm.
func (s *sendComm) Close() error { return s.close() }

// ---- the receiving side ----

type recvComm struct {
	*comm
	posted []posted // not matched with a header yet
	buf    []byte   // the control socket's bytes read ahead
	lo, hi int
}

type posted struct {
	buf []byte
	tag int
	req *request
}

func newRecvComm(g *pendingComm, bufSize int, poller bool) (*recvComm, error) {
	c, err := newComm(g.ctrl.RemoteAddr().String(), g.ctrl, g.data, g.nThreads, bufSize, g.chunk, g.inline, false, false, poller)
	if err != nil {
		return nil, err
	}
	r := &recvComm{comm: c, buf: make([]byte, ctrlBufSize)}
	c.recvSide = r
	return r, nil
}

// Irecv implements RecvComm.
func (r *recvComm) Irecv(buf []byte, tag int, _ MemHandle) (Request, error) {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	if err := r.failure(); err != nil {
		return nil, err
	}
	if r.inflight.Load() >= MaxRequests {
		return nil, nil
	}
	r.inflight.Add(1)
	req := &request{c: r.comm}
	req.pending.Store(1)
	// No read here: the caller tests the request next, and that reads.
	r.posted = append(r.posted, posted{buf: buf, tag: tag, req: req})
	return req, nil
}

// progress matches the posted receives with the headers on the control
// socket, reading it as long as a posted receive needs bytes. pmu is held.
func (r *recvComm) progress() {
	for len(r.posted) > 0 {
		p := r.posted[0]
		if avail := r.hi - r.lo; avail >= msgSize {
			hdr := r.buf[r.lo : r.lo+msgSize]
			magic, tag, n := binary.LittleEndian.Uint32(hdr), int(int32(binary.LittleEndian.Uint32(hdr[4:]))), binary.LittleEndian.Uint64(hdr[8:])
			switch {
			case magic != msgMagic:
				r.fail("reading a message header", fmt.Errorf("magic %#x, want %#x (garbage on the connection)", magic, msgMagic))
				return
			case tag != p.tag:
				r.fail("matching a message", fmt.Errorf("message %d has tag %d where the posted receive has tag %d", r.seq, tag, p.tag))
				return
			case n > uint64(len(p.buf)):
				r.fail("matching a message", fmt.Errorf("message %d of %d bytes for a posted receive of %d bytes", r.seq, n, len(p.buf)))
				return
			}
			if n <= uint64(r.inline) {
				if avail >= msgSize+int(n) {
					copy(p.buf, r.buf[r.lo+msgSize:r.lo+msgSize+int(n)])
					r.lo += msgSize + int(n)
					r.matched(p, int(n))
					continue
				}
			} else {
				r.lo += msgSize
				p.req.size = int(n)
				r.postChunks(r.seq, p.buf[:n], p.req, false)
				r.matched(p, int(n))
				continue
			}
		}
		// More bytes are needed.
		if r.lo == r.hi {
			r.lo, r.hi = 0, 0
		} else if r.hi == len(r.buf) {
			r.hi = copy(r.buf, r.buf[r.lo:r.hi])
			r.lo = 0
		}
		n, err := read(r.ctrlFD, r.buf[r.hi:])
		r.stats.Reads++
		if err != nil {
			r.fail("reading a message header", vanished(err))
			return
		}
		if n == 0 {
			r.stats.EmptyReads++
			return
		}
		r.hi += n
	}
}

// matched completes p's control part. pmu is held.
func (r *recvComm) matched(p posted, n int) {
	p.req.size = n
	r.posted[0] = posted{}
	r.posted = r.posted[1:]
	r.seq++
	p.req.ctrlDone()
}

// Close implements RecvComm.
func (r *recvComm) Close() error { return r.close() }
