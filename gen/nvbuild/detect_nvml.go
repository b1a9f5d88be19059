//go:build cgo && nvml

package nvbuild

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Built with -tags nvml: ask NVML first. go-nvml dlopens libnvidia-ml.so.1;
// without it Init returns an error (no GPU) and DetectArch moves on.
func init() {
	archDetectors = append([]func() (string, bool){detectNVML}, archDetectors...)
}

func detectNVML() (arch string, ok bool) {
	defer func() {
		if recover() != nil {
			arch, ok = "", false
		}
	}()
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return "", false
	}
	defer func() { _ = nvml.Shutdown() }()
	dev, ret := nvml.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		return "", false
	}
	major, minor, ret := dev.GetCudaComputeCapability()
	if ret != nvml.SUCCESS {
		return "", false
	}
	return fmt.Sprintf("sm_%d%d", major, minor), true
}
