package bootstrap

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"os"
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
	size    int
	localIP netip.Addr // Options.LocalIP
	magic   uint64
	self    string   // this rank's listen address
	fingers []string // listen address of rank+2^k, k = 0, 1, ...
	token   uint64   // this rank's check-in token (see hello.token)
	log     *slog.Logger
	ln      net.Listener
	box     *mailbox
	maxMsg  int // largest message accepted from / sent to a peer
	maxQ    int // most bytes queued unreceived from one peer
	life    context.Context
	endLife context.CancelFunc

	socks   connSet         // every socket, to close on shutdown
	pending pendingSet      // accepted sockets that have not said hello
	mu      sync.Mutex      // guards inPeers, out, known, tokens, looking
	inPeers map[int]bool    // peers with an incoming connection
	in      map[int]*peerIn // incoming connections, for replyMsg
	out     map[int]*peerOut
	known   map[int]string // addresses learned beyond the fingers
	// tokens holds the check-in token of every rank whose hello this rank
	// can check: its fingers and the ranks rank-2^k (from the root), and
	// the ranks it looked up or that looked it up.
	tokens  map[int]uint64
	looking map[int]int    // lookups under way, by target rank
	wg      sync.WaitGroup // accept loop, readers, forwarders
}

// peerOut is this rank's outgoing connection to one peer. lock is a
// one-slot channel so that waiting for it can honour a context.
type peerOut struct {
	lock chan struct{}
	conn net.Conn
	err  error // sticky: the stream is unusable
}

