package net

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	gonet "net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/internal/envint"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
)

// Limits of the socket backend's settings (NCCL's).
const (
	MaxSocketThreads = 16 // NCCL_SOCKET_NTHREADS
	MaxSockets       = 64 // NCCL_SOCKET_NTHREADS × NCCL_NSOCKS_PERTHREAD
	maxInterfaces    = 16
	// MaxRequests is how many requests a comm holds at once
	// (NCCL_NET_MAX_REQUESTS); Isend and Irecv say "call again" beyond.
	MaxRequests = 32
	// DefaultChunk is the smallest piece of a message given to one data
	// socket (NCCLGO_SOCKET_CHUNK); MinChunk and MaxChunk bound it.
	DefaultChunk = 64 << 10
	MinChunk     = 4 << 10
	MaxChunk     = 64 << 20
	// DefaultInline is the largest message sent on the control socket
	// right after its header (NCCLGO_SOCKET_INLINE); longer ones go in
	// chunks over the data sockets. MaxInline bounds it (the receiver
	// holds a whole inline message in its control buffer).
	DefaultInline = 64 << 10
	MaxInline     = 128 << 10
	// DefaultHandshakeTimeout bounds a new connection's hello.
	DefaultHandshakeTimeout = 30 * time.Second
)

// SocketOptions configure the socket backend.
type SocketOptions struct {
	// Interface selects the devices with NCCL_SOCKET_IFNAME's grammar;
	// Family is "AF_INET", "AF_INET6" or "" (runtime/bootstrap's
	// SelectInterfaces resolves both, empty meaning the environment).
	Interface, Family string
	// NThreads (NCCL_SOCKET_NTHREADS) helper threads per comm move the
	// chunks of large messages, each over NSocksPerThread
	// (NCCL_NSOCKS_PERTHREAD) data sockets; 0 means 1, or over loopback
	// 4 threads of 1 socket each.
	NThreads, NSocksPerThread int
	// HandshakeTimeout bounds a new connection's hello; 0 means
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// BufSize (NCCLGO_SOCKET_BUFSIZE, bytes) is the data sockets' kernel
	// buffer: SO_SNDBUF on the sending side, SO_RCVBUF on the receiving
	// one (the kernel doubles it, and caps it at net.core.wmem_max and
	// rmem_max). 0 leaves the kernel's autotuning, which over loopback
	// grows them to tcp_wmem's and tcp_rmem's maximum.
	BufSize int
	// Splice (NCCLGO_SOCKET_SPLICE: SpliceOn "1", SpliceOff "0", empty
	// SpliceAuto) lets a sending comm splice the chunks of buffers
	// registered with its RegMr instead of copying them into the socket
	// (splice.go says what that asks of the caller); it falls back to
	// writev by itself where the kernel refuses.
	Splice string
	// Chunk (NCCLGO_SOCKET_CHUNK, bytes) is the smallest piece of a message
	// given to one data socket: a message of n bytes goes in
	// max(Chunk, n/sockets) pieces; 0 means DefaultChunk. A larger value
	// spreads whole messages over the sockets instead of every message
	// over all of them (fewer, longer system calls). The connecting side's
	// value holds for the connection (its hello carries it).
	Chunk int
	// Inline (NCCLGO_SOCKET_INLINE, bytes) is the largest message that
	// goes on the control socket behind its header, written and read by
	// the caller's thread (the proxy's) with no helper's wakeup on either
	// side; longer messages go in chunks through the helpers. 0 means
	// DefaultInline; at most MaxInline. The connecting side's value holds
	// for the connection (its hello carries it). A multiple of 1024.
	Inline int
	// Wait (NCCLGO_SOCKET_WAIT) is where a helper whose chunk waits on a
	// data socket sleeps: WaitPoller ("poller", the default, and "") in
	// Go's network poller, which gives the P back (the data sockets then
	// stay in the poller; one socket per thread only, else ppoll);
	// WaitPPoll ("ppoll") in ppoll(2) on its sockets, keeping its
	// goroutine's P meanwhile. On the H200 (16 cores, 2 fake hosts) the
	// poller took AllReduce at 16–128 MiB from 6.0–6.8 to 7.4–8.1 GB/s.
	Wait string
}

// The values of SocketOptions.Wait.
const (
	WaitPPoll  = "ppoll"
	WaitPoller = "poller"
)

