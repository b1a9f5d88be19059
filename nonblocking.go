package ncclgo

import (
	"context"
	"errors"
	"fmt"
)

// ErrInProgress is what Pending.Err returns while the initialisation runs
// (NCCL's ncclInProgress).
var ErrInProgress = errors.New("ncclgo: initialisation in progress")

// Pending is a communicator (or the communicators of InitAll) being
// initialised in the background: NCCL's nonblocking init. Err reports
// ErrInProgress until the initialisation ends; Wait waits for it. The
// initialisation follows the context given to StartInitRank or
// StartInitAll; Abort ends it early.
type Pending[T any] struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
	abort  func(T)
	val    T
	err    error
}

// StartInitRank is InitRank without blocking: it returns at once, and the
// communicator is ready when Wait returns it (or Err returns nil).
// Argument errors come back through Wait and Err too.
func StartInitRank(ctx context.Context, nRanks int, id UniqueID, rank, device int, opts *Options) *Pending[*Comm] {
	return startPending(ctx, func(ctx context.Context) (*Comm, error) {
		return InitRank(ctx, nRanks, id, rank, device, opts)
	}, func(c *Comm) { c.Abort() })
}

// StartInitAll is InitAll without blocking (see StartInitRank).
func StartInitAll(ctx context.Context, devices []int, opts *Options) *Pending[[]*Comm] {
	devices = append([]int(nil), devices...) // the caller may reuse its slice
	return startPending(ctx, func(ctx context.Context) ([]*Comm, error) {
		return InitAll(ctx, devices, opts)
	}, func(cs []*Comm) {
		for _, c := range cs {
			c.Abort()
		}
	})
}

func startPending[T any](ctx context.Context, init func(context.Context) (T, error), abort func(T)) *Pending[T] {
	ctx, cancel := context.WithCancelCause(ctx)
	p := &Pending[T]{cancel: cancel, done: make(chan struct{}), abort: abort}
	go func() {
		defer close(p.done)
		defer cancel(nil)
		p.val, p.err = init(ctx)
		if p.err == nil && errors.Is(context.Cause(ctx), ErrAborted) {
			p.abort(p.val) // Abort came as the initialisation finished
		}
	}()
	return p
}

// Done is closed when the initialisation has ended, either way (at once
// for a nil Pending, which has nothing to wait for).
func (p *Pending[T]) Done() <-chan struct{} {
	if p == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return p.done
}

// errNilPending is the error of a method called on a nil *Pending.
func errNilPending(op string) error {
	return &ArgError{Op: op, Arg: "pending", Value: "nil", Want: "a Pending from StartInitRank or StartInitAll"}
}

// Err returns ErrInProgress while the initialisation runs, then its
// outcome: nil on success, else the error Wait returns. It does not block
// (NCCL's ncclCommGetAsyncError on a nonblocking communicator).
func (p *Pending[T]) Err() error {
	if p == nil {
		return errNilPending("Pending.Err")
	}
	select {
	case <-p.done:
		return p.err
	default:
		return ErrInProgress
	}
}

// Wait waits until the initialisation ends and returns its result, or
// returns ctx's cause (wrapping ErrInProgress) if ctx ends first; the
// initialisation then goes on, and Wait may be called again.
func (p *Pending[T]) Wait(ctx context.Context) (T, error) {
	if p == nil {
		var zero T
		return zero, errNilPending("Pending.Wait")
	}
	select {
	case <-p.done:
		return p.val, p.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("%w: %w", ErrInProgress, context.Cause(ctx))
	}
}

// Abort ends an initialisation still in progress (Wait then returns an
// error wrapping ErrAborted), or aborts the communicators of one that has
// succeeded (Destroy is still needed). It does not wait; see Wait. It does
// nothing on a nil Pending.
func (p *Pending[T]) Abort() {
	if p == nil {
		return
	}
	p.cancel(ErrAborted)
	select {
	case <-p.done:
		if p.err == nil {
			p.abort(p.val)
		}
	default:
	}
}
