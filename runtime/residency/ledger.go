package residency

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// EnvMPSPercent is the MPS variable that limits a client to a share of
// the GPU's SMs (see MPSBudget).
const EnvMPSPercent = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"

// Poll intervals of a waiting Ticket: it starts at minPoll and doubles up
// to maxPoll.
const (
	minPoll = 10 * time.Microsecond
	maxPoll = 500 * time.Microsecond
)

// ErrNoRequest is returned by Ticket.Next once every request has been
// returned.
var ErrNoRequest = errors.New("residency: every request of the ticket was already admitted")

// Completion reports whether the work it stands for has finished.
// *cuda.Event satisfies it; an error counts as finished (the work is dead).
type Completion interface {
	Query() (bool, error)
}

// Budget is the number of blocks that can be resident on a GPU at once:
// smCount × blocksPerSM, scaled by the MPS share mpsPercent (the value of
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; empty means the whole GPU), rounding
// the SMs down.
func Budget(smCount, blocksPerSM int, mpsPercent string) (int, error) {
	if smCount < 1 || blocksPerSM < 1 {
		return 0, fmt.Errorf("residency: SMs=%d, blocks per SM=%d: want both at least 1", smCount, blocksPerSM)
	}
	sms := smCount
	if s := strings.TrimSpace(mpsPercent); s != "" {
		p, err := strconv.ParseFloat(s, 64)
		if err != nil || !(p > 0 && p <= 100) {
			return 0, fmt.Errorf("residency: %s=%q: want a percentage in (0, 100]", EnvMPSPercent, mpsPercent)
		}
		sms = max(1, int(math.Floor(float64(smCount)*p/100+1e-9)))
	}
	return sms * blocksPerSM, nil
}

// Ledger accounts the co-resident blocks of every communicator of this
// process, per GPU. GPUs are named by strings of the caller's choosing (a
// device ordinal, a UUID). It is safe for concurrent use.
type Ledger struct {
	mu      sync.Mutex
	gpus    map[string]*gpuState
	leases  map[string]*Lease   // joined leases by key
	held    map[*Lease]struct{} // leases holding blocks
	queue   []*request          // waiting requests, oldest first
	changed chan struct{}       // closed and replaced on a change while someone sleeps
	asleep  int                 // Tickets waiting on changed
}

// gpuState is a GPU's blocks: those reserved by held leases, and how many
// may be resident. A GPU that a lease's ranks run on but on which no rank
// joined yet has no budget (joined false): it counts reservations but
// limits none.
type gpuState struct {
	budget, used int
	joined       bool
}

// leaseGPU is a GPU of a lease and the lease's ranks on it.
type leaseGPU struct {
	st    *gpuState
	ranks int
}

// New returns an empty ledger.
func New() *Ledger {
	return &Ledger{gpus: map[string]*gpuState{}, leases: map[string]*Lease{},
		held: map[*Lease]struct{}{}, changed: make(chan struct{})}
}

var process = New()

// Default returns the ledger of this process.
func Default() *Ledger { return process }

// Lease is one communicator's claim on the ledger, shared by its ranks in
// this process.
type Lease struct {
	l        *Ledger
	key      string
	local    map[string]int // GPU → ranks of the communicator on it in this process
	gpus     []leaseGPU     // local, with each GPU's state, in GPU order
	maxWidth int
	members  int

	held       bool
	width      int    // blocks per rank reserved while held
	grantedEnd uint64 // sequence numbers below are covered while held
	pins       int    // admitted launches not yet Done
	latest     map[int]Completion
}

// Key returns the name the lease was joined under.
func (s *Lease) Key() string { return s.key }

