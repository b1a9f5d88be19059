package bootstrap

import (
	"net"
	"sync"
)

// connSet tracks the live sockets of a Conn or a Root so that shutdown can
// close them all; once closing, it refuses new ones.
type connSet struct {
	mu      sync.Mutex
	closing bool
	conns   map[net.Conn]struct{}
}

// track registers nc, or reports false when the set is closing.
func (s *connSet) track(nc net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	if s.conns == nil {
		s.conns = make(map[net.Conn]struct{})
	}
	s.conns[nc] = struct{}{}
	return true
}

// untrack forgets nc.
func (s *connSet) untrack(nc net.Conn) {
	s.mu.Lock()
	delete(s.conns, nc)
	s.mu.Unlock()
}

// shut marks the set closing and calls fn on every tracked socket.
func (s *connSet) shut(fn func(net.Conn)) {
	s.mu.Lock()
	s.closing = true
	for nc := range s.conns {
		fn(nc)
	}
	s.mu.Unlock()
}

// closeAll closes every tracked socket.
func (s *connSet) closeAll() {
	s.mu.Lock()
	for nc := range s.conns {
		nc.Close()
	}
	s.mu.Unlock()
}
