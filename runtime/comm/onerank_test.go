package comm

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
)

// TestRunOneRankCopy: a one-rank collective that is a copy or nothing
// runs without a plan only where run would queue that plan's copy alone;
// elsewhere the caller is told to plan.
func TestRunOneRankCopy(t *testing.T) {
	s := cuda.WrapStream(new(cuda.Context), 0x100)
	cp := enqueue.Copy{Dst: 0x2000, Src: 0x1000, Bytes: 8}
	untracked := Settings{UntrackedOneRankCopies: true}

	done, err := NewHostOnly(nil, 0, 2, 0, untracked, nil).RunOneRankCopy(cp, s)
	assert.False(t, done, "two ranks: planned")
	assert.NoError(t, err)

	tracked := NewHostOnly(nil, 0, 1, 0, Settings{}, nil)
	done, err = tracked.RunOneRankCopy(cp, s)
	assert.False(t, done, "a tracked copy needs run's completion event: planned")
	assert.NoError(t, err)
	done, err = tracked.RunOneRankCopy(enqueue.Copy{}, s)
	assert.True(t, done, "nothing to copy (in place): nothing to run, as for an empty plan")
	assert.NoError(t, err)

	e := NewHostOnly(nil, 0, 1, 0, untracked, nil)
	done, err = e.RunOneRankCopy(cp, s)
	assert.True(t, done)
	assert.NoError(t, err)

	// A connection lost while idle fails the next launch, as run does.
	lost := NewHostOnly(nil, 0, 1, 0, untracked, nil)
	idle := errors.New("peer gone")
	lost.netIdle.Store(&idle)
	done, err = lost.RunOneRankCopy(cp, s)
	assert.True(t, done)
	assert.ErrorIs(t, err, ErrPeerFailed)
	assert.ErrorIs(t, err, idle)

	// Once Destroy began nothing is queued.
	require.NoError(t, e.Destroy())
	done, err = e.RunOneRankCopy(cp, s)
	assert.True(t, done)
	assert.ErrorIs(t, err, ErrDestroyed)
}
