package bootstrap

// This file holds the views of a network: the bootstrap networks of the
// communicators that Split and Shrink derive, riding on the network of the
// communicator they came from.
//
// Tag layout. A view's messages travel as the root network's Send and
// Recv, under tags that no root network user takes (root networks use
// small tags):
//
//	bit  62     set: a view's tag (viewSpace)
//	bits 30..61 the view's id (ViewID), 32 bits
//	bit  29     set: a message of the view's AllGather or Barrier (viewColl)
//	bits 0..28  the user's tag of the view's Send and Recv (at most
//	            MaxViewTag), or the number of the view's collective
//
// So the traffic of a parent and of each of its views never mixes, and a
// block left over by a failed collective never passes for a later one's.
// A view's collective is a ring over the view's ranks whose messages start
// with one byte: blockData followed by the block, or blockAbandon, which a
// rank that failed or aborted sends on to the next rank.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"
)

// A View is the bootstrap network of a communicator made by Split or
// Shrink: a view of some ranks of its parent's network (the root network,
// never another view: a view of a view maps its ranks through), whose
// messages travel as the root's Send and Recv under tags of the view's own
// (see ViewTag), so that the traffic of parent and children never mixes.
// The root network stays open until its owner and every view of it are
// closed (CloseShared). Abort and Close of a view end only the view's own
// waits.
type View struct {
	root    Network
	members []int // the root rank of each rank of the view
	rank    int
	id      uint32
	timeout time.Duration

	life    context.Context // ends at Abort or Close, with ErrAborted or ErrClosed
	end     context.CancelCauseFunc
	release sync.Once

	collMu sync.Mutex
	seq    int64 // collectives so far
	broken error // the first collective that failed here or on the previous rank
}

var _ Network = (*View)(nil)

// The tags of views (see the layout at the top of this file).
const (
	viewSpace   = 1 << 62
	viewIDShift = 30
	viewColl    = 1 << 29
	// MaxViewTag is the largest tag of a view's Send and Recv.
	MaxViewTag = viewColl - 1
)

// A view's tag must fit an int.
const _ int = viewSpace

// ViewTag is the root network's tag for tag t of view id: a Send and Recv
// tag, or (coll) the number of one of the view's collectives. Only t's low
// 29 bits count.
func ViewTag(id uint32, coll bool, t int64) int {
	tag := int64(viewSpace) | int64(id)<<viewIDShift | t&MaxViewTag
	if coll {
		tag |= viewColl
	}
	return int(tag)
}

// ViewID names the view that a communicator (whose bootstrap view is
// parent, 0 for a root network) derives for its seq-th Split (kind 'S'),
// Shrink ('s'), or a Shrink's messages ('v': exclude lists, 'a': the new
// root's id). Every rank of the parent computes the same id, and views with
// a rank pair in common differ; two views share an id by accident with a
// probability of 2^-32.
func ViewID(parent uint32, kind byte, seq uint64) uint32 {
	h := fnv.New64a()
	var b [13]byte
	binary.BigEndian.PutUint32(b[:], parent)
	b[4] = kind
	binary.BigEndian.PutUint64(b[5:], seq)
	_, _ = h.Write(b[:])
	x := h.Sum64()
	return uint32(x>>32) ^ uint32(x)
}

// PathID is the view id of a communicator's network (0: a root network).
func PathID(n Network) uint32 {
	if v, ok := n.(*View); ok {
		return v.id
	}
	return 0
}

// RootOf returns the root network under n and how n's ranks map onto it.
func RootOf(n Network) (Network, func(int) int) {
	if v, ok := n.(*View); ok {
		return v.root, func(r int) int { return v.members[r] }
	}
	return n, func(r int) int { return r }
}

// NewView returns rank rank of the view of parent's ranks ranks (in the
// view's order).
func NewView(parent Network, ranks []int, rank int, id uint32, timeout time.Duration) *View {
	root, rmap := RootOf(parent)
	m := make([]int, len(ranks))
	for i, r := range ranks {
		m[i] = rmap(r)
	}
	retainRoot(root)
	life, end := context.WithCancelCause(context.Background())
	return &View{root: root, members: m, rank: rank, id: id, timeout: timeout, life: life, end: end}
}

// The root networks that views share: whether their owner (the
// communicator whose network it is) still holds each, and how many views
// of it are open.
var shared struct {
	sync.Mutex
	refs map[Network]*rootUse
}

type rootUse struct {
	released bool // the owner closed it (CloseShared); views keep it open
	views    int
}

