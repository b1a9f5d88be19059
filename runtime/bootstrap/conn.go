package bootstrap

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// Conn is one rank's end of a TCP bootstrap network, returned by Init. Its
// methods are safe for concurrent use, except that the collective calls
// (AllGather, Barrier) must be made in the same order on every rank and not
// concurrently with each other.
type Conn struct {
	opState
	size   int
	magic  uint64
	addrs  []string // listen address of every rank
	tokens []uint64 // check-in token of every rank (see hello.token)
	token  uint64   // this rank's
	log    *slog.Logger
	ln     net.Listener
	box    *mailbox
	out    []*peerOut
	maxMsg int // largest message accepted from / sent to a peer
	maxQ   int // most bytes queued unreceived from one peer

	socks   connSet        // every socket, to close on shutdown
	pending pendingSet     // accepted sockets that have not said hello
	mu      sync.Mutex     // guards inPeers
	inPeers map[int]bool   // peers with an incoming connection
	wg      sync.WaitGroup // accept loop and readers
}

// peerOut is this rank's outgoing connection to one peer. lock is a
// one-slot channel so that waiting for it can honour a context.
type peerOut struct {
	lock chan struct{}
	conn net.Conn
	err  error // sticky: the stream is unusable
}

// errInitTimeout marks Init's own timeout (as opposed to the caller's
// context).
var errInitTimeout = errors.New("bootstrap init timeout")

// queryGrace bounds how long a rank whose check-in timed out waits for the
// root to say which ranks are missing.
const queryGrace = time.Second

