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
// before the launch, then recorded on s0 and waited for by each other
// stream after it. Outside it, as a captured launch of one rank orders
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
	for i, l := range ls {
		e := l.Engine
		e.logDecisions(l.Plan)
		ev, err := e.eventOn(rs[i].stream, rs[i].h)
		if err != nil {
			return true, err // nothing queued
		}
		rs[i].ev, rs[i].last = ev, e.res.last
	}
	set, err := setEventFor(ls, rs)
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
			if err := c.Wait(s0, r.last); err != nil {
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
	forked := set.fork.Record(s0)
	if forked != nil {
		errs = append(errs, fmt.Errorf("ncclgo: ranks %s: recording the captured multi-rank launch for the other streams: %w", ranksOf(ls), forked))
	}
	for i, r := range rs {
		set.joined[i] = r.h == h0
		if r.h == h0 || forked != nil {
			continue
		}
		if err := r.stream.WaitEvent(set.fork); err != nil {
			errs = append(errs, waitErr(r, err))
		} else {
			set.joined[i] = true
		}
	}
	noteMultiLaunch(ls, evs)
	return true, errors.Join(errs...)
}
