package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"strings"
)

// Device is a CUDA device (CUdevice); obtain one with GetDevice.
type Device int

// DeviceAttribute selects a device property (CUdevice_attribute).
type DeviceAttribute int

// Device attributes (values of CUdevice_attribute).
const (
	DevAttrMaxThreadsPerBlock                DeviceAttribute = 1
	DevAttrMaxBlockDimX                      DeviceAttribute = 2
	DevAttrMaxGridDimX                       DeviceAttribute = 5
	DevAttrMaxSharedMemoryPerBlock           DeviceAttribute = 8
	DevAttrWarpSize                          DeviceAttribute = 10
	DevAttrClockRate                         DeviceAttribute = 13 // kHz
	DevAttrMultiprocessorCount               DeviceAttribute = 16
	DevAttrIntegrated                        DeviceAttribute = 18
	DevAttrCanMapHostMemory                  DeviceAttribute = 19
	DevAttrComputeMode                       DeviceAttribute = 20
	DevAttrConcurrentKernels                 DeviceAttribute = 31
	DevAttrECCEnabled                        DeviceAttribute = 32
	DevAttrPCIBusID                          DeviceAttribute = 33
	DevAttrPCIDeviceID                       DeviceAttribute = 34
	DevAttrMemoryClockRate                   DeviceAttribute = 36 // kHz
	DevAttrGlobalMemoryBusWidth              DeviceAttribute = 37 // bits
	DevAttrL2CacheSize                       DeviceAttribute = 38 // bytes
	DevAttrMaxThreadsPerMultiprocessor       DeviceAttribute = 39
	DevAttrAsyncEngineCount                  DeviceAttribute = 40
	DevAttrUnifiedAddressing                 DeviceAttribute = 41
	DevAttrPCIDomainID                       DeviceAttribute = 50
	DevAttrComputeCapabilityMajor            DeviceAttribute = 75
	DevAttrComputeCapabilityMinor            DeviceAttribute = 76
	DevAttrMaxSharedMemoryPerMultiprocessor  DeviceAttribute = 81
	DevAttrMaxRegistersPerMultiprocessor     DeviceAttribute = 82
	DevAttrManagedMemory                     DeviceAttribute = 83
	DevAttrMultiGPUBoard                     DeviceAttribute = 84
	DevAttrConcurrentManagedAccess           DeviceAttribute = 89
	DevAttrCanUseHostPointerForRegisteredMem DeviceAttribute = 91
	DevAttrCooperativeLaunch                 DeviceAttribute = 95
	DevAttrMaxSharedMemoryPerBlockOptin      DeviceAttribute = 97
	DevAttrVirtualMemoryManagementSupported  DeviceAttribute = 102
	DevAttrHandleTypePosixFDSupported        DeviceAttribute = 103
	DevAttrMaxBlocksPerMultiprocessor        DeviceAttribute = 106
	DevAttrGPUDirectRDMAWithCUDAVMMSupported DeviceAttribute = 110
	DevAttrGPUDirectRDMASupported            DeviceAttribute = 116
	DevAttrHandleTypeFabricSupported         DeviceAttribute = 128
)

// DeviceCount returns the number of CUDA devices visible to the process.
func DeviceCount() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var n C.int
	if err := check("cuDeviceGetCount", Result(C.ncu_device_count(&n))); err != nil {
		return 0, err
	}
	return int(n), nil
}

// GetDevice returns the device with the given ordinal, in [0, DeviceCount()).
func GetDevice(ordinal int) (Device, error) {
	n, err := DeviceCount()
	if err != nil {
		return 0, err
	}
	if ordinal < 0 || ordinal >= n {
		return 0, fmt.Errorf("cuda: device ordinal %d out of range: %d device(s) visible: %w", ordinal, n, ErrInvalidDevice)
	}
	var d C.CUdevice
	if err := check("cuDeviceGet", Result(C.ncu_device_get(&d, C.int(ordinal)))); err != nil {
		return 0, fmt.Errorf("cuda: device %d: %w", ordinal, err)
	}
	return Device(d), nil
}

// query makes one driver query of d after Init: fn names the driver
// call, call makes it. A failed call is an error naming the device, with
// about (" attribute 16", ", peer 1") after it.
func (d Device) query(fn, about string, call func() C.CUresult) error {
	if err := Init(); err != nil {
		return err
	}
	if err := check(fn, Result(call())); err != nil {
		return fmt.Errorf("cuda: device %d%s: %w", int(d), about, err)
	}
	return nil
}

// Name returns the device's product name, e.g. "NVIDIA H200".
func (d Device) Name() (string, error) {
	var buf [256]C.char
	if err := d.query("cuDeviceGetName", "", func() C.CUresult { return C.ncu_device_name(&buf[0], C.int(len(buf)), C.CUdevice(d)) }); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

// Attribute returns one device property.
func (d Device) Attribute(a DeviceAttribute) (int, error) {
	var v C.int
	if err := d.query("cuDeviceGetAttribute", fmt.Sprintf(" attribute %d", int(a)), func() C.CUresult { return C.ncu_device_attribute(&v, C.int(a), C.CUdevice(d)) }); err != nil {
		return 0, err
	}
	return int(v), nil
}

// ComputeCapability returns the device's compute capability, e.g. (9, 0).
func (d Device) ComputeCapability() (major, minor int, err error) {
	if major, err = d.Attribute(DevAttrComputeCapabilityMajor); err != nil {
		return 0, 0, err
	}
	if minor, err = d.Attribute(DevAttrComputeCapabilityMinor); err != nil {
		return 0, 0, err
	}
	return major, minor, nil
}

// TotalMem returns the device's memory size in bytes.
func (d Device) TotalMem() (uint64, error) {
	var v C.size_t
	if err := d.query("cuDeviceTotalMem", "", func() C.CUresult { return C.ncu_device_total_mem(&v, C.CUdevice(d)) }); err != nil {
		return 0, err
	}
	return uint64(v), nil
}

// PCIBusIDString returns the device's PCI address as
// "domain:bus:device.function", lowercased so that it matches the names
// under /sys/bus/pci/devices (e.g. "0000:3b:00.0").
func (d Device) PCIBusIDString() (string, error) {
	var buf [64]C.char
	if err := d.query("cuDeviceGetPCIBusId", "", func() C.CUresult { return C.ncu_device_pci_bus_id(&buf[0], C.int(len(buf)), C.CUdevice(d)) }); err != nil {
		return "", err
	}
	return strings.ToLower(C.GoString(&buf[0])), nil
}

// UUID returns the device's 16-byte UUID (cuDeviceGetUuid_v2 where the
// driver has it).
func (d Device) UUID() ([16]byte, error) {
	var out [16]byte
	var u C.CUuuid
	if err := d.query("cuDeviceGetUuid", "", func() C.CUresult { return C.ncu_device_uuid(&u, C.CUdevice(d)) }); err != nil {
		return out, err
	}
	for i := range out {
		out[i] = byte(u.bytes[i])
	}
	return out, nil
}

// CanAccessPeer reports whether d can access peer's memory directly
// (cuDeviceCanAccessPeer). A device and itself report false, as in CUDA.
func (d Device) CanAccessPeer(peer Device) (bool, error) {
	var v C.int
	if err := d.query("cuDeviceCanAccessPeer", fmt.Sprintf(", peer %d", int(peer)), func() C.CUresult { return C.ncu_device_can_access_peer(&v, C.CUdevice(d), C.CUdevice(peer)) }); err != nil {
		return false, err
	}
	return v != 0, nil
}
