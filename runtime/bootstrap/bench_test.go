package bootstrap

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// BenchmarkBarrierTCP measures the per-message path: one op is one
// Barrier of 256 ranks over loopback TCP, on open connections
// (256·8 messages).
func BenchmarkBarrierTCP(b *testing.B) {
	nets := initTCPB(b, 256)
	bar := func() {
		errs := make(chan error, len(nets))
		for _, nw := range nets {
			go func() { errs <- nw.Barrier(context.Background()) }()
		}
		for range nets {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
	}
	bar() // open the connections
	cpu0 := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		bar()
	}
	msgs := float64(b.N * 256 * rounds(256))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/msgs/1e3, "µs/msg")
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/msgs/1e3, "cpu-µs/msg")
}

func initTCPB(b *testing.B, n int) []Network {
	ctx := context.Background()
	opts := loopbackOpts(60 * time.Second)
	root, id, err := NewRoot(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { root.Close() })
	conns, errs := startRanks(ctx, id, seq(n), n, opts)
	nets := make([]Network, n)
	for r, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
		nets[r] = conns[r]
	}
	b.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	return nets
}

// cpuTime is the process's user and system time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
