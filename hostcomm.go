//go:build ncclgo_hostcomm

package ncclgo

import (
	"github.com/ncclgo/ncclgo/internal/hostcomm"
	"github.com/ncclgo/ncclgo/runtime/comm"
)

// A build with the ncclgo_hostcomm tag (make test's host-cost run of
// capi) lets internal/hostcomm wrap a device-less engine; no other build
// has this hook.
func init() { hostcomm.Wrap = func(e *comm.Engine) any { return newComm(e) } }
