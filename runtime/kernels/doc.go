// Package kernels finds ncclgo's kernel image (the fatbin that `ncclgen
// build` produces from generated/), loads it once per device, and maps the
// kernel space's functions to the kernels and device-table ids that launch
// them.
//
// A kernel set describes itself: the file `ncclgen build` writes carries a
// manifest (package kset) in front of the fatbin — the filter, the arches,
// the ABI version, the device function table and the kernels. Load reads
// it, refuses a set of another ABI version, and resolves every call
// through it (Set.Lookup, Set.Resolve, Set.Available), so any binary runs
// any set of its ABI; a function the set lacks is an error at call time
// naming the function and the set's filter.
//
// The package-level Resolve and Available answer for the compile-time
// tables of generated/ (the full kernel space) without CUDA.
package kernels
