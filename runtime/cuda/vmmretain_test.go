package cuda

import (
	"bytes"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Without a driver MemRetainAllocationHandle fails as every entry point
// does.
func TestMemRetainAllocationHandleNoDriver(t *testing.T) {
	if Init() == nil {
		t.Skip("a usable CUDA driver is present")
	}
	_, err := (&Context{}).MemRetainAllocationHandle(1)
	assert.ErrorIs(t, err, ErrNoDriver)
}

// TestGPUMemRetainAllocationHandle: what windows rely on. Two mappings
// side by side in one reservation (PyTorch's expandable segments): an
// address inside the second gives the second mapping's range
// (MemGetAddressRange) and its allocation (MemRetainAllocationHandle),
// which exports as a POSIX fd that maps the same memory elsewhere.
// MemAlloc's memory is not VMM: retaining it fails.
func TestGPUMemRetainAllocationHandle(t *testing.T) {
	c := gpu(t)
	if ok, err := c.Device().Attribute(DevAttrVirtualMemoryManagementSupported); err != nil || ok == 0 {
		t.Skip("no virtual memory management on this device")
	}
	gran, err := c.MemGetAllocationGranularity(false)
	require.NoError(t, err)
	size := 2 * gran
	h1, err := c.MemCreate(size)
	if err != nil && (isCode(err, ResultNotSupported) || isCode(err, ResultNotPermitted)) {
		t.Skip("cuMemCreate with POSIX fd handles unavailable: " + err.Error())
	}
	require.NoError(t, err)
	h2, err := c.MemCreate(size)
	require.NoError(t, err)
	va, err := c.MemAddressReserve(2*size, gran)
	require.NoError(t, err)
	require.NoError(t, c.MemMap(va, size, h1))
	require.NoError(t, c.MemMap(va+DevicePtr(size), size, h2))
	require.NoError(t, c.MemSetAccess(va, 2*size))
	defer func() {
		assert.NoError(t, c.MemUnmap(va, 2*size))
		assert.NoError(t, c.MemRelease(h1))
		assert.NoError(t, c.MemRelease(h2))
		assert.NoError(t, c.MemAddressFree(va, 2*size))
	}()
	require.NoError(t, c.MemsetD8(va+DevicePtr(size), 0x5a, size))

	inside := va + DevicePtr(size) + 4096
	base, n, err := c.MemGetAddressRange(inside)
	require.NoError(t, err)
	assert.Equal(t, va+DevicePtr(size), base, "the range of the mapping that holds the address")
	assert.Equal(t, size, n)

	mh, err := c.MemRetainAllocationHandle(inside)
	require.NoError(t, err)
	fd, err := c.MemExportToShareableHandle(mh)
	require.NoError(t, c.MemRelease(mh), "the retained reference")
	require.NoError(t, err)
	imp, err := c.MemImportFromShareableHandle(fd)
	require.NoError(t, syscall.Close(fd))
	require.NoError(t, err)
	p, err := c.MemAddressReserve(n, gran)
	require.NoError(t, err)
	require.NoError(t, c.MemMap(p, n, imp))
	require.NoError(t, c.MemSetAccess(p, n))
	out := make([]byte, 64)
	require.NoError(t, c.MemcpyDtoH(unsafe.Pointer(&out[0]), p+100, 64))
	assert.Equal(t, bytes.Repeat([]byte{0x5a}, 64), out, "the second allocation's bytes")
	require.NoError(t, c.MemUnmap(p, n))
	require.NoError(t, c.MemRelease(imp))
	require.NoError(t, c.MemAddressFree(p, n))

	legacy, err := c.MemAlloc(4096)
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.MemFree(legacy)) }()
	_, err = c.MemRetainAllocationHandle(legacy)
	assert.Error(t, err, "cuMemAlloc's memory is not VMM")
	_, err = c.MemRetainAllocationHandle(0)
	assert.ErrorIs(t, err, ErrInvalidValue)
}
