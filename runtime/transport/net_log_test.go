package transport

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/syncbuf"
)

// TestNETStatsGoToNetLog: each NET connection's NET/stats line at close
// goes to Options.NetLog (the communicator's logger, NCCL_DEBUG_FILE's
// destination), not to the process's stderr logger.
func TestNETStatsGoToNetLog(t *testing.T) {
	var buf syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	sets, mems := connectNETOpts(t, loNet(t, 1, 1), 2, 1, netSizes, func(r int) Options {
		return Options{NetLog: log.With("rank", r), ProxyError: func(err error) { t.Errorf("rank %d: proxy error: %v", r, err) }}
	})
	const steps = 20
	var stop atomic.Bool
	var wg sync.WaitGroup
	for r := range 2 {
		next, prev := (r+1)%2, (r+1)%2
		wg.Go(func() { sendKernel(t, mems[r], sets[r].Send[Key{0, next}], 0, steps, &stop) })
		wg.Go(func() { recvKernel(t, mems[r], sets[r].Recv[Key{0, prev}], 0, steps, &stop) })
	}
	wg.Wait()
	for r := range sets {
		require.NoError(t, sets[r].Close())
	}
	out := buf.String()
	assert.Contains(t, out, "NET/stats", "the stats lines reach NetLog")
	assert.Contains(t, out, "rank=0")
	assert.Contains(t, out, "rank=1")
}