// maxBufSize bounds NCCLGO_SOCKET_BUFSIZE.
const maxBufSize = 1 << 30

// SocketOptionsFromEnv reads NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD
// through getenv (the interfaces and the family are read when the backend
// starts).
func SocketOptionsFromEnv(getenv func(string) string) (SocketOptions, error) {
	var o SocketOptions
	for _, v := range []struct {
		name string
		dst  *int
		max  int
	}{{"NCCL_SOCKET_NTHREADS", &o.NThreads, MaxSocketThreads}, {"NCCL_NSOCKS_PERTHREAD", &o.NSocksPerThread, MaxSockets}} {
		n, ok, err := envint.Get(getenv, v.name, "an integer", 1, v.max)
		if err != nil {
			return o, fmt.Errorf("net: %w", err)
		}
		if ok {
			*v.dst = n
		}
	}
	if s := strings.TrimSpace(getenv("NCCLGO_SOCKET_BUFSIZE")); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > maxBufSize {
			return o, fmt.Errorf("net: NCCLGO_SOCKET_BUFSIZE=%q: want a byte count from 0 (the kernel's autotuning) to %d", s, maxBufSize)
		}
		o.BufSize = n
	}
	if s := strings.TrimSpace(getenv("NCCLGO_SOCKET_CHUNK")); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < MinChunk || n > MaxChunk || n%1024 != 0 {
			return o, fmt.Errorf("net: NCCLGO_SOCKET_CHUNK=%q: want a byte count from %d to %d, a multiple of 1024 (default %d)", s, MinChunk, MaxChunk, DefaultChunk)
		}
		o.Chunk = n
	}
	if s := strings.TrimSpace(getenv("NCCLGO_SOCKET_INLINE")); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > MaxInline || n%1024 != 0 {
			return o, fmt.Errorf("net: NCCLGO_SOCKET_INLINE=%q: want a byte count from 0 (the default, %d) to %d, a multiple of 1024", s, DefaultInline, MaxInline)
		}
		o.Inline = n
	}
	switch w := strings.TrimSpace(getenv("NCCLGO_SOCKET_WAIT")); w {
	case "", WaitPPoll, WaitPoller:
		o.Wait = w
	default:
		return o, fmt.Errorf("net: NCCLGO_SOCKET_WAIT=%q: want %q (the default) or %q", w, WaitPoller, WaitPPoll)
	}
	if s := getenv("NCCLGO_SOCKET_SPLICE"); s != "" {
		m, err := parseSplice(s)
		if err != nil {
			return o, fmt.Errorf("net: NCCLGO_SOCKET_SPLICE=%q: %w", s, err)
		}
		o.Splice = m
	}
	return o, o.check()
}

func (o SocketOptions) threads() (nThreads, perThread int) {
	return max(o.NThreads, 1), max(o.NSocksPerThread, 1)
}

// Defaults over loopback, where the sockets cost memory copies only and
// several threads move a message's chunks in parallel.
const (
	loopbackThreads   = 4
	loopbackPerThread = 1
)

// threadsFor is threads with the defaults of a loopback connection where
// the options leave them unset.
func (o SocketOptions) threadsFor(loopback bool) (nThreads, perThread int) {
	if !loopback {
		return o.threads()
	}
	nThreads, perThread = o.NThreads, o.NSocksPerThread
	if nThreads == 0 {
		nThreads = loopbackThreads
	}
	if perThread == 0 {
		perThread = loopbackPerThread
	}
	if nThreads*perThread > MaxSockets {
		perThread = MaxSockets / nThreads
	}
	return nThreads, perThread
}

