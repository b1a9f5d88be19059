package comm

import "fmt"

// EnvProgrammatic turns programmatic dependent launch of the collective
// kernels on ("1") or off ("0", the default until measured): each kernel
// may start while the kernel before it on its stream winds down, and
// waits for it once it has loaded its arguments (enqueue.Launcher's
// Programmatic, devicesrc's ngKernelMain). It applies on GPUs of compute
// capability 9.0 and later with a driver of CUDA 12.0 or later; elsewhere
// the launches are plain.
const EnvProgrammatic = "NCCLGO_PDL"

// programmaticFromEnv reads EnvProgrammatic through lookup.
func programmaticFromEnv(lookup func(string) (string, bool)) (bool, error) {
	switch v, _ := lookup(EnvProgrammatic); v {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, fmt.Errorf("ncclgo: %s=%q: want 1 (launch the collective kernels as programmatic dependent launches) or 0 (plain launches, the default)", EnvProgrammatic, v)
	}
}