// Init joins the bootstrap network identified by id as rank of nRanks: it
// listens on a port of its own (on the interface that Options.Interface /
// NCCL_SOCKET_IFNAME selects, else on the address it uses to reach the
// root), checks in with the root, and receives every rank's address. It
// fails with a *TimeoutError naming the ranks that never checked in when the
// check-in does not complete within the timeout.
func Init(ctx context.Context, id UniqueID, rank, nRanks int, opts Options) (*Conn, error) {
	if err := checkRanks(nRanks); err != nil {
		return nil, err
	}
	if rank < 0 || rank >= nRanks {
		return nil, fmt.Errorf("bootstrap: rank %d out of range for %d ranks (want 0..%d)", rank, nRanks, nRanks-1)
	}
	magic, rootAP, err := id.decode()
	if err != nil {
		return nil, fmt.Errorf("bootstrap: rank %d: %w", rank, err)
	}
	timeout, err := opts.timeout()
	if err != nil {
		return nil, err
	}
	fam, err := opts.family()
	if err != nil {
		return nil, err
	}
	maxMsg, err := opts.maxMessage()
	if err != nil {
		return nil, err
	}
	maxQ, err := opts.maxQueued(maxMsg)
	if err != nil {
		return nil, err
	}
	var tb [8]byte
	_, _ = rand.Read(tb[:]) // crypto/rand.Read does not fail (Go 1.24)
	token := binary.BigEndian.Uint64(tb[:])
	log := opts.logger().With("rank", rank)
	rootAddr := rootAP.String()
	start := time.Now()
	ictx, cancel := context.WithTimeoutCause(ctx, timeout, errInitTimeout)
	defer cancel()
	timedOut := func() bool {
		c := context.Cause(ictx)
		return c == errInitTimeout || errors.Is(c, context.DeadlineExceeded)
	}
	ctxErr := func(what string, last error) error {
		if timedOut() {
			te := &TimeoutError{Op: fmt.Sprintf("rank %d: %s", rank, what), After: timeout, Cause: last}
			if context.Cause(ictx) != errInitTimeout {
				te.After = time.Since(start).Round(time.Millisecond)
				te.Cause = errors.Join(last, context.DeadlineExceeded)
			}
			return te
		}
		return fmt.Errorf("bootstrap: rank %d: %s: %w", rank, what, context.Cause(ictx))
	}

	rc, err := dialRetry(ictx, rootAddr)
	if err != nil {
		if ictx.Err() != nil {
			return nil, ctxErr("connecting to root at "+rootAddr, err)
		}
		return nil, fmt.Errorf("bootstrap: rank %d: connecting to root at %s: %w", rank, rootAddr, err)
	}
	defer rc.Close()

	// Listen where the others can reach us.
	var ip netip.Addr
	if spec := opts.ifaceSpec(); spec != "" {
		ifs, err := systemInterfaces()
		if err != nil {
			return nil, err
		}
		if ip, _, err = pickAddr(ifs, spec, fam); err != nil {
			return nil, err
		}
	} else {
		lap, err := netip.ParseAddrPort(rc.LocalAddr().String())
		if err != nil {
			return nil, fmt.Errorf("bootstrap: rank %d: local address %s: %w", rank, rc.LocalAddr(), err)
		}
		ip = lap.Addr()
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ictx, "tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		return nil, fmt.Errorf("bootstrap: rank %d: listen on %s: %w", rank, ip, err)
	}
	ok := false
	defer func() {
		if !ok {
			ln.Close()
		}
	}()

	// Check in, then wait for the table. A context end interrupts the socket
	// through its deadline.
	fired := make(chan struct{})
	stop := context.AfterFunc(ictx, func() { _ = rc.SetDeadline(time.Unix(1, 0)); close(fired) })
	h := hello{magic: magic, kind: helloCheckIn, rank: rank, nRanks: nRanks, token: token, addr: ln.Addr().String()}
	br := bufio.NewReader(rc)
	var reply []byte
	if err = writeFrame(rc, h.encode()); err == nil {
		reply, err = readFrame(br, rootReplyLimit(nRanks))
	}
	if !stop() {
		<-fired
	}
	if err != nil && ictx.Err() != nil && timedOut() {
		// Ask the root who is missing; it may also still send the table.
		_ = rc.SetDeadline(time.Now().Add(queryGrace))
		if werr := writeFrame(rc, []byte{msgQuery}); werr == nil {
			reply, err = readFrame(br, rootReplyLimit(nRanks))
		}
		if err != nil {
			return nil, ctxErr(fmt.Sprintf("waiting for root at %s (no answer about missing ranks)", rootAddr), nil)
		}
	} else if err != nil && ictx.Err() != nil {
		return nil, ctxErr("check-in with root at "+rootAddr, err)
	} else if err != nil {
		return nil, fmt.Errorf("bootstrap: rank %d: check-in with root at %s: %w", rank, rootAddr, err)
	}

	var table []tableEntry
	switch {
	case len(reply) > 0 && reply[0] == msgTable:
		if table, err = decodeTable(reply, nRanks); err != nil {
			return nil, fmt.Errorf("bootstrap: rank %d: %w", rank, err)
		}
		if table[rank].token != token {
			// The root gave this rank's slot to another claimant.
			return nil, fmt.Errorf("bootstrap: rank %d: %w: the root's table holds another process's check-in for rank %d (is another process using this unique id?)", rank, ErrRejected, rank)
		}
	case len(reply) > 0 && reply[0] == msgStatus:
		st, err := decodeStatus(reply)
		if err != nil {
			return nil, fmt.Errorf("bootstrap: rank %d: %w", rank, err)
		}
		after := timeout
		if context.Cause(ictx) != errInitTimeout {
			after = time.Since(start).Round(time.Millisecond) // the caller's deadline came first
		}
		if st.final {
			after = time.Duration(st.afterMS) * time.Millisecond
		}
		te := st.timeoutError(fmt.Sprintf("rank %d", rank), after)
		if st.final {
			te.Op += " (root gave up)"
		}
		log.Warn(te.Error())
		return nil, te
	case len(reply) > 0 && reply[0] == msgReject:
		return nil, fmt.Errorf("bootstrap: rank %d: %w: %s", rank, ErrRejected, reply[1:])
	default:
		return nil, fmt.Errorf("bootstrap: rank %d: unexpected %d-byte reply from root at %s", rank, len(reply), rootAddr)
	}

	addrs := make([]string, nRanks)
	tokens := make([]uint64, nRanks)
	for i, e := range table {
		addrs[i], tokens[i] = e.addr, e.token
	}
	c := &Conn{
		opState: opState{rank: rank, timeout: timeout},
		size:    nRanks, magic: magic, addrs: addrs, tokens: tokens, token: token,
		log: log, ln: ln, box: newMailbox(), maxMsg: maxMsg, maxQ: maxQ,
		out:     make([]*peerOut, nRanks),
		inPeers: make(map[int]bool),
	}
	for i := range c.out {
		c.out[i] = &peerOut{lock: make(chan struct{}, 1)}
	}
	c.wg.Add(1)
	go c.acceptLoop()
	ok = true
	log.Debug("bootstrap: rank initialised", "nranks", nRanks, "addr", h.addr, "elapsed", time.Since(start))
	return c, nil
}

