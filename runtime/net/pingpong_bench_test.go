package net

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkSocketPingPong is a message's round trip between two socket
// comms over loopback, by inline bound (SocketOptions.Inline) and size:
// each op, side A sends n bytes and side B, in another goroutine, sends
// them back. Messages up to the bound go on the control socket, moved by
// the caller's thread; longer ones in chunks through the helper threads,
// which sleep in ppoll when idle, so a message pays a helper's wakeup on
// each side.
//
//	go test -run XXX -bench SocketPingPong ./runtime/net
func BenchmarkSocketPingPong(b *testing.B) {
	for _, wait := range []string{WaitPPoll, WaitPoller} {
		for _, inline := range []int{16 << 10, DefaultInline, MaxInline} {
			for _, n := range []int{4 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10} {
				b.Run(fmt.Sprintf("wait=%s/inline=%dK/bytes=%d", wait, inline>>10, n), func(b *testing.B) {
					s, err := NewSocket(SocketOptions{Interface: "lo", Family: "AF_INET", Inline: inline, Wait: wait, HandshakeTimeout: 5 * time.Second})
					require.NoError(b, err)
					pingPong(b, s, n)
				})
			}
		}
	}
}

func pingPong(b *testing.B, s *Socket, n int) {
	abSend, abRecv := pair(b, s)
	baSend, baRecv := pair(b, s)
	out, back := make([]byte, n), make([]byte, n)
	iters := b.N
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, n)
		for range iters {
			if err := postWait(func() (Request, error) { return abRecv.Irecv(buf, 1, nil) }); err != nil {
				done <- err
				return
			}
			if err := postWait(func() (Request, error) { return baSend.Isend(buf, 1, nil) }); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	b.SetBytes(int64(2 * n))
	b.ResetTimer()
	for range iters {
		w := post(b, func() (Request, error) { return abSend.Isend(out, 1, nil) })
		r := post(b, func() (Request, error) { return baRecv.Irecv(back, 1, nil) })
		if _, err := waitB(w); err != nil {
			b.Fatal(err)
		}
		if _, err := waitB(r); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// postWait posts a request with f (again while f says "call again") and
// waits for it; for goroutines other than the benchmark's.
func postWait(f func() (Request, error)) error {
	for {
		r, err := f()
		if err != nil {
			return err
		}
		if r != nil {
			_, err = waitB(r)
			return err
		}
		runtime.Gosched()
	}
}

// waitB polls r until it completes or fails, yielding between polls (as
// the proxy does with few Ps) so that the helpers get to run.
func waitB(r Request) (int, error) {
	for {
		done, n, err := r.Test()
		if err != nil || done {
			return n, err
		}
		runtime.Gosched()
	}
}
