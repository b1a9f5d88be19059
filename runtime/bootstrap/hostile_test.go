package bootstrap

import (
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestQueueBounded: messages that nobody receives used to queue without
// bound (24 × 32 MiB took the heap to 890 MiB). A peer may now have at
// most Options.MaxQueuedBytes unreceived here; past it its connection is
// dropped and the receiver's calls on it fail with ErrQueueFull, and so,
// soon, do the sender's.
func TestQueueBounded(t *testing.T) {
	opts := loopbackOpts(5 * time.Second)
	opts.MaxMessageSize = 1000
	id, conns := tcpConns(t, 2, opts)
	ctx := context.Background()
	var sendErr error
	for i := range 50 {
		if sendErr = conns[1].Send(ctx, 0, 100+i, make([]byte, 1000)); sendErr != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	_, err := conns[0].Recv(ctx, 1, 99) // a tag never sent
	require.ErrorIs(t, err, ErrQueueFull)
	assert.ErrorContains(t, err, "rank 1")
	assert.Less(t, time.Since(start), time.Second)
	assert.LessOrEqual(t, conns[0].box.queued(1), 2*(1000+msgHeader))
	if sendErr == nil {
		require.Eventually(t, func() bool {
			return conns[1].Send(ctx, 0, 1, []byte("x")) != nil
		}, 3*time.Second, 10*time.Millisecond, "the sender's Send must fail once its stream was dropped")
	}
	_, err = Init(ctx, id, 0, 2, Options{MaxMessageSize: 1000, MaxQueuedBytes: 10})
	require.ErrorContains(t, err, "MaxQueuedBytes=10")
}

// TestImpostorRefused: a process that holds the unique id used to be able
// to speak for a rank that had not connected yet: its message was
// delivered, and the real rank's connection refused with a log line only.
// A peer hello must now carry the rank's check-in token, which only the
// ranks have: the impostor delivers nothing, the real rank gets through.
func TestImpostorRefused(t *testing.T) {
	logs := &lockedBuffer{}
	opts := loopbackOpts(5 * time.Second)
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	id, conns := tcpConns(t, 2, opts)
	ctx := context.Background()
	c := forge(t, conns[0].PeerAddr(0), id, 1, 2, 0x1234)
	defer c.Close()
	var hdr [msgHeader]byte
	hdr[0] = classUser
	binary.BigEndian.PutUint64(hdr[1:], 7)
	_ = writeFrame(c, hdr[:], []byte("forged"))
	waitClosed(t, c, 2*time.Second)
	assert.Contains(t, logs.String(), "without its check-in token")

	require.NoError(t, conns[1].Send(ctx, 0, 7, []byte("real")))
	got, err := conns[0].Recv(ctx, 1, 7)
	require.NoError(t, err)
	assert.Equal(t, "real", string(got), "the impostor's message was delivered")
	require.NoError(t, conns[0].Send(ctx, 1, 8, []byte("back")))
	got, err = conns[1].Recv(ctx, 0, 8)
	require.NoError(t, err)
	assert.Equal(t, "back", string(got))
}

// TestRootPoisonBounded: a holder of the id that checks in first with
// nRanks = 2^20 gets the real ranks rejected (as an error naming the
// conflict), and its status queries no longer cost the root a list of
// every missing rank (137 ms and 70 MiB each before).
func TestRootPoisonBounded(t *testing.T) {
	ctx := context.Background()
	opts := loopbackOpts(5 * time.Second)
	root, id, err := NewRoot(ctx, opts)
	require.NoError(t, err)
	defer root.Close()
	raw := dialHello(t, id.Addr(), id, hello{kind: helloCheckIn, rank: 0, nRanks: MaxRanks, addr: "127.0.0.1:9"})
	defer raw.Close()
	var worst time.Duration
	for range 20 {
		start := time.Now()
		require.NoError(t, writeFrame(raw, []byte{msgQuery}))
		b, err := readFrame(raw, 1<<30)
		require.NoError(t, err)
		worst = max(worst, time.Since(start))
		require.LessOrEqual(t, len(b), 22+4*maxListedMissing, "status reply size")
		st, err := decodeStatus(b)
		require.NoError(t, err)
		assert.Equal(t, MaxRanks-1, st.nMissing)
		te := st.timeoutError("x", time.Second)
		assert.Contains(t, te.Error(), "waiting for 1048575 ranks of 1048576")
	}
	t.Logf("worst status query: %v", worst)
	assert.Less(t, worst, 50*time.Millisecond)
	_, err = Init(ctx, id, 0, 2, opts)
	require.ErrorIs(t, err, ErrRejected)
	assert.ErrorContains(t, err, "another process")
}

// TestIdleStrangersBounded: connections that never say hello used to
// hold a descriptor and a goroutine each for 5 s; 300 of them kept a real
// check-in from finishing within its timeout when descriptors were short.
// At most maxPendingHellos wait now (a new one closes the oldest once it
// has waited minPendingAge).
func TestIdleStrangersBounded(t *testing.T) {
	ctx := context.Background()
	opts := loopbackOpts(10 * time.Second)
	root, id, err := NewRoot(ctx, opts)
	require.NoError(t, err)
	defer root.Close()
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range 300 {
		c, err := net.Dial("tcp", id.Addr())
		require.NoError(t, err)
		idle = append(idle, c)
	}
	held := func() int {
		root.socks.mu.Lock()
		defer root.socks.mu.Unlock()
		return len(root.socks.conns)
	}
	time.Sleep(300 * time.Millisecond) // the root accepts them all
	assert.LessOrEqual(t, held(), maxPendingHellos, "sockets the root holds for 300 silent strangers")
	start := time.Now()
	conns, errs := startRanks(ctx, id, seq(2), 2, opts)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		defer conns[r].Close()
	}
	assert.Less(t, time.Since(start), 2*time.Second, "check-in behind 300 silent strangers")
}
