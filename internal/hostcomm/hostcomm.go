// Package hostcomm lets tests and benchmarks outside package ncclgo (the C
// API's, in capi) wrap a device-less engine (runtime/comm.NewHostOnly) in
// an *ncclgo.Comm, which only package ncclgo can make. Package ncclgo sets
// Wrap when it is initialized.
package hostcomm

import "github.com/ncclgo/ncclgo/runtime/comm"

// Wrap returns the *ncclgo.Comm over e (as an any: this package cannot
// name the type).
var Wrap func(e *comm.Engine) any
