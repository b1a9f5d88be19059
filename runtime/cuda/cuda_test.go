package cuda

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// helperEnv marks a re-executed test binary that must run the no-driver
// checks with NCCLGO_CUDA_DRIVER_LIBRARY pointing at a bad library.
const helperEnv = "NCCLGO_CUDA_TEST_NODRIVER_HELPER"

func TestResultNames(t *testing.T) {
	assert.Equal(t, "CUDA_SUCCESS", ResultSuccess.String())
	assert.Equal(t, "CUDA_ERROR_OUT_OF_MEMORY", ResultOutOfMemory.String())
	assert.Equal(t, "out of memory", ResultOutOfMemory.Description())
	assert.Equal(t, "CUDA_ERROR_NO_DEVICE", ResultNoDevice.String())
	assert.Equal(t, "CUDA_ERROR_NOT_READY", ResultNotReady.String())
	assert.Equal(t, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", ResultSystemDriverMismatch.String())
	assert.Equal(t, "CUresult(12345)", Result(12345).String())
	assert.Equal(t, "unrecognized CUDA error code", Result(12345).Description())
	// Every named constant is in the built-in table, under its CUDA name.
	for _, r := range []Result{ResultSuccess, ResultInvalidValue, ResultOutOfMemory, ResultNotInitialized,
		ResultDeinitialized, ResultStubLibrary, ResultSystemDriverMismatch, ResultCompatNotSupported, ResultNoDevice, ResultInvalidDevice,
		ResultInvalidImage, ResultInvalidContext, ResultNoBinaryForGPU, ResultPeerAccessUnsupported,
		ResultInvalidPTX, ResultUnsupportedPTXVersion, ResultInvalidHandle, ResultNotFound, ResultNotReady,
		ResultIllegalAddress, ResultLaunchOutOfResources, ResultPeerAccessAlreadyEnabled,
		ResultPeerAccessNotEnabled, ResultContextIsDestroyed, ResultLaunchFailed, ResultNotPermitted,
		ResultNotSupported, ResultUnknown} {
		text, ok := resultTable[r]
		require.True(t, ok, "code %d missing from table", int(r))
		assert.True(t, strings.HasPrefix(text.name, "CUDA_"), text.name)
		assert.NotEmpty(t, text.desc)
		assert.Equal(t, text.name, r.String(), "driver and table disagree on %d", int(r))
	}
}

func TestErrorFormatAndIs(t *testing.T) {
	e := &Error{Op: "cuMemAlloc", Code: ResultOutOfMemory}
	assert.Equal(t, "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)", e.Error())
	assert.Equal(t, "CUDA_ERROR_NOT_READY (device not ready)", ErrNotReady.Error())

	wrapped := fmt.Errorf("cuda: MemAlloc(1 bytes) on device 0: %w", e)
	assert.ErrorIs(t, wrapped, ErrOutOfMemory)
	assert.NotErrorIs(t, wrapped, ErrNotReady)
	assert.NotErrorIs(t, wrapped, ErrNoDriver)
	var ce *Error
	require.ErrorAs(t, wrapped, &ce)
	assert.Equal(t, "cuMemAlloc", ce.Op)
	assert.Equal(t, ResultOutOfMemory, ce.Code)

	assert.ErrorIs(t, &Error{Op: "cuStreamQuery", Code: ResultNotReady}, ErrNotReady)
	assert.Nil(t, check("cuX", ResultSuccess))
	assert.ErrorIs(t, check("cuX", ResultNotFound), ErrNotFound)
	assert.False(t, e.Is(errors.New("other")))
	assert.False(t, e.Is((*Error)(nil)))
}

func TestBadArgWrapsInvalidValue(t *testing.T) {
	err := badArg("MemAlloc", "size is %d", 0)
	assert.ErrorIs(t, err, ErrInvalidValue)
	assert.Equal(t, "cuda: MemAlloc: size is 0: CUDA_ERROR_INVALID_VALUE (invalid argument)", err.Error())
}

func TestDim3(t *testing.T) {
	d := Dim1(128)
	assert.Equal(t, Dim3{128, 1, 1}, d)
	assert.Equal(t, uint64(128), d.Count())
	assert.Equal(t, uint64(4*5*6), Dim3{4, 5, 6}.Count())
	assert.Equal(t, uint64(1<<32-1)*(1<<16-1), Dim3{1<<32 - 1, 1<<16 - 1, 1}.Count())
	assert.Equal(t, "(2,3,4)", Dim3{2, 3, 4}.String())
	assert.NoError(t, d.validate("Launch", "grid"))
	for _, bad := range []Dim3{{}, {0, 1, 1}, {1, 0, 1}, {1, 1, 0}, {X: 32}} {
		err := bad.validate("Launch", "block")
		require.Error(t, err, "%v", bad)
		assert.ErrorIs(t, err, ErrInvalidValue)
		assert.Contains(t, err.Error(), "block "+bad.String())
	}
}

func TestCheckCopy(t *testing.T) {
	assert.NoError(t, checkCopy("MemcpyHtoD", 0, false, false))
	assert.NoError(t, checkCopy("MemcpyHtoD", 8, true, true))
	err := checkCopy("MemcpyHtoD", 8, true, false)
	assert.ErrorIs(t, err, ErrInvalidValue)
	assert.Contains(t, err.Error(), "source for 8 bytes")
	assert.Contains(t, checkCopy("MemcpyDtoH", 8, false, true).Error(), "destination")
}

// TestInitWithoutUsableDriver runs where Init fails (no libcuda, a stub, or
// no device, as on development machines and CI).
func TestInitWithoutUsableDriver(t *testing.T) {
	err := Init()
	if err == nil {
		t.Skip("a usable CUDA driver is present")
	}
	assert.ErrorIs(t, err, ErrNoDriver)
	msg := err.Error()
	assert.True(t, strings.Contains(msg, "dlopen") || strings.Contains(msg, "CUDA_ERROR_") ||
		strings.Contains(msg, "lacks symbol"), "message does not say what happened: %s", msg)
	assert.Same(t, err, Init(), "Init must return the same result every time")
	if strings.Contains(msg, "cuInit") {
		var ce *Error
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, "cuInit", ce.Op)
	}
	checkAllEntryPointsFail(t)
}

