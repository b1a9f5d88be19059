package net

import (
	"bytes"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The sender's copy, measured alone: one loopback TCP socket, one
// direction, chunks of 64 KiB to 1 MiB from an mmap'd 64 MiB source (the
// NET staging is mmap'd memory that the GPU writes, so mostly not in the
// CPU's caches) into a 64 MiB destination, the sender written with writev
// (the kernel copies user → socket) or vmsplice + splice (the socket
// references the pages; only the receiver's read copies). Sender and
// receiver are goroutines locked to their threads; their CPU time comes
// from getrusage(RUSAGE_THREAD). Pin to see a machine's figures rather
// than the scheduler's:
//
//	taskset -c 0,1 go test -run XXX -bench LoopbackStream -count 3 ./runtime/net
//
// Metrics: MB/s of payload; snd-ns/KiB and rcv-ns/KiB, each thread's CPU
// time per KiB moved.
func BenchmarkLoopbackStream(b *testing.B) {
	for _, mode := range []string{"writev", "splice"} {
		for _, chunk := range []int{64 << 10, 256 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("%s/%dK", mode, chunk>>10), func(b *testing.B) {
				benchLoopbackSend(b, mode == "splice", chunk)
			})
		}
	}
}

const benchArea = 64 << 20

func threadCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func mmapArea(b testing.TB, n int) []byte {
	m, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_SHARED)
	require.NoError(b, err)
	b.Cleanup(func() { _ = syscall.Munmap(m) })
	return m
}

func benchLoopbackSend(b *testing.B, splice bool, chunk int) {
	w, r := loopbackPair(b, true)
	src, dst := mmapArea(b, benchArea), mmapArea(b, benchArea)
	for i := range src {
		src[i] = byte(i * 7)
	}
	pr, pw := -1, -1
	if splice {
		var err error
		pr, pw, err = newPipe(pipeCap())
		require.NoError(b, err)
		defer syscall.Close(pr)
		defer syscall.Close(pw)
	}
	total := b.N * chunk
	type res struct {
		cpu time.Duration
		err error
	}
	rc := make(chan res, 1)
	b.SetBytes(int64(chunk))
	b.ResetTimer()
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		t0 := threadCPU()
		off := 0
		for got := 0; got < total; {
			want := min(total-got, benchArea-off)
			n, err := read(r, dst[off:off+want])
			if err != nil {
				rc <- res{err: err}
				return
			}
			if n == 0 {
				ppoll([]pollFd{{fd: int32(r), events: pollIn}}, time.Second)
				continue
			}
			got += n
			if off += n; off == benchArea {
				off = 0
			}
		}
		rc <- res{cpu: threadCPU() - t0}
	}()
	runtime.LockOSThread()
	t0 := threadCPU()
	wait := func() { ppoll([]pollFd{{fd: int32(w), events: pollOut}}, time.Second) }
	for i := range b.N {
		off := (i * chunk) % benchArea // chunk divides benchArea
		buf := src[off : off+chunk]
		if !splice {
			for done := 0; done < chunk; {
				n, err := writev(w, []syscall.Iovec{iovec(buf[done:])})
				require.NoError(b, err)
				if n == 0 {
					wait()
				}
				done += n
			}
			continue
		}
		for done, in := 0, 0; done < chunk; {
			if done+in < chunk {
				n, err := vmsplice(pw, buf[done+in:])
				require.NoError(b, err)
				in += n
			}
			n, err := spliceOut(pr, w, in, i+1 < b.N || done+in < chunk)
			require.NoError(b, err)
			if n == 0 {
				wait()
			}
			done += n
			in -= n
		}
	}
	snd := threadCPU() - t0
	runtime.UnlockOSThread()
	got := <-rc
	b.StopTimer()
	require.NoError(b, got.err)
	kib := float64(total) / 1024
	b.ReportMetric(float64(snd.Nanoseconds())/kib, "snd-ns/KiB")
	b.ReportMetric(float64(got.cpu.Nanoseconds())/kib, "rcv-ns/KiB")
	// The receiver got the source's bytes, in order.
	n := min(total, benchArea)
	require.True(b, bytes.Equal(src[:n], dst[:n]), "the received bytes differ from the sent ones")
}
