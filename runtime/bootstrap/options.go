package bootstrap

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/ncclgo/ncclgo/runtime/config"
)

// DefaultTimeout bounds every bootstrap wait when neither Options.Timeout nor
// NCCL_BOOTSTRAP_TIMEOUT says otherwise.
const DefaultTimeout = 120 * time.Second

// Bounds of the bootstrap timeout (Options.Timeout, NCCL_BOOTSTRAP_TIMEOUT).
const (
	MinTimeout = config.MinBootstrapTimeout
	MaxTimeout = config.MaxBootstrapTimeout
)

// MaxRanks is the largest communicator the bootstrap accepts: NCCL's ranks
// are 32-bit, but an address table of more than 2^20 ranks would not fit
// the root's reply limit, and no real job comes near it.
const MaxRanks = 1 << 20

// MaxRoots is the largest number of roots of one bootstrap (JoinScalable):
// every rank's check-in carries the list of roots.
const MaxRoots = 32

// DefaultMaxMessageSize is the largest Send / AllGather block a rank
// accepts from a peer when Options.MaxMessageSize is zero.
const DefaultMaxMessageSize = 64 << 20

// maxHelloWait bounds how long a new connection may stay silent before its
// hello: min(maxHelloWait, timeout). A variable for the tests.
var maxHelloWait = 5 * time.Second

// Options configures a Root, a Conn or an in-process Network. The zero value
// takes everything from the environment (NCCL_* variables) or the defaults.
// A field that is set overrides the environment.
type Options struct {
	// Timeout bounds every blocking wait (check-in, Recv, AllGather, ...).
	// Zero means NCCL_BOOTSTRAP_TIMEOUT (seconds), else DefaultTimeout.
	Timeout time.Duration
	// Addr is the root's listen address "host:port" (port 0 picks a free
	// port). Used by NewRoot only; it overrides NCCL_COMM_ID and the
	// interface selection.
	Addr string
	// Interface selects network interfaces with NCCL_SOCKET_IFNAME's
	// grammar; empty means NCCL_SOCKET_IFNAME. NewRoot listens on the first
	// match; Init listens on the first match instead of the address it uses
	// to reach the root.
	Interface string
	// LocalIP, when valid, is the address a rank listens on and connects
	// from (it overrides Interface). A simulation of many hosts on one
	// machine gives each fake host its own loopback address (127.0.0.0/8),
	// so that its ranks' ports do not all come from one address's
	// ephemeral range (28,232 ports by default on Linux).
	LocalIP netip.Addr
	// Family restricts addresses to "AF_INET" or "AF_INET6"; empty means
	// NCCL_SOCKET_FAMILY, else either (IPv4 preferred).
	Family string
	// MaxMessageSize is the largest message (Send payload or AllGather
	// block) a rank sends or accepts from a peer; a frame announcing more is
	// refused and its connection dropped. Zero means DefaultMaxMessageSize;
	// at most MaxMessageSize.
	MaxMessageSize int
	// MaxQueuedBytes bounds the bytes that one peer may have sent to this
	// rank and nobody received yet; a peer that goes past it has its
	// connection dropped, and receives from it fail with ErrQueueFull.
	// Zero means twice the message limit (128 MiB by default); at least
	// the message limit.
	MaxQueuedBytes int
	// Logger receives diagnostics (rejected connections, timeouts) tagged
	// subsys=BOOTSTRAP. Nil means slog.Default().
	Logger *slog.Logger
}

const (
	envCommID    = "NCCL_COMM_ID"
	envIfName    = "NCCL_SOCKET_IFNAME"
	envFamily    = "NCCL_SOCKET_FAMILY"
	envTimeout   = "NCCL_BOOTSTRAP_TIMEOUT"
	subsysKey    = "subsys"
	subsysValue  = "BOOTSTRAP"
	maxHelloSize = 4 << 10
)

// timeout resolves the effective timeout: Options.Timeout, else
// NCCL_BOOTSTRAP_TIMEOUT (seconds), else DefaultTimeout. Either must lie in
// [MinTimeout, MaxTimeout].
func (o Options) timeout() (time.Duration, error) {
	if o.Timeout != 0 {
		if o.Timeout < MinTimeout || o.Timeout > MaxTimeout {
			return 0, fmt.Errorf("bootstrap: Options.Timeout=%v: want %v..%v (0: %s or %v)", o.Timeout, MinTimeout, MaxTimeout, envTimeout, DefaultTimeout)
		}
		return o.Timeout, nil
	}
	if v, ok := os.LookupEnv(envTimeout); ok && strings.TrimSpace(v) != "" {
		d, err := config.ParseBootstrapTimeout(v)
		if err != nil {
			return 0, fmt.Errorf("bootstrap: %w", err)
		}
		return d, nil
	}
	return DefaultTimeout, nil
}

// maxMessage resolves the largest message a rank accepts.
func (o Options) maxMessage() (int, error) {
	switch {
	case o.MaxMessageSize == 0:
		return DefaultMaxMessageSize, nil
	case o.MaxMessageSize < 0 || o.MaxMessageSize > MaxMessageSize:
		return 0, fmt.Errorf("bootstrap: Options.MaxMessageSize=%d: want 1..%d (0: %d)", o.MaxMessageSize, MaxMessageSize, DefaultMaxMessageSize)
	}
	return o.MaxMessageSize, nil
}

// maxQueued resolves the per-peer bound of unreceived bytes, for a
// message limit of maxMsg.
func (o Options) maxQueued(maxMsg int) (int, error) {
	switch {
	case o.MaxQueuedBytes == 0:
		return 2 * (maxMsg + msgHeader), nil
	case o.MaxQueuedBytes < maxMsg+msgHeader:
		return 0, fmt.Errorf("bootstrap: Options.MaxQueuedBytes=%d: want at least the message limit plus its %d-byte header (%d), or 0", o.MaxQueuedBytes, msgHeader, maxMsg+msgHeader)
	}
	return o.MaxQueuedBytes, nil
}

// helloWait is how long a new connection may stay silent before its hello.
func helloWait(timeout time.Duration) time.Duration { return min(maxHelloWait, timeout) }

// checkRanks validates a communicator size.
func checkRanks(nRanks int) error {
	if nRanks < 1 || nRanks > MaxRanks {
		return fmt.Errorf("bootstrap: nRanks=%d: want 1..%d", nRanks, MaxRanks)
	}
	return nil
}

func (o Options) ifaceSpec() string {
	if o.Interface != "" {
		return o.Interface
	}
	return os.Getenv(envIfName)
}

func (o Options) family() (int, error) {
	f := o.Family
	if f == "" {
		f = os.Getenv(envFamily)
	}
	switch p, err := config.ParseSocketFamily(f); {
	case err != nil:
		return 0, fmt.Errorf("bootstrap: socket family %q: want AF_INET or AF_INET6", f)
	case p == "AF_INET":
		return 4, nil
	case p == "AF_INET6":
		return 6, nil
	}
	return 0, nil
}

func (o Options) logger() *slog.Logger {
	l := o.Logger
	if l == nil {
		l = slog.Default()
	}
	return l.With(subsysKey, subsysValue)
}
