// Package comm is the engine under package ncclgo's Comm: one rank of a
// communicator, from its setup to its destruction.
//
// An Engine sets itself up over a bootstrap network (Init: who runs where,
// peer access, kernels, the tuning inputs every rank agrees on, channels,
// connections, the device image and the host-mapped flags), launches the
// plans of a group through the process's residency ledger (AdmitAndRun,
// with the registry of the ranks of one communicator co-located in this
// process), watches the processes of the other ranks (liveness), derives
// the engines of Split and Shrink over views of its bootstrap network
// (runtime/bootstrap's View), and frees everything at Destroy, bounded by
// the communicator's timeout.
//
// The engine reports facts (a device error code, a lost peer, an abort)
// and wraps the sentinels of this package; package ncclgo, the public API,
// turns them into its own error types and re-exports the sentinels, so
// errors.Is matches either name. Nothing here is an API: it changes with
// package ncclgo.
package comm
