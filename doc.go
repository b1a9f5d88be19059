// Package ncclgo is NCCL's job — collective communication between GPUs —
// done as a Go code-generating build system with a Go runtime.
//
// The generator (gen/, cmd/ncclgen) emits the CUDA sources, tables and ABI
// under generated/; ncclgen build compiles them into a fatbin; the runtime
// (package runtime and its subpackages) loads the fatbin and runs the
// collectives. See docs/ARCHITECTURE.md.
package ncclgo

//go:generate go run ./cmd/ncclgen generate -out generated
