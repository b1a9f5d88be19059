// Package acceptloop is the accept loop of ncclgo's listeners (the
// bootstrap's TCP sockets, the IPC layer's Unix sockets): one that a failed
// Accept does not end.
package acceptloop

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"
)

// Backoff after a failed Accept: from Min, doubling up to Max, reset by
// the next success.
const (
	Min = 5 * time.Millisecond
	Max = time.Second
)

// Run accepts connections on ln and hands each to serve, until ln is
// closed, quit is closed or serve returns false. A failed Accept for any
// other reason (EMFILE or ENFILE when descriptors run out, ECONNABORTED,
// ...) does not end the loop: it is logged on log as what (at Warn once per
// burst, then at Debug) and retried after the backoff, so that a burst of
// connections cannot close the door for good.
func Run(ln net.Listener, quit <-chan struct{}, log *slog.Logger, what string, serve func(net.Conn) bool) {
	backoff := time.Duration(0)
	for {
		c, err := ln.Accept()
		if err == nil {
			backoff = 0
			if !serve(c) {
				return
			}
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
		select {
		case <-quit:
			return
		default:
		}
		lvl := slog.LevelDebug
		if backoff == 0 {
			lvl = slog.LevelWarn
			backoff = Min
		} else {
			backoff = min(2*backoff, Max)
		}
		log.Log(context.Background(), lvl, what+": accept failed, retrying", "addr", ln.Addr().String(), "err", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-quit:
			t.Stop()
			return
		case <-t.C:
		}
	}
}
