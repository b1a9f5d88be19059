package comm

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// SplitNoColor is the color of a rank that takes part in Split without
// joining any of the new communicators (package ncclgo's SplitNoColor).
const SplitNoColor = -1

// splitState is what an engine keeps for Split and Shrink.
type splitState struct {
	mu      sync.Mutex // one Split or Shrink at a time
	splits  uint64     // Splits made so far (the same on every rank)
	shrinks uint64     // Shrinks made so far
}

// Split makes the engine of this rank's new communicator (package
// ncclgo's Comm.Split documents the whole behaviour): every rank says what
// it asks for, color and key, or that it failed locally (local, returned
// after the exchange so that the other ranks fail at once too); the ranks
// of one color form a communicator over a view of this engine's bootstrap
// network, set up with s on this engine's device. A rank of SplitNoColor
// gets (nil, nil). Abort ends the exchange.
func (c *Engine) Split(ctx context.Context, color, key int, s Settings, local error) (*Engine, error) {
	const op = "Split"
	ctx, release := c.life.bind(ctx) // Abort ends the exchange
	defer release()
	c.split.mu.Lock()
	defer c.split.mu.Unlock()
	c.split.splits++
	seq := c.split.splits
	all, err := c.net.AllGather(ctx, encodeSplitArgs(local == nil, color, key))
	if err != nil {
		return nil, fmt.Errorf("ncclgo: rank %d: Split: exchanging colors and keys: %w", c.rank, err)
	}
	if local != nil {
		return nil, fmt.Errorf("ncclgo: rank %d: %w", c.rank, local)
	}
	colors, keys, err := decodeSplitArgs(all)
	if err != nil {
		return nil, fmt.Errorf("ncclgo: rank %d: Split: %w", c.rank, err)
	}
	if color == SplitNoColor {
		return nil, nil
	}
	members, newRank := splitMembers(colors, keys, c.rank)
	view, err := c.view(op, members, newRank, bootstrap.ViewID(bootstrap.PathID(c.net), 'S', seq), s.Timeout())
	if err != nil {
		return nil, err
	}
	return c.initChild(ctx, op, view, s)
}

// Shrink makes the engine of this rank in a communicator of the ranks
// other than excl (sorted), numbered in order (package ncclgo's
// Comm.Shrink documents the whole behaviour). local is this rank's own
// failure before the exchange (a bad exclude list, bad options): in the
// default mode the other ranks hear of it at once. With abortMode the
// engine is aborted and the new communicator gets a bootstrap network of
// its own.
func (c *Engine) Shrink(ctx context.Context, excl []int, s Settings, abortMode bool, local error) (*Engine, error) {
	const op = "Shrink"
	if !abortMode { // abort mode runs on an aborted parent
		var release func()
		ctx, release = c.life.bind(ctx) // Abort ends the exchange
		defer release()
	}
	c.split.mu.Lock()
	defer c.split.mu.Unlock()
	c.split.shrinks++
	seq := c.split.shrinks
	if local != nil {
		if !abortMode {
			c.announceFailure(ctx, seq)
		}
		return nil, local
	}
	survivors := survivorsOf(c.nRanks, excl)
	newRank := slices.Index(survivors, c.rank)
	if abortMode {
		return c.shrinkAbort(ctx, excl, survivors, newRank, seq, s)
	}
	if err := c.agreeExclude(ctx, excl, survivors, seq); err != nil {
		return nil, err
	}
	view, err := c.view(op, survivors, newRank, bootstrap.ViewID(bootstrap.PathID(c.net), 's', seq), s.Timeout())
	if err != nil {
		return nil, err
	}
	return c.initChild(ctx, op, view, s)
}

