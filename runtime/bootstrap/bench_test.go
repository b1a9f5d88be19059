package bootstrap

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// BenchmarkBarrierTCP measures the per-message path: one op is one
// Barrier of 256 ranks over loopback TCP, on open connections
// (2·255 messages).
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
	msgs := float64(b.N * 2 * 255)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/msgs/1e3, "µs/msg")
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/msgs/1e3, "cpu-µs/msg")
}

// BenchmarkAllGatherTCP: one op is one AllGather of 64-byte blocks among
// 1024 ranks over loopback TCP, on open connections; it reports the
// CPU time per op beside the wall time.
func BenchmarkAllGatherTCP(b *testing.B) {
	nets := initTCPB(b, 1024)
	ag := func() {
		errs := make(chan error, len(nets))
		for r, nw := range nets {
			go func() {
				blk := make([]byte, 64)
				blk[0], blk[1] = byte(r), byte(r>>8)
				all, err := nw.AllGather(context.Background(), blk)
				if err == nil && (len(all) != len(nets) || all[len(nets)-1][1] != byte((len(nets)-1)>>8)) {
					err = errors.New("wrong result")
				}
				errs <- err
			}()
		}
		for range nets {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
	}
	ag() // open the connections
	cpu0 := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		ag()
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N)/1e6, "cpu-ms/op")
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
