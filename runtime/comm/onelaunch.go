package comm

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/residency"
)

// EnvOneLaunch turns the multi-rank launch off ("0") or on ("1", the
// default): a group that holds the calls of several ranks of one
// communicator on one GPU of this process launches one kernel for them
// all instead of one per rank (docs/notes/20261201-onelaunch.md).
const EnvOneLaunch = "NCCLGO_ONE_LAUNCH"

// EnvOnePass turns off ("0") or on ("1", the default) the one-pass
// AllReduce of a multi-rank launch that holds every rank of its
// communicator (enqueue.OnePass: one work per rank, at most
// enqueue.OnePassMaxBytes): each block reduces its slice of every rank's
// input straight into every rank's output, with no connection, mailbox or
// wait between the ranks' blocks, whatever algorithm the tuner chose.
const EnvOnePass = "NCCLGO_ONE_PASS"

// onePassFromEnv reads EnvOnePass through lookup: on unless it is "0".
func onePassFromEnv(lookup func(string) (string, bool)) (bool, error) {
	return envChoice(lookup, EnvOnePass, true, map[string]bool{"0": false, "1": true},
		"1 (a multi-rank launch of every rank of a communicator runs a small AllReduce in one pass, the default) or 0 (as the tuner chose)")
}

// oneLaunchFromEnv reads EnvOneLaunch through lookup: on unless it is "0".
func oneLaunchFromEnv(lookup func(string) (string, bool)) (bool, error) {
	return envChoice(lookup, EnvOneLaunch, true, map[string]bool{"0": false, "1": true},
		"0 (a launch per rank) or 1 (one launch for the ranks of this process on a GPU, the default)")
}

// mergeKey is what the launches of one multi-rank launch share: the
// communicator (its lease on the residency ledger, one per communicator
// in the process) and the CUDA context, so the GPU.
type mergeKey struct {
	lease *residency.Lease
	ctx   uintptr
}

// mergeCand is one launch of a group as the merge planning sees it.
type mergeCand struct {
	key  mergeKey
	ok   bool // the launch may share a kernel launch (mergeable)
	rank int
	part enqueue.Part
}

// mutual reports whether every rank's part of the tasks waits for every
// other rank's: true for AllReduce, AllGather and ReduceScatter, whose
// every rank's result depends on every rank's input. Only then does
// starting the ranks' kernels together (each waiting for what every
// rank's stream queued before) add no wait that a kernel per rank lacks:
// each rank's kernel already finishes only after all the others started.
// A Broadcast's root, a Reduce's leaves and point-to-point calls finish on
// their own, so their launches stay apart.
func mutual(tasks []enqueue.Task) bool {
	for _, t := range tasks {
		switch t.Coll {
		case kspace.AllReduce, kspace.AllGather, kspace.ReduceScatter:
		default:
			return false
		}
	}
	return len(tasks) > 0
}

// candidate describes l for the merge planning; l's plan is on the ledger
// (not empty). It reads e's lease under e.mu.
func (l *Launch) candidate() mergeCand {
	if !l.mergeable() {
		return mergeCand{}
	}
	l.Engine.mu.Lock() // Destroy frees the launcher once destroyed is set under mu
	defer l.Engine.mu.Unlock()
	return l.candidateLocked()
}

// mergeable reports whether l's plan and settings allow a multi-rank
// launch, which candidateLocked then checks of its engine.
func (l *Launch) mergeable() bool {
	e := l.Engine
	return e.s.OneLaunch && !e.hostOnly && len(l.Plan.Copies) == 0 && len(l.Plan.Launches) == 1 && mutual(l.Tasks)
}

// candidateLocked is candidate of a mergeable l with e.mu held.
func (l *Launch) candidateLocked() mergeCand {
	e := l.Engine
	if e.destroyed || e.launcher == nil || e.res.lease == nil {
		return mergeCand{}
	}
	return mergeCand{
		key:  mergeKey{lease: e.res.lease, ctx: e.cctx.Handle()},
		ok:   true,
		rank: e.rank,
		part: enqueue.Part{Comm: e.launcher.Comm(), Launch: &l.Plan.Launches[0], NRanks: e.nRanks},
	}
}

