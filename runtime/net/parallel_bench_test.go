package net

import (
	"fmt"
	"io"
	gonet "net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The machine's loopback ceiling for the NET transport's shape of traffic:
// two fake hosts that both send and receive at once. streams=S opens S
// loopback TCP connections each way (2S in all); every connection has a
// goroutine writing chunks from an mmap'd area and one reading them into
// another, as the NET proxy's socket threads do. MB/s counts the payload
// of both directions together; a 2-rank AllReduce's busbw is at most half
// of it (each rank sends and receives the whole buffer once):
//
//	go test -run XXX -bench LoopbackParallel -benchtime 4096x ./runtime/net
func BenchmarkLoopbackParallel(b *testing.B) {
	for _, streams := range []int{1, 2, 4, 8, 16} {
		for _, chunk := range []int{512 << 10, 4 << 20} {
			b.Run(fmt.Sprintf("streams=%d/chunk=%dK", streams, chunk>>10), func(b *testing.B) {
				benchLoopbackParallel(b, streams, chunk)
			})
		}
	}
}

func benchLoopbackParallel(b *testing.B, streams, chunk int) {
	const area = 32 << 20
	type pair struct{ w, r *gonet.TCPConn }
	var pairs []pair
	for range 2 * streams {
		l, err := gonet.ListenTCP("tcp", &gonet.TCPAddr{IP: gonet.IPv4(127, 0, 0, 1)})
		require.NoError(b, err)
		c, err := gonet.DialTCP("tcp", nil, l.Addr().(*gonet.TCPAddr))
		require.NoError(b, err)
		s, err := l.AcceptTCP()
		require.NoError(b, err)
		_ = l.Close()
		b.Cleanup(func() { _ = c.Close(); _ = s.Close() })
		pairs = append(pairs, pair{c, s})
	}
	areas := make([][2][]byte, len(pairs))
	for i := range areas {
		areas[i] = [2][]byte{mmapArea(b, area), mmapArea(b, area)}
		for j := 0; j < area; j += 4096 { // fault the pages in now
			areas[i][0][j], areas[i][1][j] = byte(j), 1
		}
	}
	b.SetBytes(int64(chunk * len(pairs)))
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(pairs))
	b.ResetTimer()
	for k, p := range pairs {
		src, dst := areas[k][0], areas[k][1]
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range b.N {
				off := (i * chunk) % (area - area%chunk)
				if _, err := p.w.Write(src[off : off+chunk]); err != nil {
					errs <- err
					_ = p.r.Close() // the reader must not wait for the rest
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := range b.N {
				off := (i * chunk) % (area - area%chunk)
				if _, err := io.ReadFull(p.r, dst[off:off+chunk]); err != nil {
					errs <- err
					_ = p.w.Close() // the writer must not block on a full socket
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		require.NoError(b, err)
	}
}
