package bootstrap

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"
)

// DefaultTimeout bounds every bootstrap wait when neither Options.Timeout nor
// NCCL_BOOTSTRAP_TIMEOUT says otherwise.
const DefaultTimeout = 120 * time.Second

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
	// Family restricts addresses to "AF_INET" or "AF_INET6"; empty means
	// NCCL_SOCKET_FAMILY, else either (IPv4 preferred).
	Family string
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

// timeout resolves the effective timeout.
func (o Options) timeout() (time.Duration, error) {
	if o.Timeout < 0 {
		return 0, fmt.Errorf("bootstrap: negative Options.Timeout %v", o.Timeout)
	}
	if o.Timeout > 0 {
		return o.Timeout, nil
	}
	if v, ok := os.LookupEnv(envTimeout); ok && strings.TrimSpace(v) != "" {
		secs, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || secs <= 0 || secs > 1e9 {
			return 0, fmt.Errorf("bootstrap: %s=%q: want a positive number of seconds", envTimeout, v)
		}
		return time.Duration(secs * float64(time.Second)), nil
	}
	return DefaultTimeout, nil
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
	switch strings.ToUpper(strings.TrimSpace(f)) {
	case "":
		return 0, nil
	case "AF_INET", "INET", "4", "IPV4":
		return 4, nil
	case "AF_INET6", "INET6", "6", "IPV6":
		return 6, nil
	}
	return 0, fmt.Errorf("bootstrap: socket family %q: want AF_INET or AF_INET6", f)
}

func (o Options) logger() *slog.Logger {
	l := o.Logger
	if l == nil {
		l = slog.Default()
	}
	return l.With(subsysKey, subsysValue)
}