// peerIn is a connection that a peer opened to this rank, on which this
// rank answers (replyMsg). lock is a one-slot channel so that waiting for
// it can honour a context.
type peerIn struct {
	lock  chan struct{}
	conn  net.Conn
	hello bool  // this rank's hello is sent
	err   error // sticky: the stream is unusable
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
// root), checks in with the root, and receives the addresses of its
// fingers, the ranks rank+2^k (see the package documentation). It fails
// with a *TimeoutError naming the ranks that never checked in when the
// check-in does not complete within the timeout.
func Init(ctx context.Context, id UniqueID, rank, nRanks int, opts Options) (*Conn, error) {
	return JoinScalable(ctx, []UniqueID{id}, rank, nRanks, opts)
}

// JoinScalable is Init with several roots, NCCL's
// ncclCommInitRankScalable: ids are the UniqueIDs of len(ids) roots, the
// same list in the same order on every rank; root i serves the check-in of
// ranks [RootSlice(i, len(ids), nRanks)), and the roots exchange their
// slices among themselves, so that no root holds more than its slice's
// connections. With one id it is Init.
func JoinScalable(ctx context.Context, ids []UniqueID, rank, nRanks int, opts Options) (*Conn, error) {
	if err := checkRanks(nRanks); err != nil {
		return nil, err
	}
	if rank < 0 || rank >= nRanks {
		return nil, fmt.Errorf("bootstrap: rank %d out of range for %d ranks (want 0..%d)", rank, nRanks, nRanks-1)
	}
	if len(ids) < 1 || len(ids) > min(MaxRoots, nRanks) {
		return nil, fmt.Errorf("bootstrap: rank %d: %d root ids for %d ranks: want 1..%d", rank, len(ids), nRanks, min(MaxRoots, nRanks))
	}
	roots := make([]rootRef, len(ids))
	for i, id := range ids {
		m, ap, err := id.decode()
		if err != nil {
			return nil, fmt.Errorf("bootstrap: rank %d: root id %d: %w", rank, i, err)
		}
		for j := range i {
			if roots[j].magic == m {
				return nil, fmt.Errorf("bootstrap: rank %d: root ids %d and %d are the same root: %w", rank, j, i, ErrInvalidID)
			}
		}
		roots[i] = rootRef{magic: m, addr: ap.String()}
	}
	ri := RootOfRank(rank, len(ids), nRanks)
	magic, rootMagic, rootAddr := roots[0].magic, roots[ri].magic, roots[ri].addr
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
	start := time.Now()
	ok := false
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

	// Check in, wait for the table and acknowledge it. A check-in whose
	// connection breaks before the root answered (reset, EOF: a root
	// starved of CPU may close a connection whose hello it has not read
	// in time, or the root wrote the table into a connection that was
	// already cut) is made again, with the same listener and token, after
	// a backoff: the root answers until every rank acknowledged.
	var (
		ln    net.Listener
		h     hello
		reply []byte
		table []tableEntry
	)
	defer func() {
		if ln != nil && !ok {
			ln.Close()
		}
	}()
	backoff := checkInBackoffMin
	for {
		var rc net.Conn
		rc, err = dialRetry(ictx, rootAddr, opts.LocalIP)
		if err != nil {
			if ictx.Err() != nil {
				return nil, ctxErr("connecting to root at "+rootAddr, err)
			}
			return nil, fmt.Errorf("bootstrap: rank %d: connecting to root at %s: %w", rank, rootAddr, err)
		}
		if ln == nil {
			if ln, err = listenNear(ictx, rc, opts, fam); err != nil {
				rc.Close()
				return nil, fmt.Errorf("bootstrap: rank %d: %w", rank, err)
			}
			h = hello{magic: rootMagic, kind: helloCheckIn, rank: rank, nRanks: nRanks, token: token, addr: ln.Addr().String()}
			if len(roots) > 1 {
				h.kind, h.rootIndex, h.roots = helloCheckInRoots, ri, roots
			}
		}
		reply, err = checkIn(ictx, rc, h, timedOut)
		table = nil // the one acknowledged on this connection
		if err == nil && len(reply) > 0 && reply[0] == msgTable {
			if table, err = decodeTable(reply, tableLen(nRanks)); err != nil {
				rc.Close()
				return nil, fmt.Errorf("bootstrap: rank %d: %w", rank, err)
			}
			if table[0].token != token {
				// The root gave this rank's slot to another claimant.
				rc.Close()
				return nil, fmt.Errorf("bootstrap: rank %d: %w: the root's table holds another process's check-in for rank %d (is another process using this unique id?)", rank, ErrRejected, rank)
			}
			err = ackTable(rc, h)
		}
		rc.Close()
		if err == nil || ictx.Err() != nil || !connLost(err) {
			break
		}
		log.Debug("bootstrap: check-in connection lost, checking in again", "root", rootAddr, "err", err, "retry_in", backoff)
		t := time.NewTimer(jitter(backoff))
		select {
		case <-ictx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, checkInBackoffMax)
	}
	switch {
	case err != nil && ictx.Err() != nil && timedOut() && reply == nil:
		return nil, ctxErr(fmt.Sprintf("waiting for root at %s (no answer about missing ranks)", rootAddr), nil)
	case err != nil && ictx.Err() != nil:
		return nil, ctxErr("check-in with root at "+rootAddr, err)
	case err != nil:
		return nil, fmt.Errorf("bootstrap: rank %d: check-in with root at %s: %w", rank, rootAddr, err)
	}

	switch {
	case table != nil: // decoded and acknowledged above
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

	// The table: this rank, its fingers, the ranks that dial it.
	k := rounds(nRanks)
	c := &Conn{
		opState: opState{rank: rank, timeout: timeout},
		size:    nRanks, localIP: opts.LocalIP, magic: magic, self: h.addr, token: token,
		log: log, ln: ln, box: newMailbox(), maxMsg: maxMsg, maxQ: maxQ,
		inPeers: make(map[int]bool), in: make(map[int]*peerIn), out: make(map[int]*peerOut), known: make(map[int]string),
		tokens: make(map[int]uint64, 2*k), looking: make(map[int]int),
	}
	for j := range k {
		f := table[1+j]
		c.fingers = append(c.fingers, f.addr)
		c.tokens[(rank+1<<j)%nRanks] = f.token
		c.tokens[((rank-1<<j)%nRanks+nRanks)%nRanks] = table[1+k+j].token
	}
	c.life, c.endLife = context.WithCancel(context.Background())
	c.wg.Add(1)
	go c.acceptLoop()
	ok = true
	log.Debug("bootstrap: rank initialised", "nranks", nRanks, "addr", h.addr, "elapsed", time.Since(start))
	return c, nil
}

// Backoff between check-ins of one rank whose connection to the root
// broke: doubling, with jitter, so that thousands of ranks cut off at
// once do not come back at once.
const (
	checkInBackoffMin = 10 * time.Millisecond
	checkInBackoffMax = time.Second
)

// jitter returns a duration in [d/2, d).
func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(mrand.Int64N(int64(d/2)+1))
}

// connLost reports whether err says that a connection broke or was
// refused before an answer came: worth a new check-in.
func connLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNABORTED)
}

