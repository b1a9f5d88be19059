package bootstrap

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Root serves the check-in of one communicator: it collects the listen
// address and check-in token of every rank and, once all have arrived,
// sends each of them its table (its fingers and the ranks that dial it),
// until every rank acknowledged its table. It runs in its own goroutines
// from NewRoot until the check-in is served, it times out, its context
// ends, or Close is called.
type Root struct {
	ln      net.Listener
	id      UniqueID
	magic   uint64
	timeout time.Duration
	log     *slog.Logger
	cancel  context.CancelCauseFunc
	done    chan struct{}
	err     error // outcome, set before done is closed

	socks   connSet        // every accepted socket, to close on shutdown
	pending pendingSet     // accepted sockets that have not said hello
	wg      sync.WaitGroup // accept loop and connection handlers
}

// NewRoot starts a root and returns it with the UniqueID that ranks pass to
// Init. It listens on Options.Addr, else NCCL_COMM_ID, else the interface
// that Options.Interface / NCCL_SOCKET_IFNAME selects, else the first up
// non-loopback interface, else loopback. Cancelling ctx stops the root.
func NewRoot(ctx context.Context, opts Options) (*Root, UniqueID, error) {
	timeout, err := opts.timeout()
	if err != nil {
		return nil, UniqueID{}, err
	}
	addr, err := rootListenAddr(opts)
	if err != nil {
		return nil, UniqueID{}, err
	}
	lc := net.ListenConfig{KeepAlive: -1} // see "Limits" in doc.go
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, UniqueID{}, fmt.Errorf("bootstrap: root listen on %s: %w", addr, err)
	}
	ap, err := netip.ParseAddrPort(ln.Addr().String())
	if err != nil {
		ln.Close()
		return nil, UniqueID{}, fmt.Errorf("bootstrap: root listen address %s: %w", ln.Addr(), err)
	}
	if ap.Addr().IsUnspecified() {
		// Listening on 0.0.0.0 or ::; advertise an address ranks can reach.
		fam, _ := opts.family()
		ifs, err := systemInterfaces()
		if err == nil {
			if a, _, err2 := pickAddr(ifs, opts.ifaceSpec(), fam); err2 == nil {
				ap = netip.AddrPortFrom(a, ap.Port())
			}
		}
	}
	id, err := newUniqueID(ap)
	if err != nil {
		ln.Close()
		return nil, UniqueID{}, err
	}
	magic, _, _ := id.decode()
	ctx, cancel := context.WithCancelCause(ctx)
	r := &Root{
		ln: ln, id: id, magic: magic, timeout: timeout,
		log:    opts.logger().With("role", "root", "addr", ap.String()),
		cancel: cancel, done: make(chan struct{}),
	}
	go r.serve(ctx)
	return r, id, nil
}

// ID returns the root's UniqueID.
func (r *Root) ID() UniqueID { return r.id }

// Addr returns the address the root listens on.
func (r *Root) Addr() net.Addr { return r.ln.Addr() }

// Done is closed when the root has stopped.
func (r *Root) Done() <-chan struct{} { return r.done }

// Wait waits until the root stops (or ctx ends) and returns its outcome: nil
// once every rank acknowledged its table; a *TimeoutError (ErrTimeout)
// naming the ranks that never checked in, or (Unacked) that never
// acknowledged their tables; ErrClosed after Close; the context's error
// when NewRoot's context ended.
func (r *Root) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return fmt.Errorf("bootstrap: waiting for root: %w", context.Cause(ctx))
	}
}

// Close stops the root if it is still serving and waits for its goroutines
// to exit. It is safe to call more than once and after the root finished.
func (r *Root) Close() error {
	r.cancel(ErrClosed)
	<-r.done
	return nil
}

// RootSlice returns the ranks [lo, hi) whose check-in root i of nRoots
// serves in a bootstrap of nRanks ranks (JoinScalable): consecutive
// slices, as even as can be.
func RootSlice(i, nRoots, nRanks int) (lo, hi int) {
	return i * nRanks / nRoots, (i + 1) * nRanks / nRoots
}

