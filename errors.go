package ncclgo

import (
	"errors"
	"fmt"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/runtime/transport"
)

// Errors for errors.Is.
var (
	// ErrInvalidArgument is wrapped by every *ArgError.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrInvalidUsage: a group misused (ended twice, used after End), a
	// communicator used after Finalize, or Shrink's exclude lists
	// disagreeing between ranks. (A communicator used after Destroy fails
	// with ErrDestroyed.)
	ErrInvalidUsage = errors.New("invalid usage")
	// ErrAborted: the communicator was aborted (Abort), or a kernel stopped
	// because it was.
	ErrAborted = errors.New("communicator aborted")
	// ErrDestroyed: the communicator was destroyed.
	ErrDestroyed = errors.New("communicator destroyed")
	// ErrUnsupported: a kernel ran a function the device library does not
	// implement.
	ErrUnsupported = errors.New("operation not supported by the device library")
	// ErrDevice: the device reported an error (see DeviceError).
	ErrDevice = errors.New("device error")
	// ErrNoTransport: no transport connects two ranks (they run on
	// different hosts, or NCCL_P2P_DISABLE and NCCL_SHM_DISABLE leave
	// none); InitRank and InitAll wrap it.
	ErrNoTransport = transport.ErrNoTransport
)

// ArgError reports a bad argument: which one, its value and what is valid.
type ArgError struct {
	Op    string // the call ("AllReduce"); may be empty
	Arg   string // the argument ("count", "root", "stream")
	Value any    // the value passed
	Want  string // what is valid
}

// Error returns "ncclgo: OP: ARG=VALUE: want WANT".
func (e *ArgError) Error() string {
	op := ""
	if e.Op != "" {
		op = e.Op + ": "
	}
	return fmt.Sprintf("ncclgo: %s%s=%v: want %s", op, e.Arg, e.Value, e.Want)
}

// Unwrap returns ErrInvalidArgument.
func (e *ArgError) Unwrap() error { return ErrInvalidArgument }

// DeviceError is an error a kernel stored in the communicator's error flag.
type DeviceError struct {
	Rank int    // the rank whose kernel reported it
	Code uint32 // NG_DEV_ERR_*
}

// Error names the rank and says what the code means.
func (e *DeviceError) Error() string {
	what := "unknown device error"
	switch e.Code {
	case generated.DevErrUnsupported:
		what = "a kernel ran a function without a device implementation"
	case generated.DevErrAborted:
		what = "a kernel stopped waiting because the communicator was aborted"
	case generated.DevErrBadWork:
		what = "a kernel received a malformed work descriptor, or a Send and its Recv disagree on the size"
	}
	return fmt.Sprintf("ncclgo: rank %d: %s (device error %d)", e.Rank, what, e.Code)
}

// Unwrap maps the code onto ErrUnsupported, ErrAborted or ErrDevice.
func (e *DeviceError) Unwrap() error {
	switch e.Code {
	case generated.DevErrUnsupported:
		return ErrUnsupported
	case generated.DevErrAborted:
		return ErrAborted
	}
	return ErrDevice
}
