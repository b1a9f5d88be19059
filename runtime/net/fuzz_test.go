package net

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// FuzzSocketRecv: a peer that shook hands properly then sends anything on
// its control and data sockets and hangs up. The posted receive ends
// within the bound (never hangs), with an error naming the peer (ErrPeer)
// or a message no longer than what was posted, and nothing is written
// outside the posted buffer. Seeds are the shapes TestSocketRejectsGarbage
// checks one by one.
//
//	go test -run XXX -fuzz FuzzSocketRecv -fuzztime 60s ./runtime/net
func FuzzSocketRecv(f *testing.F) {
	const big = DefaultInline + 8
	f.Add(msgHeader(0, 8), []byte(nil), uint32(64))
	f.Add(append(msgHeader(0, 8), 1, 2, 3, 4, 5, 6, 7, 8), []byte(nil), uint32(64))
	f.Add(msgHeader(0, 100), []byte(nil), uint32(64))
	f.Add(msgHeader(0, big), chunkHeader(0, big), uint32(big))
	f.Add(msgHeader(0, big), chunkHeader(5, big), uint32(big))
	f.Add(msgHeader(0, big), chunkHeader(0, big+1), uint32(big))
	f.Add(msgHeader(7, 8), []byte(nil), uint32(8))
	f.Add([]byte("this is no header"), []byte(nil), uint32(16))
	f.Add(msgHeader(0, 1<<62), []byte("0123456789abcdef"), uint32(1<<20))
	n := loopbackFuzz(f)
	f.Fuzz(func(t *testing.T, ctrlBytes, dataBytes []byte, posted uint32) {
		posted %= 2 * big
		h, l, err := n.Listen(0)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ctrl, data := rawPeer(t, h, false)
		rc := accept(t, n, l)
		defer rc.Close()
		const guard = 64
		mem := make([]byte, int(posted)+guard)
		buf := mem[:posted:posted]
		r := post(t, func() (Request, error) { return rc.Irecv(buf, 0, nil) })
		_, _ = ctrl.Write(ctrlBytes)
		_, _ = data.Write(dataBytes)
		_ = data.Close()
		_ = ctrl.Close()
		deadline := time.Now().Add(10 * time.Second)
		for {
			done, got, err := r.Test()
			if err != nil {
				if !errors.Is(err, ErrPeer) {
					t.Fatalf("a misbehaving peer's error is not ErrPeer: %v", err)
				}
				break
			}
			if done {
				if got < 0 || got > int(posted) {
					t.Fatalf("received %d bytes into a buffer of %d", got, posted)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the receive neither ended nor failed within 10 s of the peer hanging up")
			}
			time.Sleep(50 * time.Microsecond)
		}
		if !bytes.Equal(mem[posted:], make([]byte, guard)) {
			t.Fatalf("bytes written past the posted %d", posted)
		}
	})
}

// loopbackFuzz is loopback for a fuzz target.
func loopbackFuzz(f *testing.F) *Socket {
	s, err := NewSocket(SocketOptions{Interface: "lo", Family: "AF_INET", NThreads: 1, NSocksPerThread: 1, HandshakeTimeout: 5 * time.Second})
	if err != nil {
		f.Skip(err)
	}
	return s
}
