package ncclgo

import (
	"errors"
	"fmt"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/comm"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/transport"
)

// Errors for errors.Is. Every error of the package wraps one of them (or
// a context's error) where the cause is one of these kinds; the sentinels
// are those of the machinery underneath, so errors.Is matches either name.
var (
	// ErrInvalidArgument is wrapped by every *ArgError.
	ErrInvalidArgument = comm.ErrInvalidArgument
	// ErrInvalidUsage: a group misused (ended twice, used after End), a
	// communicator used after Finalize, or Shrink's exclude lists
	// disagreeing between ranks. (A communicator used after Destroy fails
	// with ErrDestroyed.)
	ErrInvalidUsage = comm.ErrInvalidUsage
	// ErrAborted: the communicator was aborted (Abort), or a kernel stopped
	// because it was.
	ErrAborted = comm.ErrAborted
	// ErrDestroyed: the communicator was destroyed.
	ErrDestroyed = comm.ErrDestroyed
	// ErrPeerFailed: a connection of the communicator to a rank on another
	// host was lost while nothing of the communicator ran (that rank
	// aborted or exited, as programs that end with Abort do). As in NCCL
	// only work that needs the connection notices: Err stays nil and
	// Destroy returns nil, but a call fails at once, launching nothing,
	// with an error that wraps ErrPeerFailed and names the peer and why.
	// (Were a launch running, the communicator aborts: ErrAborted.)
	ErrPeerFailed = comm.ErrPeerFailed
	// ErrUnsupported: a kernel ran a function the device library does not
	// implement.
	ErrUnsupported = errors.New("operation not supported by the device library")
	// ErrDevice: the device reported an error (see DeviceError).
	ErrDevice = errors.New("device error")
	// ErrNoTransport: no transport connects two ranks; InitRank and
	// InitAll would wrap it. NET, the last transport tried, connects any
	// two ranks, so ncclgo's transports always find one.
	ErrNoTransport = transport.ErrNoTransport
	// ErrSharedGPUNeedsMPS is wrapped by InitRank's error when ranks of
	// different processes share a GPU and the CUDA Multi-Process Service is
	// not running: without MPS the kernels of different processes only
	// time-slice, and the spin-waiting kernels of two ranks would never run
	// together (a hang).
	ErrSharedGPUNeedsMPS = comm.ErrSharedGPUNeedsMPS
	// ErrContextLostAfterAbort is wrapped by Destroy's error when the CUDA
	// context failed (a kernel fault; the MPS client torn down) after the
	// communicator was aborted; the error names the abort's cause. Where
	// processes share a GPU under MPS, a process killed while its kernels
	// run takes every client of the GPU down with it (MPS's fatal-fault
	// containment): the survivors learn of the loss first (the abort, an
	// error naming the lost rank), then their contexts fail. The process
	// must exit to use the GPU again.
	ErrContextLostAfterAbort = comm.ErrContextLostAfterAbort

	// ErrWindowMismatch is wrapped by RegisterWindow's and
	// Window.Deregister's errors when the ranks did not call them alike
	// (sizes, order).
	ErrWindowMismatch = comm.ErrWindowMismatch
	// ErrNoDriver: no usable CUDA driver (InitAll, InitRank).
	ErrNoDriver = cuda.ErrNoDriver
)

// Errors of the bootstrap, the TCP exchange by which ranks find each other
// (InitRank, Split, Shrink, a Root).
var (
	// ErrTimeout: a bootstrap wait ran past the bootstrap timeout
	// (Options.BootstrapTimeout, NCCL_BOOTSTRAP_TIMEOUT, 120 s by default);
	// the error names what was waited for, and for a check-in the ranks that
	// never arrived.
	ErrTimeout = bootstrap.ErrTimeout
	// ErrCollectiveBroken: a bootstrap exchange failed on some rank, which
	// told the others; every later exchange of that communicator's
	// bootstrap fails at once with it (after an Abort of a rank whose
	// communicator has Split children, say).
	ErrCollectiveBroken = bootstrap.ErrCollectiveBroken
	// ErrPeerClosed: a rank's bootstrap connection ended (its process
	// exited, or it destroyed or aborted its communicator) while this rank
	// waited for it.
	ErrPeerClosed = bootstrap.ErrPeerClosed
	// ErrRejected: the root refused a rank's check-in (a duplicate rank, a
	// rank out of range, a different number of ranks).
	ErrRejected = bootstrap.ErrRejected
	// ErrBadMagic: a connection presented another bootstrap's magic, or was
	// not a bootstrap connection at all.
	ErrBadMagic = bootstrap.ErrBadMagic
	// ErrInvalidID: a UniqueID that does not decode (ParseUniqueID, InitRank).
	ErrInvalidID = bootstrap.ErrInvalidID
	// ErrClosed: a call on, or a wait ended by, a closed Root or the closed
	// bootstrap of a communicator.
	ErrClosed = bootstrap.ErrClosed
	// ErrBootstrapAborted: a bootstrap wait ended because the network it
	// waited on was aborted (this rank's communicator was aborted, or a
	// peer's abort tore a connection down). The calls of an aborted
	// communicator fail with ErrAborted.
	ErrBootstrapAborted = bootstrap.ErrAborted
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

// PeerLostError reports that the process of another rank ended without
// destroying the communicator (it crashed or was killed). The communicator
// is aborted: its kernels leave through the abort flag, and its calls fail
// with this error, which wraps ErrAborted.
type PeerLostError struct {
	Rank int    // the lost rank
	PID  int    // its process
	Host string // its host
}

// Error says which rank's process ended and that the communicator is
// aborted.
func (e *PeerLostError) Error() string {
	return fmt.Sprintf("rank %d (pid %d on %s) exited without destroying the communicator: %v", e.Rank, e.PID, e.Host, ErrAborted)
}

// Unwrap returns ErrAborted.
func (e *PeerLostError) Unwrap() error { return ErrAborted }
