package bootstrap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"time"
)

// ErrCollectiveBroken reports an AllGather or Barrier made after one of
// the collectives of the network failed on some rank (cancelled, timed
// out, a peer gone). Such a failure leaves the ranks unable to tell which
// messages belong to which call, so it is final for the collectives of the
// network: every later collective, on every rank that heard of it, fails
// with this error instead of matching a leftover block to a newer call.
// Send and Recv are not affected. Close the network and build a new one.
var ErrCollectiveBroken = errors.New("bootstrap: collective sequence broken")

// collState numbers a rank's collectives and records the first one that
// failed, here or on a peer.
type collState struct {
	mu        sync.Mutex
	seq       int64 // the last number handed out
	brokenAt  int64 // the first failed number; 0: none
	why       error
	cur       int64 // the call in progress, 0: none
	curCancel context.CancelCauseFunc
}

// begin numbers the next collective and returns a context that ends when
// the collective is declared broken, and the function ending the call.
func (s *collState) begin(ctx context.Context) (int64, context.Context, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	if s.brokenAt != 0 && s.seq >= s.brokenAt {
		return s.seq, ctx, func() {}, s.why
	}
	cctx, cancel := context.WithCancelCause(ctx)
	s.cur, s.curCancel = s.seq, cancel
	seq := s.seq
	return seq, cctx, func() {
		s.mu.Lock()
		if s.cur == seq {
			s.cur, s.curCancel = 0, nil
		}
		s.mu.Unlock()
		cancel(nil)
	}, nil
}

// broken returns the reason collective seq cannot succeed, or nil.
func (s *collState) broken(seq int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.brokenAt != 0 && seq >= s.brokenAt {
		return s.why
	}
	return nil
}

// fail records that collective seq failed (why wraps
// ErrCollectiveBroken) and ends the call in progress if it is seq or
// later. It reports whether seq is news: earlier than any failure known
// so far.
func (s *collState) fail(seq int64, why error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	news := s.brokenAt == 0 || seq < s.brokenAt
	if news {
		s.brokenAt, s.why = seq, why
	}
	if s.cur != 0 && s.cur >= seq {
		s.curCancel(s.why)
	}
	return news
}

// peerAbandoned records a peer's notice that its collective seq failed,
// and reports whether it was news.
func (s *collState) peerAbandoned(peer int, seq int64) bool {
	return s.fail(seq, fmt.Errorf("%w: rank %d abandoned collective #%d", ErrCollectiveBroken, peer, seq))
}

// brokenAtSeq is the first failed collective number, 0 if none (tests).
func (s *collState) brokenAtSeq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.brokenAt
}

// transport is what the shared collective code needs from a network.
type transport interface {
	Rank() int
	Size() int
	sendMsg(ctx context.Context, peer int, class byte, tag int64, data []byte) error
	recvMsg(ctx context.Context, peer int, class byte, tag int64) ([]byte, error)
	// replyMsg sends to peer over the connection that peer opened to
	// this rank (TCP); it fails when there is none.
	replyMsg(ctx context.Context, peer int, class byte, tag int64, data []byte) error
	coll() *collState
	opContext(ctx context.Context, op string) (context.Context, context.CancelFunc)
	wrapErr(ctx context.Context, op string, err error) error
	timeoutValue() time.Duration
	// maxMessage is the largest message the network carries.
	maxMessage() int
	// abandonTargets are the ranks told directly that a collective
	// failed here (the others hear of it from them).
	abandonTargets() []int
}

