package ipc

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Reply codes of the server.
const (
	replyOK      = 0
	replyUnknown = 1
)

// Server hands out the descriptors registered with Add to the processes
// that Fetch them. It owns the registered descriptors and closes them in
// Close.
type Server struct {
	name    string
	secret  Secret
	ln      *net.UnixListener
	quit    chan struct{} // closed by Close: stops the accept loop's backoff
	pending pendingSet

	mu    sync.Mutex
	fds   map[uint64]int
	conns map[*net.UnixConn]struct{}
	done  bool

	wg sync.WaitGroup
}

// NewName returns a fresh abstract socket name for a server: a prefix, the
// process id and a random token, so that communicators and processes never
// collide.
func NewName(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("@%s-%d-%x", prefix, os.Getpid(), b)
}

// Listen starts a server at name ("@..." for the abstract namespace, or a
// file path).
func Listen(name string) (*Server, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("ipc: listening at %q: %w", name, err)
	}
	s := &Server{name: name, secret: newSecret(), ln: ln, quit: make(chan struct{}), fds: map[uint64]int{}, conns: map[*net.UnixConn]struct{}{}}
	s.wg.Go(s.accept)
	return s, nil
}

// Name is the socket's name (for messages; Fetch needs Addr).
func (s *Server) Name() string { return s.name }

// Addr is what Fetch needs to reach the server: its name and its secret.
// It is a credential: hand it to the other ranks over the bootstrap only.
func (s *Server) Addr() string { return formatAddr(s.name, s.secret) }

// Add registers fd under key; the server takes ownership of fd.
func (s *Server) Add(key uint64, fd int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return fmt.Errorf("ipc: server %q is closed", s.name)
	}
	if _, dup := s.fds[key]; dup {
		return fmt.Errorf("ipc: key %#x registered twice", key)
	}
	s.fds[key] = fd
	return nil
}

func (s *Server) accept() {
	acceptLoop(s.ln, s.quit, func(c *net.UnixConn) bool {
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			c.Close()
			return false
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.pending.add(c) // in accept order: the oldest stranger goes first
		s.wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			s.serve(c)
		})
		return true
	})
}

// handshakeTimeout bounds a handshake, and the silence of a connection
// between a Server's requests.
var handshakeTimeout = 10 * time.Second

// serve authenticates c (pending already), then answers its requests (one 8-byte key each)
// with a 1-byte code and, when known, the descriptor. A connection that
// stays silent for handshakeTimeout is closed.
func (s *Server) serve(c *net.UnixConn) {
	_, proof, err := acceptAuth(c, s.secret, 0, time.Now().Add(handshakeTimeout))
	s.pending.done(c)
	if err != nil {
		return
	}
	if _, err := c.Write(proof); err != nil {
		return
	}
	var req [8]byte
	for {
		_ = c.SetReadDeadline(time.Now().Add(handshakeTimeout))
		if _, err := io.ReadFull(c, req[:]); err != nil {
			return
		}
		key := binary.LittleEndian.Uint64(req[:])
		s.mu.Lock()
		fd, ok := s.fds[key]
		s.mu.Unlock()
		var err error
		if ok {
			_, _, err = c.WriteMsgUnix([]byte{replyOK}, syscall.UnixRights(fd), nil)
		} else {
			_, err = c.Write([]byte{replyUnknown})
		}
		if err != nil {
			return
		}
	}
}

// Close stops the server, waits for its goroutines and closes every
// registered descriptor.
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return nil
	}
	s.done = true
	close(s.quit)
	err := s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	var errs []error
	for k, fd := range s.fds {
		errs = append(errs, syscall.Close(fd))
		delete(s.fds, k)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return errors.Join(append(errs, err)...)
}

// ErrUnknownKey is returned by Fetch for a key the server does not hold.
var ErrUnknownKey = errors.New("ipc: the server holds no descriptor under that key")

// Fetch asks the server at addr (its Addr, exchanged over the bootstrap)
// for the descriptors under keys and returns them in order; the caller
// owns them. On error it returns none (the ones already received are
// closed). It gives up after handshakeTimeout (10 s) without an answer
// even if ctx has no deadline: a live server answers at once, also after
// a shortage of descriptors has delayed its accept.
func Fetch(ctx context.Context, addr string, keys ...uint64) (fds []int, err error) {
	name, secret, err := parseAddr(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, handshakeTimeout,
		fmt.Errorf("ipc: no answer from %q within %v: %w", name, handshakeTimeout, context.DeadlineExceeded))
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", name)
	if err != nil {
		return nil, fmt.Errorf("ipc: dialing %q: %w", name, err)
	}
	c := nc.(*net.UnixConn)
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	defer func() {
		if err != nil {
			for _, fd := range fds {
				_ = syscall.Close(fd)
			}
			fds = nil
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
			}
		}
	}()
	want, err := dialAuth(c, secret, nil)
	if err == nil {
		err = checkProof(c, want)
	}
	if err != nil {
		return nil, fmt.Errorf("ipc: authenticating with %q: %w", name, err)
	}
	oob := make([]byte, syscall.CmsgSpace(4))
	for _, k := range keys {
		var req [8]byte
		binary.LittleEndian.PutUint64(req[:], k)
		if _, err := c.Write(req[:]); err != nil {
			return fds, fmt.Errorf("ipc: asking %q for key %#x: %w", name, k, err)
		}
		var code [1]byte
		n, oobn, flags, _, err := c.ReadMsgUnix(code[:], oob)
		if err != nil {
			return fds, fmt.Errorf("ipc: reading %q's reply for key %#x: %w", name, k, err)
		}
		got, err := parseRights(oob[:oobn])
		if err != nil {
			return fds, fmt.Errorf("ipc: %q's reply for key %#x: %w", name, k, err)
		}
		if flags&syscall.MSG_CTRUNC != 0 {
			closeAll(got)
			return fds, fmt.Errorf("ipc: %q's reply for key %#x: the descriptor was dropped on arrival (is this process out of descriptors? RLIMIT_NOFILE)", name, k)
		}
		switch {
		case n != 1:
			closeAll(got)
			return fds, fmt.Errorf("ipc: %q closed the connection before answering key %#x", name, k)
		case code[0] == replyUnknown:
			closeAll(got)
			return fds, fmt.Errorf("ipc: %q, key %#x: %w", name, k, ErrUnknownKey)
		case code[0] != replyOK || len(got) != 1:
			closeAll(got)
			return fds, fmt.Errorf("ipc: %q answered key %#x with code %d and %d descriptors, want code 0 and 1", name, k, code[0], len(got))
		}
		fds = append(fds, got[0])
	}
	return fds, nil
}

func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		f, err := syscall.ParseUnixRights(&m)
		if err != nil {
			closeAll(fds)
			return nil, err
		}
		for _, fd := range f {
			syscall.CloseOnExec(fd)
		}
		fds = append(fds, f...)
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = syscall.Close(fd)
	}
}
