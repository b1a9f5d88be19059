package ncclgo

import (
	"github.com/stretchr/testify/assert"
	"testing"
)

func TestDeviceErrors(t *testing.T) {
	e := &DeviceError{Rank: 3, Code: 1}
	assert.ErrorIs(t, e, ErrUnsupported)
	assert.Contains(t, e.Error(), "rank 3")
	assert.ErrorIs(t, &DeviceError{Code: 2}, ErrAborted)
	assert.ErrorIs(t, &DeviceError{Code: 3}, ErrDevice)
}