// Collective algorithms. Every connection goes from a rank r to r+2^k
// (mod n) for some k, so that a rank talks to at most 2·⌈log2 n⌉ peers:
// the ones whose addresses the root handed it (its fingers, r+2^k), and
// the ones that dial it (r-2^k), which it answers on their connections.
//
//   - Barrier: an empty message up the gather tree to rank 0 (see
//     gatherParent), then back down it, each parent answering on its
//     children's connections: 2(n-1) messages over n-1 connections, in
//     2·⌈log2 n⌉ steps. The messages down carry tag -seq.
//   - AllGather: when every block is small (at most treeBlockLimit), the
//     blocks go up the gather tree, each rank sending its subtree's, and
//     rank 0 sends all of them back down, each rank forwarding the
//     message it received to its children, largest subtree first. Each message starts with a flag
//     saying whether the sender has seen a large block: rank 0 learns
//     whether any block was large, and if so it sends the flag down
//     instead, and all ranks (and only then) fall back to the ring, whose
//     n-1 steps move one block each, to r+1 and from r-1.

// Tree limits: a block larger than treeMaxBlock, or one that would make
// the broadcast message (n blocks) exceed treeMaxMessage or the network's
// message limit, sends the AllGather round the ring instead.
const (
	treeMaxBlock   = 64 << 10
	treeMaxMessage = 16 << 20
)

// treeBlockLimit is the largest block an AllGather over n ranks sends
// through the trees when messages may carry maxMsg bytes; negative when
// none fits.
func treeBlockLimit(n, maxMsg int) int {
	return min(treeMaxBlock, (min(maxMsg, treeMaxMessage)-5)/n-4)
}

// rounds is ⌈log2 n⌉, the number of fingers of a rank among n.
func rounds(n int) int { return bits.Len(uint(n - 1)) }

// collective runs body as collective number seq of t: it bounds it by the
// bootstrap timeout, and when it fails declares the sequence broken here
// and on the peers (see ErrCollectiveBroken), so that its leftover
// messages are never taken for a later call's.
func collective(ctx context.Context, t transport, op string, body func(ctx context.Context, seq int64) ([][]byte, string, error)) ([][]byte, error) {
	ctx, cancel := t.opContext(ctx, op)
	defer cancel()
	cs := t.coll()
	seq, ctx, end, err := cs.begin(ctx)
	defer end()
	op = fmt.Sprintf("%s #%d", op, seq)
	if err != nil {
		return nil, t.wrapErr(ctx, op, err)
	}
	// A call whose context has already ended fails here, on every
	// transport alike, rather than by whichever of its sends or receives
	// notices first (a queued message could let it succeed). Err first:
	// a peer's abandon may cancel ctx at any moment, and a Cause read
	// before that cancel is nil even when Err, read after, is not.
	var out [][]byte
	what := "before step 0"
	if ctx.Err() != nil {
		err = context.Cause(ctx)
	} else {
		out, what, err = body(ctx, seq)
	}
	if err == nil {
		return out, nil
	}
	err = t.wrapErr(ctx, op+": "+what, err)
	if !errors.Is(err, ErrCollectiveBroken) {
		if cs.fail(seq, fmt.Errorf("%w: collective #%d failed on rank %d: %v", ErrCollectiveBroken, seq, t.Rank(), err)) &&
			!errors.Is(err, ErrAborted) && !errors.Is(err, ErrClosed) {
			abandon(t, seq)
		}
	}
	return nil, err
}

// exchange sends data to rank `to` and receives the message of rank
// `from`, both under collective seq, as step k of kind ("round", "ring
// step"); what names the failed half.
func exchange(ctx context.Context, t transport, seq int64, kind string, k, to, from int, data []byte) ([]byte, string, error) {
	if err := t.sendMsg(ctx, to, classColl, seq, data); err != nil {
		return nil, fmt.Sprintf("%s %d: send to rank %d", kind, k, to), err
	}
	d, err := t.recvMsg(ctx, from, classColl, seq)
	if err == nil {
		err = t.coll().broken(seq)
	}
	if err != nil {
		return nil, fmt.Sprintf("%s %d: recv from rank %d", kind, k, from), err
	}
	return d, "", nil
}