func (o SocketOptions) check() error {
	t, s := o.threads()
	switch {
	case t > MaxSocketThreads:
		return fmt.Errorf("net: NCCL_SOCKET_NTHREADS=%d: want at most %d", t, MaxSocketThreads)
	case t*s > MaxSockets:
		return fmt.Errorf("net: NCCL_SOCKET_NTHREADS=%d × NCCL_NSOCKS_PERTHREAD=%d = %d sockets per connection: want at most %d", t, s, t*s, MaxSockets)
	}
	if _, err := parseSplice(o.Splice); err != nil {
		return fmt.Errorf("net: socket option Splice=%q: %w", o.Splice, err)
	}
	if o.Wait != "" && o.Wait != WaitPPoll && o.Wait != WaitPoller {
		return fmt.Errorf("net: socket option Wait=%q (NCCLGO_SOCKET_WAIT): want %q, %q or empty", o.Wait, WaitPPoll, WaitPoller)
	}
	if o.Inline < 0 || o.Inline > MaxInline || o.Inline%1024 != 0 {
		return fmt.Errorf("net: socket option Inline=%d (NCCLGO_SOCKET_INLINE): want 0 (%d) or a byte count up to %d, a multiple of 1024", o.Inline, DefaultInline, MaxInline)
	}
	if o.Chunk != 0 && (o.Chunk < MinChunk || o.Chunk > MaxChunk || o.Chunk%1024 != 0) {
		return fmt.Errorf("net: socket option Chunk=%d (NCCLGO_SOCKET_CHUNK): want 0 (%d) or a byte count from %d to %d, a multiple of 1024", o.Chunk, DefaultChunk, MinChunk, MaxChunk)
	}
	return nil
}

// inline is the option's inline bound, its default when unset.
func (o SocketOptions) inline() int {
	if o.Inline == 0 {
		return DefaultInline
	}
	return o.Inline
}

// chunk is the option's chunk size, its default when unset.
func (o SocketOptions) chunk() int {
	if o.Chunk == 0 {
		return DefaultChunk
	}
	return o.Chunk
}

// Socket is the socket backend: one device per selected interface; every
// connection is a control socket plus NThreads × NSocksPerThread data
// sockets, each message split across the data sockets.
type Socket struct {
	opts SocketOptions
	devs []bootstrap.Interface
}

var _ Net = (*Socket)(nil)

// NewSocket selects the interfaces and returns the backend.
func NewSocket(o SocketOptions) (*Socket, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	devs, err := bootstrap.SelectInterfaces(o.Interface, o.Family, maxInterfaces)
	if err != nil {
		return nil, fmt.Errorf("net: socket devices: %w", err)
	}
	return &Socket{opts: o, devs: devs}, nil
}

// Name implements Net.
func (s *Socket) Name() string { return "Socket" }

// Devices implements Net.
func (s *Socket) Devices() int { return len(s.devs) }

func (s *Socket) dev(d int) (bootstrap.Interface, error) {
	if d < 0 || d >= len(s.devs) {
		return bootstrap.Interface{}, fmt.Errorf("net: socket device %d: want 0..%d", d, len(s.devs)-1)
	}
	return s.devs[d], nil
}

// Properties implements Net: the speed is the interface's
// (/sys/class/net/NAME/speed, 10 Gbit/s where unknown, as in NCCL).
func (s *Socket) Properties(d int) (Properties, error) {
	ifc, err := s.dev(d)
	if err != nil {
		return Properties{}, err
	}
	p := Properties{Name: ifc.Name, PtrSupport: PtrHost, Speed: 10000, MaxComms: 65536, MaxRecvs: 1}
	if ifc.Name != "" {
		if b, err := os.ReadFile(filepath.Join("/sys/class/net", ifc.Name, "speed")); err == nil {
			if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v > 0 {
				p.Speed = v
			}
		}
		if path, err := filepath.EvalSymlinks(filepath.Join("/sys/class/net", ifc.Name, "device")); err == nil {
			p.PCIPath = path
		}
	}
	return p, nil
}

// Close implements Net.
func (s *Socket) Close() error { return nil }

// The wire: a handle, a hello per socket, a header per message on the
// control socket, a header per chunk on the data sockets; little-endian.
const (
	handleMagic = 0x4b53474e // "NGSK"
	helloMagic  = 0x4853474e // "NGSH"
	msgMagic    = 0x4d53474e // "NGSM"
	chunkMagic  = 0x4353474e // "NGSC"
	helloSize   = 32
	msgSize     = 16
	chunkSize   = 16
)

type handle struct {
	nonce uint64
	addr  netip.AddrPort
}

func (h handle) encode() Handle {
	var out Handle
	binary.LittleEndian.PutUint32(out[0:], handleMagic)
	binary.LittleEndian.PutUint64(out[4:], h.nonce)
	a := h.addr.String()
	out[12] = byte(len(a))
	copy(out[13:], a)
	return out
}