// shrinkAbort is Shrink's abort mode.
func (c *Engine) shrinkAbort(ctx context.Context, excl, survivors []int, newRank int, seq uint64, s Settings) (_ *Engine, err error) {
	// Abort the device side now; the bootstrap stays for the hand-over
	// of the new root's id, and is aborted at the end.
	c.aborted.Store(true)
	c.setAbortFlag()
	defer bootstrap.AbortShared(c.net)

	root, rmap := bootstrap.RootOf(c.net)
	tag := bootstrap.ViewTag(bootstrap.ViewID(bootstrap.PathID(c.net), 'a', seq), false, 0)
	leader := survivors[0]
	var id bootstrap.UniqueID
	if c.rank == leader {
		r, rid, err := bootstrap.NewRoot(ctx, s.Bootstrap)
		if err != nil {
			return nil, fmt.Errorf("ncclgo: rank %d: Shrink: starting the new bootstrap root: %w", c.rank, err)
		}
		defer func() {
			if err == nil {
				// Every rank checked in: wait until the root has
				// answered them all.
				_ = r.Wait(ctx)
			}
			_ = r.Close()
		}()
		id = rid
		b, _ := json.Marshal(shrinkAnnounce{OK: true, Exclude: excl, ID: id.String()})
		var wg sync.WaitGroup
		errs := make([]error, len(survivors))
		for i, p := range survivors[1:] {
			wg.Go(func() { errs[i] = root.Send(ctx, rmap(p), tag, b) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("ncclgo: rank %d: Shrink: sending the new bootstrap id: %w", c.rank, err)
		}
	} else {
		rctx, cancel := context.WithTimeout(ctx, s.Timeout())
		b, err := root.Recv(rctx, rmap(leader), tag)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("ncclgo: rank %d: Shrink: waiting for rank %d's new bootstrap id: %w", c.rank, leader, err)
		}
		var a shrinkAnnounce
		if err := json.Unmarshal(b, &a); err != nil {
			return nil, fmt.Errorf("ncclgo: rank %d: Shrink: rank %d's message: %w", c.rank, leader, err)
		}
		if !slices.Equal(a.Exclude, excl) {
			return nil, fmt.Errorf("ncclgo: rank %d: Shrink: %w: exclude lists disagree: this rank excludes %v, rank %d excludes %v",
				c.rank, ErrInvalidUsage, excl, leader, a.Exclude)
		}
		if id, err = bootstrap.ParseUniqueID(a.ID); err != nil {
			return nil, fmt.Errorf("ncclgo: rank %d: Shrink: rank %d's bootstrap id: %w", c.rank, leader, err)
		}
	}
	conn, err := bootstrap.Init(ctx, id, newRank, len(survivors), s.Bootstrap)
	if err != nil {
		return nil, fmt.Errorf("ncclgo: rank %d: Shrink: joining the new bootstrap: %w", c.rank, err)
	}
	// Everyone now checks everyone's list.
	mine, _ := json.Marshal(excl)
	all, err := conn.AllGather(ctx, mine)
	if err == nil {
		err = compareExcludes(excl, survivors, func(i int) ([]int, error) {
			var e []int
			return e, json.Unmarshal(all[i], &e)
		})
	}
	if err != nil {
		conn.Abort()
		_ = conn.Close()
		return nil, fmt.Errorf("ncclgo: rank %d: Shrink: %w", c.rank, err)
	}
	return c.initChild(ctx, "Shrink", conn, s)
}

// shrinkAnnounce is what a rank tells the others at Shrink.
type shrinkAnnounce struct {
	OK      bool   // false: the rank failed before the exchange
	Exclude []int  // sorted
	ID      string `json:",omitempty"` // abort mode: the new bootstrap's id
}

// agreeExclude checks, in Shrink's default mode, that the ranks this rank
// keeps exclude the same ranks. It tells every rank of c (the excluded ones
// too, briefly and best effort: a rank that excludes this one must learn
// that it disagrees) and hears from every rank it keeps.
func (c *Engine) agreeExclude(ctx context.Context, excl, survivors []int, seq uint64) error {
	root, rmap := bootstrap.RootOf(c.net)
	tag := bootstrap.ViewTag(bootstrap.ViewID(bootstrap.PathID(c.net), 'v', seq), false, 0)
	b, _ := json.Marshal(shrinkAnnounce{OK: true, Exclude: excl})
	var wg sync.WaitGroup
	sendErrs := make([]error, c.nRanks)
	for p := range c.nRanks {
		if p == c.rank {
			continue
		}
		wg.Go(func() {
			sctx := ctx
			if _, ok := slices.BinarySearch(excl, p); ok {
				var cancel context.CancelFunc
				sctx, cancel = context.WithTimeout(ctx, time.Second)
				defer cancel()
				_ = root.Send(sctx, rmap(p), tag, b)
				return
			}
			sendErrs[p] = root.Send(sctx, rmap(p), tag, b)
		})
	}
	wg.Wait()
	if err := errors.Join(sendErrs...); err != nil {
		return fmt.Errorf("ncclgo: rank %d: Shrink: sending the exclude list: %w", c.rank, err)
	}
	// Hear from every rank kept, all at once; after a disagreement, wait
	// briefly for the rest, to name every rank that disagrees.
	rctx, cancel := context.WithTimeoutCause(ctx, c.s.Timeout(), &bootstrap.TimeoutError{
		Op: fmt.Sprintf("rank %d: Shrink: waiting for the exclude lists of ranks %v", c.rank, survivors), After: c.s.Timeout()})
	defer cancel()
	type reply struct {
		rank int
		a    shrinkAnnounce
		err  error
	}
	replies := make(chan reply, len(survivors))
	for _, p := range survivors {
		if p == c.rank {
			continue
		}
		wg.Go(func() {
			b, err := root.Recv(rctx, rmap(p), tag)
			var a shrinkAnnounce
			if err == nil {
				err = json.Unmarshal(b, &a)
			}
			replies <- reply{p, a, err}
		})
	}
	got := map[int]shrinkAnnounce{}
	var errs []error
	var grace <-chan time.Time
	for range len(survivors) - 1 {
		var r reply
		select {
		case r = <-replies:
		case <-grace:
			cancel()
			r = <-replies
		}
		if r.err != nil {
			if len(got) == 0 || grace == nil {
				errs = append(errs, fmt.Errorf("rank %d: %w", r.rank, r.err))
			}
			continue
		}
		got[r.rank] = r.a
		if !r.a.OK || !slices.Equal(r.a.Exclude, excl) {
			if grace == nil {
				t := time.NewTimer(time.Second)
				defer t.Stop()
				grace = t.C
			}
		}
	}
	wg.Wait()
	if err := compareExcludes(excl, survivors, func(i int) ([]int, error) {
		a, ok := got[survivors[i]]
		switch {
		case survivors[i] == c.rank:
			return excl, nil
		case !ok:
			return excl, nil // no answer: reported below if nothing disagrees
		case !a.OK:
			return nil, fmt.Errorf("rank %d failed before the exchange", survivors[i])
		}
		return a.Exclude, nil
	}); err != nil {
		return fmt.Errorf("ncclgo: rank %d: Shrink: %w", c.rank, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ncclgo: rank %d: Shrink: waiting for the exclude lists: %w", c.rank, err)
	}
	return nil
}

// announceFailure tells every other rank, briefly and best effort, that
// this rank's default-mode Shrink failed before the exchange.
func (c *Engine) announceFailure(ctx context.Context, seq uint64) {
	root, rmap := bootstrap.RootOf(c.net)
	tag := bootstrap.ViewTag(bootstrap.ViewID(bootstrap.PathID(c.net), 'v', seq), false, 0)
	b, _ := json.Marshal(shrinkAnnounce{})
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for p := range c.nRanks {
		if p != c.rank {
			wg.Go(func() { _ = root.Send(ctx, rmap(p), tag, b) })
		}
	}
	wg.Wait()
}

// compareExcludes checks that the list of every survivor (list(i) for
// survivors[i]) equals mine, naming those that differ.
func compareExcludes(mine, survivors []int, list func(i int) ([]int, error)) error {
	var bad []string
	for i, p := range survivors {
		e, err := list(i)
		switch {
		case err != nil:
			bad = append(bad, err.Error())
		case !slices.Equal(e, mine):
			bad = append(bad, fmt.Sprintf("rank %d excludes %v", p, e))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w: exclude lists disagree: this rank excludes %v; %s", ErrInvalidUsage, mine, strings.Join(bad, "; "))
}

// view is rank rank of a new view of c's network (bootstrap.NewView), unless c
// was destroyed meanwhile: Destroy, which marks c destroyed under mu before
// it closes the network, may have closed it already, and the view would
// keep a closed network open in the shared count.
func (c *Engine) view(op string, ranks []int, rank int, id uint32, timeout time.Duration) (*bootstrap.View, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return nil, fmt.Errorf("ncclgo: rank %d: %s: %w", c.rank, op, ErrDestroyed)
	}
	return bootstrap.NewView(c.net, ranks, rank, id, timeout), nil
}

// initChild builds the rank of a new communicator on net, c's device: a
// host-only child of a host-only engine (once every rank of net arrived),
// else through Init. On error it aborts and closes net.
func (c *Engine) initChild(ctx context.Context, op string, net bootstrap.Network, s Settings) (*Engine, error) {
	s.LogFile.Retain()
	var child *Engine
	var err error
	if c.hostOnly {
		if err = net.Barrier(ctx); err == nil {
			child = NewHostOnly(net, net.Rank(), net.Size(), c.device, s, nil)
		}
	} else {
		child, err = Init(ctx, net, c.device, s)
	}
	if err != nil {
		net.Abort()
		_ = bootstrap.CloseShared(net)
		_ = s.LogFile.Release()
		return nil, fmt.Errorf("ncclgo: rank %d: %s: %w", c.rank, op, err)
	}
	return child, nil
}

// Adopt returns s for a communicator derived from c: on c's CUDA context
// (the one Options.Contexts named for c's device, else the primary one).
func (c *Engine) Adopt(s Settings) Settings {
	ctxs := maps.Clone(s.Contexts)
	if ctxs == nil {
		ctxs = map[int]*cuda.Context{}
	}
	if pc := c.s.Contexts[c.device]; pc != nil {
		ctxs[c.device] = pc
	} else {
		delete(ctxs, c.device)
	}
	s.Contexts = ctxs
	return s
}

// survivorsOf lists the ranks of 0..n-1 not in excl (sorted).
func survivorsOf(n int, excl []int) []int {
	out := make([]int, 0, n-len(excl))
	for r := range n {
		if _, ok := slices.BinarySearch(excl, r); !ok {
			out = append(out, r)
		}
	}
	return out
}

// splitMembers returns the ranks that share rank me's color, ordered by key
// then rank, and me's position among them.
func splitMembers(colors, keys []int, me int) ([]int, int) {
	var m []int
	for r, col := range colors {
		if col == colors[me] {
			m = append(m, r)
		}
	}
	slices.SortStableFunc(m, func(a, b int) int { return cmp.Compare(keys[a], keys[b]) })
	return m, slices.Index(m, me)
}

// encodeSplitArgs is one rank's part of Split's exchange.
func encodeSplitArgs(ok bool, color, key int) []byte {
	b := make([]byte, 17)
	if ok {
		b[0] = 1
	}
	binary.BigEndian.PutUint64(b[1:], uint64(int64(color)))
	binary.BigEndian.PutUint64(b[9:], uint64(int64(key)))
	return b
}

// decodeSplitArgs reads every rank's part of Split's exchange, failing when
// a rank failed locally or passed a bad color.
func decodeSplitArgs(all [][]byte) (colors, keys []int, err error) {
	colors, keys = make([]int, len(all)), make([]int, len(all))
	var failed, badColor []int
	for r, b := range all {
		if len(b) != 17 {
			return nil, nil, fmt.Errorf("rank %d sent a %d-byte split request, want 17", r, len(b))
		}
		colors[r] = int(int64(binary.BigEndian.Uint64(b[1:])))
		keys[r] = int(int64(binary.BigEndian.Uint64(b[9:])))
		switch {
		case colors[r] < 0 && colors[r] != SplitNoColor:
			badColor = append(badColor, r)
		case b[0] != 1:
			failed = append(failed, r)
		}
	}
	if len(badColor) > 0 {
		bad := make([]string, len(badColor))
		for i, r := range badColor {
			bad[i] = fmt.Sprintf("rank %d: color=%d", r, colors[r])
		}
		return nil, nil, fmt.Errorf("%w: %s (want a color >= 0, or SplitNoColor (-1))", ErrInvalidArgument, strings.Join(bad, ", "))
	}
	if len(failed) > 0 {
		return nil, nil, fmt.Errorf("%w: rank(s) %v failed before the exchange (see their errors)", ErrInvalidUsage, failed)
	}
	return colors, keys, nil
}