// barrier gathers an empty message up the gather tree to rank 0 and
// releases the ranks down the same tree, each parent answering its
// children on the connections they opened: n-1 connections and 2(n-1)
// messages in all, where a dissemination barrier sends n·⌈log2 n⌉
// messages over as many connections (the first Barrier opens them:
// 229,376 at 16,384 ranks).
func barrier(ctx context.Context, t transport) error {
	_, err := collective(ctx, t, "barrier", func(ctx context.Context, seq int64) ([][]byte, string, error) {
		n, r := t.Size(), t.Rank()
		kids := gatherChildren(n, r)
		for _, c := range kids {
			if _, err := t.recvMsg(ctx, c, classColl, seq); err != nil {
				return nil, fmt.Sprintf("gather: recv from rank %d", c), err
			}
		}
		if r != 0 {
			p := gatherParent(n, r)
			if err := t.sendMsg(ctx, p, classColl, seq, nil); err != nil {
				return nil, fmt.Sprintf("gather: send to rank %d", p), err
			}
			if _, err := t.recvMsg(ctx, p, classColl, -seq); err != nil {
				return nil, fmt.Sprintf("release: recv from rank %d", p), err
			}
		}
		if err := t.coll().broken(seq); err != nil {
			return nil, "release", err
		}
		for i := len(kids) - 1; i >= 0; i-- {
			if err := t.replyMsg(ctx, kids[i], classColl, -seq, nil); err != nil {
				return nil, fmt.Sprintf("release: send to rank %d", kids[i]), err
			}
		}
		return nil, "", nil
	})
	return err
}

// The gather tree, rooted at rank 0, is the binomial tree of the virtual
// ranks v = n-r (mod n), whose parent is v-lowbit(v), i.e. rank
// r+lowbit(v): a child sends to a finger of its own, and a parent
// answers on the child's connection. Its depth is ⌈log2 n⌉, and rank r's
// subtree is the ranks r, r-1, ..., so that the blocks of an AllGather
// arrive in contiguous runs.

// gatherParent is the parent of rank r ≠ 0 in the gather tree.
func gatherParent(n, r int) int {
	v := (n - r) % n
	return (r + v&-v) % n
}

// gatherChildren are the children of rank r in the gather tree, r-2^j for
// j = 0, 1, ...: child r-2^j heads the 2^j ranks (fewer for the last)
// below r-2^j+1.
func gatherChildren(n, r int) []int {
	v := (n - r) % n
	lim := n
	if v != 0 {
		lim = v & -v
	}
	var out []int
	for d := 1; d < lim && v+d < n; d <<= 1 {
		out = append(out, (r-d+n)%n)
	}
	return out
}