// listenNear listens where the other ranks can reach this one: on the
// interface that Options.Interface / NCCL_SOCKET_IFNAME selects, else on
// the address that rc, the connection to the root, goes out from.
func listenNear(ctx context.Context, rc net.Conn, opts Options, fam int) (net.Listener, error) {
	var ip netip.Addr
	if opts.LocalIP.IsValid() {
		ip = opts.LocalIP
	} else if spec := opts.ifaceSpec(); spec != "" {
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
			return nil, fmt.Errorf("local address %s: %w", rc.LocalAddr(), err)
		}
		ip = lap.Addr()
	}
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(ctx, "tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", ip, err)
	}
	return ln, nil
}

// checkIn sends hello h to the root over rc and reads its reply. The end
// of ctx interrupts the socket; when it ended by the rank's own timeout
// (timedOut), the rank asks the root which ranks are missing and returns
// that answer (a status) with the error.
func checkIn(ctx context.Context, rc net.Conn, h hello, timedOut func() bool) ([]byte, error) {
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { _ = rc.SetDeadline(time.Unix(1, 0)); close(fired) })
	br := bufio.NewReader(rc)
	var reply []byte
	err := writeFrame(rc, h.encode())
	if err == nil {
		reply, err = readFrame(br, rootReplyLimit(h.nRanks))
	}
	if !stop() {
		<-fired
	}
	if err != nil && ctx.Err() != nil && timedOut() {
		// Ask the root who is missing; it may also still send the table.
		_ = rc.SetDeadline(time.Now().Add(queryGrace))
		if werr := writeFrame(rc, []byte{msgQuery}); werr == nil {
			if r, rerr := readFrame(br, rootReplyLimit(h.nRanks)); rerr == nil {
				return r, nil
			}
		}
	}
	return reply, err
}

// ackTable tells the root over rc that the table of the check-in h
// arrived. The frame is small enough never to wait for room in the send
// buffer; the deadline bounds the write all the same.
func ackTable(rc net.Conn, h hello) error {
	_ = rc.SetWriteDeadline(time.Now().Add(queryGrace))
	if err := writeFrame(rc, encodeAck(h.rank, h.token)); err != nil {
		return fmt.Errorf("acknowledging the table: %w", err)
	}
	return nil
}

// dialRetry dials addr (from local, when valid) until it succeeds or ctx
// ends, retrying refused connections (the root may not be listening yet,
// e.g. with NCCL_COMM_ID).
func dialRetry(ctx context.Context, addr string, local netip.Addr) (net.Conn, error) {
	d := dialer(local)
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

// dialer returns the dialer of bootstrap connections: from local when
// valid, without TCP keep-alive (see "Limits" in doc.go).
func dialer(local netip.Addr) net.Dialer {
	d := net.Dialer{KeepAlive: -1}
	if local.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(local, 0))
	}
	return d
}

// Rank returns this rank.
func (c *Conn) Rank() int { return c.rank }

