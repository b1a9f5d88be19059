package comm

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// TestExplainLost: a Destroy error whose context failed after an abort
// wraps ErrContextLostAfterAbort and names the abort's cause (the lost
// peer); other errors, and a failed context without an abort, pass as
// they are.
func TestExplainLost(t *testing.T) {
	faulted := fmt.Errorf("ncclgo: rank 0: Destroy: cuda: MemFree: %w", &cuda.Error{Op: "cuMemFree", Code: cuda.ResultIllegalAddress})
	other := errors.New("ncclgo: rank 0: Destroy: something else")

	var e Engine
	assert.Same(t, faulted, e.explainLost(faulted), "no abort: the error as it is")
	assert.Nil(t, e.explainLost(nil))

	// Aborted by the proxy: a NET connection lost mid-launch (netAbort).
	netErr := errors.New("transport: rank 0 receiving from rank 1 (pid 7 on b, device 0): EOF")
	e.netErr.Store(&netErr)
	e.aborted.Store(true)
	assert.Same(t, other, e.explainLost(other), "not a lost context: as it is")
	err := e.explainLost(faulted)
	require.ErrorIs(t, err, ErrContextLostAfterAbort)
	require.ErrorIs(t, err, cuda.ErrIllegalAddress, "the driver's error stays matchable")
	assert.ErrorContains(t, err, "first: transport: rank 0 receiving from rank 1 (pid 7 on b")
	assert.ErrorContains(t, err, "under MPS")

	// Aborted by the liveness watch: the lost rank's process.
	var w Engine
	w.lost.Store(&PeerLost{Rank: 3, PID: 9, Host: "c"})
	w.aborted.Store(true)
	assert.ErrorContains(t, w.explainLost(faulted), "first: rank 3 (pid 9 on c) exited without destroying the communicator")

	// Ended by an Abort of the caller's: its cause.
	var a Engine
	a.life.end(fmt.Errorf("%w: by the test", ErrAborted))
	assert.ErrorContains(t, a.explainLost(faulted), "first: communicator aborted: by the test")
}
