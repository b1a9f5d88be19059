// Package ipc holds the host-side plumbing that cross-process transports
// share: passing file descriptors between processes of one host over Unix
// domain sockets (SCM_RIGHTS), and shared memory segments backed by an
// anonymous memory file (memfd) that another process maps from the passed
// descriptor.
//
// A Server publishes descriptors under 64-bit keys at an abstract-namespace
// socket name; Fetch dials it and returns duplicates of the descriptors it
// asks for. Only processes of the same user are served (SO_PEERCRED).
package ipc
