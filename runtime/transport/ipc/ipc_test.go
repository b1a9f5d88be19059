package ipc

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	envChild = "NCCLGO_IPC_TEST_CHILD" // the server's socket name
	envKey   = "NCCLGO_IPC_TEST_KEY"
	envSize  = "NCCLGO_IPC_TEST_SIZE"
)

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	return b
}

// TestCrossProcess passes a shared memory segment's descriptor to another
// process (this test binary, re-executed), which maps it, checks what this
// process wrote and writes an answer that this process then reads.
func TestCrossProcess(t *testing.T) {
	if os.Getenv(envChild) != "" {
		t.Skip("child process")
	}
	const size = 1 << 16
	seg, err := CreateSegment("ncclgo-test", size)
	require.NoError(t, err)
	defer seg.Close()
	copy(seg.Bytes(), pattern(size/2))

	srv, err := Listen(NewName("ncclgo-test"))
	require.NoError(t, err)
	defer srv.Close()
	fd, err := seg.Dup()
	require.NoError(t, err)
	require.NoError(t, srv.Add(42, fd))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrossProcessChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envChild+"="+srv.Addr(), envKey+"=42", envSize+"="+strconv.Itoa(size))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child:\n%s", out)
	require.Contains(t, string(out), "CHILD OK", "child:\n%s", out)
	// The child wrote the pattern, inverted, into the second half.
	want := pattern(size / 2)
	for i := range want {
		want[i] = ^want[i]
	}
	assert.True(t, bytes.Equal(want, seg.Bytes()[size/2:]), "the child's writes are not visible here")
	require.NoError(t, srv.Close())
	require.Error(t, syscall.Close(fd), "Close must close the registered descriptors")
}

// TestCrossProcessChild is the child role of TestCrossProcess.
func TestCrossProcessChild(t *testing.T) {
	name := os.Getenv(envChild)
	if name == "" {
		t.Skip("only runs as a child of TestCrossProcess")
	}
	key, err := strconv.ParseUint(os.Getenv(envKey), 10, 64)
	require.NoError(t, err)
	size, err := strconv.Atoi(os.Getenv(envSize))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fds, err := Fetch(ctx, name, key)
	require.NoError(t, err)
	require.Len(t, fds, 1)
	seg, err := MapSegment(fds[0], size)
	require.NoError(t, err)
	defer seg.Close()
	got := seg.Bytes()
	require.True(t, bytes.Equal(pattern(size/2), got[:size/2]), "the parent's pattern is not visible here")
	for i := range size / 2 {
		got[size/2+i] = ^got[i]
	}
	_, err = Fetch(ctx, name, key+1)
	require.ErrorIs(t, err, ErrUnknownKey)
	t.Log("CHILD OK")
}

func TestFetchSeveral(t *testing.T) {
	srv, err := Listen(NewName("ncclgo-test"))
	require.NoError(t, err)
	defer srv.Close()
	var segs []*Segment
	for k := range 3 {
		s, err := CreateSegment("ncclgo-test", 4096)
		require.NoError(t, err)
		defer s.Close()
		s.Bytes()[0] = byte(10 + k)
		fd, err := s.Dup()
		require.NoError(t, err)
		require.NoError(t, srv.Add(uint64(k), fd))
		segs = append(segs, s)
	}
	fd, err := segs[0].Dup()
	require.NoError(t, err)
	require.Error(t, srv.Add(1, fd), "a key registered twice")
	syscall.Close(fd)

	ctx := context.Background()
	fds, err := Fetch(ctx, srv.Addr(), 2, 0, 1)
	require.NoError(t, err)
	for i, k := range []int{2, 0, 1} {
		m, err := MapSegment(fds[i], 4096)
		require.NoError(t, err)
		assert.Equal(t, byte(10+k), m.Bytes()[0], "descriptor %d", i)
		require.NoError(t, m.Close())
	}
	// A failing request returns nothing and leaks nothing.
	fds, err = Fetch(ctx, srv.Addr(), 0, 99)
	require.ErrorIs(t, err, ErrUnknownKey)
	assert.Empty(t, fds)

	require.NoError(t, srv.Close())
	require.NoError(t, srv.Close(), "Close twice")
	_, err = Fetch(ctx, srv.Addr(), 0)
	require.Error(t, err, "a closed server must refuse")
}

func TestFetchHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Fetch(ctx, formatAddr(NewName("ncclgo-none"), newSecret()), 1)
	require.ErrorIs(t, err, context.Canceled)
}

func TestSegmentArguments(t *testing.T) {
	_, err := CreateSegment("x", 0)
	require.Error(t, err)
	_, err = MapSegment(-1, 10)
	require.Error(t, err)
	s, err := CreateSegment("x", 4096)
	require.NoError(t, err)
	fd, err := s.Dup()
	require.NoError(t, err)
	_, err = MapSegment(fd, 8192)
	require.ErrorContains(t, err, "fewer than")
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
}
