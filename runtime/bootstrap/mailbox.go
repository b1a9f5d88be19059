package bootstrap

import (
	"context"
	"fmt"
	"sync"
)

// msgKey identifies a queue of messages: who sent them, on which class and
// with which tag.
type msgKey struct {
	peer  int
	class byte
	tag   int64
}

type delivery struct {
	data []byte
	err  error
}

// slot holds the messages that arrived before anybody asked for them, or
// the receivers that asked before a message arrived (never both).
type slot struct {
	queue   [][]byte
	waiters []chan delivery
}

// mailbox matches arriving messages with receivers. It is shared by the
// TCP and in-process networks.
type mailbox struct {
	mu    sync.Mutex
	slots map[msgKey]*slot
	gone  map[int]error // peers whose connection ended
	bytes map[int]int   // per peer: bytes queued, nobody waiting for them
	done  chan struct{} // closed by shutdown
	err   error         // why done was closed
}

func newMailbox() *mailbox {
	return &mailbox{slots: make(map[msgKey]*slot), gone: make(map[int]error), bytes: make(map[int]int), done: make(chan struct{})}
}

// deliver hands data to the first waiter for k, or queues it.
func (m *mailbox) deliver(k msgKey, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return
	}
	s := m.slots[k]
	if s == nil {
		s = &slot{}
		m.slots[k] = s
	}
	if len(s.waiters) > 0 {
		w := s.waiters[0]
		s.waiters = s.waiters[1:]
		w <- delivery{data: data}
		if len(s.waiters) == 0 && len(s.queue) == 0 {
			delete(m.slots, k)
		}
		return
	}
	s.queue = append(s.queue, data)
	m.bytes[k.peer] += len(data)
}

// queued returns the bytes from peer that are queued for nobody.
func (m *mailbox) queued(peer int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes[peer]
}

// peerGone records that no more messages will come from peer and wakes the
// receivers waiting on it.
func (m *mailbox) peerGone(peer int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return
	}
	if _, ok := m.gone[peer]; ok {
		return
	}
	m.gone[peer] = err
	for k, s := range m.slots {
		if k.peer != peer {
			continue
		}
		for _, w := range s.waiters {
			w <- delivery{err: err}
		}
		s.waiters = nil
		if len(s.queue) == 0 {
			delete(m.slots, k)
		}
	}
}

// shutdown wakes every waiter with err (once; later calls do nothing) and
// reports whether this call did it.
func (m *mailbox) shutdown(err error) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return false
	}
	m.err = err
	close(m.done)
	m.slots = nil
	return true
}

// closedErr returns the shutdown reason, or nil.
func (m *mailbox) closedErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// recv waits for the next message on k, until ctx ends or the mailbox shuts
// down.
func (m *mailbox) recv(ctx context.Context, k msgKey) ([]byte, error) {
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		return nil, m.err
	}
	s := m.slots[k]
	if s != nil && len(s.queue) > 0 {
		d := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		m.bytes[k.peer] -= len(d)
		if len(s.queue) == 0 {
			delete(m.slots, k)
		}
		m.mu.Unlock()
		return d, nil
	}
	if err, ok := m.gone[k.peer]; ok {
		m.mu.Unlock()
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		m.mu.Unlock()
		return nil, context.Cause(ctx)
	}
	if s == nil {
		s = &slot{}
		m.slots[k] = s
	}
	ch := make(chan delivery, 1)
	s.waiters = append(s.waiters, ch)
	m.mu.Unlock()

	var why error
	select {
	case d := <-ch:
		return d.data, d.err
	case <-ctx.Done():
		why = context.Cause(ctx)
	case <-m.done:
		why = m.closedErr()
	}
	// Withdraw; if a message was handed over meanwhile, put it back in
	// front so that it is not lost.
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.slots[k]; s != nil {
		for i, w := range s.waiters {
			if w == ch {
				s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
				if len(s.waiters) == 0 && len(s.queue) == 0 {
					delete(m.slots, k)
				}
				return nil, why
			}
		}
	}
	select {
	case d := <-ch:
		if d.err == nil && m.err == nil {
			s := m.slots[k]
			if s == nil {
				s = &slot{}
				m.slots[k] = s
			}
			s.queue = append([][]byte{d.data}, s.queue...)
			m.bytes[k.peer] += len(d.data)
		}
	default:
	}
	return nil, why
}

// checkPeer validates a peer rank.
func checkPeer(peer, n int) error {
	if peer < 0 || peer >= n {
		return fmt.Errorf("bootstrap: peer rank %d out of range for %d ranks (want 0..%d)", peer, n, n-1)
	}
	return nil
}
