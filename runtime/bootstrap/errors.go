package bootstrap

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors. Errors returned by this package wrap them (and the
// context's error, where a context ended a call), so test them with
// errors.Is.
var (
	// ErrTimeout reports that a bootstrap wait ran past its timeout.
	// The error is a *TimeoutError with the details.
	ErrTimeout = errors.New("bootstrap: timed out")
	// ErrAborted reports that Abort was called on the Network.
	ErrAborted = errors.New("bootstrap: aborted")
	// ErrClosed reports a call on (or a wait ended by) a closed Root or Network.
	ErrClosed = errors.New("bootstrap: closed")
	// ErrBadMagic reports a connection whose hello carried the wrong magic or
	// was not a hello at all; such connections are dropped.
	ErrBadMagic = errors.New("bootstrap: bad magic or malformed hello")
	// ErrInvalidID reports a UniqueID that does not decode.
	ErrInvalidID = errors.New("bootstrap: invalid unique id")
	// ErrPeerClosed reports a Recv from a peer whose connection has ended,
	// with no matching message left in the queue.
	ErrPeerClosed = errors.New("bootstrap: peer closed the connection")
	// ErrQueueFull reports that a peer sent more than
	// Options.MaxQueuedBytes that nobody received: its connection is
	// dropped, and receives from it fail with this error.
	ErrQueueFull = errors.New("bootstrap: too many bytes queued unreceived from a peer")
	// ErrRejected reports that the root refused a rank's check-in
	// (duplicate rank, rank out of range, mismatched number of ranks).
	ErrRejected = errors.New("bootstrap: check-in rejected by root")
)

// TimeoutError describes a wait that ran past the bootstrap timeout. It
// matches ErrTimeout with errors.Is, and also Cause (for example
// context.DeadlineExceeded when the caller's context expired first).
type TimeoutError struct {
	// Op names what was waited for ("rank 2: recv from rank 1 tag 7").
	Op string
	// After is the timeout that expired.
	After time.Duration
	// Missing lists, for a check-in, the ranks that never arrived (nil
	// otherwise, or when the root could not be asked): the first 64 of
	// them when more are missing (NMissing counts them all).
	Missing []int
	// NMissing is the number of missing ranks when it exceeds
	// len(Missing); zero otherwise.
	NMissing int
	// NRanks is the communicator size, for a check-in.
	NRanks int
	// Unacked says that Missing are ranks that checked in and were sent
	// their tables but never acknowledged them (a root's timeout).
	Unacked bool
	// Cause is the underlying error, if any (a context error, or the last
	// dial error while waiting for the root).
	Cause error
}

// Error formats the timeout, naming the missing ranks of a check-in, e.g.
// "bootstrap: timed out after 2s waiting for ranks [3] of 4 to check in".
func (e *TimeoutError) Error() string {
	var b strings.Builder
	b.WriteString("bootstrap: ")
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	fmt.Fprintf(&b, "timed out after %v", e.After)
	if e.Missing != nil {
		what := "check in"
		if e.Unacked {
			what = "acknowledge their tables"
		}
		if e.NMissing > len(e.Missing) {
			fmt.Fprintf(&b, " waiting for %d ranks of %d to %s, the first %s", e.NMissing, e.NRanks, what, formatRanks(e.Missing))
		} else {
			fmt.Fprintf(&b, " waiting for ranks %s of %d to %s", formatRanks(e.Missing), e.NRanks, what)
		}
	}
	if e.Cause != nil {
		b.WriteString(": ")
		b.WriteString(e.Cause.Error())
	}
	return b.String()
}

// Unwrap returns ErrTimeout and Cause.
func (e *TimeoutError) Unwrap() []error {
	if e.Cause != nil {
		return []error{ErrTimeout, e.Cause}
	}
	return []error{ErrTimeout}
}

// formatRanks prints a rank list as "[3 5 6]", eliding the middle of very
// long lists.
func formatRanks(r []int) string {
	const maxShown = 32
	var b strings.Builder
	b.WriteByte('[')
	for i, v := range r {
		if i == maxShown/2 && len(r) > maxShown {
			fmt.Fprintf(&b, " ... (%d more)", len(r)-maxShown)
			r = r[len(r)-maxShown/2:]
			for _, w := range r {
				b.WriteByte(' ')
				b.WriteString(strconv.Itoa(w))
			}
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(v))
	}
	b.WriteByte(']')
	return b.String()
}