// Size returns the number of ranks.
func (c *Conn) Size() int { return c.size }

// PeerAddr returns the listen address of rank peer when this rank knows
// it: its own, a finger's (rank+2^k, from the root), or that of a peer it
// has exchanged messages with; "" otherwise.
func (c *Conn) PeerAddr(peer int) string {
	switch {
	case peer < 0 || peer >= c.size:
		return ""
	case peer == c.rank:
		return c.self
	}
	if k, ok := c.fingerIndex(peer); ok {
		return c.fingers[k]
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.known[peer]
}

// fingerIndex returns k when peer is rank+2^k.
func (c *Conn) fingerIndex(peer int) (int, bool) {
	d := (peer - c.rank + c.size) % c.size
	if d == 0 || d&(d-1) != 0 {
		return 0, false
	}
	return bits.TrailingZeros(uint(d)), true
}

// nextHop returns the finger of this rank closest to target without
// passing it: a lookup for target travels at most ⌈log2 n⌉ hops.
func (c *Conn) nextHop(target int) int {
	d := (target - c.rank + c.size) % c.size
	return (c.rank + 1<<(bits.Len(uint(d))-1)) % c.size
}

// addrOf returns peer's listen address, looking it up through the
// fingers when this rank does not know it. The lookup carries this rank's
// address and token to peer; peer's answer echoes the token (the proof
// that it comes from the rank the lookup reached) and the hello of the
// connection it comes by carries peer's token, which this rank learns.
func (c *Conn) addrOf(ctx context.Context, peer int) (string, error) {
	if a := c.PeerAddr(peer); a != "" {
		return a, nil
	}
	req := binary.BigEndian.AppendUint32(nil, uint32(c.rank))
	req = binary.BigEndian.AppendUint64(req, c.token)
	req = append(req, c.self...)
	c.mu.Lock()
	c.looking[peer]++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if c.looking[peer]--; c.looking[peer] <= 0 {
			delete(c.looking, peer)
		}
		c.mu.Unlock()
	}()
	hop := c.nextHop(peer)
	if err := c.sendMsg(ctx, hop, classLookup, int64(peer), req); err != nil {
		return "", fmt.Errorf("looking up rank %d's address through rank %d: %w", peer, hop, err)
	}
	b, err := c.box.recv(ctx, msgKey{peer: peer, class: classFound, tag: int64(peer)})
	if err != nil {
		return "", fmt.Errorf("looking up rank %d's address: %w", peer, err)
	}
	return string(b), nil
}

// learnToken records peer's check-in token; it reports false when this
// rank already holds another one for peer (which it keeps).
func (c *Conn) learnToken(peer int, token uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.tokens[peer]; ok {
		return t == token
	}
	c.tokens[peer] = token
	return true
}

// learnAddr records peer's address.
func (c *Conn) learnAddr(peer int, addr string) {
	if _, ok := c.fingerIndex(peer); ok {
		return
	}
	c.mu.Lock()
	c.known[peer] = addr
	c.mu.Unlock()
}

// tokenOf returns peer's check-in token when this rank knows it, and
// whether a lookup of peer is under way.
func (c *Conn) tokenOf(peer int) (token uint64, ok, looking bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	token, ok = c.tokens[peer]
	return token, ok, c.looking[peer] > 0
}

// background runs fn in a goroutine that Close waits for, with a context
// bounded by the timeout and ended by Close or Abort.
func (c *Conn) background(fn func(ctx context.Context)) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.life, c.timeout)
		defer cancel()
		fn(ctx)
	}()
}