// RootOfRank returns the root (0..nRoots-1) that serves rank's check-in
// (RootOf is the root network under a View).
func RootOfRank(rank, nRoots, nRanks int) int {
	i := rank * nRoots / nRanks // never past the answer
	for {
		if _, hi := RootSlice(i, nRoots, nRanks); rank < hi {
			return i
		}
		i++
	}
}

type rootEventKind int

const (
	evHello rootEventKind = iota
	evQuery
	evGone
	evSlice // another root's slice of the table
	evPushed
	evAck // a rank acknowledged its table
)

type rootEvent struct {
	kind    rootEventKind
	conn    net.Conn
	h       hello
	lo      int          // evSlice
	entries []tableEntry // evSlice
	err     error        // evPushed; evGone: what the peer did wrong, if anything
}

func (r *Root) acceptLoop(events chan<- rootEvent, quit <-chan struct{}) {
	defer r.wg.Done()
	acceptLoop(r.ln, quit, r.log, func(c net.Conn) bool {
		if old := r.pending.add(c, quit); old != nil {
			r.socks.untrack(old)
		}
		if !r.socks.track(c) {
			r.pending.done(c)
			c.Close()
			return false
		}
		r.wg.Add(1)
		go r.handle(c, events, quit)
		return true
	})
}

// handle reads the hello of one connection, then its queries, forwarding
// them to serve. A connection that says nothing for min(5 s, timeout) is
// closed, and at most maxPendingHellos wait for their hello, so that
// silent strangers cannot use up the file descriptors.
func (r *Root) handle(c net.Conn, events chan<- rootEvent, quit <-chan struct{}) {
	defer r.wg.Done()
	defer r.socks.untrack(c)
	defer c.Close()
	send := func(ev rootEvent) bool {
		select {
		case events <- ev:
			return true
		case <-quit:
			return false
		}
	}
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(helloWait(r.timeout)))
	r.pending.reading(c)
	b, err := readFrame(br, maxHelloSize)
	if !r.pending.done(c) && err == nil {
		err = errEvicted
	}
	var h hello
	if err == nil {
		h, err = decodeHello(b, r.magic)
		if err == nil && h.kind != helloCheckIn && h.kind != helloCheckInRoots && h.kind != helloRootPeer {
			err = fmt.Errorf("%w: hello kind %d sent to the root", ErrBadMagic, h.kind)
		}
		if err == nil && h.kind == helloRootPeer {
			// Another root's slice follows at once.
			if b, err = readFrame(br, sliceLimit(h.nRanks)); err == nil {
				var ev = rootEvent{kind: evSlice, conn: c, h: h}
				if ev.lo, ev.entries, err = decodeSlice(b, h.nRanks); err == nil {
					// The pusher retries until it reads this.
					_ = c.SetWriteDeadline(time.Now().Add(helloWait(r.timeout)))
					_ = writeFrame(c, []byte{msgAck})
					send(ev)
					return
				}
			}
			err = fmt.Errorf("%w: slice from root %d: %v", ErrBadMagic, h.rank, err)
		}
	} else if errors.Is(err, errFrameTooLong) {
		err = fmt.Errorf("%w: %v", ErrBadMagic, err)
	}
	if err != nil {
		select {
		case <-quit: // shutting down: not the stranger's fault
		default:
			lvl := slog.LevelDebug
			if errors.Is(err, ErrBadMagic) {
				lvl = slog.LevelWarn
			}
			r.log.Log(context.Background(), lvl, "bootstrap root: rejected connection", "remote", c.RemoteAddr().String(), "err", err)
		}
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if !send(rootEvent{kind: evHello, conn: c, h: h}) {
		return
	}
	// Then queries and the acknowledgement of the table, until the rank
	// hangs up. Anything else is the peer's error: logged by serve, and
	// the connection is closed.
	for {
		ev := rootEvent{kind: evQuery, conn: c, h: h}
		b, err := readFrame(br, ackLen)
		switch {
		case errors.Is(err, errFrameTooLong):
			ev.kind, ev.err = evGone, err
		case err != nil:
			ev.kind = evGone
		case len(b) == 1 && b[0] == msgQuery:
		case len(b) > 0 && b[0] == msgAck:
			ev.kind = evAck
			if ev.err = decodeAck(b, h); ev.err != nil {
				ev.kind = evGone
			}
		default:
			ev.kind, ev.err = evGone, fmt.Errorf("unexpected %d-byte frame", len(b))
			if len(b) > 0 {
				ev.err = fmt.Errorf("%w of kind %q (want a query or an acknowledgement)", ev.err, b[0])
			}
		}
		if !send(ev) || ev.kind == evGone {
			return
		}
	}
}

