package bootstrap

import (
	"net"
	"sync"
)

// maxPendingHellos bounds the connections of one Root or Conn that have
// not said hello yet. A new connection past it closes the oldest, so that
// silent strangers hold at most this many descriptors and goroutines
// (each for at most min(5 s, timeout)), while a real rank, which sends its
// hello with its connect, still gets through. A variable for the tests.
var maxPendingHellos = 64

// pendingSet tracks the connections awaiting their hello, oldest first.
type pendingSet struct {
	mu    sync.Mutex
	conns []net.Conn
}

// add registers c (call it in accept order), closing the oldest pending
// connection when the set is full.
func (p *pendingSet) add(c net.Conn) {
	p.mu.Lock()
	var evict net.Conn
	if len(p.conns) >= maxPendingHellos {
		evict = p.conns[0]
		p.conns = p.conns[1:]
	}
	p.conns = append(p.conns, c)
	p.mu.Unlock()
	if evict != nil {
		_ = evict.Close()
	}
}

// done unregisters c: it said hello, or it is gone.
func (p *pendingSet) done(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.conns {
		if x == c {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			return
		}
	}
}
