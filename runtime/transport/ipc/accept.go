package ipc

import (
	"log/slog"
	"net"
	"sync"

	"github.com/ncclgo/ncclgo/internal/acceptloop"
)

// acceptLoop is acceptloop.Run on ln, logged as the IPC layer's.
func acceptLoop(ln *net.UnixListener, quit <-chan struct{}, serve func(*net.UnixConn) bool) {
	acceptloop.Run(ln, quit, slog.Default(), "ipc", func(c net.Conn) bool { return serve(c.(*net.UnixConn)) })
}

// maxPending bounds the connections of one listener that have not yet
// authenticated; a new one past the bound closes the oldest, so that
// strangers cannot hold descriptors and goroutines in bulk while a real
// peer, which authenticates within microseconds, still gets through.
const maxPending = 32

// pendingSet tracks the connections that have not authenticated yet.
type pendingSet struct {
	mu    sync.Mutex
	conns []*net.UnixConn // oldest first
}

// add registers c, closing the oldest pending connection when full.
func (p *pendingSet) add(c *net.UnixConn) {
	p.mu.Lock()
	var evict *net.UnixConn
	if len(p.conns) >= maxPending {
		evict = p.conns[0]
		p.conns = p.conns[1:]
	}
	p.conns = append(p.conns, c)
	p.mu.Unlock()
	if evict != nil {
		_ = evict.Close()
	}
}

// done unregisters c (authenticated or given up).
func (p *pendingSet) done(c *net.UnixConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.conns {
		if x == c {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			return
		}
	}
}
