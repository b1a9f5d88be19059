//go:build !ncclgo_nonvml

package topo

import (
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

var (
	nvmlOnce sync.Once
	nvmlErr  error
)

func nvmlInit() error {
	nvmlOnce.Do(func() {
		defer func() {
			// go-nvml panics when libnvidia-ml.so.1 cannot be loaded.
			if r := recover(); r != nil {
				nvmlErr = fmt.Errorf("%w: %v", ErrNoNVML, r)
			}
		}()
		if ret := nvml.Init(); ret != nvml.SUCCESS {
			nvmlErr = fmt.Errorf("%w: nvmlInit: %s", ErrNoNVML, nvml.ErrorString(ret))
		}
	})
	return nvmlErr
}

func nvmlLinks(busID string) ([]string, error) {
	if err := nvmlInit(); err != nil {
		return nil, err
	}
	dev, ret := nvml.DeviceGetHandleByPciBusId(busID)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: nvmlDeviceGetHandleByPciBusId(%s): %s", ErrNoNVML, busID, nvml.ErrorString(ret))
	}
	var remotes []string
	for link := 0; link < nvml.NVLINK_MAX_LINKS; link++ {
		state, ret := dev.GetNvLinkState(link)
		if ret != nvml.SUCCESS || state != nvml.FEATURE_ENABLED {
			continue
		}
		pci, ret := dev.GetNvLinkRemotePciInfo(link)
		if ret != nvml.SUCCESS {
			continue
		}
		b := make([]byte, 0, len(pci.BusId))
		for _, c := range pci.BusId {
			if c == 0 {
				break
			}
			b = append(b, byte(c))
		}
		remotes = append(remotes, string(b))
	}
	return remotes, nil
}
