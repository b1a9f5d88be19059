// Package cuda is ncclgo's binding of the CUDA driver API.
//
// The driver is reached through dlopen("libcuda.so.1") at run time, never
// linked, so the package builds and its CPU tests run on machines without
// CUDA; there, Init and every entry point return an error wrapping
// ErrNoDriver. The package needs cgo (a C compiler) but no CUDA headers or
// libraries at build time. Setting NCCLGO_CUDA_DRIVER_LIBRARY to a path makes Init load
// that file instead of libcuda.so.1.
//
// CUDA contexts are current per OS thread while goroutines migrate between
// threads, so no call here relies on a context being current: every
// context-bound operation is a single cgo call whose C side makes the
// context current and then calls the driver. Callers never need
// runtime.LockOSThread.
//
// Objects (Context, Stream, Event, Module) may be used from several
// goroutines at once, but not concurrently with their own
// Release/Destroy/Unload.
package cuda