func decodeHandle(b Handle) (handle, error) {
	if binary.LittleEndian.Uint32(b[0:]) != handleMagic {
		return handle{}, fmt.Errorf("net: socket handle with magic %#x: not a socket listener's handle (want %#x)", binary.LittleEndian.Uint32(b[0:]), handleMagic)
	}
	n := int(b[12])
	if n > HandleSize-13 {
		return handle{}, fmt.Errorf("net: socket handle with a %d-byte address: at most %d", n, HandleSize-13)
	}
	ap, err := netip.ParseAddrPort(string(b[13 : 13+n]))
	if err != nil {
		return handle{}, fmt.Errorf("net: socket handle: %w", err)
	}
	return handle{nonce: binary.LittleEndian.Uint64(b[4:]), addr: ap}, nil
}

type hello struct {
	nonce, comm          uint64
	index, nSocks, nThrd uint16
	// chunkKiB is the sender's chunk size in KiB (0 from a peer that
	// predates it: DefaultChunk).
	chunkKiB uint32
	// inlineKiB is the sender's inline bound in KiB (0 from a peer that
	// predates it: legacyInline).
	inlineKiB uint16
}

func (h hello) encode() []byte {
	b := make([]byte, helloSize)
	binary.LittleEndian.PutUint32(b[0:], helloMagic)
	binary.LittleEndian.PutUint64(b[4:], h.nonce)
	binary.LittleEndian.PutUint64(b[12:], h.comm)
	binary.LittleEndian.PutUint16(b[20:], h.index)
	binary.LittleEndian.PutUint16(b[22:], h.nSocks)
	binary.LittleEndian.PutUint16(b[24:], h.nThrd)
	binary.LittleEndian.PutUint32(b[26:], h.chunkKiB)
	binary.LittleEndian.PutUint16(b[30:], h.inlineKiB)
	return b
}

func randUint64() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// socketListener accepts the sockets of incoming comms and groups them.
type socketListener struct {
	s       *Socket
	l       *gonet.TCPListener
	nonce   uint64
	timeout time.Duration

	mu       sync.Mutex
	groups   map[uint64]*pendingComm
	ready    []*pendingComm
	rejected []error // stray connections, for diagnostics
	err      error
	conns    map[gonet.Conn]bool // in their hello
	closed   bool
	wg       sync.WaitGroup
}

type pendingComm struct {
	nSocks, nThreads int
	chunk            int // bytes
	inline           int // bytes
	ctrl             *gonet.TCPConn
	data             []*gonet.TCPConn
	got              int
}

// Listen implements Net.
func (s *Socket) Listen(d int) (Handle, Listener, error) {
	ifc, err := s.dev(d)
	if err != nil {
		return Handle{}, nil, err
	}
	l, err := gonet.ListenTCP("tcp", gonet.TCPAddrFromAddrPort(netip.AddrPortFrom(ifc.Addr, 0)))
	if err != nil {
		return Handle{}, nil, fmt.Errorf("net: listening on %s (%s): %w", ifc.Addr, ifc.Name, err)
	}
	sl := &socketListener{s: s, l: l, nonce: randUint64(), groups: map[uint64]*pendingComm{}, conns: map[gonet.Conn]bool{},
		timeout: s.opts.HandshakeTimeout}
	if sl.timeout <= 0 {
		sl.timeout = DefaultHandshakeTimeout
	}
	ap := l.Addr().(*gonet.TCPAddr).AddrPort()
	ap = netip.AddrPortFrom(ifc.Addr, ap.Port()) // keep the zone of a link-local address
	sl.wg.Add(1)
	go sl.acceptLoop()
	return handle{nonce: sl.nonce, addr: ap}.encode(), sl, nil
}

func (sl *socketListener) acceptLoop() {
	defer sl.wg.Done()
	for {
		c, err := sl.l.AcceptTCP()
		if err != nil {
			sl.mu.Lock()
			if !sl.closed {
				sl.err = fmt.Errorf("net: accepting on %s: %w", sl.l.Addr(), err)
			}
			sl.mu.Unlock()
			return
		}
		sl.mu.Lock()
		if sl.closed {
			sl.mu.Unlock()
			_ = c.Close()
			return
		}
		sl.conns[c] = true
		sl.wg.Add(1)
		sl.mu.Unlock()
		go sl.handshake(c)
	}
}

