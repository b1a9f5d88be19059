// Package kernels finds ncclgo's kernel image (the fatbin that `ncclgen
// build` produces from generated/), loads it once per device, and maps the
// kernel space's functions to the kernels and device-table ids that launch
// them.
//
// The pure table logic — which functions exist, which this build kept,
// which have a device implementation — is Resolve and Available; it reads
// only the committed generated tables and runs without CUDA, so the tuner
// uses it on any machine. Load and Set add the CUDA side.
package kernels
