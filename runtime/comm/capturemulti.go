package comm

import (
	"errors"
	"fmt"

	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
)

// runMultiCaptured is runMulti's launch when every rank's stream is being
// captured into one CUDA graph (one capture id, as when a program forks
// its ranks' streams from one capturing stream): one captured multi-rank
// launch on the first rank's stream s0, so that each replay runs one
// kernel for all the ranks (and an AllReduce of them all in one pass,
// enqueue.OnePass) instead of a kernel per rank that meet through their
// connections. Inside the capture the joins are the graph's edges: the
// set's fork event, recorded on each other stream and waited for by s0
// before the launch; after it each other stream follows s0
// (joinCaptured). Outside it, as a captured launch of one rank orders
// itself (runLocked): each rank's previous launch on another stream is an
// external event wait node, and the set's completion event an external
// record node that each replay records, every rank's latest.
//
// done is false, with nothing queued, when the streams are not all in one
// capture (rs[i].known from runMultiOps' checks, then each stream's
// capture id), or one is a default stream: runMulti then runs each rank
// alone, each launch captured into its own stream's graph. Every engine's
// mu is held.
func runMultiCaptured(ls []Launch, parts []enqueue.Part, evs []*cuda.Event, rs []rankSync) (done bool, _ error) {
	s0, h0 := rs[0].stream, rs[0].h
	for _, r := range rs {
		if r.known != captureActive || r.stream.IsDefault() {
			return false, nil
		}
	}
	id0, err := s0.CaptureID()
	if err != nil || id0 == 0 {
		return false, nil // runKnown asks again and reports what failed
	}
	for _, r := range rs[1:] {
		if r.h == h0 {
			continue
		}
		if id, err := r.stream.CaptureID(); err != nil || id != id0 {
			return false, nil
		}
	}
	set, err := prepareSet(ls, rs)
	if err != nil {
		return true, err // nothing queued
	}
	if set.fork == nil {
		// Through a context wrapper of its own, as the set's event.
		ctx, err := cuda.WrapContext(ls[0].Engine.cctx.Handle())
		var fork *cuda.Event
		if err == nil {
			fork, err = ctx.NewEvent(true)
		}
		if err != nil {
			return true, fmt.Errorf("ncclgo: ranks %s: the captured multi-rank launch's join event: %w", ranksOf(ls), err)
		}
		set.fork = fork
	}
	const c = enqueue.Capture(true)
	for i, r := range rs {
		if r.last != nil && r.last != r.ev && r.last != set.ev {
			if err := captureWait(c, s0, r.last); err != nil {
				return true, fmt.Errorf("ncclgo: rank %d: ordering after the previous launch on another stream: %w", r.rank, err)
			}
		}
		if i == 0 || r.h == h0 {
			continue
		}
		if err := set.fork.Record(r.stream); err != nil {
			return true, fmt.Errorf("ncclgo: rank %d: recording captured stream %#x for the multi-rank launch: %w", r.rank, r.h, err)
		}
		if err := s0.WaitEvent(set.fork); err != nil {
			return true, fmt.Errorf("ncclgo: rank %d: joining captured stream %#x to the multi-rank launch: %w", r.rank, r.h, err)
		}
	}
	var errs []error
	e0 := ls[0].Engine
	if err := e0.launcher.RunMultiIn(parts, s0, c); err != nil {
		errs = append(errs, fmt.Errorf("ncclgo: ranks %s: %w", ranksOf(ls), err))
	}
	// Something may be captured even when the launch failed: track it all
	// the same, as runMulti does.
	if err := e0.record(c, set.ev, s0); err != nil {
		errs = append(errs, recordErr(set, err))
	} else {
		for i := range evs {
			evs[i] = set.ev
		}
	}
	forked := false // the fork recorded on s0, for drivers that cannot follow
	for i, r := range rs {
		set.joined[i] = r.h == h0
		if r.h == h0 {
			continue
		}
		if err := joinCaptured(r.stream, s0, set.fork, &forked); err != nil {
			errs = append(errs, waitErr(r, err))
		} else {
			set.joined[i] = true
		}
	}
	noteMultiLaunch(ls, evs)
	return true, errors.Join(errs...)
}

// joinCaptured joins captured stream s back to s0 after a captured
// multi-rank launch: s's capture dependencies become s0's
// (cuda.Stream.FollowCapture). A captured wait for an event recorded on s0
// would add them to those s already has: s, which captures nothing of its
// own between the launches, would gather every launch before, and each
// later launch, joined from s, would depend on all of them (a replay of n
// launches then cost O(n²) edges: 2.22 µs a collective at n = 20, 5.26 at
// n = 400, on the H200). Where the driver cannot follow, it falls back to
// that wait, the fork recorded on s0 once (*forked).
func joinCaptured(s, s0 *cuda.Stream, fork *cuda.Event, forked *bool) error {
	err := s.FollowCapture(s0)
	if !errors.Is(err, cuda.ErrNotSupported) {
		return err
	}
	if !*forked {
		if err := fork.Record(s0); err != nil {
			return err
		}
		*forked = true
	}
	return s.WaitEvent(fork)
}
