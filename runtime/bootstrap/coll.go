package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
// later.
func (s *collState) fail(seq int64, why error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.brokenAt == 0 || seq < s.brokenAt {
		s.brokenAt, s.why = seq, why
	}
	if s.cur != 0 && s.cur >= seq {
		s.curCancel(s.why)
	}
}

// peerAbandoned records a peer's notice that its collective seq failed.
func (s *collState) peerAbandoned(peer int, seq int64) {
	s.fail(seq, fmt.Errorf("%w: rank %d abandoned collective #%d", ErrCollectiveBroken, peer, seq))
}

// brokenAtSeq is the first failed collective number, 0 if none (tests).
func (s *collState) brokenAtSeq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.brokenAt
}