// tableFor returns rank's table (see tableLen): its own entry, its
// fingers' (ranks rank+2^k), and the tokens of the ranks rank-2^k, which
// dial it in the collectives and whose lookups it forwards.
func tableFor(all []tableEntry, rank int) []tableEntry {
	n := len(all)
	k := rounds(n)
	t := make([]tableEntry, 0, tableLen(n))
	t = append(t, all[rank])
	for j := range k {
		t = append(t, all[(rank+1<<j)%n])
	}
	for j := range k {
		t = append(t, tableEntry{token: all[((rank-1<<j)%n+n)%n].token})
	}
	return t
}

// push hands this root's slice of the table to another root of the same
// bootstrap, retrying while that root is not listening yet, and until it
// acknowledges the slice: a root short of CPU may close a connection
// whose hello it has not read in time (see maxPendingHellos), and the
// writes into it may still have succeeded here.
func (r *Root) push(ctx context.Context, to rootRef, index, nRanks int, payload []byte, events chan<- rootEvent, quit <-chan struct{}) {
	defer r.wg.Done()
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	once := func() error {
		c, err := dialRetry(ctx, to.addr, netip.Addr{})
		if err != nil {
			return fmt.Errorf("dialing root at %s: %w", to.addr, err)
		}
		defer c.Close()
		stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
		defer stop()
		_ = c.SetDeadline(time.Now().Add(helloWait(r.timeout)))
		h := hello{magic: to.magic, kind: helloRootPeer, rank: index, nRanks: nRanks}
		if err := writeFrame(c, h.encode()); err != nil {
			return err
		}
		if err := writeFrame(c, payload); err != nil {
			return err
		}
		b, err := readFrame(c, 1)
		if err == nil && (len(b) != 1 || b[0] != msgAck) {
			err = fmt.Errorf("%w: root at %s answered a slice with %q", ErrBadMagic, to.addr, b)
		}
		return err
	}
	backoff := checkInBackoffMin
	var err error
	for {
		err = once()
		var ne net.Error
		if err == nil || ctx.Err() != nil || !(connLost(err) || errors.As(err, &ne) && ne.Timeout()) {
			break
		}
		r.log.Debug("bootstrap root: slice not acknowledged, pushing again", "root", to.addr, "err", err, "retry_in", backoff)
		t := time.NewTimer(jitter(backoff))
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, checkInBackoffMax)
	}
	select {
	case events <- rootEvent{kind: evPushed, err: err}:
	case <-quit:
	}
}

