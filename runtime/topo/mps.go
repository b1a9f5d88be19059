package topo

import (
	"os"
	"path/filepath"
)

// DefaultMPSPipeDirectory is where an MPS control daemon keeps its pipes
// when CUDA_MPS_PIPE_DIRECTORY is not set.
const DefaultMPSPipeDirectory = "/tmp/nvidia-mps"

// MPSActive reports whether an MPS (CUDA Multi-Process Service) control
// daemon runs for this process, so that processes may share a GPU: its
// control pipe exists in $CUDA_MPS_PIPE_DIRECTORY (default
// DefaultMPSPipeDirectory). NCCLGO_MPS=1 or 0 overrides the detection.
// getenv is os.Getenv normally.
func MPSActive(getenv func(string) string) bool {
	switch getenv("NCCLGO_MPS") {
	case "1":
		return true
	case "0":
		return false
	}
	dir := getenv("CUDA_MPS_PIPE_DIRECTORY")
	if dir == "" {
		dir = DefaultMPSPipeDirectory
	}
	fi, err := os.Stat(filepath.Join(dir, "control"))
	return err == nil && !fi.IsDir() // a FIFO (or socket) made by nvidia-cuda-mps-control -d
}
