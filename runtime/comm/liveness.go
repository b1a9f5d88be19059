package comm

import (
	"context"
	"fmt"

	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/transport"
	"github.com/ncclgo/ncclgo/runtime/transport/ipc"
)

// watchPeers starts rank's liveness watcher when some ranks run in other
// processes (then every rank does: the decision is the same everywhere)
// and connects it to the watchers of those ranks. It must run after the
// flags are allocated: a report aborts the communicator at once.
func (c *Engine) watchPeers(ctx context.Context, peers []transport.Peer) error {
	rank := c.rank
	// The watcher is a Unix socket: it reaches the processes of this host
	// only. Ranks on other hosts are watched by their NET connections (the
	// proxy reports a peer that vanishes: proxyFailed).
	watched := func(p transport.Peer) bool { return p.Host == peers[rank].Host && !p.SameProcess(peers[rank]) }
	multi := false
	for _, p := range peers {
		multi = multi || watched(p)
	}
	if !multi {
		return nil
	}
	w, err := ipc.NewWatcher(rank, len(peers), func(r int) { c.peerLost(&PeerLost{Rank: r, PID: peers[r].PID, Host: peers[r].Host}) })
	if err != nil {
		return err
	}
	c.watch = w
	names, err := c.net.AllGather(ctx, []byte(w.Addr()))
	if err != nil {
		return fmt.Errorf("exchanging liveness sockets: %w", err)
	}
	for p := rank + 1; p < len(peers); p++ {
		if !watched(peers[p]) {
			continue
		}
		if err := w.Dial(ctx, p, string(names[p])); err != nil {
			return err
		}
	}
	return nil
}

// proxyFailed aborts c because the proxy lost a NET connection: its peer
// vanished or sent what it must not (the error names it).
func (c *Engine) proxyFailed(err error) {
	if !c.netErr.CompareAndSwap(nil, &err) {
		return
	}
	c.log.Warn(fmt.Sprintf("%v; aborting", err), config.SubsysInit.Attr(), config.SubsysNet.Attr())
	c.aborted.Store(true)
	c.setAbortFlag()
}

// peerLost aborts c because a rank's process died.
func (c *Engine) peerLost(e *PeerLost) {
	if !c.lost.CompareAndSwap(nil, e) {
		return
	}
	c.log.Warn(fmt.Sprintf("rank %d (pid %d on %s) exited without destroying the communicator; aborting", e.Rank, e.PID, e.Host), config.SubsysInit.Attr())
	c.aborted.Store(true)
	c.setAbortFlag()
}

// abortCause says why c was aborted (nil when it was not), for the
// goodbyes its NET connections send its peers: a lost peer, a lost NET
// connection, a kernel's error, or Abort.
func (c *Engine) abortCause() error {
	if !c.aborted.Load() {
		return nil
	}
	if l := c.lost.Load(); l != nil {
		return fmt.Errorf("rank %d (pid %d on %s) exited without destroying the communicator", l.Rank, l.PID, l.Host)
	}
	if p := c.netErr.Load(); p != nil {
		return *p
	}
	if code := c.ErrorCode(); code != 0 {
		return fmt.Errorf("a kernel of rank %d reported device error %d", c.rank, code)
	}
	return ErrAborted
}