// dialRetry dials addr until it succeeds or ctx ends, retrying refused
// connections (the root may not be listening yet, e.g. with NCCL_COMM_ID).
func dialRetry(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	backoff := 5 * time.Millisecond
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil || !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// Rank returns this rank.
func (c *Conn) Rank() int { return c.rank }

// Size returns the number of ranks.
func (c *Conn) Size() int { return c.size }

// PeerAddr returns the listen address of rank peer, as received from the
// root.
func (c *Conn) PeerAddr(peer int) string {
	if peer < 0 || peer >= c.size {
		return ""
	}
	return c.addrs[peer]
}

func (c *Conn) acceptLoop() {
	defer c.wg.Done()
	acceptLoop(c.ln, c.box.done, c.log, func(nc net.Conn) bool {
		if !c.socks.track(nc) {
			nc.Close()
			return false
		}
		c.pending.add(nc)
		c.wg.Add(1)
		go c.readPeer(nc)
		return true
	})
}

// readPeer checks an incoming connection's hello (which must come within
// min(5 s, timeout)), then delivers its messages until it ends. A frame
// longer than the message limit, or whose body does not follow its length
// within the timeout, ends the connection; if it had delivered nothing
// yet, its rank may connect again (the real rank, after a forger that
// knew the id).
func (c *Conn) readPeer(nc net.Conn) {
	defer c.wg.Done()
	defer c.socks.untrack(nc)
	defer nc.Close()
	br := bufio.NewReaderSize(nc, 64<<10)
	_ = nc.SetReadDeadline(time.Now().Add(helloWait(c.timeout)))
	b, err := readFrame(br, maxHelloSize)
	c.pending.done(nc)
	var h hello
	if err == nil {
		h, err = decodeHello(b, c.magic)
	} else if errors.Is(err, errFrameTooLong) {
		err = fmt.Errorf("%w: %v", ErrBadMagic, err)
	}
	if err == nil {
		switch {
		case h.kind != helloPeer:
			err = fmt.Errorf("%w: hello kind %d sent to a rank", ErrBadMagic, h.kind)
		case h.nRanks != c.size || h.rank == c.rank:
			err = fmt.Errorf("%w: peer says rank %d of %d, this is rank %d of %d", ErrBadMagic, h.rank, h.nRanks, c.rank, c.size)
		case h.token != c.tokens[h.rank]:
			// It knows the id but did not check in as that rank: an
			// impostor, refused before it can deliver anything.
			err = fmt.Errorf("%w: a connection claims rank %d without its check-in token (another process holding the unique id?)", ErrBadMagic, h.rank)
		}
	}
	if err == nil {
		c.mu.Lock()
		if c.inPeers[h.rank] {
			err = fmt.Errorf("second connection from rank %d", h.rank)
		}
		c.inPeers[h.rank] = true
		c.mu.Unlock()
	}
	if err != nil {
		if c.box.closedErr() == nil {
			c.log.Warn("bootstrap: rejected connection", "remote", nc.RemoteAddr().String(), "err", err)
		}
		return
	}
	_ = nc.SetReadDeadline(time.Time{})
	delivered := false
	for {
		b, err := readFrameConn(nc, br, c.maxMsg+msgHeader, c.timeout, func(n int) error {
			// What this peer sent and nobody received yet, plus this
			// frame, must fit the per-peer bound.
			if q := c.box.queued(h.rank); q+n > c.maxQ {
				return fmt.Errorf("%w: rank %d has %d bytes queued unreceived here; a %d-byte frame would pass the %d-byte bound (Options.MaxQueuedBytes)",
					ErrQueueFull, h.rank, q, n, c.maxQ)
			}
			return nil
		})
		violation := false
		if err == nil && len(b) < msgHeader {
			err, violation = fmt.Errorf("%d-byte message", len(b)), true
		}
		if err != nil {
			var ne net.Error
			full := errors.Is(err, ErrQueueFull)
			violation = violation || full || errors.Is(err, errFrameTooLong) || errors.As(err, &ne) && ne.Timeout()
			if violation && c.box.closedErr() == nil {
				c.log.Warn("bootstrap: dropped connection", "peer", h.rank, "remote", nc.RemoteAddr().String(), "err", err)
			}
			if full {
				// The receivers on this peer learn why: the rest of
				// its stream is lost.
				c.box.peerGone(h.rank, err)
				return
			}
			if !delivered {
				// A real rank sends its hello and first message
				// together: this was not one. Let the rank connect.
				c.mu.Lock()
				delete(c.inPeers, h.rank)
				c.mu.Unlock()
				return
			}
			c.box.peerGone(h.rank, fmt.Errorf("%w: rank %d (%v)", ErrPeerClosed, h.rank, err))
			return
		}
		delivered = true
		class, tag := b[0], int64(binary.BigEndian.Uint64(b[1:]))
		if class == classAbandon {
			c.cs.peerAbandoned(h.rank, tag)
			continue
		}
		c.box.deliver(msgKey{peer: h.rank, class: class, tag: tag}, b[msgHeader:])
	}
}

// withConnCtx runs fn with conn's deadlines following ctx.
func withConnCtx(ctx context.Context, nc net.Conn, fn func() error) error {
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetWriteDeadline(dl)
	} else {
		_ = nc.SetWriteDeadline(time.Time{})
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { _ = nc.SetWriteDeadline(time.Unix(1, 0)); close(fired) })
	err := fn()
	if !stop() {
		<-fired
	}
	return err
}