// serve runs the check-in state machine; it alone writes to rank
// connections.
func (r *Root) serve(ctx context.Context) {
	defer close(r.done)
	defer r.cancel(nil)
	start := time.Now()
	events := make(chan rootEvent)
	quit := make(chan struct{})
	r.wg.Add(1)
	go r.acceptLoop(events, quit)

	timer := time.NewTimer(r.timeout)
	defer timer.Stop()
	nRanks := 0
	var roots []rootRef // several roots: all of them, from the first check-in
	index, lo, hi := 0, 0, 0
	arrived := map[int]net.Conn{}
	entries := map[int]tableEntry{} // every rank's entry known so far
	hungUp := map[int]bool{}
	// all is every rank's entry once the tables are written: the root
	// then answers a rank that checks in again with its table again, and
	// stops once every rank of its slice acknowledged its table.
	var all []tableEntry
	acked := map[int]bool{}
	faults := map[int]error{} // what a rank's connection did wrong, for the final error
	pushed := false
	pushing := 0 // pushes under way: the root waits for them before it stops
	pctx, stopPushes := context.WithCancel(ctx)
	defer stopPushes()
	// missing lists the first missing ranks and counts them all: its cost
	// does not grow with the nRanks that a check-in claimed. A rank is
	// missing until some root has its entry (this one through its
	// check-in, another through that root's slice).
	missing := func() (listed []int, n int) {
		listed = []int{}
		if all != nil {
			for i := lo; i < hi && len(listed) < maxListedMissing; i++ {
				if !acked[i] {
					listed = append(listed, i)
				}
			}
			return listed, hi - lo - len(acked)
		}
		for i := 0; i < nRanks && len(listed) < maxListedMissing; i++ {
			if _, ok := entries[i]; !ok {
				listed = append(listed, i)
			}
		}
		if len(entries) < nRanks || len(hungUp) == 0 {
			return listed, nRanks - len(entries)
		}
		// Everybody checked in, but some hung up before their table
		// came: those are the ones missing.
		for i := range nRanks {
			if hungUp[i] && len(listed) < maxListedMissing {
				listed = append(listed, i)
			}
		}
		return listed, len(hungUp)
	}
	// faultsOf joins what the connections of ranks did wrong, if anything.
	faultsOf := func(ranks []int) error {
		var errs []error
		for _, i := range ranks {
			errs = append(errs, faults[i])
		}
		return errors.Join(errs...)
	}
	statusNow := func(final bool, afterMS uint64) status {
		m, n := missing()
		return status{final: final, afterMS: afterMS, nRanks: nRanks, nMissing: n, missing: m}
	}
	write := func(c net.Conn, payload []byte) {
		_ = c.SetWriteDeadline(time.Now().Add(min(r.timeout, 5*time.Second)))
		if err := writeFrame(c, payload); err != nil {
			r.log.Debug("bootstrap root: write failed", "remote", c.RemoteAddr().String(), "err", err)
		}
	}
	// Slices from other roots before our first rank, at most one per root
	// index (decodeHello bounds it by MaxRoots): the first one of each.
	early := map[int]rootEvent{}
	took := map[int]bool{} // root indexes whose slice we hold
	takeSlice := func(ev rootEvent) {
		if roots == nil || ev.h.nRanks != nRanks || ev.h.rank == index || ev.h.rank >= len(roots) {
			r.log.Warn("bootstrap root: dropped a slice from an unexpected root", "root", ev.h.rank, "nranks", ev.h.nRanks)
			return
		}
		if l, h := RootSlice(ev.h.rank, len(roots), nRanks); ev.lo != l || len(ev.entries) != h-l {
			r.log.Warn("bootstrap root: dropped a malformed slice", "root", ev.h.rank, "lo", ev.lo, "count", len(ev.entries))
			return
		}
		if took[ev.h.rank] {
			// The first slice of a root stands: a second one comes from
			// a stranger that holds the ids (or the first did).
			r.log.Warn("bootstrap root: dropped a second slice from a root (is another process using these unique ids?)", "root", ev.h.rank)
			return
		}
		took[ev.h.rank] = true
		for i, e := range ev.entries {
			entries[ev.lo+i] = e
		}
	}
	// gone handles a rank's connection that ended (ev.err says what the
	// peer did wrong, if anything; the connection is then closed). A rank
	// that hung up keeps its entry (another root may hold it already) but
	// is missing until it checks in again: it could not receive its table,
	// or not acknowledge it.
	gone := func(ev rootEvent) {
		rank := ev.h.rank
		if arrived[rank] != ev.conn || acked[rank] {
			return
		}
		if ev.err != nil {
			err := fmt.Errorf("rank %d at %s: %w", rank, ev.conn.RemoteAddr(), ev.err)
			r.log.Warn("bootstrap root: dropped a rank's check-in connection", "err", err)
			faults[rank] = err
			ev.conn.Close()
		}
		if all == nil {
			r.log.Debug("bootstrap root: rank hung up before the check-in completed", "rank", rank)
			hungUp[rank] = true
		} else {
			r.log.Debug("bootstrap root: rank hung up before it acknowledged its table", "rank", rank)
		}
	}
	graceful := false
loop:
	for {
		if nRanks > 0 && len(arrived) == hi-lo && !pushed && len(roots) > 1 {
			// Our slice is complete: hand it to the other roots.
			pushed = true
			mine := make([]tableEntry, hi-lo)
			for i := range mine {
				mine[i] = entries[lo+i]
			}
			payload := encodeSlice(lo, mine)
			for j, peer := range roots {
				if j != index {
					r.wg.Add(1)
					pushing++
					go r.push(pctx, peer, index, nRanks, payload, events, quit)
				}
			}
		}
		if all == nil && nRanks > 0 && len(arrived) == hi-lo && len(hungUp) == 0 && len(entries) == nRanks && pushing == 0 {
			all = make([]tableEntry, nRanks)
			for i := range all {
				all[i] = entries[i]
			}
			for rank, c := range arrived {
				write(c, encodeTable(tableFor(all, rank)))
			}
			r.log.Debug("bootstrap root: all ranks checked in, tables sent", "nranks", nRanks, "slice", fmt.Sprintf("[%d,%d)", lo, hi), "elapsed", time.Since(start))
		}
		if all != nil && len(acked) == hi-lo {
			// A table written is not a table received (the first write
			// into a connection that the peer closed succeeds): the
			// root is done once every rank said it has its table.
			r.log.Debug("bootstrap root: every rank acknowledged its table", "nranks", nRanks, "slice", fmt.Sprintf("[%d,%d)", lo, hi), "elapsed", time.Since(start))
			graceful = true
			break loop
		}
		select {
		case ev := <-events:
			switch ev.kind {
			case evHello:
				h := ev.h
				if nRanks == 0 {
					nRanks, lo, hi = h.nRanks, 0, h.nRanks
					if h.kind == helloCheckInRoots {
						roots, index = h.roots, h.rootIndex
						lo, hi = RootSlice(index, len(roots), nRanks)
					}
				}
				var why string
				switch {
				case h.nRanks != nRanks:
					why = fmt.Sprintf("rank %d says %d ranks, others said %d (is another process using this unique id?)", h.rank, h.nRanks, nRanks)
				case (h.kind == helloCheckInRoots) != (roots != nil) || h.rootIndex != index || !slices.Equal(h.roots, roots):
					why = fmt.Sprintf("rank %d names %d roots with this one as root %d, others named %d with this one as root %d", h.rank, max(1, len(h.roots)), h.rootIndex, max(1, len(roots)), index)
				case roots != nil && roots[index].magic != r.magic:
					why = fmt.Sprintf("rank %d says this root is root %d, whose id is another root's", h.rank, index)
				case h.rank < lo || h.rank >= hi:
					why = fmt.Sprintf("rank %d checked in with root %d, which serves ranks %d..%d", h.rank, index, lo, hi-1)
				case all != nil && entries[h.rank].token != h.token:
					why = fmt.Sprintf("rank %d checked in after the tables were sent, with another token than its first check-in (is another process using this unique id?)", h.rank)
				case arrived[h.rank] != nil && !hungUp[h.rank] && entries[h.rank].token != h.token:
					why = fmt.Sprintf("rank %d checked in twice", h.rank)
				}
				if why != "" {
					r.log.Warn("bootstrap root: rejected check-in", "remote", ev.conn.RemoteAddr().String(), "reason", why)
					write(ev.conn, append([]byte{msgReject}, why...))
					ev.conn.Close()
					continue
				}
				if old := arrived[h.rank]; old != nil && old != ev.conn {
					// The rank came back (its first connection broke, or
					// it hung up): the new connection replaces the old.
					old.Close()
				}
				arrived[h.rank] = ev.conn
				if all != nil {
					// Its check-in broke before the table arrived: the
					// same rank (same token) asks again.
					write(ev.conn, encodeTable(tableFor(all, h.rank)))
					r.log.Debug("bootstrap root: rank checked in again, table sent again", "rank", h.rank)
					continue
				}
				entries[h.rank] = tableEntry{addr: h.addr, token: h.token}
				for _, ev := range early {
					takeSlice(ev)
				}
				clear(early)
				delete(hungUp, h.rank)
				r.log.Debug("bootstrap root: rank checked in", "rank", h.rank, "nranks", nRanks, "addr", h.addr)
			case evSlice:
				if nRanks == 0 {
					if _, dup := early[ev.h.rank]; !dup {
						early[ev.h.rank] = ev // before our first rank
					}
					continue
				}
				takeSlice(ev)
			case evPushed:
				pushing--
				if ev.err != nil {
					r.log.Warn("bootstrap root: could not hand this root's slice to another root", "err", ev.err)
				}
			case evQuery:
				if arrived[ev.h.rank] == ev.conn {
					write(ev.conn, statusNow(false, uint64(time.Since(start).Milliseconds())).encode())
				}
			case evAck:
				switch {
				case arrived[ev.h.rank] != ev.conn:
					// A connection that another check-in of the rank
					// replaced: its acknowledgement comes on that one.
				case all == nil:
					ev.err = errors.New("acknowledged a table before the root sent one")
					gone(ev)
				default:
					acked[ev.h.rank] = true
					delete(faults, ev.h.rank)
				}
			case evGone:
				gone(ev)
			}
		case <-timer.C:
			st := statusNow(true, uint64(r.timeout.Milliseconds()))
			if nRanks == 0 {
				r.err = &TimeoutError{Op: "root", After: r.timeout, Cause: errors.New("no rank checked in")}
			} else {
				te := st.timeoutError("", r.timeout)
				te.Unacked = all != nil
				te.Cause = faultsOf(st.missing)
				r.err = te
			}
			r.log.Warn(r.err.Error())
			if all == nil {
				// The ranks that wait for a table learn who is missing.
				payload := st.encode()
				for _, c := range arrived {
					write(c, payload)
				}
			}
			graceful = true
			break loop
		case <-ctx.Done():
			cause := context.Cause(ctx)
			m, _ := missing()
			what := "missing"
			if all != nil {
				what = "yet to acknowledge their tables"
			}
			if errors.Is(cause, ErrClosed) {
				r.err = fmt.Errorf("bootstrap: root closed with ranks %s of %d %s: %w", formatRanks(m), nRanks, what, ErrClosed)
			} else {
				r.err = fmt.Errorf("bootstrap: root stopped with ranks %s of %d %s: %w", formatRanks(m), nRanks, what, cause)
			}
			if f := faultsOf(m); f != nil {
				r.err = fmt.Errorf("%w (%v)", r.err, f)
			}
			break loop
		}
	}

	// Shut down: no more connections; strangers and pending connections are
	// closed now; rank connections are half-closed so that the ranks read
	// everything, and closed when they hang up or after a grace period.
	close(quit)
	stopPushes()
	r.ln.Close()
	ranks := make(map[net.Conn]bool, len(arrived))
	for _, rc := range arrived {
		ranks[rc] = true
	}
	r.socks.shut(func(c net.Conn) {
		if graceful && ranks[c] {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
				return
			}
		}
		c.Close()
	})
	waited := make(chan struct{})
	go func() { r.wg.Wait(); close(waited) }()
	grace := time.NewTimer(min(r.timeout, 2*time.Second))
	defer grace.Stop()
	select {
	case <-waited:
		return
	case <-grace.C:
	case <-ctx.Done():
	}
	r.socks.closeAll()
	<-waited
}