// Join registers a rank of the communicator key running on gpu, whose
// blocks budget is budget (the smallest budget given for a GPU wins),
// and returns the communicator's lease, creating it for the first rank.
// local gives, per GPU, the communicator's ranks in this process on it;
// maxWidth is the most blocks one rank's launch may use. Every rank of the
// communicator in this process must join, with the same local and
// maxWidth, before any of them launches; each calls Leave when done.
func (l *Ledger) Join(key, gpu string, budget int, local map[string]int, maxWidth int) (*Lease, error) {
	if budget < 1 || maxWidth < 1 {
		return nil, fmt.Errorf("residency: Join(%q): budget=%d, maxWidth=%d: want both at least 1", key, budget, maxWidth)
	}
	if local[gpu] < 1 {
		return nil, fmt.Errorf("residency: Join(%q): local=%v: want at least one rank on the joining GPU %q", key, local, gpu)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.gpu(gpu)
	if !g.joined {
		g.joined, g.budget = true, budget
	}
	g.budget = min(g.budget, budget)
	if need := maxWidth * local[gpu]; need > g.budget {
		return nil, fmt.Errorf("residency: communicator %s needs %d blocks on GPU %s (%d ranks × %d channels) but only %d can be resident at once",
			key, need, gpu, local[gpu], maxWidth, g.budget)
	}
	s := l.leases[key]
	if s == nil {
		s = &Lease{l: l, key: key, local: maps.Clone(local), maxWidth: maxWidth, latest: map[int]Completion{}}
		for _, name := range slices.Sorted(maps.Keys(local)) {
			s.gpus = append(s.gpus, leaseGPU{st: l.gpu(name), ranks: local[name]})
		}
		l.leases[key] = s
	} else if !maps.Equal(s.local, local) || s.maxWidth != maxWidth {
		return nil, fmt.Errorf("residency: Join(%q): local=%v, maxWidth=%d disagree with an earlier rank's %v, %d",
			key, local, maxWidth, s.local, s.maxWidth)
	}
	s.members++
	return s, nil
}

// gpu returns the state of the GPU name, making it (not joined) for a GPU
// new to the ledger. l.mu is held.
func (l *Ledger) gpu(name string) *gpuState {
	g := l.gpus[name]
	if g == nil {
		g = &gpuState{}
		l.gpus[name] = g
	}
	return g
}

// Leave unregisters rank. A launch of the rank that has not finished stays
// accounted (its blocks still occupy the GPU) until it does.
func (s *Lease) Leave(rank int) {
	l := s.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := s.latest[rank]; c != nil {
		if done, err := c.Query(); done || err != nil {
			delete(s.latest, rank)
		}
	}
	if s.members--; s.members <= 0 && l.leases[s.key] == s {
		delete(l.leases, s.key)
	}
	l.notify()
}

// Used returns the blocks in use on gpu and its budget (0, 0 for a GPU no
// rank joined on).
func (l *Ledger) Used(gpu string) (used, budget int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if g := l.gpus[gpu]; g != nil && g.joined {
		return g.used, g.budget
	}
	return 0, 0
}

// Request asks for one launch of one rank: its sequence number (how many
// launches the rank made before) and the most blocks a launch of it uses
// (0: it launches no kernel).
type Request struct {
	Lease  *Lease
	Rank   int
	Seq    uint64
	Blocks int
}

type reqState int

const (
	queued   reqState = iota
	admitted          // admitted, not yet returned by Next
	returned          // returned by Next, not yet Done
	finished          // Done, or closed
)

type request struct {
	Request
	state  reqState
	pinned bool
}

// Ticket is a set of requests made together, typically the launches of one
// group. Its requests are admitted one by one as they fit; Next returns
// them. A Ticket is used by one goroutine. The zero Ticket is closed: a
// caller may keep one and acquire into it again and again (AcquireInto).
type Ticket struct {
	l           *Ledger
	reqs        []request // the ledger's queue points into it while open
	open        bool      // acquired and not yet closed
	interrupted func() error
	// waiting is when Next first found nothing admitted: what a wait
	// error says the requests waited since (a ticket admitted at once
	// never reads the clock).
	waiting time.Time
}

// ErrTicketOpen is returned by AcquireInto given a ticket not yet closed.
var ErrTicketOpen = errors.New("residency: the ticket is still open (Close it first)")

// Acquire queues reqs, admitting at once those that fit, and returns the
// ticket that Next returns them from. interrupted (may be nil) is polled
// while waiting; a non-nil result ends the wait with it. Close the ticket
// when done with it.
func (l *Ledger) Acquire(reqs []Request, interrupted func() error) (*Ticket, error) {
	t := new(Ticket)
	if err := l.AcquireInto(t, reqs, interrupted); err != nil {
		return nil, err
	}
	return t, nil
}

// AcquireInto is Acquire into t, a zero or closed Ticket, reusing its
// memory: a caller that keeps a Ticket for its groups allocates nothing
// here. It fails with ErrTicketOpen, changing nothing, when t is open.
func (l *Ledger) AcquireInto(t *Ticket, reqs []Request, interrupted func() error) error {
	for i, r := range reqs {
		if r.Lease == nil || r.Lease.l != l {
			return fmt.Errorf("residency: request %d: lease %v: want a lease of this ledger", i, r.Lease)
		}
		if r.Blocks < 0 || r.Blocks > r.Lease.maxWidth {
			return fmt.Errorf("residency: request %d (communicator %s rank %d): blocks=%d: want 0..%d",
				i, r.Lease.key, r.Rank, r.Blocks, r.Lease.maxWidth)
		}
	}
	if t.open {
		return ErrTicketOpen
	}
	// t is closed: no queue of any ledger points into t.reqs.
	t.l, t.interrupted, t.waiting = l, interrupted, time.Time{}
	if cap(t.reqs) < len(reqs) {
		t.reqs = make([]request, len(reqs))
	}
	t.reqs = t.reqs[:len(reqs)]
	for i, r := range reqs {
		t.reqs[i] = request{Request: r}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t.open = true
	for i := range t.reqs {
		l.queue = append(l.queue, &t.reqs[i])
	}
	l.pass(false)
	return nil
}

// TryNext returns, without waiting, the index of one more admitted request
// of t (lowest first) and true, or -1 and false when none is admitted now
// (some still wait, or every request was returned): Next then waits or
// says which. A launch whose requests fit, the common case, needs no
// context with a deadline.
func (t *Ticket) TryNext() (int, bool) {
	t.l.mu.Lock()
	defer t.l.mu.Unlock()
	i, _ := t.admit()
	return i, i >= 0
}

// TryNextAll is TryNext for every request of t admitted now: it appends
// their indexes to ks, lowest first, under one lock, and returns it.
func (t *Ticket) TryNextAll(ks []int) []int {
	t.l.mu.Lock()
	defer t.l.mu.Unlock()
	for {
		i, _ := t.admit()
		if i < 0 {
			return ks
		}
		ks = append(ks, i)
	}
}

// admit is take after a pass of the ledger when nothing of t was admitted
// yet and some of it still waits; l.mu is held.
func (t *Ticket) admit() (int, bool) {
	i, all := t.take()
	if i < 0 && !all {
		t.l.pass(true)
		i, all = t.take()
	}
	return i, all
}

// Next waits until one more request of t is admitted and returns its
// index in the slice given to Acquire; the request's lease stays pinned
// (held) until Done(i). Admitted requests come back lowest index first. It
// fails when ctx ends or interrupted reports an error, naming what it
// waited for, and with ErrNoRequest when every request was returned.
func (t *Ticket) Next(ctx context.Context) (int, error) {
	l := t.l
	delay := minPoll
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for first := true; ; first = false {
		l.mu.Lock()
		i, all := t.admit()
		switch {
		case i >= 0:
			l.mu.Unlock()
			return i, nil
		case all:
			l.mu.Unlock()
			return -1, ErrNoRequest
		}
		ch := l.changed
		l.asleep++
		l.mu.Unlock()
		if t.waiting.IsZero() {
			t.waiting = time.Now()
		}
		var stop error
		if t.interrupted != nil {
			stop = t.interrupted()
		}
		if stop == nil {
			stop = context.Cause(ctx)
		}
		if stop == nil {
			if !first {
				delay = min(2*delay, maxPoll)
			}
			if timer == nil {
				timer = time.NewTimer(delay)
			} else {
				timer.Reset(delay)
			}
			select {
			case <-ctx.Done():
			case <-ch:
			case <-timer.C:
			}
		}
		l.mu.Lock()
		l.asleep--
		if stop != nil {
			err := t.describe()
			l.mu.Unlock()
			return -1, fmt.Errorf("%w: %w", err, stop)
		}
		l.mu.Unlock()
	}
}

// take returns the lowest admitted request and marks it returned; -1 and
// ok when every request was returned, -1 and !ok when some still wait.
func (t *Ticket) take() (int, bool) {
	all := true
	for i := range t.reqs {
		switch r := &t.reqs[i]; r.state {
		case admitted:
			r.state = returned
			return i, false
		case queued:
			all = false
		}
	}
	return -1, all
}

// describe says what t waits for; l.mu is held.
func (t *Ticket) describe() error {
	var parts []string
	for i := range t.reqs {
		r := &t.reqs[i]
		if r.state != queued {
			continue
		}
		s := r.Lease
		var gs []string
		for _, g := range slices.Sorted(maps.Keys(s.local)) {
			st := t.l.gpus[g]
			if st == nil || !st.joined {
				continue
			}
			gs = append(gs, fmt.Sprintf("GPU %s: %d of %d blocks in use", g, st.used, st.budget))
		}
		parts = append(parts, fmt.Sprintf("communicator %s rank %d launch %d (%d blocks × %v ranks) waited %v; %s; %d launches of other communicators queued first",
			s.key, r.Rank, r.Seq, r.Blocks, s.local, time.Since(t.waiting).Round(time.Millisecond), strings.Join(gs, ", "), t.l.ahead(r)))
	}
	return fmt.Errorf("residency: %s", strings.Join(parts, "; "))
}

// ahead counts the queued requests of other leases before r.
func (l *Ledger) ahead(r *request) int {
	n := 0
	for _, q := range l.queue {
		if q == r {
			break
		}
		if q.Lease != r.Lease {
			n++
		}
	}
	return n
}

// Done records that the launch of request i (returned by Next) is queued
// and c reports its completion (nil: nothing was launched), and unpins its
// lease.
func (t *Ticket) Done(i int, c Completion) {
	l := t.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.done(i, c) {
		l.notify()
	}
}

// done is Done without the notification; it reports whether it changed
// anything. l.mu is held.
func (t *Ticket) done(i int, c Completion) bool {
	if i < 0 || i >= len(t.reqs) {
		return false
	}
	r := &t.reqs[i]
	if r.state != returned && r.state != admitted {
		return false
	}
	r.state = finished
	if r.pinned {
		if c != nil {
			r.Lease.latest[r.Rank] = c
		}
		r.Lease.pins--
		r.pinned = false
	}
	return true
}

// DoneEach is Done(ks[j], c(j)) for every j, under one lock.
func (t *Ticket) DoneEach(ks []int, c func(j int) Completion) {
	l := t.l
	l.mu.Lock()
	defer l.mu.Unlock()
	for j, i := range ks {
		t.done(i, c(j))
	}
	l.notify()
}

// Close withdraws the requests of t still queued and unpins those admitted
// but not Done; Done and Next then find no request. It is safe to call
// more than once, and on a zero Ticket.
func (t *Ticket) Close() {
	l := t.l
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !t.open {
		return
	}
	t.open = false
	withdrawn := false // requests of t were in the queue
	for i := range t.reqs {
		r := &t.reqs[i]
		withdrawn = withdrawn || r.state == queued
		if r.pinned {
			r.Lease.pins--
			r.pinned = false
		}
		r.state = finished
	}
	if withdrawn {
		// They may have blocked later requests on their GPUs (pass keeps
		// the queue's order per GPU); only queued requests are queued.
		l.queue = slices.DeleteFunc(l.queue, func(q *request) bool { return q.state == finished })
		l.pass(false)
	}
	// Nothing points into t.reqs now. Keep their memory for AcquireInto,
	// but not the leases (and their completions) nor the check: a ticket
	// kept for later groups must not keep a destroyed communicator alive.
	// Empty, t still answers as closed: nothing to take, Done ignored.
	clear(t.reqs)
	t.reqs = t.reqs[:0]
	t.interrupted = nil
	l.notify()
}

// notify wakes every waiter; l.mu is held.
func (l *Ledger) notify() {
	if l.asleep > 0 {
		close(l.changed)
		l.changed = make(chan struct{})
	}
}

// pass admits, oldest first, every queued request that is covered by its
// held lease or fits, and keeps the rest; reap first releases the leases
// whose launches all finished. l.mu is held.
func (l *Ledger) pass(reap bool) {
	if reap {
		l.reap()
	}
	var blocked map[*gpuState]bool
	changed := false
	keep := l.queue[:0]
	for _, r := range l.queue {
		s := r.Lease
		switch {
		case r.state != queued:
			continue
		case r.Blocks == 0:
			r.state = admitted
		case s.held && r.Seq < s.grantedEnd:
			// Covered: its peers may already spin on it, so it never waits.
			if r.Blocks > s.width {
				l.resize(s, r.Blocks)
			}
			l.pin(r)
		case !touches(blocked, s) && l.fits(s, r.Blocks):
			if !s.held {
				s.held = true
				l.held[s] = struct{}{}
			}
			l.resize(s, max(s.width, r.Blocks))
			s.grantedEnd = max(s.grantedEnd, r.Seq+1)
			l.pin(r)
		default:
			if blocked == nil {
				blocked = map[*gpuState]bool{}
			}
			for _, g := range s.gpus {
				blocked[g.st] = true
			}
			keep = append(keep, r)
			continue
		}
		changed = true
	}
	clear(l.queue[len(keep):])
	l.queue = keep
	if changed {
		l.notify()
	}
}

func (l *Ledger) pin(r *request) {
	r.state = admitted
	r.pinned = true
	r.Lease.pins++
}

func touches(blocked map[*gpuState]bool, s *Lease) bool {
	if blocked == nil {
		return false
	}
	for _, g := range s.gpus {
		if blocked[g.st] {
			return true
		}
	}
	return false
}

// fits reports whether s can reserve blocks per rank beside what is in use.
func (l *Ledger) fits(s *Lease, blocks int) bool {
	cur := 0
	if s.held {
		cur = s.width
	}
	extra := max(blocks, cur) - cur
	for _, g := range s.gpus {
		if g.st.joined && g.st.used+extra*g.ranks > g.st.budget {
			return false
		}
	}
	return true
}

// resize sets s's reservation to width blocks per rank.
func (l *Ledger) resize(s *Lease, width int) {
	for _, g := range s.gpus {
		g.st.used += (width - s.width) * g.ranks
	}
	s.width = width
}

// reap releases every held lease that no admitted launch pins and whose
// ranks' latest launches have all finished. l.mu is held.
func (l *Ledger) reap() {
	for s := range l.held {
		if s.pins > 0 {
			continue
		}
		for rank, c := range s.latest {
			if done, err := c.Query(); done || err != nil {
				delete(s.latest, rank)
			}
		}
		if len(s.latest) > 0 {
			continue
		}
		l.resize(s, 0)
		s.held = false
		delete(l.held, s)
		l.notify()
	}
}
