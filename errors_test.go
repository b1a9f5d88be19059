package ncclgo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/comm"
)

func TestDeviceErrors(t *testing.T) {
	e := &DeviceError{Rank: 3, Code: 1}
	assert.ErrorIs(t, e, ErrUnsupported)
	assert.Contains(t, e.Error(), "rank 3")
	assert.ErrorIs(t, &DeviceError{Code: 2}, ErrAborted)
	assert.ErrorIs(t, &DeviceError{Code: 3}, ErrDevice)
}

// The public sentinels are the runtime's: errors.Is matches an error of
// the machinery with the public name, and the other way round.
func TestPublicSentinels(t *testing.T) {
	for _, tc := range []struct {
		public, runtime error
	}{
		{ErrTimeout, bootstrap.ErrTimeout},
		{ErrCollectiveBroken, bootstrap.ErrCollectiveBroken},
		{ErrPeerClosed, bootstrap.ErrPeerClosed},
		{ErrRejected, bootstrap.ErrRejected},
		{ErrBadMagic, bootstrap.ErrBadMagic},
		{ErrInvalidID, bootstrap.ErrInvalidID},
		{ErrClosed, bootstrap.ErrClosed},
		{ErrBootstrapAborted, bootstrap.ErrAborted},
		{ErrAborted, comm.ErrAborted},
		{ErrDestroyed, comm.ErrDestroyed},
		{ErrInvalidUsage, comm.ErrInvalidUsage},
		{ErrInvalidArgument, comm.ErrInvalidArgument},
		{ErrSharedGPUNeedsMPS, comm.ErrSharedGPUNeedsMPS},
	} {
		wrapped := fmt.Errorf("ncclgo: rank 1: %w", tc.runtime)
		assert.ErrorIs(t, wrapped, tc.public, "%v", tc.runtime)
		assert.ErrorIs(t, fmt.Errorf("x: %w", tc.public), tc.runtime)
	}
	_, err := ParseUniqueID("00")
	assert.ErrorIs(t, err, ErrInvalidID)
	var te *bootstrap.TimeoutError
	assert.ErrorIs(t, &bootstrap.TimeoutError{Op: "x"}, ErrTimeout)
	assert.False(t, errors.As(err, &te))
}

// UniqueID is the package's own type; its text form and parsing are the
// bootstrap's.
func TestUniqueIDText(t *testing.T) {
	t.Setenv("NCCL_COMM_ID", "127.0.0.1:0")
	r, err := StartRoot(context.Background(), &Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer r.Close()
	id := r.ID()
	assert.Equal(t, bootstrap.UniqueID(id).String(), id.String())
	back, err := ParseUniqueID(" " + strings.ToUpper(id.String()) + "\n")
	require.NoError(t, err)
	assert.Equal(t, id, back)
	b, err := json.Marshal(id)
	require.NoError(t, err)
	var got UniqueID
	require.NoError(t, json.Unmarshal(b, &got))
	assert.Equal(t, id, got)
	assert.ErrorIs(t, got.UnmarshalText([]byte("zz")), ErrInvalidID)
}