// control handles a lookup, found or abandon message from peer, whose
// hello carried token; it reports false for a malformed one.
func (c *Conn) control(peer int, token uint64, class byte, tag int64, body []byte) bool {
	switch class {
	case classAbandon:
		if c.cs.peerAbandoned(peer, tag) {
			// News here: pass it on, so that every rank hears of it.
			c.background(func(ctx context.Context) {
				for _, p := range c.abandonTargets() {
					_ = c.sendMsg(ctx, p, classAbandon, tag, nil)
				}
			})
		}
		return true
	case classFound:
		// echo u64 | address: the answer to this rank's lookup of peer.
		if tag != int64(peer) || len(body) <= 8 || len(body) > 8+maxAddrLen || binary.BigEndian.Uint64(body) != c.token {
			return false
		}
		if !c.learnToken(peer, token) {
			return false
		}
		addr := string(body[8:])
		c.learnAddr(peer, addr)
		if _, _, looking := c.tokenOf(peer); looking {
			c.box.deliver(msgKey{peer: peer, class: classFound, tag: tag}, []byte(addr))
		}
		return true
	case classLookup:
		// origin u32 | origin's token u64 | origin's address. It came
		// finger to finger, each hop over a connection whose sender's
		// token was checked: the origin's entry is as good as the root's.
		if tag < 0 || tag >= int64(c.size) || len(body) <= 12 || len(body) > 12+maxAddrLen {
			return false
		}
		origin := int(binary.BigEndian.Uint32(body))
		if origin >= c.size || origin == c.rank {
			return false
		}
		target := int(tag)
		if target == c.rank {
			addr := string(body[12:])
			if !c.learnToken(origin, binary.BigEndian.Uint64(body[4:])) {
				return false
			}
			ans := binary.BigEndian.AppendUint64(nil, binary.BigEndian.Uint64(body[4:]))
			ans = append(ans, c.self...)
			c.background(func(ctx context.Context) {
				// The answer goes first on the connection to the origin,
				// which knows this rank's token only from it: the
				// origin's address is published (for this rank's own
				// sends) only once the connection's lock is held.
				err := c.sendTo(ctx, origin, addr, func() { c.learnAddr(origin, addr) }, classFound, tag, ans)
				if err != nil {
					c.log.Debug("bootstrap: answering a lookup", "origin", origin, "err", err)
				}
			})
			return true
		}
		body = append([]byte{}, body...)
		c.background(func(ctx context.Context) {
			if err := c.sendMsg(ctx, c.nextHop(target), classLookup, tag, body); err != nil {
				c.log.Debug("bootstrap: forwarding a lookup", "origin", origin, "target", target, "err", err)
			}
		})
		return true
	}
	return false
}

func (c *Conn) maxMessage() int { return c.maxMsg }

// abandonTargets: the fingers; each rank that hears of a failure first
// tells its own fingers, which reaches every rank in ⌈log2 n⌉ hops.
func (c *Conn) abandonTargets() []int {
	t := make([]int, len(c.fingers))
	for k := range t {
		t[k] = (c.rank + 1<<k) % c.size
	}
	return t
}

func (c *Conn) acceptLoop() {
	defer c.wg.Done()
	acceptLoop(c.ln, c.box.done, c.log, func(nc net.Conn) bool {
		if old := c.pending.add(nc, c.box.done); old != nil {
			c.socks.untrack(old)
		}
		if !c.socks.track(nc) {
			c.pending.done(nc)
			nc.Close()
			return false
		}
		c.wg.Add(1)
		go c.readPeer(nc)
		return true
	})
}

