// Package ipc holds the host-side plumbing that cross-process transports
// share: passing file descriptors between processes of one host over Unix
// domain sockets (SCM_RIGHTS), and shared memory segments backed by an
// anonymous memory file (memfd) that another process maps from the passed
// descriptor.
//
// A Server publishes descriptors under 64-bit keys at an abstract-namespace
// socket name; Fetch dials it and returns duplicates of the descriptors it
// asks for. Only processes of the same user (SO_PEERCRED) that prove they
// hold the server's secret are served: its Addr carries the name and the
// secret, and the ranks exchange Addrs over the bootstrap only. A Watcher
// authenticates its connections the same way, so that no other process
// can make it report a rank lost. Accept loops survive a shortage of
// descriptors; connections that have not authenticated are bounded in
// number and in time.
package ipc