// allGather gathers mine from every rank: up the gather tree and back
// down it when every block is small, the ring otherwise (see
// above).
func allGather(ctx context.Context, t transport, mine []byte) ([][]byte, error) {
	return collective(ctx, t, "allgather", func(ctx context.Context, seq int64) ([][]byte, string, error) {
		n, r := t.Size(), t.Rank()
		out := make([][]byte, n)
		out[r] = append([]byte{}, mine...)
		large := len(mine) > treeBlockLimit(n, t.maxMessage())
		// Gather: rank r's subtree is ranks r, r-1, ..., r-have+1; child
		// r-2^j brings the 2^j (or fewer) below.
		have := 1
		kids := gatherChildren(n, r)
		for _, c := range kids {
			got, err := t.recvMsg(ctx, c, classColl, seq)
			if err != nil {
				return nil, fmt.Sprintf("gather: recv from rank %d", c), err
			}
			if len(got) > 0 && got[0] == 1 {
				large = true
			}
			cnt := min(have, n-((n-r)%n+have))
			if !large {
				if err := decodeBlocks(got, out, r-have, cnt); err != nil {
					return nil, fmt.Sprintf("gather: from rank %d", c), err
				}
			}
			have += cnt
		}
		var msg []byte
		if r != 0 {
			p := gatherParent(n, r)
			msg = []byte{1}
			if !large {
				msg = encodeBlocks(nil, out, r, have)
			}
			if err := t.sendMsg(ctx, p, classColl, seq, msg); err != nil {
				return nil, fmt.Sprintf("gather: send to rank %d", p), err
			}
			got, err := t.recvMsg(ctx, p, classColl, -seq)
			if err != nil {
				return nil, fmt.Sprintf("broadcast: recv from rank %d", p), err
			}
			msg, large = got, len(got) > 0 && got[0] == 1
			if !large {
				if err := decodeBlocks(got, out, 0, n); err != nil {
					return nil, fmt.Sprintf("broadcast: from rank %d", p), err
				}
			}
		} else {
			msg = []byte{1}
			if !large {
				msg = encodeBlocks(nil, out, 0, n)
			}
		}
		if err := t.coll().broken(seq); err != nil {
			return nil, "broadcast", err
		}
		for i := len(kids) - 1; i >= 0; i-- {
			if err := t.replyMsg(ctx, kids[i], classColl, -seq, msg); err != nil {
				return nil, fmt.Sprintf("broadcast: send to rank %d", kids[i]), err
			}
		}
		if !large {
			return out, "", nil
		}
		clear(out)
		out[r] = append([]byte{}, mine...)
		// The ring: in step s a rank sends block (r-s) to r+1 and receives
		// block (r-s-1) from r-1.
		next, prev := (r+1)%n, (r-1+n)%n
		for s := 0; s < n-1; s++ {
			got, what, err := exchange(ctx, t, seq, "ring step", s, next, prev, out[((r-s)%n+n)%n])
			if err != nil {
				return nil, what, err
			}
			out[((r-s-1)%n+n)%n] = got
		}
		return out, "", nil
	})
}

// encodeBlocks appends to b blocks r, r-1, ..., r-cnt+1 (mod len(out))
// of out as an AllGather message: 0 | cnt u32 | cnt × len u32 | the blocks.
func encodeBlocks(b []byte, out [][]byte, r, cnt int) []byte {
	n := len(out)
	size := 5 + 4*cnt
	for i := range cnt {
		size += len(out[((r-i)%n+n)%n])
	}
	b = slices.Grow(b, size)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(cnt))
	for i := range cnt {
		b = binary.BigEndian.AppendUint32(b, uint32(len(out[((r-i)%n+n)%n])))
	}
	for i := range cnt {
		b = append(b, out[((r-i)%n+n)%n]...)
	}
	return b
}

// decodeBlocks stores the cnt blocks of AllGather message b as blocks first,
// first-1, ... (mod len(out)) of out. The blocks share b's memory.
func decodeBlocks(b []byte, out [][]byte, first, cnt int) error {
	n := len(out)
	if len(b) < 5 || b[0] != 0 {
		return fmt.Errorf("malformed %d-byte allgather message", len(b))
	}
	if got := int(binary.BigEndian.Uint32(b[1:])); got != cnt || len(b) < 5+4*cnt {
		return fmt.Errorf("allgather message with %d blocks, want %d", got, cnt)
	}
	data := b[5+4*cnt:]
	for i := range cnt {
		l := int(binary.BigEndian.Uint32(b[5+4*i:]))
		if l > len(data) {
			return fmt.Errorf("allgather message: block %d of %d bytes overruns the message", i, l)
		}
		out[((first-i)%n+n)%n] = data[:l:l]
		data = data[l:]
	}
	if len(data) != 0 {
		return fmt.Errorf("allgather message: %d trailing bytes", len(data))
	}
	return nil
}

// abandon tells the peers, best effort and briefly, that collective seq
// failed on this rank.
func abandon(t transport, seq int64) {
	ctx, cancel := context.WithTimeout(context.Background(), min(time.Second, t.timeoutValue()))
	defer cancel()
	for _, p := range t.abandonTargets() {
		if p != t.Rank() {
			_ = t.sendMsg(ctx, p, classAbandon, seq, nil)
		}
	}
}
