package net

import (
	"bytes"
	"errors"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The conformance tests every backend passes: the socket backend and the
// plugin loader (over the test plugin).

// goMem allocates buffers on the Go heap (fine for the socket backend).
func goMem(t *testing.T) func(int) []byte { return func(n int) []byte { return make([]byte, n) } }

// cMem allocates buffers from an mmap'd arena that outlives the test's
// connections (a plugin keeps pointers to its buffers: no Go memory).
func cMem(t *testing.T) func(int) []byte {
	const size = 64 << 20
	arena, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Munmap(arena) })
	off := 0
	return func(n int) []byte {
		require.LessOrEqual(t, off+n, size, "test arena exhausted")
		b := arena[off : off+n : off+n]
		off += (n + 63) &^ 63
		return b
	}
}

// testMessages sends messages of 0 B to 1 MiB, all posted before any
// completes, and checks sizes, bytes, and that nothing past a message is
// written.
func testMessages(t *testing.T, n Net, mem func(*testing.T) func(int) []byte) {
	alloc := mem(t)
	sc, rc := pair(t, n)
	sizes := []int{0, 1, 8, DefaultChunk - 1, DefaultChunk + 1, 3*DefaultChunk + 17, 1 << 20}
	var sends, recvs []Request
	var want, got [][]byte
	for i, sz := range sizes {
		b := alloc(sz)
		for j := range b {
			b[j] = byte(i*31 + j*7)
		}
		want = append(want, b)
		got = append(got, alloc(sz+100))
		smh, err := sc.RegMr(b, PtrHost)
		require.NoError(t, err)
		rmh, err := rc.RegMr(got[i], PtrHost)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, sc.DeregMr(smh)); assert.NoError(t, rc.DeregMr(rmh)) })
		sends = append(sends, post(t, func() (Request, error) { return sc.Isend(b, i, smh) }))
		recvs = append(recvs, post(t, func() (Request, error) { return rc.Irecv(got[i], i, rmh) }))
	}
	for i := range sizes {
		m, err := wait(t, sends[i])
		require.NoError(t, err)
		assert.Equal(t, sizes[i], m)
		m, err = wait(t, recvs[i])
		require.NoError(t, err, "message %d", i)
		require.Equal(t, sizes[i], m)
		require.True(t, bytes.Equal(want[i], got[i][:m]), "message %d (%d bytes) differs", i, m)
		assert.True(t, bytes.Equal(make([]byte, 100), got[i][m:]), "bytes past the message were written")
		// A completed request keeps its answer.
		done, m2, err := recvs[i].Test()
		assert.True(t, done && m2 == m && err == nil)
	}
}

// waitWith polls r until it completes or fails, polling s as well: a
// plugin may move a message only when its request is tested.
func waitWith(t *testing.T, r, s Request) (int, error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		_, _, _ = s.Test()
		done, n, err := r.Test()
		if err != nil || done {
			return n, err
		}
		runtime.Gosched()
	}
	t.Fatal("request still pending after 10 s")
	return 0, nil
}

type refusal struct{ err error }

// testRefusals checks that a message longer than the posted receive and
// one whose tag differs are refused as the peer's errors naming it,
// without writing into the buffer.
func testRefusals(t *testing.T, n Net, mem func(*testing.T) func(int) []byte) refusal {
	alloc := mem(t)
	sc, rc := pair(t, n)
	s := post(t, func() (Request, error) { return sc.Isend(alloc(100), 7, nil) })
	buf := alloc(50)
	_, err := waitWith(t, post(t, func() (Request, error) { return rc.Irecv(buf, 7, nil) }), s)
	require.ErrorIs(t, err, ErrPeer)
	require.ErrorContains(t, err, "100 bytes for a posted receive of 50 bytes")
	require.ErrorContains(t, err, rc.Peer(), "the error names the peer")
	assert.Equal(t, make([]byte, 50), buf, "nothing written")
	first := err

	sc, rc = pair(t, n)
	s = post(t, func() (Request, error) { return sc.Isend(alloc(10), 1, nil) })
	_, err = waitWith(t, post(t, func() (Request, error) { return rc.Irecv(alloc(10), 2, nil) }), s)
	require.ErrorIs(t, err, ErrPeer)
	require.ErrorContains(t, err, "tag 1 where the posted receive has tag 2")
	return refusal{first}
}

// testVanishedSender checks that a receive pending when the sender closes
// fails as the peer's error.
func testVanishedSender(t *testing.T, n Net, mem func(*testing.T) func(int) []byte) {
	alloc := mem(t)
	sc, rc := pair(t, n)
	r := post(t, func() (Request, error) { return rc.Irecv(alloc(10), 0, nil) })
	require.NoError(t, sc.Close())
	_, err := wait(t, r)
	require.ErrorIs(t, err, ErrPeer)
	require.ErrorContains(t, err, rc.Peer())
	require.ErrorContains(t, err, "closed the connection")
	require.NoError(t, rc.Close())
	_, err = rc.Irecv(alloc(1), 0, nil)
	require.ErrorIs(t, err, ErrClosed)
}

// testVanishedReceiver checks that sends to a receiver that closed fail
// (the kernel may buffer the first few) as the peer's error naming it.
func testVanishedReceiver(t *testing.T, n Net, mem func(*testing.T) func(int) []byte) {
	buf := mem(t)(1 << 20)
	sc, rc := pair(t, n)
	require.NoError(t, rc.Close())
	deadline := time.Now().Add(10 * time.Second)
	var err error
	for err == nil || !errors.Is(err, ErrPeer) {
		require.True(t, time.Now().Before(deadline), "sends to a closed peer never failed")
		var r Request
		r, err = sc.Isend(buf, 0, nil)
		if r != nil {
			_, err = wait(t, r)
		}
	}
	require.ErrorContains(t, err, sc.Peer())
}