// SharedNetworks is the number of root networks that views keep open (for
// tests: it is 0 once every communicator is destroyed).
func SharedNetworks() int {
	shared.Lock()
	defer shared.Unlock()
	return len(shared.refs)
}

func retainRoot(n Network) {
	shared.Lock()
	defer shared.Unlock()
	if shared.refs == nil {
		shared.refs = map[Network]*rootUse{}
	}
	u := shared.refs[n]
	if u == nil {
		u = &rootUse{}
		shared.refs[n] = u
	}
	u.views++
}

// releaseRoot drops the owner's use of n (owner) or a view's, and closes
// n after the last.
func releaseRoot(n Network, owner bool) error {
	shared.Lock()
	if u := shared.refs[n]; u != nil {
		if owner {
			u.released = true
		} else {
			u.views--
		}
		if !u.released || u.views > 0 {
			shared.Unlock()
			return nil
		}
		delete(shared.refs, n)
	}
	shared.Unlock()
	return n.Close()
}

// CloseShared closes a communicator's bootstrap network: a view ends, and a
// root network closes once no view of it remains.
func CloseShared(n Network) error {
	if n == nil {
		return nil
	}
	if v, ok := n.(*View); ok {
		return v.Close()
	}
	return releaseRoot(n, true)
}

// AbortShared aborts a communicator's network, unless it is a root network
// that views still use (an abort would end their bootstrap too). Such a
// network stays open, and its collectives are declared broken on every
// rank instead (a collective that fails at once here tells every peer),
// so that the peers' next exchange with this rank fails now rather than
// at its timeout; the views' traffic, plain Send and Recv under tags of
// their own, goes on. A root network whose owner closed it (Abort may
// come during or after Destroy) is left alone: only views use it now. A
// nil n is no network: nothing to abort.
func AbortShared(n Network) {
	if n == nil {
		return
	}
	if _, ok := n.(*View); !ok {
		shared.Lock()
		var use rootUse
		if u := shared.refs[n]; u != nil {
			use = *u
		}
		shared.Unlock()
		switch {
		case use.released:
			return
		case use.views > 0:
			ctx, cancel := context.WithCancelCause(context.Background())
			cancel(errAbortedHere)
			_ = n.Barrier(ctx)
			return
		}
	}
	n.Abort()
}

// errAbortedHere ends the collective by which AbortShared breaks a network's
// collectives.
var errAbortedHere = errors.New("ncclgo: this rank's communicator was aborted")

// Rank implements Network.
func (v *View) Rank() int { return v.rank }

// Size implements Network.
func (v *View) Size() int { return len(v.members) }

// opContext bounds one call by the timeout and by the view's life.
func (v *View) opContext(ctx context.Context, op string) (context.Context, func()) {
	ctx, cancelT := context.WithTimeoutCause(ctx, v.timeout, &TimeoutError{Op: fmt.Sprintf("view rank %d: %s", v.rank, op), After: v.timeout})
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(v.life, func() { cancel(context.Cause(v.life)) })
	return ctx, func() { stop(); cancel(nil); cancelT() }
}

// wrap names the call in err; a view ended meanwhile reports why.
func (v *View) wrap(op string, err error) error {
	if v.life.Err() != nil {
		err = context.Cause(v.life)
	}
	return fmt.Errorf("bootstrap view %08x: rank %d: %s: %w", v.id, v.rank, op, err)
}

func (v *View) check(op string, peer, tag int) error {
	if err := v.life.Err(); err != nil {
		return v.wrap(op, err)
	}
	if peer < 0 || peer >= len(v.members) {
		return v.wrap(op, fmt.Errorf("peer rank %d out of range for %d ranks (want 0..%d)", peer, len(v.members), len(v.members)-1))
	}
	if tag < 0 || tag > MaxViewTag {
		return v.wrap(op, fmt.Errorf("tag %d out of range (want 0..%d)", tag, MaxViewTag))
	}
	return nil
}

// Send implements Network.
func (v *View) Send(ctx context.Context, peer, tag int, data []byte) error {
	op := fmt.Sprintf("send to rank %d tag %d", peer, tag)
	if err := v.check(op, peer, tag); err != nil {
		return err
	}
	ctx, done := v.opContext(ctx, op)
	defer done()
	if err := v.root.Send(ctx, v.members[peer], ViewTag(v.id, false, int64(tag)), data); err != nil {
		return v.wrap(op, err)
	}
	return nil
}

