package net

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func spliceSocket(t *testing.T, threads, socks int, mode string) *Socket {
	t.Helper()
	s, err := NewSocket(SocketOptions{Interface: "lo", Family: "AF_INET", NThreads: threads, NSocksPerThread: socks, HandshakeTimeout: 5 * time.Second, Splice: mode})
	require.NoError(t, err)
	return s
}

// spliceMessages sends messages of many sizes from many offsets of an
// mmap'd area (unaligned ones too), registered unless plain, and checks
// every byte received and the bytes that were spliced.
func spliceMessages(t *testing.T, sc SendComm, rc RecvComm, plain bool) (chunked uint64) {
	t.Helper()
	sizes := []int{DefaultInline + 1, DefaultChunk - 1, DefaultChunk, DefaultChunk + 1, 3*DefaultChunk + 17, 1<<20 + 4095, 5<<20 + 3}
	offs := []int{0, 1, 7, 4095, 4096 + 13}
	area := mmapArea(t, 16<<20)
	for i := range area {
		area[i] = byte(i*13 + i>>12)
	}
	smh, err := sc.RegMr(area, PtrHost)
	require.NoError(t, err)
	if plain {
		smh = nil
	}
	got := make([]byte, 6<<20)
	tag := 0
	for _, sz := range sizes {
		for _, off := range offs {
			tag++
			msg := area[off : off+sz]
			clear(got)
			s := post(t, func() (Request, error) { return sc.Isend(msg, tag, smh) })
			r := post(t, func() (Request, error) { return rc.Irecv(got, tag, nil) })
			n, err := waitWith(t, r, s)
			require.NoError(t, err, "%d bytes at offset %d", sz, off)
			require.Equal(t, sz, n)
			_, err = waitWith(t, s, r)
			require.NoError(t, err)
			require.True(t, bytes.Equal(msg, got[:n]), "%d bytes at offset %d differ", sz, off)
			require.True(t, bytes.Equal(make([]byte, 64), got[n:n+64]), "bytes past the message were written")
			if sz > DefaultInline { // shorter ones ride on the control socket
				chunked += uint64(sz)
			}
		}
	}
	return chunked
}

func sockStats(c any) SocketStats { return c.(interface{ Stats() SocketStats }).Stats() }

func spliceErr(c any) error { return c.(interface{ SpliceError() error }).SpliceError() }

func TestSocketSpliceMovesEveryByte(t *testing.T) {
	for _, ts := range [][2]int{{1, 1}, {2, 2}, {4, 1}} {
		t.Run(fmt.Sprintf("%dx%d", ts[0], ts[1]), func(t *testing.T) {
			sc, rc := pair(t, spliceSocket(t, ts[0], ts[1], SpliceOn))
			chunked := spliceMessages(t, sc, rc, false)
			require.NoError(t, spliceErr(sc))
			assert.Equal(t, chunked, sockStats(sc).SplicedBytes, "every chunk spliced")
			// A buffer not registered is written, not spliced.
			spliceMessages(t, sc, rc, true)
			assert.Equal(t, chunked, sockStats(sc).SplicedBytes, "unregistered buffers written")
		})
	}
}

func TestSocketSpliceOff(t *testing.T) {
	sc, rc := pair(t, spliceSocket(t, 2, 1, SpliceOff))
	spliceMessages(t, sc, rc, false)
	assert.Zero(t, sockStats(sc).SplicedBytes)
	assert.Nil(t, sc.(*sendComm).pipes, "no pipes when splicing is off")
}

// failAfter makes *fn fail with e after n successful calls, until the
// test ends (after its comms are closed: register before pair).
func failAfter[F any](t *testing.T, fn *F, wrap func(F, func() bool) F, n int32) {
	orig := *fn
	var calls atomic.Int32
	*fn = wrap(orig, func() bool { return calls.Add(1) > n })
	t.Cleanup(func() { *fn = orig })
}

func TestSocketSpliceFallsBackToWritev(t *testing.T) {
	for _, tc := range []struct {
		name   string
		vm     bool // vmsplice fails (else splice into the socket)
		after  int32
		errno  syscall.Errno
		anyRun bool // some bytes spliced before the failure
	}{
		{"vmsplice ENOSYS at once", true, 0, syscall.ENOSYS, false},
		{"vmsplice EFAULT later", true, 40, syscall.EFAULT, true},
		{"splice EINVAL at once", false, 0, syscall.EINVAL, false},
		{"splice EINVAL later", false, 40, syscall.EINVAL, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.vm {
				failAfter(t, &vmspliceFn, func(f func(int, []byte) (int, error), fail func() bool) func(int, []byte) (int, error) {
					return func(w int, b []byte) (int, error) {
						if fail() {
							return 0, tc.errno
						}
						return f(w, b)
					}
				}, tc.after)
			} else {
				failAfter(t, &spliceFn, func(f func(int, int, int, bool) (int, error), fail func() bool) func(int, int, int, bool) (int, error) {
					return func(r, fd, n int, more bool) (int, error) {
						if fail() {
							return 0, tc.errno
						}
						return f(r, fd, n, more)
					}
				}, tc.after)
			}
			sc, rc := pair(t, spliceSocket(t, 2, 1, SpliceOn))
			chunked := spliceMessages(t, sc, rc, false)
			require.ErrorIs(t, spliceErr(sc), tc.errno)
			sp := sockStats(sc).SplicedBytes
			if tc.anyRun {
				assert.True(t, sp > 0 && sp < chunked, "spliced %d of %d bytes", sp, chunked)
			} else {
				assert.Zero(t, sp)
			}
		})
	}
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

