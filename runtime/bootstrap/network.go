package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Network is a bootstrap network as seen by one rank. *Conn (TCP, one rank
// per process or per goroutine) and the ranks returned by NewInProcess
// implement it.
//
// Every blocking method honours its context and the bootstrap timeout, and
// returns at once with ErrAborted after Abort or ErrClosed after Close.
// Messages between two ranks with the same tag arrive in the order they were
// sent; messages with different tags may be received in any order (early
// ones are queued). AllGather and Barrier are collective: every rank must
// call them in the same order, and not concurrently with each other on one
// Network.
type Network interface {
	// Rank returns this rank, in [0, Size()).
	Rank() int
	// Size returns the number of ranks.
	Size() int
	// AllGather sends mine to every rank and returns every rank's block,
	// indexed by rank. Blocks may differ in size.
	AllGather(ctx context.Context, mine []byte) ([][]byte, error)
	// Barrier returns once every rank has entered it.
	Barrier(ctx context.Context) error
	// Send delivers a copy of data to peer under tag. It may return before
	// the peer receives it.
	Send(ctx context.Context, peer, tag int, data []byte) error
	// Recv returns the next message that peer sent under tag.
	Recv(ctx context.Context, peer, tag int) ([]byte, error)
	// Close releases every resource and waits for every goroutine the
	// Network started. Pending and later calls fail with ErrClosed.
	Close() error
	// Abort wakes every waiter at once with ErrAborted and tears the
	// network down without waiting.
	Abort()
}

var (
	_ Network = (*Conn)(nil)
	_ Network = (*inProcRank)(nil)
)

// opState is the timeout and error-wrapping behaviour shared by both
// networks.
type opState struct {
	rank    int
	timeout time.Duration
	cs      collState
}

func (o *opState) coll() *collState            { return &o.cs }
func (o *opState) timeoutValue() time.Duration { return o.timeout }

func (o *opState) opContext(ctx context.Context, op string) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, o.timeout, &TimeoutError{Op: fmt.Sprintf("rank %d: %s", o.rank, op), After: o.timeout})
}

// wrapErr names the operation in err, keeping it comparable with errors.Is.
func (o *opState) wrapErr(ctx context.Context, op string, err error) error {
	var te *TimeoutError
	if errors.As(err, &te) && te.Missing == nil {
		return &TimeoutError{Op: fmt.Sprintf("rank %d: %s", o.rank, op), After: te.After, Cause: te.Cause}
	}
	return fmt.Errorf("bootstrap: rank %d: %s: %w", o.rank, op, err)
}