// planMerges returns the multi-rank launches of a group's launches cs:
// sets of at least two indexes into cs, mergeable launches of one
// communicator on one GPU, each set in increasing rank order, which
// enqueue.CheckMulti accepts. Launches of one key are taken in the
// group's order; one that does not fit in its key's current set starts
// the next. A launch in no set runs on its own.
func planMerges(cs []mergeCand) [][]int { return planMergesIn(cs, new(mergeScratch)) }

// planMergesIn is planMerges in sc's memory: the sets share one backing
// array (they are disjoint), and taken marks the launches placed; a
// reused sc allocates nothing (BenchmarkHostMultiAllReduce8).
func planMergesIn(cs []mergeCand, sc *mergeScratch) [][]int {
	sets := sc.sets[:0]
	buf := grow(sc.buf, len(cs))[:0]
	taken := grow(sc.taken, len(cs))
	clear(taken)
	parts := grow(sc.planParts, len(cs))[:0]
	defer func() { sc.sets, sc.buf, sc.taken, sc.planParts = sets, buf, taken, parts }()
	for i := range cs {
		if !cs[i].ok || taken[i] {
			continue
		}
		start := len(buf)
		parts = parts[:0]
		for j := i; j < len(cs); j++ {
			if taken[j] || !cs[j].ok || cs[j].key != cs[i].key {
				continue
			}
			if len(parts) > 0 && enqueue.CheckMulti(append(parts, cs[j].part)) != nil {
				continue // left for a later set of this key
			}
			buf = append(buf, j)
			parts = append(parts, cs[j].part)
			taken[j] = true
		}
		set := buf[start:len(buf):len(buf)]
		if len(set) < 2 {
			buf = buf[:start] // a launch alone: its slot is free again
			continue
		}
		sortByRank(set, cs)
		sets = append(sets, set)
	}
	if len(sets) == 0 {
		return nil
	}
	return sets
}

// sortByRank sorts set, indexes into cs, by rank (insertion: at most 8).
func sortByRank(set []int, cs []mergeCand) {
	for i := 1; i < len(set); i++ {
		for j := i; j > 0 && cs[set[j]].rank < cs[set[j-1]].rank; j-- {
			set[j], set[j-1] = set[j-1], set[j]
		}
	}
}

// grow returns s with length n, reusing its memory when it is large
// enough.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// mergeScratch is the memory of a group's merge planning (newMerger), kept
// in mergePool between groups so that a repeated group of several ranks
// allocates none of it.
type mergeScratch struct {
	cs               []mergeCand
	setOf            []int
	held             []bool
	sets             [][]int
	buf              []int
	taken            []bool
	planParts, parts []enqueue.Part
	setParts         [][]enqueue.Part
	state            []mergeState
	ls1              []Launch
	evs              []*cuda.Event
	rs               []rankSync
}

var mergePool = sync.Pool{New: func() any { return new(mergeScratch) }}