// Close while the kernel holds spliced pages (in the pipes, in the
// socket buffers), then the memory unmapped: nothing faults, nothing is
// left behind.
func TestSocketCloseWhileSpliced(t *testing.T) {
	before, fds := runtime.NumGoroutine(), openFDs(t)
	func() {
		n := spliceSocket(t, 4, 1, SpliceOn)
		h, l, err := n.Listen(0)
		require.NoError(t, err)
		defer l.Close()
		sc, err := n.Connect(0, h)
		require.NoError(t, err)
		rc := accept(t, n, l)
		m, err := syscall.Mmap(-1, 0, 64<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_SHARED)
		require.NoError(t, err)
		mh, err := sc.RegMr(m, PtrHost)
		require.NoError(t, err)
		// No receive is posted: the chunks stop when the sockets fill.
		s := post(t, func() (Request, error) { return sc.Isend(m, 1, mh) })
		for deadline := time.Now().Add(5 * time.Second); sockStats(sc).SplicedBytes == 0; time.Sleep(time.Millisecond) {
			require.True(t, time.Now().Before(deadline), "nothing spliced in 5 s")
		}
		done, _, _ := s.Test()
		require.False(t, done, "64 MiB cannot fit in the sockets")
		require.NoError(t, sc.Close())
		require.NoError(t, syscall.Munmap(m))
		require.NoError(t, rc.Close())
	}()
	if !settles(before) {
		t.Fatalf("goroutines: %d before, %d after", before, runtime.NumGoroutine())
	}
	assert.Equal(t, fds, openFDs(t), "descriptors left open")
}

// A send that completed, its comm closed and its memory unmapped before
// the receiver read: the receiver still gets the bytes as they were (the
// kernel's page references keep them).
func TestSocketSplicedBytesOutliveTheMapping(t *testing.T) {
	n := spliceSocket(t, 1, 1, SpliceOn)
	h, l, err := n.Listen(0)
	require.NoError(t, err)
	defer l.Close()
	sc, err := n.Connect(0, h)
	require.NoError(t, err)
	rc := accept(t, n, l)
	defer rc.Close()
	const size = 512 << 10
	m, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_SHARED)
	require.NoError(t, err)
	for i := range m {
		m[i] = byte(i * 5)
	}
	want := bytes.Clone(m)
	mh, err := sc.RegMr(m, PtrHost)
	require.NoError(t, err)
	s := post(t, func() (Request, error) { return sc.Isend(m, 1, mh) })
	_, err = wait(t, s)
	require.NoError(t, err)
	require.Equal(t, uint64(size), sockStats(sc).SplicedBytes)
	require.NoError(t, sc.Close())
	require.NoError(t, syscall.Munmap(m))
	got := make([]byte, size)
	r := post(t, func() (Request, error) { return rc.Irecv(got, 1, nil) })
	k, err := wait(t, r)
	require.NoError(t, err)
	require.Equal(t, size, k)
	require.True(t, bytes.Equal(want, got), "the received bytes differ from what was sent")
}

func TestSocketSpliceOption(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "NCCLGO_SOCKET_SPLICE" {
				return v
			}
			return ""
		}
	}
	for v, want := range map[string]string{"": SpliceAuto, "1": SpliceOn, "on": SpliceOn, "0": SpliceOff, "OFF": SpliceOff} {
		o, err := SocketOptionsFromEnv(env(v))
		require.NoError(t, err)
		assert.Equal(t, want, o.Splice, "%q", v)
	}
	_, err := SocketOptionsFromEnv(env("maybe"))
	require.ErrorContains(t, err, `NCCLGO_SOCKET_SPLICE="maybe": want 1`)
	_, err = NewSocket(SocketOptions{Interface: "lo", Splice: "2"})
	require.ErrorContains(t, err, `Splice="2"`)
	assert.True(t, spliceEnabled(SpliceOn))
	assert.False(t, spliceEnabled(SpliceOff))
	assert.Equal(t, spliceDefault, spliceEnabled(SpliceAuto))
}
