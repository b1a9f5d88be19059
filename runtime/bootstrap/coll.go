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

// Collective algorithms. Every step of every algorithm sends to rank
// r+2^k and receives from rank r-2^k (mod n) for some k, so that a rank
// talks to at most 2·⌈log2 n⌉ peers: the ones whose addresses the root
// handed it (its fingers, r+2^k) and the ones that dial it (r-2^k).
//
//   - Barrier: a dissemination barrier, ⌈log2 n⌉ rounds; in round k rank
//     r sends an empty message to r+2^k and waits for one from r-2^k.
//   - AllGather: Bruck's algorithm over the same rounds when every block
//     is small (at most bruckBlockLimit); in round k rank r sends the
//     min(2^k, n-2^k) blocks it holds (r, r-1, ...) to r+2^k. Each message
//     starts with a flag saying whether the sender has seen a large block
//     yet: the flags are OR-reduced by the rounds themselves, so that
//     after the last round every rank knows whether any block was large,
//     and then all of them (and only then) fall back to the ring, whose
//     n-1 steps move one block each, to r+1 and from r-1.

// Bruck limits: a block larger than bruckMaxBlock, or one that would make
// the largest Bruck message (⌈n/2⌉ blocks) exceed bruckMaxMessage or the
// network's message limit, sends the AllGather round the ring instead.
const (
	bruckMaxBlock   = 64 << 10
	bruckMaxMessage = 16 << 20
)

// bruckBlockLimit is the largest block an AllGather over n ranks sends
// with Bruck's algorithm when messages may carry maxMsg bytes; -1 when
// none fits.
func bruckBlockLimit(n, maxMsg int) int {
	half := (n + 1) / 2
	return min(bruckMaxBlock, (min(maxMsg, bruckMaxMessage)-5)/half-4)
}

// rounds is the number of dissemination rounds for n ranks, ⌈log2 n⌉.
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
	// notices first (a queued message could let it succeed).
	var out [][]byte
	what := "before step 0"
	if err = context.Cause(ctx); ctx.Err() == nil {
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

// barrier is a dissemination barrier.
func barrier(ctx context.Context, t transport) error {
	_, err := collective(ctx, t, "barrier", func(ctx context.Context, seq int64) ([][]byte, string, error) {
		n, r := t.Size(), t.Rank()
		for k := range rounds(n) {
			d := 1 << k
			if _, what, err := exchange(ctx, t, seq, "round", k, (r+d)%n, (r-d+n)%n, nil); err != nil {
				return nil, what, err
			}
		}
		return nil, "", nil
	})
	return err
}

// allGather gathers mine from every rank: Bruck's algorithm when every
// block is small, the ring otherwise (see above).
func allGather(ctx context.Context, t transport, mine []byte) ([][]byte, error) {
	return collective(ctx, t, "allgather", func(ctx context.Context, seq int64) ([][]byte, string, error) {
		n, r := t.Size(), t.Rank()
		out := make([][]byte, n)
		out[r] = append([]byte{}, mine...)
		large := len(mine) > bruckBlockLimit(n, t.maxMessage())
		have := 1      // out holds blocks r, r-1, ..., r-have+1
		var buf []byte // the message of each round, reused: sendMsg copies or writes it
		for k := range rounds(n) {
			d := 1 << k
			cnt := min(d, n-have)
			var msg []byte
			if large {
				msg = []byte{1}
			} else {
				buf = encodeBlocks(buf[:0], out, r, cnt)
				msg = buf
			}
			from := (r - d + n) % n
			got, what, err := exchange(ctx, t, seq, "round", k, (r+d)%n, from, msg)
			if err != nil {
				return nil, what, err
			}
			if len(got) > 0 && got[0] == 1 {
				large = true
			}
			if large {
				continue
			}
			if err := decodeBlocks(got, out, r-have, cnt); err != nil {
				return nil, fmt.Sprintf("round %d: from rank %d", k, from), err
			}
			have += cnt
		}
		if !large {
			return out, "", nil
		}
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
// of out as a Bruck message: 0 | cnt u32 | cnt × len u32 | the blocks.
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

// decodeBlocks stores the cnt blocks of Bruck message b as blocks first,
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
