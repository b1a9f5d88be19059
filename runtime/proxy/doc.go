// Package proxy will hold the host progress engine of the transports that
// need the host to move data or to post progress: SHM through copy
// engines (NCCL's SHM memcpy mode), NET (sockets, InfiniBand).
//
// None is needed yet. P2P (in one process or across processes) and SHM
// (direct stores into host shared memory) are driven entirely by the
// kernels: the sender stores into the receiver's FIFO and posts its tail,
// the receiver polls it, both through mapped memory; nothing runs on the
// host between InitRank and Destroy except the liveness watcher
// (runtime/transport/ipc.Watcher).
//
// The design, for when a transport implements transport.Proxied:
//   - One proxy per process, as in NCCL: a goroutine locked to an OS thread
//     (runtime.LockOSThread), with the CUDA context of each device it serves
//     current, started by the first communicator that has a Proxied
//     connection and stopped when the last such communicator is destroyed.
//   - Per connection, the host copy of the step counters (head, tail, and
//     the posted step), in host-mapped memory that the kernels and the
//     proxy both see; the kernel posts "step s ready" and the proxy
//     answers "step s done" as NCCL's proxy ops do.
//   - Stopped by a communicator's Abort, its context's cancellation and its
//     Destroy: each communicator's connections are removed from the
//     engine, which returns only once it no longer touches their memory.
package proxy
