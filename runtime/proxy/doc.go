// Package proxy is the host progress engine of the transports that need
// the host to move data: NET (runtime/transport's net.go) moves each step
// between a connection's host-pinned staging buffers and the network.
// P2P and SHM need none: the kernels move every byte.
//
// As in NCCL (its proxy thread), there is one engine per process: a
// goroutine locked to an OS thread, started by the first Acquire (the first
// communicator with a NET connection) and stopped by the last Release. It
// calls Progress on every connection added to it, spinning while any has
// work and for SpinIdle after, then napping NapIdle at a time, and only
// after DozeAfter of idleness backing off to MaxIdle between passes.
//
// A connection leaves the engine through Remove, Detach (every connection
// of one owner, a communicator: its Abort and Destroy), the cancellation of
// the context it was added with, or its own error (reported once to its
// onError callback, which a communicator uses to abort its kernels). Remove
// and Detach return only once the engine no longer touches the
// connection's memory, so that the caller may free it.
package proxy
