package comm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/transport"
	"github.com/ncclgo/ncclgo/runtime/transport/ipc"
)

// watchPeers starts rank's liveness watcher when other processes of its
// host run ranks of c, and connects it to the watchers of those ranks.
// The exchange of the watchers' addresses is collective: every rank takes
// part as soon as any host runs ranks in two processes, a rank with no
// such peer of its own with an empty address (3 ranks on 2 hosts: the
// rank alone on its host still joins its peers' exchange). It must run
// after the flags are allocated: a report aborts the communicator at once.
func (c *Engine) watchPeers(ctx context.Context, peers []transport.Peer) error {
	rank := c.rank
	// The watcher is a Unix socket: it reaches the processes of this host
	// only. Ranks on other hosts are watched by their NET connections (the
	// proxy reports a peer that vanishes: proxyFailed).
	watched := func(p transport.Peer) bool { return p.Host == peers[rank].Host && !p.SameProcess(peers[rank]) }
	if !hostsShared(peers) {
		return nil
	}
	addr := ""
	if slices.ContainsFunc(peers, watched) {
		w, err := ipc.NewWatcher(rank, len(peers), func(r int) { c.peerLost(&PeerLost{Rank: r, PID: peers[r].PID, Host: peers[r].Host}) })
		if err != nil {
			return err
		}
		c.watch = w
		addr = w.Addr()
	}
	names, err := c.net.AllGather(ctx, []byte(addr))
	if err != nil {
		return fmt.Errorf("exchanging liveness sockets: %w", err)
	}
	if c.watch == nil {
		return nil
	}
	w := c.watch
	for p := rank + 1; p < len(peers); p++ {
		if !watched(peers[p]) {
			continue
		}
		if len(names[p]) == 0 {
			return fmt.Errorf("exchanging liveness sockets: rank %d (%s) shares this host but published no watcher", p, peers[p])
		}
		if err := w.Dial(ctx, p, string(names[p])); err != nil {
			return err
		}
	}
	return nil
}

// hostsShared reports whether some host runs ranks of peers in two or
// more processes: the same answer on every rank.
func hostsShared(peers []transport.Peer) bool {
	first := map[string]int{} // host -> a PID of it
	for _, p := range peers {
		if pid, ok := first[p.Host]; !ok {
			first[p.Host] = p.PID
		} else if pid != p.PID {
			return true
		}
	}
	return false
}

// proxyFailed handles the proxy losing a NET connection of c: its peer
// aborted (its goodbye says why: an Abort that ends its program, say),
// vanished, or sent what it must not (the error names it). As in NCCL,
// only work that needs the connection notices. While a launch of c may
// still run (its completion event has not completed), c aborts at once:
// its kernels may wait on the peer for ever. Otherwise the error is kept
// (IdleNetError) and c goes on: Err stays nil, the next launch fails with
// it without launching (run), and Destroy stays clean.
//
// Both look under mu, so a launch either sees the error or is seen in
// flight here. Work that no call of c launches (the replay of a CUDA
// graph that captured c's launches, a multi-rank launch that does not go
// through run) is caught by a watch that polls c's completion events
// until c aborts or is destroyed (netWatch), and aborts c when one runs.
//
// A connection that ended without the peer's goodbye may mean that its
// process died: first the kernels of every peer process of this machine
// that has ended are ended (peerabort.go; the watch of its pidfd does so
// too, as soon as it sees the end).
func (c *Engine) proxyFailed(err error) {
	if !errors.Is(err, transport.ErrPeerAborted) {
		c.orphans.Load().endExited()
	}
	c.mu.Lock()
	if !c.inFlight() {
		first := c.netIdle.CompareAndSwap(nil, &err)
		if first && c.netWatch == nil && !c.destroyed {
			c.netWatch = startNetWatch(c)
		}
		c.mu.Unlock()
		if first {
			c.log.Info(fmt.Sprintf("%v; no launch was running: the next call fails", err), config.SubsysInit.Attr(), config.SubsysNet.Attr())
		}
		return
	}
	c.mu.Unlock()
	c.netAbort(err)
}

// netAbort aborts c because a NET connection that a launch may need was
// lost.
func (c *Engine) netAbort(err error) {
	if !c.netErr.CompareAndSwap(nil, &err) {
		return
	}
	c.log.Warn(fmt.Sprintf("%v; aborting", err), config.SubsysInit.Attr(), config.SubsysNet.Attr())
	c.aborted.Store(true)
	c.setAbortFlag()
}

// inFlight reports whether a launch of c may still run: the completion
// event of its latest launch on some stream, or of a multi-rank launch
// set of it, has not completed (or cannot be queried). c.mu is held.
func (c *Engine) inFlight() bool {
	for _, ev := range c.events {
		if done, err := ev.Query(); err != nil || !done {
			return true
		}
	}
	for _, s := range c.sets { // its multi-rank launches (setevent.go)
		if done, err := s.ev.Query(); err != nil || !done {
			return true
		}
	}
	return false
}

// netWatchEvery is how often a communicator that lost a NET connection
// while idle looks for work of its own that runs regardless (netWatch).
const netWatchEvery = time.Millisecond

// netWatch polls the completion events of a communicator that lost a NET
// connection while idle, and aborts it with that error once one of them
// has not completed: a launch that run did not refuse is running, and may
// wait on the lost peer for ever. It ends then, at an abort, or at
// Destroy (stopNetWatch).
type netWatch struct {
	stop, done chan struct{}
}

func startNetWatch(c *Engine) *netWatch {
	w := &netWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(netWatchEvery)
		defer t.Stop()
		for !c.aborted.Load() {
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
			c.mu.Lock()
			busy := c.inFlight()
			c.mu.Unlock()
			if busy {
				c.netAbort(c.IdleNetError())
				return
			}
		}
	}()
	return w
}

// stopNetWatch ends c's netWatch, if any, and waits for it: Destroy calls
// it before it destroys the events the watch queries. c.mu must not be
// held.
func (c *Engine) stopNetWatch() {
	c.mu.Lock()
	w := c.netWatch
	c.netWatch = nil
	c.mu.Unlock()
	if w != nil {
		close(w.stop)
		<-w.done
	}
}

// peerLost aborts c because a rank's process died, after ending that
// process's kernels where they outlive it (under MPS: peerabort.go).
func (c *Engine) peerLost(e *PeerLost) {
	c.orphans.Load().endRank(e.Rank)
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
