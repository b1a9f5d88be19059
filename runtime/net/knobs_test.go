package net

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSocketChunkOption(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "NCCLGO_SOCKET_CHUNK" {
				return v
			}
			return ""
		}
	}
	o, err := SocketOptionsFromEnv(env("524288"))
	require.NoError(t, err)
	assert.Equal(t, 512<<10, o.Chunk)
	for _, bad := range []string{"4095", "1000", "x", "67109888", "-65536", "5000"} {
		_, err := SocketOptionsFromEnv(env(bad))
		require.ErrorContains(t, err, `NCCLGO_SOCKET_CHUNK="`+bad+`": want a byte count from 4096 to 67108864, a multiple of 1024`)
	}
	_, err = NewSocket(SocketOptions{Interface: "lo", Chunk: 3})
	require.ErrorContains(t, err, "Chunk=3 (NCCLGO_SOCKET_CHUNK)")
}

// chunkCount is how many chunks a message of n bytes goes in on c.
func chunkCount(c any, n int) int {
	var cm *comm
	switch v := c.(type) {
	case *sendComm:
		cm = v.comm
	case *recvComm:
		cm = v.comm
	}
	_, count := cm.chunks(n)
	return count
}

// The sender's chunk size holds for the connection: the receiver takes it
// from the hello, whatever its own option says, so every chunk's length
// matches on both sides.
func TestSocketChunkTravelsInTheHello(t *testing.T) {
	for _, chunk := range []int{0, 4 << 10, 512 << 10, 4 << 20} {
		sender, err := NewSocket(SocketOptions{Interface: "lo", Family: "AF_INET", NThreads: 2, NSocksPerThread: 2, Chunk: chunk, HandshakeTimeout: 5 * time.Second})
		require.NoError(t, err)
		receiver := loopback(t, 1, 1) // its own Chunk (the default) does not apply
		h, l, err := receiver.Listen(0)
		require.NoError(t, err)
		sc, err := sender.Connect(0, h)
		require.NoError(t, err)
		rc := accept(t, receiver, l)
		const n = 3<<20 + 5
		want := chunk
		if chunk == 0 {
			want = DefaultChunk
		}
		wantCount := (n + max(want, (n+3)/4) - 1) / max(want, (n+3)/4)
		assert.Equal(t, wantCount, chunkCount(sc, n), "chunk %d: the sender's chunks", chunk)
		assert.Equal(t, wantCount, chunkCount(rc, n), "chunk %d: the receiver's chunks", chunk)
		src := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7}, n/7+1)[:n]
		dst := make([]byte, n)
		r, err := rc.Irecv(dst, 1, nil)
		require.NoError(t, err)
		s, err := sc.Isend(src, 1, nil)
		require.NoError(t, err)
		waitDone(t, s)
		waitDone(t, r)
		require.Equal(t, src, dst)
		require.NoError(t, sc.Close())
		require.NoError(t, rc.Close())
		require.NoError(t, l.Close())
	}
}

// A helper whose read or write moved less than it asked waits in ppoll
// for the socket instead of calling again to be told EAGAIN: the data
// sockets' empty reads are at most one per chunk (the first look at a
// socket for a new chunk), not one per wakeup.
func TestSocketHelpersDoNotReadDrainedSockets(t *testing.T) {
	n := loopback(t, 1, 1)
	sc, rc := pair(t, n)
	const msgs, size = 16, 16 << 20
	src := bytes.Repeat([]byte{9, 8, 7, 6, 5}, size/5+1)[:size]
	dst := make([]byte, size)
	for i := range msgs {
		r, err := rc.Irecv(dst, 1, nil)
		require.NoError(t, err)
		s, err := sc.Isend(src, 1, nil)
		require.NoError(t, err)
		_, err = waitWith(t, r, s)
		require.NoError(t, err)
		waitDone(t, s)
		require.Equal(t, src, dst, "message %d", i)
		clear(dst)
	}
	chunks := uint64(msgs * chunkCount(sc, size))
	snd, rcv := sockStats(sc), sockStats(rc)
	t.Logf("sender: %d writes; receiver: %d reads, %d empty; %d chunks", snd.DataWrites, rcv.DataReads, rcv.DataEmptyReads, chunks)
	assert.GreaterOrEqual(t, rcv.DataReads-rcv.DataEmptyReads, 2*chunks, "a header and some bytes per chunk")
	assert.LessOrEqual(t, rcv.DataEmptyReads, chunks, "empty reads on the data socket")
	assert.GreaterOrEqual(t, snd.DataWrites, chunks)
}
