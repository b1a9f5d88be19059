package bootstrap

import (
	"log/slog"
	"net"

	"github.com/ncclgo/ncclgo/internal/acceptloop"
)

// acceptLoop is acceptloop.Run on ln, logged as the bootstrap's.
func acceptLoop(ln net.Listener, quit <-chan struct{}, log *slog.Logger, serve func(net.Conn) bool) {
	acceptloop.Run(ln, quit, log, "bootstrap", serve)
}
