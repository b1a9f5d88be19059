package ncclgo

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On a communicator of no peers (the zero Comm) a window registers
// locally, deregisters once, and runs no DIRECT.
func TestWindowZeroComm(t *testing.T) {
	var c Comm
	w, err := c.RegisterWindow(context.Background(), 0x7000_0000, 4096)
	require.NoError(t, err)
	assert.Equal(t, uint64(4096), w.Size())
	assert.False(t, w.Direct())
	require.NoError(t, w.Deregister(context.Background()))
	assert.ErrorIs(t, w.Deregister(context.Background()), ErrInvalidUsage)
	_, err = c.RegisterWindow(context.Background(), 0, 64)
	assert.ErrorIs(t, err, ErrInvalidArgument)
	var nw *Window
	var ae *ArgError
	assert.ErrorAs(t, nw.Deregister(context.Background()), &ae)
}
