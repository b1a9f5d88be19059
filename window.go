package ncclgo

import (
	"context"

	"github.com/ncclgo/ncclgo/runtime/comm"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// Window is a buffer registered with RegisterWindow: NCCL's
// ncclWindow_t.
type Window struct {
	c *Comm
	w *comm.Window
}

// RegisterWindow registers size bytes of device memory at buf as a
// window, as ncclCommWindowRegister does. It is collective: every rank
// calls it, in the same order as every other registration and
// Deregister of c, with the same size; ranks that do not fail with
// ErrWindowMismatch.
//
// Where ranks of several processes share a GPU (MPS) or are NVLink peers,
// DIRECT runs on calls whose sendbuff and recvbuff lie in windows on every
// rank (registration maps every peer's window here): register the same
// buffers on every rank and use them alike, as NCCL requires. A rank whose
// buffers are windows while a peer's are not waits for that peer until
// Abort. Without windows such ranks still run small AllReduces as DIRECT's
// LL one-shot, which reads only the ranks' own mailboxes. Within one
// process DIRECT needs no windows.
func (c *Comm) RegisterWindow(ctx context.Context, buf cuda.DevicePtr, size uint64) (*Window, error) {
	if c == nil {
		return nil, errNilComm("RegisterWindow")
	}
	w, err := c.engine().RegisterWindow(ctx, buf, size)
	if err != nil {
		return nil, err
	}
	return &Window{c: c, w: w}, nil
}

// Deregister deregisters w, collectively (every rank, in registration
// order), after the calls on it ended. Destroy and Abort deregister what
// is left.
func (w *Window) Deregister(ctx context.Context) error {
	if w == nil {
		return &ArgError{Op: "Window.Deregister", Arg: "w", Value: "nil", Want: "a window from RegisterWindow"}
	}
	return w.c.engine().DeregisterWindow(ctx, w.w)
}

// Buf is the window's buffer on this rank.
func (w *Window) Buf() cuda.DevicePtr { return w.w.Buf() }

// Size is the window's size in bytes.
func (w *Window) Size() uint64 { return w.w.Size() }

// Direct reports whether DIRECT can run across processes on calls in w.
func (w *Window) Direct() bool { return w.w.Row() >= 0 }
