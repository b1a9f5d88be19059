package ncclgo

import (
	"context"
	"fmt"
	"slices"

	"github.com/ncclgo/ncclgo/runtime/comm"
)

// SplitNoColor is the color of a rank that takes part in Split without
// joining any of the new communicators (NCCL's NCCL_SPLIT_NOCOLOR).
const SplitNoColor = -1

// Split creates new communicators from the ranks of c (NCCL's
// ncclCommSplit). It is collective: every rank of c must call it, in the
// same order as c's other Splits (in one process, from different
// goroutines), and it blocks until the new communicator is ready. Ranks
// that pass the same color form one communicator, in which they are
// ordered by key, then by their rank in c. A rank that passes SplitNoColor
// joins none and gets (nil, nil); other negative colors are an *ArgError
// on the rank that passed it, and an error naming that rank on the others.
//
// The new communicator's ranks keep c's devices and CUDA contexts. opts nil
// takes c's options; otherwise opts applies as at InitRank, except for
// Contexts, which c decides.
//
// What the new communicator shares with c: the bootstrap connections
// (its bootstrap messages travel over c's, in a tag space of their own, so
// that neither sees the other's traffic; they stay open until both are
// destroyed), the device and the CUDA context. It has its own channels,
// transport buffers and connections, kernels, flags and residency share
// (NCCL's splitShare=0; splitShare=1 is taken as a hint and not honoured).
// Abort of the new communicator does not affect c, and, as in NCCL, Abort
// of c does not affect the new communicator: the shared bootstrap
// connections stay open for it (see Abort).
func (c *Comm) Split(ctx context.Context, color, key int, opts *Options) (*Comm, error) {
	const op = "Split"
	if err := c.usable(op); err != nil {
		return nil, err
	}
	// Every rank says what it asks for, or that it failed locally, so that
	// a bad argument on one rank fails every rank at once.
	var local error
	if color < 0 && color != SplitNoColor {
		local = &ArgError{Op: op, Arg: "color", Value: color, Want: "a color >= 0, or SplitNoColor (-1)"}
	}
	var s comm.Settings
	if local == nil && color != SplitNoColor {
		s, local = c.childSettings(opts)
		defer func() { _ = s.LogFile.CloseUnused() }() // when no child took it
	}
	e, err := c.engine().Split(ctx, color, key, s, local)
	if err != nil || e == nil {
		return nil, err
	}
	return newComm(e), nil
}

// Shrink creates a communicator of c's ranks other than exclude, numbered
// in c's order (NCCL's ncclCommShrink). Every rank not in exclude must call
// it with the same ranks (in any order); the excluded ranks do not call
// it. A rank whose list differs fails with an error (matching
// ErrInvalidUsage) that names the ranks that disagree.
//
// In the default mode c stays usable and the new communicator's bootstrap
// travels over c's, as after Split (see Split for what is shared). With
// abortMode (NCCL_SHRINK_ABORT) the excluded ranks are taken for dead: c
// is aborted first (its kernels stop; c's later calls fail with
// ErrAborted, and Destroy is still needed), and the new communicator gets
// a bootstrap network of its own, whose root the lowest remaining rank
// starts; that rank sends the root's id to the others over c's bootstrap
// connections, which join two ranks directly (no message goes through a
// third rank), so excluded ranks are never waited for.
//
// Limitation: the exclude lists are checked through messages under a tag
// derived from how many Shrinks each rank made on c; a rank left out of a
// Shrink of c must therefore not take part in a later Shrink of c.
func (c *Comm) Shrink(ctx context.Context, exclude []int, opts *Options, abortMode bool) (*Comm, error) {
	const op = "Shrink"
	if abortMode {
		if c == nil {
			return nil, errNilComm(op)
		}
		if d, _ := c.engine().State(); d {
			return nil, fmt.Errorf("ncclgo: %s: %w", op, ErrDestroyed)
		}
	} else if err := c.usable(op); err != nil {
		return nil, err
	}
	excl, err := checkExclude(exclude, c.rank, c.nRanks)
	var s comm.Settings
	if err == nil {
		s, err = c.childSettings(opts)
		defer func() { _ = s.LogFile.CloseUnused() }() // when no child took it
	}
	e, err := c.engine().Shrink(ctx, excl, s, abortMode, err)
	if err != nil {
		return nil, err
	}
	return newComm(e), nil
}

// childSettings is what a communicator derived from c runs with: opts (nil:
// c's own), on c's CUDA context.
func (c *Comm) childSettings(opts *Options) (comm.Settings, error) {
	if opts == nil {
		return c.engine().Settings(), nil
	}
	s, err := opts.resolve()
	if err != nil {
		return s, err
	}
	return c.engine().Adopt(s), nil
}

// checkExclude validates Shrink's exclude list for rank me of n and
// returns it sorted.
func checkExclude(exclude []int, me, n int) ([]int, error) {
	out := slices.Clone(exclude)
	slices.Sort(out)
	for i, r := range out {
		switch {
		case r < 0 || r >= n:
			return nil, &ArgError{Op: "Shrink", Arg: "exclude", Value: exclude, Want: fmt.Sprintf("ranks in 0..%d (rank %d is not)", n-1, r)}
		case i > 0 && out[i-1] == r:
			return nil, &ArgError{Op: "Shrink", Arg: "exclude", Value: exclude, Want: fmt.Sprintf("distinct ranks (rank %d repeats)", r)}
		case r == me:
			return nil, &ArgError{Op: "Shrink", Arg: "exclude", Value: exclude, Want: fmt.Sprintf("ranks other than this one (%d): excluded ranks do not call Shrink", me)}
		}
	}
	if out == nil {
		out = []int{}
	}
	return out, nil
}