// TestNoDriverLibrary re-runs this test binary with the driver library
// pointed at a missing file and at a library without CUDA symbols, so the
// dlopen and symbol failure paths are checked on every machine, GPU or not.
func TestNoDriverLibrary(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("in helper")
	}
	for _, tc := range []struct{ lib, want string }{
		{"/nonexistent/libcuda.so.1", "dlopen /nonexistent/libcuda.so.1"},
		{"libc.so.6", "lacks symbol cuInit"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNoDriverHelper$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), helperEnv+"="+tc.want, LibraryEnv+"="+tc.lib)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "helper with %s failed:\n%s", tc.lib, out)
		assert.Contains(t, string(out), "--- PASS: TestNoDriverHelper")
	}
}

func TestNoDriverHelper(t *testing.T) {
	want := os.Getenv(helperEnv)
	if want == "" {
		t.Skip("only run by TestNoDriverLibrary")
	}
	err := Init()
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNoDriver)
	assert.Contains(t, err.Error(), want)
	t.Log(err)
	// Error naming falls back on the built-in table.
	assert.Equal(t, "CUDA_ERROR_OUT_OF_MEMORY", ResultOutOfMemory.String())
	checkAllEntryPointsFail(t)
}

// checkAllEntryPointsFail calls every entry point, with nil or zero
// receivers where one is needed, and expects ErrNoDriver from each.
func checkAllEntryPointsFail(t *testing.T) {
	t.Helper()
	nd := func(name string, err error) {
		t.Helper()
		assert.ErrorIs(t, err, ErrNoDriver, name)
	}
	_, err := DriverVersion()
	nd("DriverVersion", err)
	_, err = DeviceCount()
	nd("DeviceCount", err)
	_, err = CurrentContext()
	nd("CurrentContext", err)
	nd("SetCurrentContext", SetCurrentContext(0))
	_, ok, err := CurrentDevice()
	nd("CurrentDevice", err)
	assert.False(t, ok, "CurrentDevice without a driver")
	_, err = GetDevice(0)
	nd("GetDevice", err)
	d := Device(0)
	_, err = d.Name()
	nd("Name", err)
	_, err = d.Attribute(DevAttrMultiprocessorCount)
	nd("Attribute", err)
	_, _, err = d.ComputeCapability()
	nd("ComputeCapability", err)
	_, err = d.TotalMem()
	nd("TotalMem", err)
	_, err = d.PCIBusIDString()
	nd("PCIBusIDString", err)
	_, err = d.UUID()
	nd("UUID", err)
	_, err = d.CanAccessPeer(1)
	nd("CanAccessPeer", err)
	_, err = d.PrimaryContext()
	nd("PrimaryContext", err)

	for _, c := range []*Context{nil, {}} {
		nd("Release", c.Release())
		nd("Synchronize", c.Synchronize())
		nd("EnablePeerAccess", c.EnablePeerAccess(c))
		_, err = c.MemAlloc(1)
		nd("MemAlloc", err)
		nd("MemFree", c.MemFree(1))
		_, err = c.MemAllocHost(1)
		nd("MemAllocHost", err)
		nd("MemFreeHost", c.MemFreeHost(nil))
		_, err = c.HostDevicePointer(nil)
		nd("HostDevicePointer", err)
		nd("MemcpyHtoD", c.MemcpyHtoD(0, nil, 1))
		nd("MemcpyDtoH", c.MemcpyDtoH(nil, 0, 1))
		nd("MemcpyDtoD", c.MemcpyDtoD(0, 0, 1))
		nd("MemsetD8", c.MemsetD8(0, 0, 1))
		_, _, err = c.MemGetInfo()
		nd("MemGetInfo", err)
		_, err = c.SMLimit()
		nd("SMLimit", err)
		_, err = c.NewStream(false)
		nd("NewStream", err)
		_, err = c.NewEvent(false)
		nd("NewEvent", err)
		_, err = c.LoadModule([]byte("x"))
		nd("LoadModule", err)
		_, err = c.IpcGetMemHandle(1)
		nd("IpcGetMemHandle", err)
		_, err = c.IpcOpenMemHandle(IpcMemHandle{})
		nd("IpcOpenMemHandle", err)
		nd("IpcCloseMemHandle", c.IpcCloseMemHandle(1))
		_, err = c.MemGetAllocationGranularity(false)
		nd("MemGetAllocationGranularity", err)
		_, err = c.MemCreate(1)
		nd("MemCreate", err)
		_, err = c.MemGranularityFor(AllocProp{HandleTypes: MemHandleFabric}, true)
		nd("MemGranularityFor", err)
		_, err = c.MemCreateWith(1, AllocProp{GPUDirectRDMA: true})
		nd("MemCreateWith", err)
		_, err = c.PointerInfo(1)
		nd("PointerInfo", err)
		_, err = c.MemAddressReserve(1, 0)
		nd("MemAddressReserve", err)
		nd("MemMap", c.MemMap(1, 1, 1))
		nd("MemSetAccess", c.MemSetAccess(1, 1))
		nd("MemUnmap", c.MemUnmap(1, 1))
		nd("MemAddressFree", c.MemAddressFree(1, 1))
		nd("MemRelease", c.MemRelease(1))
		_, err = c.MemExportToShareableHandle(1)
		nd("MemExportToShareableHandle", err)
		_, err = c.MemImportFromShareableHandle(0)
		nd("MemImportFromShareableHandle", err)

		for _, s := range []*Stream{nil, WrapStream(c, 0)} {
			nd("Stream.Synchronize", s.Synchronize())
			_, err = s.Query()
			nd("Stream.Query", err)
			nd("Stream.Destroy", s.Destroy())
			nd("Stream.WaitEvent", s.WaitEvent(nil))
			nd("MemcpyHtoDAsync", s.MemcpyHtoDAsync(0, nil, 1))
			nd("MemcpyDtoHAsync", s.MemcpyDtoHAsync(nil, 0, 1))
			nd("MemcpyDtoDAsync", s.MemcpyDtoDAsync(0, 0, 1))
			nd("MemsetD8Async", s.MemsetD8Async(0, 0, 1))
			nd("MemsetD32Async", s.MemsetD32Async(0, 0, 1))
			nd("Launch", s.Launch(nil, Dim1(1), Dim1(1), 0, nil))
			_, err = s.CaptureStatus()
			nd("Stream.CaptureStatus", err)
			nd("Stream.BeginCapture", s.BeginCapture(CaptureModeGlobal))
			_, err = s.EndCapture()
			nd("Stream.EndCapture", err)
			nd("Stream.WaitEventExternal", s.WaitEventExternal(nil))
			nd("MemcpyHtoDWait", s.MemcpyHtoDWait(0, nil, 1))
		}
	}
	var e *Event
	nd("Event.Record", e.Record(nil))
	nd("Event.Synchronize", e.Synchronize())
	_, err = e.Query()
	nd("Event.Query", err)
	nd("Event.Destroy", e.Destroy())
	nd("Event.RecordExternal", e.RecordExternal(nil))
	var g *Graph
	_, err = g.NodeCount()
	nd("Graph.NodeCount", err)
	_, err = g.Instantiate()
	nd("Graph.Instantiate", err)
	nd("Graph.Destroy", g.Destroy())
	var x *GraphExec
	nd("GraphExec.Launch", x.Launch(nil))
	nd("GraphExec.Destroy", x.Destroy())
	_, err = ElapsedMillis(nil, nil)
	nd("ElapsedMillis", err)

	var m *Module
	_, err = m.Function("add1")
	nd("Module.Function", err)
	_, _, err = m.Global("g")
	nd("Module.Global", err)
	nd("Module.Unload", m.Unload())

	var f *Function
	assert.Equal(t, "", f.Name())
	_, err = f.MaxActiveBlocksPerSM(128, 0)
	nd("MaxActiveBlocksPerSM", err)
	_, err = f.Attribute(FuncAttrNumRegs)
	nd("Function.Attribute", err)
	nd("Function.SetAttribute", f.SetAttribute(FuncAttrMaxDynamicSharedSizeBytes, 0))
}