// readPeer checks an incoming connection's hello (which must come within
// min(5 s, timeout)) and its token, then delivers its messages until it
// ends. A hello from a rank whose token this rank has not learned is
// refused, unless this rank is looking that rank up: then the first frame
// must be the answer, echoing this rank's token. A frame longer than the
// message limit, or whose body does not follow its length within the
// timeout, ends the connection; if it had delivered nothing yet, its rank
// may connect again (the real rank, after a forger that knew the id).
func (c *Conn) readPeer(nc net.Conn) {
	defer c.wg.Done()
	defer c.socks.untrack(nc)
	defer nc.Close()
	// A small buffer: most frames are small (a barrier's is 13 bytes),
	// and one larger than the buffer is read into its own memory
	// directly; 4 KiB per connection made the first Barrier's
	// allocations (and GC) larger.
	br := bufio.NewReaderSize(nc, peerReadBuffer)
	_ = nc.SetReadDeadline(time.Now().Add(helloWait(c.timeout)))
	c.pending.reading(nc)
	b, err := readFrame(br, maxHelloSize)
	if !c.pending.done(nc) && err == nil {
		err = errEvicted
	}
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
		default:
			err = c.checkToken(nc, br, h)
		}
	}
	if err == nil {
		c.mu.Lock()
		if c.inPeers[h.rank] {
			err = fmt.Errorf("second connection from rank %d", h.rank)
		} else {
			pi := &peerIn{lock: make(chan struct{}, 1), conn: nc}
			c.in[h.rank] = pi
			defer func() {
				c.mu.Lock()
				if c.in[h.rank] == pi {
					delete(c.in, h.rank)
				}
				c.mu.Unlock()
			}()
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
	c.readMessages(nc, br, h, func() {
		// A real rank sends its hello and first message together:
		// this was not one. Let the rank connect.
		c.mu.Lock()
		delete(c.inPeers, h.rank)
		c.mu.Unlock()
	})
}

// readMessages delivers the messages of peer h.rank (whose hello h was
// checked) arriving on nc until the stream ends or breaks the rules;
// undelivered, if not nil, runs when it ends before any message came.
func (c *Conn) readMessages(nc net.Conn, br *bufio.Reader, h hello, undelivered func()) {
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
				if undelivered != nil {
					undelivered()
				}
				return
			}
			c.box.peerGone(h.rank, fmt.Errorf("%w: rank %d (%v)", ErrPeerClosed, h.rank, err))
			return
		}
		delivered = true
		class, tag := b[0], int64(binary.BigEndian.Uint64(b[1:]))
		if class > classColl {
			if !c.control(h.rank, h.token, class, tag, b[msgHeader:]) && c.box.closedErr() == nil {
				c.log.Warn("bootstrap: dropped a malformed message", "peer", h.rank, "class", class, "tag", tag, "len", len(b)-msgHeader)
			}
			continue
		}
		c.box.deliver(msgKey{peer: h.rank, class: class, tag: tag}, b[msgHeader:])
	}
}

// peerReadBuffer is the read buffer of a connection from a peer.
const peerReadBuffer = 512

