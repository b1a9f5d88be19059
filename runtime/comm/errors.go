package comm

import "errors"

// Sentinel errors of the engine. Package ncclgo exports each under the
// same name (the same value), with its documentation.
var (
	ErrInvalidArgument = errors.New("invalid argument")
	ErrInvalidUsage    = errors.New("invalid usage")
	ErrAborted         = errors.New("communicator aborted")
	ErrDestroyed       = errors.New("communicator destroyed")
	// ErrPeerFailed: a NET connection of the communicator was lost while
	// no launch ran (its peer aborted or vanished); a call that would
	// need it fails at once, launching nothing. The error names the peer.
	ErrPeerFailed = errors.New("a peer of the communicator failed")
	// ErrContextLostAfterAbort: Destroy's CUDA calls failed with a lost
	// context (cuda.ContextLost) after the communicator was aborted; the
	// error names the abort's cause.
	ErrContextLostAfterAbort = errors.New("the CUDA context failed after the communicator was aborted")
	// ErrSharedGPUNeedsMPS: ranks of different processes share a GPU and
	// the CUDA Multi-Process Service is not running: without MPS the
	// kernels of different processes only time-slice, and the spin-waiting
	// kernels of two ranks would never run together (a hang).
	ErrSharedGPUNeedsMPS = errors.New("ranks of different processes share a GPU, which needs MPS (CUDA Multi-Process Service: " +
		"start it with nvidia-cuda-mps-control -d, or give each process its own GPU)")
)

// PeerLost names a rank whose process ended without destroying the
// communicator (it crashed or was killed); the engine aborted itself.
type PeerLost struct {
	Rank int    // the lost rank
	PID  int    // its process
	Host string // its host
}
