package comm

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/transport"
)

func TestHostsShared(t *testing.T) {
	p := func(host string, pid int) transport.Peer { return transport.Peer{Host: host, PID: pid} }
	cases := []struct {
		name  string
		peers []transport.Peer
		want  bool
	}{
		{"one process", []transport.Peer{p("a", 1), p("a", 1)}, false},
		{"one rank per host", []transport.Peer{p("a", 1), p("b", 2), p("c", 3)}, false},
		{"two processes on a host", []transport.Peer{p("a", 1), p("a", 2)}, true},
		{"uneven: 2 then 1", []transport.Peer{p("a", 1), p("a", 2), p("b", 3)}, true},
		{"uneven: 1 then 2", []transport.Peer{p("a", 1), p("b", 2), p("b", 3)}, true},
		{"same pid, other hosts", []transport.Peer{p("a", 7), p("b", 7)}, false},
	}
	for _, c := range cases {
		require.Equal(t, c.want, hostsShared(c.peers), c.name)
	}
}

// TestWatchPeersUnevenHosts runs the liveness exchange on 3 ranks in 3
// processes on 2 hosts (the layout the survivors of a killed rank of 2×2
// have): the rank alone on its host must join the exchange, or its peers
// wait for it (or read its next collective's message as theirs); the two
// ranks that share a host watch each other.
func TestWatchPeersUnevenHosts(t *testing.T) {
	for _, hosts := range [][]string{{"a", "a", "b"}, {"a", "b", "b"}, {"a", "b", "a"}} {
		n := len(hosts)
		peers := make([]transport.Peer, n)
		for r := range peers {
			peers[r] = transport.Peer{Rank: r, Host: hosts[r], PID: 1000 + r}
		}
		nets := bootstrap.NewInProcess(n)
		es := make([]*Engine, n)
		errs := make([]error, n)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var wg sync.WaitGroup
		for r := range es {
			es[r] = &Engine{rank: r, nRanks: n, net: nets[r], log: slog.New(slog.DiscardHandler)}
			wg.Go(func() {
				errs[r] = es[r].watchPeers(ctx, peers)
				if errs[r] == nil {
					// The next collective must pair with the peers' next one.
					_, errs[r] = nets[r].AllGather(ctx, []byte{byte(r)})
				}
			})
		}
		wg.Wait()
		cancel()
		for r, e := range es {
			require.NoError(t, errs[r], "hosts %v rank %d", hosts, r)
			alone := true
			for q := range peers {
				alone = alone && (q == r || peers[q].Host != peers[r].Host)
			}
			require.Equal(t, !alone, e.watch != nil, "hosts %v rank %d: a watcher only where a peer shares the host", hosts, r)
			if e.watch != nil {
				require.NoError(t, e.watch.Close())
			}
		}
	}
}