// handshake reads c's hello and files c under its comm.
func (sl *socketListener) handshake(c *gonet.TCPConn) {
	defer sl.wg.Done()
	h, err := sl.readHello(c)
	sl.mu.Lock()
	defer sl.mu.Unlock()
	delete(sl.conns, c)
	if err != nil || sl.closed {
		_ = c.Close()
		if err != nil && !sl.closed {
			sl.rejected = append(sl.rejected, err)
		}
		return
	}
	g := sl.groups[h.comm]
	if g == nil {
		g = &pendingComm{nSocks: int(h.nSocks), nThreads: int(h.nThrd), chunk: helloChunk(h), inline: helloInline(h), data: make([]*gonet.TCPConn, h.nSocks)}
		sl.groups[h.comm] = g
	}
	slot := &g.ctrl
	if h.index > 0 {
		slot = &g.data[h.index-1]
	}
	if int(h.nSocks) != g.nSocks || int(h.nThrd) != g.nThreads || helloChunk(h) != g.chunk || helloInline(h) != g.inline || *slot != nil {
		_ = c.Close()
		sl.rejected = append(sl.rejected, &PeerError{Peer: c.RemoteAddr().String(), Op: "handshake",
			Err: fmt.Errorf("socket %d of comm %#x contradicts the comm's earlier sockets", h.index, h.comm)})
		return
	}
	*slot = c
	if g.got++; g.got == g.nSocks+1 {
		delete(sl.groups, h.comm)
		sl.ready = append(sl.ready, g)
	}
}

func (sl *socketListener) readHello(c *gonet.TCPConn) (hello, error) {
	peer := c.RemoteAddr().String()
	_ = c.SetReadDeadline(time.Now().Add(sl.timeout))
	b := make([]byte, helloSize)
	if _, err := io.ReadFull(c, b); err != nil {
		return hello{}, &PeerError{Peer: peer, Op: "reading the hello", Err: err}
	}
	_ = c.SetReadDeadline(time.Time{})
	h := hello{nonce: binary.LittleEndian.Uint64(b[4:]), comm: binary.LittleEndian.Uint64(b[12:]),
		index: binary.LittleEndian.Uint16(b[20:]), nSocks: binary.LittleEndian.Uint16(b[22:]), nThrd: binary.LittleEndian.Uint16(b[24:]),
		chunkKiB: binary.LittleEndian.Uint32(b[26:]), inlineKiB: binary.LittleEndian.Uint16(b[30:])}
	bad := func(format string, a ...any) (hello, error) {
		return hello{}, &PeerError{Peer: peer, Op: "handshake", Err: fmt.Errorf(format, a...)}
	}
	switch {
	case binary.LittleEndian.Uint32(b) != helloMagic:
		return bad("hello magic %#x, want %#x (not an ncclgo socket net peer)", binary.LittleEndian.Uint32(b), helloMagic)
	case h.nonce != sl.nonce:
		return bad("hello for another listener (nonce %#x)", h.nonce)
	case h.nThrd < 1 || h.nThrd > MaxSocketThreads:
		return bad("%d threads: want 1..%d", h.nThrd, MaxSocketThreads)
	case h.nSocks < h.nThrd || h.nSocks > MaxSockets || h.nSocks%h.nThrd != 0:
		return bad("%d sockets over %d threads: want a multiple of the threads, at most %d", h.nSocks, h.nThrd, MaxSockets)
	case h.index > h.nSocks:
		return bad("socket index %d of %d", h.index, h.nSocks)
	case h.chunkKiB != 0 && (uint64(h.chunkKiB)<<10 < MinChunk || uint64(h.chunkKiB)<<10 > MaxChunk):
		return bad("a chunk of %d KiB: want %d to %d KiB", h.chunkKiB, MinChunk>>10, MaxChunk>>10)
	case int(h.inlineKiB)<<10 > MaxInline:
		return bad("inline messages of up to %d KiB: want at most %d KiB", h.inlineKiB, MaxInline>>10)
	}
	return h, nil
}

// legacyInline is the inline bound of a peer whose hello predates the
// field (it says 0).
const legacyInline = 16 << 10

// helloInline is the inline bound that h announces, in bytes.
func helloInline(h hello) int {
	if h.inlineKiB == 0 {
		return legacyInline
	}
	return int(h.inlineKiB) << 10
}