// runMulti queues the plans of ls, launches of ranks of one communicator
// on one GPU in increasing rank order (a set of planMerges), as one
// multi-rank launch, on the first launch's stream s0, joined to the other
// ranks' streams (joinBefore, joinAfter). It stores each launch's
// completion event in evs: the set's (setEvent), recorded once after the
// launch, or nil where nothing was queued or the record failed. When
// every stream is being captured into one CUDA graph the launch is
// captured (runMultiCaptured); when only some are, or into several
// graphs, or a rank was destroyed, it runs each plan on its own (run)
// instead. rs is scratch as long as ls.
func runMulti(ls []Launch, parts []enqueue.Part, evs []*cuda.Event, rs []rankSync) error {
	for _, l := range ls { // in rank order: two groups never lock the other way round
		l.Engine.mu.Lock()
	}
	alone := false
	var h0 uintptr
	for i := range rs {
		rs[i] = rankSync{}
	}
	for i, l := range ls {
		if l.Engine.destroyed || l.Engine.IdleNetError() != nil {
			alone = true // run refuses it, naming why
			break
		}
		h := l.Stream.Handle()
		rs[i] = rankSync{rank: l.Engine.rank, stream: l.Stream, h: h}
		if i == 0 {
			h0 = h
		}
	}
	e0 := ls[0].Engine
	if !alone && !(e0.lanes.shared && ls[0].Stream.IsDefault()) && e0.launcher != nil {
		// No lane to enter: the capture checks, the joins and the launch
		// go to the driver in one call (runMultiOps).
		done, err := runMultiOps(ls, parts, evs, rs)
		if !done {
			// Every stream in one capture: one captured launch for all.
			done, err = runMultiCaptured(ls, parts, evs, rs)
		}
		if done {
			for _, l := range ls {
				l.Engine.mu.Unlock()
			}
			return err
		}
		alone = true // streams of several captures, or a failed check: run reports it
	}
	for i, l := range ls {
		if alone {
			break
		}
		if i > 0 && rs[i].h == h0 {
			continue // asked already
		}
		c, err := enqueue.CaptureOf(l.Stream)
		if err != nil || bool(c) {
			alone = true // run reports the error, or captures the launch alone
			if err == nil {
				rs[i].known = captureActive
			}
			break
		}
	}
	if alone {
		for _, l := range ls {
			l.Engine.mu.Unlock()
		}
		var errs []error
		for i, l := range ls {
			ev, err := l.Engine.runKnown(l.Plan, l.Stream, rs[i].known)
			evs[i] = ev
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	defer func() {
		for _, l := range ls {
			l.Engine.mu.Unlock()
		}
	}()
	// On a default stream that several ranks of this process share, the
	// launch goes on the first rank's lane, as run puts a rank's launch:
	// a group whose ranks do not all fit one multi-rank launch queues
	// several sets, and on the one shared stream the first set's kernel
	// would wait for ranks queued behind it. The set's other ranks on that
	// stream are the lane's (it entered from their stream); leaveLanes
	// joins it back at the group's end.
	s0, err := ls[0].Engine.laneFor(ls[0].Stream)
	if err != nil {
		return err // nothing queued yet
	}
	shared, h0 := rs[0].h, rs[0].h
	if s0 != ls[0].Stream {
		h0 = s0.Handle()
	}
	for i, l := range ls {
		e := l.Engine
		e.logDecisions(l.Plan)
		if rs[i].h == shared {
			rs[i].stream, rs[i].h = s0, h0
		}
		ev, err := e.eventOn(rs[i].stream, rs[i].h)
		if err != nil {
			return err // at most the lane entered: leaveLanes leaves it
		}
		rs[i].ev, rs[i].last = ev, e.res.last
	}
	set, err := setEventFor(ls, rs)
	if err != nil {
		return err // at most the lane entered: leaveLanes leaves it
	}
	if err := joinBefore(driverSync{}, rs, set); err != nil {
		return err // nothing launched
	}
	var errs []error
	if err := ls[0].Engine.launcher.RunMulti(parts, s0); err != nil {
		errs = append(errs, fmt.Errorf("ncclgo: ranks %s: %w", ranksOf(ls), err))
	}
	// Something may be queued even when the launch failed: track it all
	// the same, as run does.
	errs = append(errs, joinAfter(driverSync{}, rs, set, evs)...)
	noteMultiLaunch(ls, evs)
	return errors.Join(errs...)
}

// runMultiOps is runMulti for launches that enter no lane, in one call
// into the driver (cuda.Ops on the first rank's engine): each distinct
// stream's capture check, then joinBefore's, the launch's and joinAfter's
// calls, in their order and with their answers to failures. done is
// false, with nothing queued, when a stream is being captured or a check
// failed: runMulti then runs each rank alone. Every engine's mu is held.
func runMultiOps(ls []Launch, parts []enqueue.Part, evs []*cuda.Event, rs []rankSync) (done bool, _ error) {
	o := &ls[0].Engine.ops
	o.Reset()
	s0, h0 := rs[0].stream, rs[0].h
	for i := range rs {
		rs[i].check = 0 // s0's
		if i == 0 || rs[i].h != h0 {
			rs[i].check = o.Capture(rs[i].stream)
		}
	}
	checks := o.Len()
	set, err := prepareSet(ls, rs)
	if err != nil {
		return true, err // nothing queued
	}
	// With join graphs, the first stream's waits for the others and the
	// set's record are nodes of the launch's graph (a stream found idle
	// keeps its event's last record, long done, which the graph's wait
	// passes at once).
	var g *cuda.LaunchGraph
	if launcher := ls[0].Engine.launcher; launcher.JoinGraphs {
		var buf [enqueue.MaxJoinRanks]*cuda.Event
		waits := buf[:0]
		for i, r := range rs {
			if i > 0 && r.h != h0 {
				waits = append(waits, r.ev)
			}
		}
		g = launcher.MultiJoinGraph(parts, waits, set.ev)
	}
	// joinBefore: a failure stops everything (nothing is launched).
	type join struct{ wait, query, rec, join int } // indexes in o, -1 for none
	before := make([]join, 0, 8)
	for i := range rs {
		r := &rs[i]
		j := join{wait: -1, query: -1, rec: -1, join: -1}
		if r.last != nil && r.last != r.ev && r.last != set.ev {
			j.wait = o.WaitEvent(s0, r.last, false, cuda.OpStop)
		}
		if i > 0 && r.h != h0 {
			if ls[i].Engine.joinSkipsQuery(r.h) {
				j.rec = o.Record(r.ev, r.stream, false, cuda.OpStop)
			} else {
				j.query = o.Query(r.stream, cuda.OpStop)
				j.rec = o.Record(r.ev, r.stream, false, cuda.OpStop|cuda.OpIfBusy)
			}
			if g == nil {
				j.join = o.WaitEvent(s0, r.ev, false, cuda.OpStop|cuda.OpIfPrevOK)
			}
		}
		before = append(before, j)
	}
	li, err := ls[0].Engine.launcher.QueueMultiVia(parts, s0, o, cuda.OpSkip, g)
	if err != nil {
		return true, fmt.Errorf("ncclgo: ranks %s: %w", ranksOf(ls), err) // nothing queued
	}
	// joinAfter: run whatever the launch did, as runMulti tracks it.
	after := -1 // the set's record, in g when there is one
	if g == nil {
		after = o.Record(set.ev, s0, false, cuda.OpAlways)
	}
	firstWait := o.Len()
	for i := range rs {
		r := &rs[i]
		if r.h != h0 {
			o.WaitEvent(r.stream, set.ev, false, cuda.OpAlways)
		}
	}
	if err := o.Run(); err != nil {
		return true, fmt.Errorf("ncclgo: ranks %s: %w", ranksOf(ls), err) // nothing ran
	}
	for i := range checks {
		if o.Err(i) != nil || o.CaptureOf(i) != cuda.CaptureNone {
			// The checks in a row all ran (cuda.Ops.Capture): tell each
			// rank's run what its stream's answered.
			for k := range rs {
				switch c := rs[k].check; {
				case !o.Ran(c) || o.Err(c) != nil:
				case o.CaptureOf(c) == cuda.CaptureNone:
					rs[k].known = captureNone
				case o.CaptureOf(c) == cuda.CaptureActive:
					rs[k].known = captureActive
				}
			}
			return false, nil
		}
	}
	for i, j := range before {
		r := &rs[i]
		if j.wait >= 0 {
			if err := o.Err(j.wait); err != nil {
				return true, fmt.Errorf("ncclgo: rank %d: ordering after the previous launch on another stream: %w", r.rank, err)
			}
		}
		if j.rec < 0 {
			continue
		}
		busy := true // joined without asking
		if j.query >= 0 {
			if err := o.Err(j.query); err != nil {
				return true, fmt.Errorf("ncclgo: rank %d: querying stream %#x for the multi-rank launch: %w", r.rank, r.h, err)
			}
			busy = o.Busy(j.query)
		}
		if err := o.Err(j.rec); err != nil && busy {
			return true, fmt.Errorf("ncclgo: rank %d: recording stream %#x for the multi-rank launch: %w", r.rank, r.h, err)
		}
		if j.join >= 0 {
			if err := o.Err(j.join); err != nil && busy {
				return true, fmt.Errorf("ncclgo: rank %d: joining stream %#x to the multi-rank launch: %w", r.rank, r.h, err)
			}
		}
		ls[i].Engine.noteJoin(r.h, j.query >= 0, busy)
	}
	var errs []error
	if err := o.Err(li); err != nil {
		errs = append(errs, fmt.Errorf("ncclgo: ranks %s: enqueue: multi-rank launch of %s for %d ranks: %w", ranksOf(ls), parts[0].Launch.Func, len(parts), err))
	}
	switch {
	case after >= 0 && o.Err(after) != nil:
		errs = append(errs, recordErr(set, o.Err(after)))
	case after >= 0 || o.Err(li) == nil: // in g, the record ran with the launch
		for i := range evs {
			evs[i] = set.ev
		}
	}
	k := firstWait
	for i := range rs {
		r := &rs[i]
		set.joined[i] = r.h == h0
		if r.h != h0 {
			if err := o.Err(k); err != nil {
				if !errors.Is(err, cuda.ErrNotRun) { // else what stopped it failed
					errs = append(errs, waitErr(*r, err))
				}
			} else {
				set.joined[i] = true
			}
			k++
		}
	}
	noteMultiLaunch(ls, evs)
	return true, errors.Join(errs...)
}

// prepareSet logs each launch's decisions, fills in each rank's own
// completion event on its stream and its previous launch's (rs[i].ev,
// rs[i].last), and returns the set's completion event (setEventFor), for
// a multi-rank launch that enters no lane. Every engine's mu is held;
// nothing is queued.
func prepareSet(ls []Launch, rs []rankSync) (*setEvent, error) {
	for i, l := range ls {
		e := l.Engine
		e.logDecisions(l.Plan)
		ev, err := e.eventOn(rs[i].stream, rs[i].h)
		if err != nil {
			return nil, err
		}
		rs[i].ev, rs[i].last = ev, e.res.last
	}
	return setEventFor(ls, rs)
}

// eventOn is eventFor(stream) for a stream whose handle h the caller has
// (Stream.Handle is a cgo call). e.mu is held.
func (e *Engine) eventOn(stream *cuda.Stream, h uintptr) (*cuda.Event, error) {
	if ev, ok := e.events[h].(*cuda.Event); ok {
		return ev, nil
	}
	return e.eventFor(stream)
}

// joinQueryEvery bounds how long a stream's join goes without asking:
// once a query found the stream busy, the next joinQueryEvery-1 joins of
// it record and wait at once (the two calls a busy stream needs anyway)
// instead of asking first, and the one after asks again. Back-to-back
// calls keep the other ranks' streams busy (each waits on the previous
// launch), so the query was a wasted driver call per stream there, and
// with none left the capture-mode switch around the queries goes too.
// A stream that turned idle costs a needless record and wait per launch
// until it is asked again.
const joinQueryEvery = 16

// joinSkipsQuery reports whether the join of stream h joins it without
// asking whether it is busy. Under e.mu.
func (e *Engine) joinSkipsQuery(h uintptr) bool { return e.joinBusy[h] > 0 }

// noteJoin records how the join of stream h went: asked (queried) and
// found busy or idle, or joined without asking. Under e.mu.
func (e *Engine) noteJoin(h uintptr, queried, busy bool) {
	switch {
	case queried && busy:
		if e.joinBusy == nil || len(e.joinBusy) >= 64 {
			e.joinBusy = map[uintptr]uint8{} // streams come and go: forget them all now and then
		}
		e.joinBusy[h] = 1
	case queried:
		delete(e.joinBusy, h)
	case e.joinBusy[h] > 0:
		if n := e.joinBusy[h] + 1; n < joinQueryEvery {
			e.joinBusy[h] = n
		} else {
			delete(e.joinBusy, h) // ask next time
		}
	}
}

// rankSync is what joining a rank's stream to a multi-rank launch needs.
type rankSync struct {
	rank   int
	stream *cuda.Stream
	h      uintptr     // stream.Handle()
	ev     *cuda.Event // the rank's own completion event on stream (Engine.eventFor), for joinBefore
	last   *cuda.Event // the rank's previous launch's event, nil for none
	check  int         // runMultiOps: the index of its stream's capture check
	known  knownCapture
}

// streamSync is the driver calls that join streams: the CUDA driver's
// (driverSync), or a test's that counts them.
type streamSync interface {
	idle(s *cuda.Stream) (bool, error) // cuStreamQuery: all queued work done
	record(ev *cuda.Event, s *cuda.Stream) error
	wait(s *cuda.Stream, ev *cuda.Event) error
}

// driverSync is streamSync through the CUDA driver.
type driverSync struct{}

func (driverSync) idle(s *cuda.Stream) (bool, error)           { return s.Query() }
func (driverSync) record(ev *cuda.Event, s *cuda.Stream) error { return ev.Record(s) }
func (driverSync) wait(s *cuda.Stream, ev *cuda.Event) error   { return s.WaitEvent(ev) }

// joinBefore makes rs[0].stream, s0, where the multi-rank launch is
// queued, wait for what it must come after: each rank's previous launch
// when that was on another stream (as run orders it), and what every
// other rank's stream has queued so far, unless that stream is idle (all
// its work done: then there is nothing to wait for, and a record and a
// wait, two driver calls and a cross-stream dependency on the GPU, are
// saved; in a loop of multi-rank launches every other stream is idle but
// for its wait for the previous launch, done by the time the host queues
// the next). Ranks on s0's own stream (one shared default stream) need
// nothing, nor does a rank whose previous launch was set's, on s0 too. It
// returns at the first failure, before the launch is queued.
func joinBefore(o streamSync, rs []rankSync, set *setEvent) error {
	s0, h0 := rs[0].stream, rs[0].h
	for i, r := range rs {
		if r.last != nil && r.last != r.ev && r.last != set.ev {
			if err := o.wait(s0, r.last); err != nil {
				return fmt.Errorf("ncclgo: rank %d: ordering after the previous launch on another stream: %w", r.rank, err)
			}
		}
		if i == 0 || r.h == h0 {
			continue
		}
		idle, err := o.idle(r.stream)
		if err != nil {
			return fmt.Errorf("ncclgo: rank %d: querying stream %#x for the multi-rank launch: %w", r.rank, r.h, err)
		}
		if idle {
			continue
		}
		if err := o.record(r.ev, r.stream); err != nil {
			return fmt.Errorf("ncclgo: rank %d: recording stream %#x for the multi-rank launch: %w", r.rank, r.h, err)
		}
		if err := o.wait(s0, r.ev); err != nil {
			return fmt.Errorf("ncclgo: rank %d: joining stream %#x to the multi-rank launch: %w", r.rank, r.h, err)
		}
	}
	return nil
}

// joinAfter records the set's completion event on s0 after the
// multi-rank launch, stores it in evs as every rank's (nil for all when
// the record failed), and makes every other stream wait for it. A wait
// runs even when the record failed: it then waits for the set's previous
// launch, which the stream already waited for.
func joinAfter(o streamSync, rs []rankSync, set *setEvent, evs []*cuda.Event) []error {
	s0, h0 := rs[0].stream, rs[0].h
	var errs []error
	if err := o.record(set.ev, s0); err != nil {
		errs = append(errs, recordErr(set, err))
	} else {
		for i := range evs {
			evs[i] = set.ev
		}
	}
	for i, r := range rs {
		set.joined[i] = r.h == h0
		if r.h == h0 {
			continue
		}
		if err := o.wait(r.stream, set.ev); err != nil {
			errs = append(errs, waitErr(r, err))
		} else {
			set.joined[i] = true
		}
	}
	return errs
}

// recordErr is the error of a failed record of set's completion event
// after its launch: the launch is tracked by nothing.
func recordErr(set *setEvent, err error) error {
	return fmt.Errorf("ncclgo: ranks %s: recording the completion of the multi-rank launch: %w", set.ranks(), err)
}

// waitErr is the error of r's stream failing to wait for the multi-rank
// launch.
func waitErr(r rankSync, err error) error {
	return fmt.Errorf("ncclgo: rank %d: joining stream %#x after the multi-rank launch: %w", r.rank, r.h, err)
}

// MultiLaunches returns how many of the rank's launches ran as part of a
// multi-rank launch (EnvOneLaunch).
func (e *Engine) MultiLaunches() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.multi
}

// ranksOf names the ranks of ls for errors.
func ranksOf(ls []Launch) string {
	return rankList(len(ls), func(i int) int { return ls[i].Engine.rank })
}

// rankList names n ranks, rank(0) to rank(n-1), for errors: "0,1,3".
func rankList(n int, rank func(i int) int) string {
	s := ""
	for i := range n {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprint(rank(i))
	}
	return s
}

// merger holds back, within one group's admission (admitAndRun), the
// admitted launches of each multi-rank launch until all its ranks are
// admitted, then runs them as one (runMulti). Admission does not wait
// while it holds a launch: before a wait for room (or at the end) flush
// runs what it holds on its own, so a launch its peers spin on is never
// held back.
type merger struct {
	ls    []Launch
	idx   []int   // request → index in ls
	setOf []int   // request → its multi-rank launch, -1 for none
	held  []bool  // per request: admitted and held
	sets  [][]int // per multi-rank launch: its requests, in rank order
	parts [][]enqueue.Part
	state []mergeState // per multi-rank launch
	// Scratch for runMulti, as long as the largest set: the set's
	// launches, their completion events and their streams' joins.
	ls1 []Launch
	evs []*cuda.Event
	rs  []rankSync
	sc  *mergeScratch // the memory of all of it (release)
}

// mergeState is where a multi-rank launch of a group's admission stands.
type mergeState struct {
	arrived int  // its requests admitted so far
	broken  bool // run, or given up (flush)
}

// newMerger plans the multi-rank launches of the requests idx (indexes
// into ls) of a group. It allocates nothing when no launch may merge, and
// nothing either when it reuses the memory of an earlier group's merger
// (release).
func newMerger(ls []Launch, idx []int) merger { return newMergerOf(ls, idx, nil) }

// newMergerOf is newMerger given the candidates of the requests, cands[k]
// of ls[idx[k]] (made with the ledger request under the same lock:
// Engine.admission), or nil to make them.
func newMergerOf(ls []Launch, idx []int, cands []mergeCand) merger {
	m := merger{ls: ls, idx: idx}
	if len(idx) < 2 || !slices.ContainsFunc(idx, func(i int) bool { return ls[i].Engine.s.OneLaunch }) {
		return m
	}
	sc := mergePool.Get().(*mergeScratch)
	n := len(idx)
	cs := grow(sc.cs, n)
	sc.cs = cs
	if cands != nil {
		copy(cs, cands)
	} else {
		for k, i := range idx {
			cs[k] = ls[i].candidate()
		}
	}
	sets := planMergesIn(cs, sc)
	if len(sets) == 0 {
		sc.release()
		return m
	}
	m.sc = sc
	m.setOf = grow(sc.setOf, n)
	m.held = grow(sc.held, n)
	clear(m.held)
	for k := range m.setOf {
		m.setOf[k] = -1
	}
	m.sets = sets
	m.parts = grow(sc.setParts, len(sets))
	m.state = grow(sc.state, len(sets))
	clear(m.state)
	parts := grow(sc.parts, n)[:0] // the sets' parts, one backing array
	widest := 0
	for s, set := range sets {
		at := len(parts)
		for _, k := range set {
			m.setOf[k] = s
			parts = append(parts, cs[k].part)
		}
		m.parts[s] = parts[at:len(parts):len(parts)]
		widest = max(widest, len(set))
	}
	m.ls1 = grow(sc.ls1, widest)
	m.evs = grow(sc.evs, widest)
	m.rs = grow(sc.rs, widest)
	sc.setOf, sc.held, sc.setParts, sc.state, sc.parts = m.setOf, m.held, m.parts, m.state, parts
	sc.ls1, sc.evs, sc.rs = m.ls1, m.evs, m.rs
	return m
}

// release gives the merger's memory back for the next group's; m is not
// used after it.
func (m *merger) release() {
	if m.sc != nil {
		m.sc.release()
		*m = merger{}
	}
}

// release clears what sc points at (launches, plans, engines, events) and
// puts it back in mergePool.
func (sc *mergeScratch) release() {
	clear(sc.cs[:cap(sc.cs)])
	clear(sc.planParts[:cap(sc.planParts)])
	clear(sc.parts[:cap(sc.parts)])
	clear(sc.setParts[:cap(sc.setParts)])
	clear(sc.sets[:cap(sc.sets)])
	clear(sc.ls1[:cap(sc.ls1)])
	clear(sc.evs[:cap(sc.evs)])
	clear(sc.rs[:cap(sc.rs)])
	mergePool.Put(sc)
}

// hold reports whether admitted request k belongs to a multi-rank launch
// still to run (admitted then takes it).
func (m *merger) hold(k int) bool {
	return m.setOf != nil && m.setOf[k] >= 0 && !m.state[m.setOf[k]].broken
}

// admitted holds request k and runs its multi-rank launch once every
// request of it is admitted.
func (m *merger) admitted(k int, tk *residency.Ticket) error {
	s := m.setOf[k]
	m.held[k] = true
	m.state[s].arrived++
	if m.state[s].arrived < len(m.sets[s]) {
		return nil
	}
	set := m.sets[s]
	ls, evs := m.ls1[:len(set)], m.evs[:len(set)]
	for j, r := range set {
		ls[j] = m.ls[m.idx[r]]
		evs[j] = nil
	}
	err := runMulti(ls, m.parts[s], evs, m.rs[:len(set)])
	tk.DoneEach(set, func(j int) residency.Completion {
		if evs[j] != nil {
			return evs[j]
		}
		return nil // not a nil *cuda.Event: nothing was queued
	})
	for _, r := range set {
		m.held[r] = false
	}
	m.state[s].broken = true
	return err
}

// flush runs every held request on its own and gives up their multi-rank
// launches: their other requests run on their own once admitted. It
// returns errs with their errors appended.
func (m *merger) flush(tk *residency.Ticket, errs []error) []error {
	for k, h := range m.held {
		if !h {
			continue
		}
		m.held[k] = false
		m.state[m.setOf[k]].broken = true
		if err := runAlone(m.ls[m.idx[k]], k, tk); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// noteMultiLaunch records a multi-rank launch in each rank's engine: one
// more launch in sequence, and its completion event (evs[i]) as the
// rank's last where it has one.
func noteMultiLaunch(ls []Launch, evs []*cuda.Event) {
	for i, l := range ls {
		e := l.Engine
		e.res.seq++
		e.multi++
		if evs[i] != nil {
			e.res.last = evs[i]
		}
	}
}
