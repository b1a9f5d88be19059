//go:build ncclgo_nonvml

package topo

import "fmt"

// nvmlLinks without NVML: builds tagged ncclgo_nonvml (the c-shared
// libnccl.so.2, whose clients would otherwise have to resolve go-nvml's
// symbols at link time) leave NVLink counts unknown.
func nvmlLinks(busID string) ([]string, error) {
	return nil, fmt.Errorf("%w: built with -tags ncclgo_nonvml", ErrNoNVML)
}