// checkToken checks the token of peer hello h, which arrived on nc: it
// must be the one this rank holds for h.rank. When this rank holds none
// but is looking h.rank up, the connection's first frame must be the
// answer (see addrOf); checkToken reads and handles it.
func (c *Conn) checkToken(nc net.Conn, br *bufio.Reader, h hello) error {
	want, ok, looking := c.tokenOf(h.rank)
	switch {
	case ok && h.token != want:
		// It knows the id but did not check in as that rank: an
		// impostor, refused before it can deliver anything.
		return fmt.Errorf("%w: a connection claims rank %d without its check-in token (another process holding the unique id?)", ErrBadMagic, h.rank)
	case ok:
		return nil
	case !looking:
		return fmt.Errorf("%w: a connection claims rank %d, whose check-in token this rank has not learned (another process holding the unique id?)", ErrBadMagic, h.rank)
	}
	// The hello and the answer come together: the hello's deadline holds.
	b, err := readFrame(br, msgHeader+8+maxAddrLen)
	if err != nil {
		return fmt.Errorf("%w: rank %d's answer to a lookup: %v", ErrBadMagic, h.rank, err)
	}
	if len(b) < msgHeader || b[0] != classFound || !c.control(h.rank, h.token, b[0], int64(binary.BigEndian.Uint64(b[1:])), b[msgHeader:]) {
		return fmt.Errorf("%w: a connection claims rank %d without its check-in token, and its first message is no answer to this rank's lookup (another process holding the unique id?)", ErrBadMagic, h.rank)
	}
	return nil
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
	if err == nil {
		// tryWrite must not find an old deadline in the past.
		_ = nc.SetWriteDeadline(time.Time{})
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
	// Find the address first, holding no lock: answering the peer's own
	// lookup of this rank may need the lock of the connection to it.
	addr, err := c.addrOf(ctx, peer)
	if err != nil {
		return err
	}
	return c.sendTo(ctx, peer, addr, nil, class, tag, data)
}

// sendTo sends a message to peer, which listens at addr, dialing it if
// this rank has no connection to it yet; locked, if not nil, runs once
// the connection is this call's, before anything is written.
func (c *Conn) sendTo(ctx context.Context, peer int, addr string, locked func(), class byte, tag int64, data []byte) error {
	c.mu.Lock()
	po := c.out[peer]
	if po == nil {
		po = &peerOut{lock: make(chan struct{}, 1)}
		c.out[peer] = po
	}
	c.mu.Unlock()
	select {
	case po.lock <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-c.box.done:
		return c.box.closedErr()
	}
	defer func() { <-po.lock }()
	if locked != nil {
		locked()
	}
	if po.err != nil {
		return po.err
	}
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	var helloFrame []byte
	if po.conn == nil {
		d := dialer(c.localIP)
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("dial rank %d at %s: %w", peer, addr, err)
		}
		if !c.socks.track(nc) {
			nc.Close()
			return c.box.closedErr()
		}
		po.conn = nc
		helloFrame = c.helloFrame()
		// The peer may answer on this connection (replyMsg).
		c.wg.Add(1)
		go c.readReplies(peer, nc)
	}
	err := writeMsg(ctx, po.conn, helloFrame, class, tag, data)
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

// helloFrame is this rank's hello to a peer.
func (c *Conn) helloFrame() []byte {
	return hello{magic: c.magic, kind: helloPeer, rank: c.rank, nRanks: c.size, token: c.token}.encode()
}

// writeMsg writes a message to nc, preceded by helloFrame when not nil,
// bounded by ctx.
func writeMsg(ctx context.Context, nc net.Conn, helloFrame []byte, class byte, tag int64, data []byte) error {
	var hdr [msgHeader]byte
	hdr[0] = class
	binary.BigEndian.PutUint64(hdr[1:], uint64(tag))
	var err error
	if size := 4 + len(helloFrame) + 4 + msgHeader + len(data); size <= fastFrameMax {
		// The common case: the frame (with the hello on a new
		// connection) in one buffer and one write, which the socket
		// takes at once: no deadline, no timer, no goroutine. Only
		// what it does not take waits, bounded by ctx.
		bp := framePool.Get().(*[]byte)
		buf := (*bp)[:0]
		if len(helloFrame) > 0 {
			buf = appendFrame(buf, helloFrame)
		}
		buf = appendFrame(buf, hdr[:], data)
		var n int
		n, err = tryWrite(nc, buf)
		if err == nil && n < len(buf) {
			err = withConnCtx(ctx, nc, func() error {
				_, err := nc.Write(buf[n:])
				return err
			})
		}
		*bp = buf
		framePool.Put(bp)
	} else {
		err = withConnCtx(ctx, nc, func() error {
			if len(helloFrame) > 0 {
				if err := writeFrame(nc, helloFrame); err != nil {
					return err
				}
			}
			return writeFrame(nc, hdr[:], data)
		})
	}
	return err
}

// replyMsg sends a message to peer over the connection peer opened to
// this rank, preceded on its first use by this rank's hello, which the
// peer checks as it checks any hello (readReplies).
func (c *Conn) replyMsg(ctx context.Context, peer int, class byte, tag int64, data []byte) error {
	if err := c.box.closedErr(); err != nil {
		return err
	}
	if len(data) > c.maxMsg {
		return fmt.Errorf("bootstrap: %d-byte message exceeds the %d byte limit (Options.MaxMessageSize)", len(data), c.maxMsg)
	}
	c.mu.Lock()
	pi := c.in[peer]
	c.mu.Unlock()
	if pi == nil {
		return fmt.Errorf("bootstrap: no connection from rank %d to answer on", peer)
	}
	select {
	case pi.lock <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-c.box.done:
		return c.box.closedErr()
	}
	defer func() { <-pi.lock }()
	if pi.err != nil {
		return pi.err
	}
	var helloFrame []byte
	if !pi.hello {
		helloFrame = c.helloFrame()
	}
	err := writeMsg(ctx, pi.conn, helloFrame, class, tag, data)
	if err != nil {
		pi.err = fmt.Errorf("connection from rank %d broken: %w", peer, err)
		pi.conn.Close()
		if cerr := c.box.closedErr(); cerr != nil {
			return cerr
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return pi.err
	}
	pi.hello = true
	return nil
}

// readReplies reads what peer sends back on nc, the connection this rank
// opened to it: first peer's hello, which must carry the token this rank
// holds for it, then messages. It closes nc when the stream ends.
func (c *Conn) readReplies(peer int, nc net.Conn) {
	defer c.wg.Done()
	defer nc.Close()
	br := bufio.NewReaderSize(nc, peerReadBuffer)
	b, err := readFrame(br, maxHelloSize) // the peer may never answer: no deadline
	if err != nil {
		return
	}
	h, err := decodeHello(b, c.magic)
	if err == nil {
		want, ok, _ := c.tokenOf(peer)
		switch {
		case h.kind != helloPeer || h.rank != peer || h.nRanks != c.size:
			err = fmt.Errorf("%w: answer from rank %d says rank %d of %d (kind %d)", ErrBadMagic, peer, h.rank, h.nRanks, h.kind)
		case !ok || h.token != want:
			err = fmt.Errorf("%w: answer from rank %d's address without its check-in token", ErrBadMagic, peer)
		}
	}
	if err != nil {
		if c.box.closedErr() == nil {
			c.log.Warn("bootstrap: rejected an answer", "peer", peer, "remote", nc.RemoteAddr().String(), "err", err)
		}
		return
	}
	c.readMessages(nc, br, h, nil)
}

// fastFrameMax is the largest frame that sendTo copies into a pooled
// buffer and writes with one system call.
const fastFrameMax = 64 << 10

var framePool = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// appendFrame appends a frame made of parts to b.
func appendFrame(b []byte, parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// tryWrite writes as much of b to nc as its socket takes without
// waiting, and returns how much that was; an error means that the
// connection failed.
func tryWrite(nc net.Conn, b []byte) (int, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return 0, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, nil
	}
	n := 0
	var werr error
	err = rc.Write(func(fd uintptr) bool {
		for n < len(b) {
			k, e := syscall.Write(int(fd), b[n:])
			switch {
			case e == syscall.EINTR:
				continue
			case e == syscall.EAGAIN:
				return true
			case e != nil:
				werr = os.NewSyscallError("write", e)
				return true
			}
			n += k
		}
		return true
	})
	if werr == nil {
		werr = err
	}
	return n, werr
}

func (c *Conn) recvMsg(ctx context.Context, peer int, class byte, tag int64) ([]byte, error) {
	return c.box.recv(ctx, msgKey{peer: peer, class: class, tag: tag})
}

// AllGather implements Network: up and down two binomial trees when every
// block is small, the ring otherwise.
func (c *Conn) AllGather(ctx context.Context, mine []byte) ([][]byte, error) {
	return allGather(ctx, c, mine)
}

// Barrier implements Network: up and down two binomial trees, 2·⌈log2 n⌉
// steps.
func (c *Conn) Barrier(ctx context.Context) error {
	return barrier(ctx, c)
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
	c.endLife()
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
