package comm

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// setEvent is the completion event of a multi-rank launch set: the exact
// ranks of a multi-rank launch (the same engines, in rank order) on the
// exact streams (each rank's, after its lane). It is recorded once, on
// the first rank's stream after the launch, and every rank of the set
// takes it as its completion of that launch (its latest launch, its
// ledger entry, what Wait, Destroy and the liveness watcher query).
//
// Only a launch of that exact set records it: a rank launching alone, or
// in another set, records its own event or that set's. So whoever refers
// to it (a rank of the set) waits for a launch of the ranks of the set,
// the rank itself included, never for a kernel of some other rank that
// may wait for it (docs/notes/20261201-setevent.md).
//
// Its ranks own it jointly: each holds a reference (Engine.sets) from the
// set's first launch to its Destroy, which waits for it, and the last one
// to let go destroys it. A set with a destroyed rank never launches again
// (runMulti runs a destroyed rank alone, which run refuses), so the event
// is recorded no more once its first rank has let go.
type setEvent struct {
	members []*Engine // in rank order
	handles []uintptr // members[i]'s stream's handle (rankSync.h)
	ev      *cuda.Event
	// joined[i] says whether members[i]'s stream waited for ev after its
	// latest record (or is the stream it was recorded on): a later launch
	// of the rank alone on that stream need not wait for it. Written
	// under every member's mu, read under the member's own.
	joined []bool
	refs   atomic.Int32 // members that have not let go (release)
	// fork joins the streams of a captured launch of the set inside
	// their capture (runMultiCaptured): it is only ever recorded on
	// capturing streams, so nothing may query or wait for it outside a
	// capture, and it is in no completion list. Made at the set's first
	// captured launch, under every member's mu.
	fork *cuda.Event
}

// matches reports whether s is the set of the launches ls on the streams
// of rs.
func (s *setEvent) matches(ls []Launch, rs []rankSync) bool {
	if len(s.members) != len(ls) {
		return false
	}
	for i := range ls {
		if s.members[i] != ls[i].Engine || s.handles[i] != rs[i].h {
			return false
		}
	}
	return true
}

// setEventFor returns the completion event of the multi-rank launch of
// ls on the streams of rs, made at that set's first launch, when each of
// its engines takes a reference. Every engine's mu is held, none is
// destroyed.
func setEventFor(ls []Launch, rs []rankSync) (*setEvent, error) {
	e0 := ls[0].Engine
	for _, s := range e0.sets {
		if s.matches(ls, rs) {
			return s, nil
		}
	}
	// Through a context wrapper of its own: the first rank's is released
	// at its Destroy (and with it every event made through it), while the
	// other ranks may still query the event. The context itself outlives
	// the event: each rank retains it (or its caller owns it) until after
	// it let go of the event.
	ctx, err := cuda.WrapContext(e0.cctx.Handle())
	var ev *cuda.Event
	if err == nil {
		ev, err = ctx.NewEvent(true)
	}
	if err != nil {
		return nil, fmt.Errorf("ncclgo: ranks %s: the multi-rank launch's completion event: %w", ranksOf(ls), err)
	}
	s := &setEvent{members: make([]*Engine, len(ls)), handles: make([]uintptr, len(ls)), ev: ev, joined: make([]bool, len(ls))}
	for i, l := range ls {
		s.members[i], s.handles[i] = l.Engine, rs[i].h
		l.Engine.sets = append(l.Engine.sets, s)
	}
	s.refs.Store(int32(len(ls)))
	return s, nil
}

// release lets go of one member's reference; the last one destroys the
// event. The member's Destroy calls it once the event has completed.
func (s *setEvent) release() error {
	if s.refs.Add(-1) != 0 {
		return nil
	}
	var err error
	if s.fork != nil {
		err = s.fork.Destroy()
	}
	return errors.Join(s.ev.Destroy(), err)
}

// label names s in Destroy's errors: the stream it is recorded on and
// its ranks.
func (s *setEvent) label() string {
	return fmt.Sprintf("%#x (the multi-rank launch of ranks %s)", s.handles[0], s.ranks())
}

// ranks names the ranks of s for errors.
func (s *setEvent) ranks() string {
	return rankList(len(s.members), func(i int) int { return s.members[i].rank })
}

// joinedAfter reports whether e's stream h is ordered after ev, the
// rank's latest launch: ev is the event of a set of e's launched on h,
// whose stream waited for it after its latest launch (or is where it was
// recorded). run then need not make h wait for it. e.mu is held.
func (e *Engine) joinedAfter(ev *cuda.Event, h uintptr) bool {
	for _, s := range e.sets {
		if s.ev != ev {
			continue
		}
		i := slices.Index(s.members, e)
		return i >= 0 && s.handles[i] == h && s.joined[i]
	}
	return false
}

// completions appends to evs every completion event e holds: its own (one
// per stream) and those of its sets. e.mu is held.
func (e *Engine) completions(evs []launchEvent) []launchEvent {
	for _, ev := range e.events {
		evs = append(evs, ev)
	}
	for _, s := range e.sets {
		evs = append(evs, s.ev)
	}
	return evs
}

// releaseSets lets go of e's references to its sets' events (Destroy,
// once they have completed). e.mu is held.
func (e *Engine) releaseSets() error {
	var errs []error
	for _, s := range e.sets {
		errs = append(errs, s.release())
	}
	e.sets = nil
	return errors.Join(errs...)
}