// helloChunk is the chunk size that h announces, in bytes.
func helloChunk(h hello) int {
	if h.chunkKiB == 0 {
		return DefaultChunk
	}
	return int(h.chunkKiB) << 10
}

// Close implements Listener: it stops accepting and closes the sockets of
// the comms not accepted yet.
func (sl *socketListener) Close() error {
	sl.mu.Lock()
	if sl.closed {
		sl.mu.Unlock()
		return nil
	}
	sl.closed = true
	err := sl.l.Close()
	for c := range sl.conns {
		_ = c.Close()
	}
	var pend []*pendingComm
	pend = append(pend, sl.ready...)
	for _, g := range sl.groups {
		pend = append(pend, g)
	}
	sl.ready, sl.groups = nil, nil
	sl.mu.Unlock()
	sl.wg.Wait()
	for _, g := range pend {
		g.close()
	}
	return err
}

func (g *pendingComm) close() {
	if g.ctrl != nil {
		_ = g.ctrl.Close()
	}
	for _, c := range g.data {
		if c != nil {
			_ = c.Close()
		}
	}
}

// Rejected returns the errors of the connections the listener refused
// (stray or garbled hellos); they do not fail Accept.
func (sl *socketListener) Rejected() []error {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return append([]error(nil), sl.rejected...)
}

// Accept implements Net.
func (s *Socket) Accept(l Listener) (RecvComm, error) {
	sl, ok := l.(*socketListener)
	if !ok {
		return nil, fmt.Errorf("net: socket Accept on a %T", l)
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	switch {
	case sl.closed:
		return nil, fmt.Errorf("net: Accept on %s: %w", sl.l.Addr(), ErrClosed)
	case len(sl.ready) > 0:
		g := sl.ready[0]
		sl.ready = sl.ready[1:]
		rc, err := newRecvComm(g, s.opts.BufSize, s.opts.Wait != WaitPPoll)
		if err != nil {
			g.close()
			return nil, err
		}
		return rc, nil
	case sl.err != nil:
		return nil, sl.err
	}
	return nil, nil
}

// Connect implements Net. It dials every socket of the comm before it
// returns (loopback and LAN connects are quick; a refused one is an error).
func (s *Socket) Connect(d int, hb Handle) (SendComm, error) {
	h, err := decodeHandle(hb)
	if err != nil {
		return nil, err
	}
	if _, err := s.dev(d); err != nil {
		return nil, err
	}
	ifc, _ := s.dev(d)
	nt, per := s.opts.threadsFor(ifc.Addr.IsLoopback() || h.addr.Addr().IsLoopback())
	n := nt * per
	id := randUint64()
	socks := make([]*gonet.TCPConn, 0, n+1)
	fail := func(err error) (SendComm, error) {
		for _, c := range socks {
			_ = c.Close()
		}
		return nil, err
	}
	timeout := s.opts.HandshakeTimeout
	if timeout <= 0 {
		timeout = DefaultHandshakeTimeout
	}
	for i := 0; i <= n; i++ {
		d := gonet.Dialer{Timeout: timeout}
		c, err := d.Dial("tcp", h.addr.String())
		if err != nil {
			return fail(&PeerError{Peer: h.addr.String(), Op: "connecting", Err: err})
		}
		tc := c.(*gonet.TCPConn)
		_ = tc.SetNoDelay(true)
		socks = append(socks, tc)
		_ = tc.SetWriteDeadline(time.Now().Add(timeout))
		if _, err := tc.Write(hello{nonce: h.nonce, comm: id, index: uint16(i), nSocks: uint16(n), nThrd: uint16(nt), chunkKiB: uint32(s.opts.chunk() >> 10), inlineKiB: uint16(s.opts.inline() >> 10)}.encode()); err != nil {
			return fail(&PeerError{Peer: h.addr.String(), Op: "sending the hello", Err: err})
		}
		_ = tc.SetWriteDeadline(time.Time{})
	}
	sc, err := newSendComm(h.addr.String(), socks[0], socks[1:], nt, s.opts.BufSize, s.opts.chunk(), s.opts.inline(), spliceEnabled(s.opts.Splice), s.opts.Wait != WaitPPoll)
	if err != nil {
		return fail(err)
	}
	return sc, nil
}
