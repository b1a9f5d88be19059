package bootstrap

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"
)

// Backoff of the accept loops after a failed Accept.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// acceptLoop accepts connections on ln and hands each to serve, until ln is
// closed, quit is closed or serve returns false. A failed Accept for any
// other reason (EMFILE or ENFILE when file descriptors run out,
// ECONNABORTED, ...) does not end the loop: it is logged and retried after
// a backoff (5 ms doubling up to 1 s, reset by the next success), so that a
// burst of connections cannot shut the door on the ranks for good.
func acceptLoop(ln net.Listener, quit <-chan struct{}, log *slog.Logger, serve func(net.Conn) bool) {
	backoff := time.Duration(0)
	for {
		nc, err := ln.Accept()
		if err == nil {
			backoff = 0
			if !serve(nc) {
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
			lvl = slog.LevelWarn // once per burst
			backoff = acceptBackoffMin
		} else {
			backoff = min(2*backoff, acceptBackoffMax)
		}
		log.Log(context.Background(), lvl, "bootstrap: accept failed, retrying", "err", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-quit:
			t.Stop()
			return
		case <-t.C:
		}
	}
}