func (c *Conn) sendMsg(ctx context.Context, peer int, class byte, tag int64, data []byte) error {
	if err := c.box.closedErr(); err != nil {
		return err
	}
	if len(data) > c.maxMsg {
		return fmt.Errorf("bootstrap: %d-byte message exceeds the %d byte limit (Options.MaxMessageSize)", len(data), c.maxMsg)
	}
	if peer == c.rank {
		c.box.deliver(msgKey{peer: c.rank, class: class, tag: tag}, append([]byte{}, data...))
		return nil
	}
	po := c.out[peer]
	select {
	case po.lock <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-c.box.done:
		return c.box.closedErr()
	}
	defer func() { <-po.lock }()
	if po.err != nil {
		return po.err
	}
	var frames [][]byte
	if po.conn == nil {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", c.addrs[peer])
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("dial rank %d at %s: %w", peer, c.addrs[peer], err)
		}
		if !c.socks.track(nc) {
			nc.Close()
			return c.box.closedErr()
		}
		po.conn = nc
		frames = append(frames, hello{magic: c.magic, kind: helloPeer, rank: c.rank, nRanks: c.size, token: c.token}.encode())
	}
	var hdr [msgHeader]byte
	hdr[0] = class
	binary.BigEndian.PutUint64(hdr[1:], uint64(tag))
	err := withConnCtx(ctx, po.conn, func() error {
		for _, f := range frames {
			if err := writeFrame(po.conn, f); err != nil {
				return err
			}
		}
		return writeFrame(po.conn, hdr[:], data)
	})
	if err != nil {
		// The stream may hold part of a frame: it cannot be used again.
		po.err = fmt.Errorf("connection to rank %d broken: %w", peer, err)
		po.conn.Close()
		if cerr := c.box.closedErr(); cerr != nil {
			return cerr
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return po.err
	}
	return nil
}

func (c *Conn) recvMsg(ctx context.Context, peer int, class byte, tag int64) ([]byte, error) {
	return c.box.recv(ctx, msgKey{peer: peer, class: class, tag: tag})
}

// AllGather implements Network over a ring of TCP connections.
func (c *Conn) AllGather(ctx context.Context, mine []byte) ([][]byte, error) {
	return ringAllGather(ctx, c, "allgather", mine)
}

// Barrier implements Network (an AllGather of nothing).
func (c *Conn) Barrier(ctx context.Context) error {
	_, err := ringAllGather(ctx, c, "barrier", nil)
	return err
}

// Send implements Network. It returns once data is written to the socket.
func (c *Conn) Send(ctx context.Context, peer, tag int, data []byte) error {
	if err := checkPeer(peer, c.size); err != nil {
		return err
	}
	op := fmt.Sprintf("send to rank %d tag %d", peer, tag)
	ctx, cancel := c.opContext(ctx, op)
	defer cancel()
	if err := c.sendMsg(ctx, peer, classUser, int64(tag), data); err != nil {
		return c.wrapErr(ctx, op, err)
	}
	return nil
}

// Recv implements Network.
func (c *Conn) Recv(ctx context.Context, peer, tag int) ([]byte, error) {
	if err := checkPeer(peer, c.size); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("recv from rank %d tag %d", peer, tag)
	ctx, cancel := c.opContext(ctx, op)
	defer cancel()
	d, err := c.recvMsg(ctx, peer, classUser, int64(tag))
	if err != nil {
		return nil, c.wrapErr(ctx, op, err)
	}
	return d, nil
}

// shutdown wakes every waiter with err and closes every socket (once).
func (c *Conn) shutdown(err error) {
	if !c.box.shutdown(err) {
		return
	}
	c.socks.shut(func(nc net.Conn) { nc.Close() })
	c.ln.Close()
}

// Close closes every socket and waits for every goroutine the Conn
// started. Calls in progress fail with ErrClosed (or ErrAborted after
// Abort). Close is idempotent and always returns nil.
func (c *Conn) Close() error {
	c.shutdown(ErrClosed)
	c.wg.Wait()
	return nil
}

// Abort wakes every waiter at once with ErrAborted and closes every socket,
// without waiting; call Close afterwards to wait for the goroutines.
func (c *Conn) Abort() { c.shutdown(ErrAborted) }
