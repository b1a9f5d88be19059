package ncclgo

import (
	"context"
	"fmt"

	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/transport"
	"github.com/ncclgo/ncclgo/runtime/transport/ipc"
)

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

// watchPeers starts rank's liveness watcher when some ranks run in other
// processes (then every rank does: the decision is the same everywhere)
// and connects it to the watchers of those ranks. It must run after the
// flags are allocated: a report aborts the communicator at once.
func (c *Comm) watchPeers(ctx context.Context, peers []transport.Peer) error {
	rank := c.rank
	multi := false
	for _, p := range peers {
		multi = multi || !p.SameProcess(peers[rank])
	}
	if !multi {
		return nil
	}
	w, err := ipc.NewWatcher(rank, len(peers), func(r int) { c.peerLost(&PeerLostError{Rank: r, PID: peers[r].PID, Host: peers[r].Host}) })
	if err != nil {
		return err
	}
	c.watch = w
	names, err := c.net.AllGather(ctx, []byte(w.Addr()))
	if err != nil {
		return fmt.Errorf("exchanging liveness sockets: %w", err)
	}
	for p := rank + 1; p < len(peers); p++ {
		if peers[p].SameProcess(peers[rank]) {
			continue
		}
		if err := w.Dial(ctx, p, string(names[p])); err != nil {
			return err
		}
	}
	return nil
}

// peerLost aborts c because a rank's process died.
func (c *Comm) peerLost(e *PeerLostError) {
	if !c.lost.CompareAndSwap(nil, e) {
		return
	}
	c.log.Warn(fmt.Sprintf("%v; aborting", e.Error()), config.SubsysInit.Attr())
	c.aborted.Store(true)
	c.setAbortFlag()
}

// lostErr is the PeerLostError of c, or nil.
func (c *Comm) lostErr() error {
	if e := c.lost.Load(); e != nil {
		return e
	}
	return nil
}