// Recv implements Network.
func (v *View) Recv(ctx context.Context, peer, tag int) ([]byte, error) {
	op := fmt.Sprintf("recv from rank %d tag %d", peer, tag)
	if err := v.check(op, peer, tag); err != nil {
		return nil, err
	}
	ctx, done := v.opContext(ctx, op)
	defer done()
	d, err := v.root.Recv(ctx, v.members[peer], ViewTag(v.id, false, int64(tag)))
	if err != nil {
		return nil, v.wrap(op, err)
	}
	return d, nil
}

// AllGather implements Network, as a ring: in step s a rank
// sends block (rank-s) to rank+1 and receives block (rank-s-1) from
// rank-1. Each collective has tags of its own, so that a block left over
// by a failed one never passes for a later one's. A failure is final for
// the view's collectives (ErrCollectiveBroken), and the rank
// that failed tells the next one, which fails too and passes it on.
func (v *View) AllGather(ctx context.Context, mine []byte) ([][]byte, error) {
	return v.ring(ctx, "allgather", mine)
}

// Barrier implements Network.
func (v *View) Barrier(ctx context.Context) error {
	_, err := v.ring(ctx, "barrier", nil)
	return err
}

const (
	blockData    = 0
	blockAbandon = 1
)

func (v *View) ring(ctx context.Context, op string, mine []byte) ([][]byte, error) {
	v.collMu.Lock()
	defer v.collMu.Unlock()
	v.seq++
	op = fmt.Sprintf("%s #%d", op, v.seq)
	if err := v.life.Err(); err != nil {
		return nil, v.wrap(op, err)
	}
	if v.broken != nil {
		return nil, v.wrap(op, v.broken)
	}
	n, r := len(v.members), v.rank
	out := make([][]byte, n)
	out[r] = append([]byte{}, mine...)
	if n == 1 {
		return out, nil
	}
	tag := ViewTag(v.id, true, v.seq)
	next, prev := v.members[(r+1)%n], v.members[(r-1+n)%n]
	ctx, done := v.opContext(ctx, op)
	defer done()
	fail := func(what string, err error) ([][]byte, error) {
		if !errors.Is(err, ErrCollectiveBroken) {
			err = fmt.Errorf("%w: collective #%d failed on view rank %d: %w", ErrCollectiveBroken, v.seq, r, err)
		}
		v.broken = err
		if v.life.Err() == nil {
			actx, cancel := context.WithTimeout(context.Background(), min(time.Second, v.timeout))
			_ = v.root.Send(actx, next, tag, []byte{blockAbandon})
			cancel()
		}
		return nil, v.wrap(op+": "+what, err)
	}
	for s := range n - 1 {
		send := ((r-s)%n + n) % n
		recv := ((r-s-1)%n + n) % n
		msg := append([]byte{blockData}, out[send]...)
		if err := v.root.Send(ctx, next, tag, msg); err != nil {
			return fail(fmt.Sprintf("step %d: send to rank %d", s, (r+1)%n), err)
		}
		d, err := v.root.Recv(ctx, prev, tag)
		if err == nil && (len(d) == 0 || d[0] != blockData) {
			err = fmt.Errorf("%w: view rank %d abandoned collective #%d", ErrCollectiveBroken, (r-1+n)%n, v.seq)
		}
		if err != nil {
			return fail(fmt.Sprintf("step %d: recv from rank %d", s, (r-1+n)%n), err)
		}
		out[recv] = d[1:]
	}
	return out, nil
}

// Close implements Network: the view's waits end with
// ErrClosed, and the root network closes if no one else uses
// it.
func (v *View) Close() error {
	v.end(ErrClosed)
	var err error
	v.release.Do(func() { err = releaseRoot(v.root, false) })
	return err
}

// Abort implements Network: the view's waits end with
// ErrAborted; the root network and other views go on. The next
// rank hears that this one abandoned its last collective and the next
// one (and passes it on), so that the others do not wait for it until
// their timeout.
func (v *View) Abort() {
	if v.life.Err() != nil {
		return
	}
	v.end(ErrAborted)
	v.collMu.Lock() // the collective in progress, if any, has just ended
	seq := v.seq
	v.collMu.Unlock()
	if len(v.members) == 1 {
		return
	}
	next := v.members[(v.rank+1)%len(v.members)]
	ctx, cancel := context.WithTimeout(context.Background(), min(time.Second, v.timeout))
	defer cancel()
	for _, s := range []int64{seq, seq + 1} {
		if s > 0 {
			_ = v.root.Send(ctx, next, ViewTag(v.id, true, s), []byte{blockAbandon})
		}
	}
}
