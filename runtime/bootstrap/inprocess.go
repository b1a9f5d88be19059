package bootstrap

import (
	"context"
	"fmt"
	"sync"
)

// NewInProcess returns the n ranks of a network that lives inside this
// process (channels and mutexes, no sockets), for when one process drives
// every rank. It uses the environment's timeout (NCCL_BOOTSTRAP_TIMEOUT or
// DefaultTimeout). It panics if n < 1; use NewInProcessOptions to get an
// error instead.
func NewInProcess(n int) []Network {
	nets, err := NewInProcessOptions(n, Options{})
	if err != nil {
		panic(err)
	}
	return nets
}

// NewInProcessOptions is NewInProcess with options (only Timeout is used).
func NewInProcessOptions(n int, opts Options) ([]Network, error) {
	if err := checkRanks(n); err != nil {
		return nil, fmt.Errorf("bootstrap: in-process network: %w", err)
	}
	timeout, err := opts.timeout()
	if err != nil {
		return nil, err
	}
	maxMsg, err := opts.maxMessage()
	if err != nil {
		return nil, err
	}
	h := &inProcHub{ranks: make([]*inProcRank, n)}
	out := make([]Network, n)
	for i := range h.ranks {
		r := &inProcRank{opState: opState{rank: i, timeout: timeout}, hub: h, box: newMailbox(), maxMsg: maxMsg}
		h.ranks[i] = r
		out[i] = r
	}
	return out, nil
}

type inProcHub struct {
	ranks []*inProcRank
}

type inProcRank struct {
	opState
	hub    *inProcHub
	box    *mailbox
	maxMsg int
	once   sync.Once
}

// Rank returns this rank.
func (r *inProcRank) Rank() int { return r.rank }

// Size returns the number of ranks.
func (r *inProcRank) Size() int { return len(r.hub.ranks) }

func (r *inProcRank) sendMsg(ctx context.Context, peer int, class byte, tag int64, data []byte) error {
	if err := r.box.closedErr(); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if class == classAbandon {
		r.hub.ranks[peer].cs.peerAbandoned(r.rank, tag)
		return nil
	}
	if len(data) > r.maxMsg {
		return fmt.Errorf("bootstrap: %d-byte message exceeds the %d byte limit (Options.MaxMessageSize)", len(data), r.maxMsg)
	}
	r.hub.ranks[peer].box.deliver(msgKey{peer: r.rank, class: class, tag: tag}, append([]byte{}, data...))
	return nil
}

// replyMsg is sendMsg: there are no connections.
func (r *inProcRank) replyMsg(ctx context.Context, peer int, class byte, tag int64, data []byte) error {
	return r.sendMsg(ctx, peer, class, tag, data)
}

func (r *inProcRank) recvMsg(ctx context.Context, peer int, class byte, tag int64) ([]byte, error) {
	return r.box.recv(ctx, msgKey{peer: peer, class: class, tag: tag})
}

func (r *inProcRank) maxMessage() int { return r.maxMsg }

// abandonTargets: every peer, directly (no sockets to open).
func (r *inProcRank) abandonTargets() []int {
	all := make([]int, r.Size())
	for i := range all {
		all[i] = i
	}
	return all
}

// AllGather implements Network.
func (r *inProcRank) AllGather(ctx context.Context, mine []byte) ([][]byte, error) {
	return allGather(ctx, r, mine)
}

// Barrier implements Network.
func (r *inProcRank) Barrier(ctx context.Context) error {
	return barrier(ctx, r)
}

// Send implements Network.
func (r *inProcRank) Send(ctx context.Context, peer, tag int, data []byte) error {
	if err := checkPeer(peer, r.Size()); err != nil {
		return err
	}
	op := fmt.Sprintf("send to rank %d tag %d", peer, tag)
	if err := r.sendMsg(ctx, peer, classUser, int64(tag), data); err != nil {
		return r.wrapErr(ctx, op, err)
	}
	return nil
}

// Recv implements Network.
func (r *inProcRank) Recv(ctx context.Context, peer, tag int) ([]byte, error) {
	if err := checkPeer(peer, r.Size()); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("recv from rank %d tag %d", peer, tag)
	ctx, cancel := r.opContext(ctx, op)
	defer cancel()
	d, err := r.recvMsg(ctx, peer, classUser, int64(tag))
	if err != nil {
		return nil, r.wrapErr(ctx, op, err)
	}
	return d, nil
}

func (r *inProcRank) shutdown(err error) {
	r.once.Do(func() {
		r.box.shutdown(err)
		for _, p := range r.hub.ranks {
			if p != r {
				p.box.peerGone(r.rank, fmt.Errorf("rank %d: %w", r.rank, ErrPeerClosed))
			}
		}
	})
}

// Close implements Network. It starts no goroutines, so there is nothing to
// wait for.
func (r *inProcRank) Close() error {
	r.shutdown(ErrClosed)
	return nil
}

// Abort implements Network.
func (r *inProcRank) Abort() { r.shutdown(ErrAborted) }
