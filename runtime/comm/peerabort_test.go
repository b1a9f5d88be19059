package comm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/leakcheck"
	"github.com/ncclgo/ncclgo/internal/testutil"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/transport"
	"github.com/ncclgo/ncclgo/runtime/transport/ipc"
)

// envPeerAbortChild selects the role of TestPeerAbortChild.
const envPeerAbortChild = "NCCLGO_COMM_PEERABORT_CHILD"

func TestPeerAbortFromEnv(t *testing.T) {
	for _, c := range []struct {
		v        string
		set, on  bool
		wantsErr bool
	}{{"", false, true, false}, {"", true, true, false}, {"1", true, true, false}, {"0", true, false, false}, {"off", true, false, true}} {
		on, err := peerAbortFromEnv(func(string) (string, bool) { return c.v, c.set })
		if c.wantsErr {
			assert.ErrorContains(t, err, `NCCLGO_PEER_ABORT="off"`)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, c.on, on, "%q set=%v", c.v, c.set)
	}
}

// peerChild is a process standing in for a rank of another process: it
// shares its flag page and a pidfd of itself, as sharePeerFlags does.
type peerChild struct {
	cmd   *exec.Cmd
	addr  string
	out   *bufio.Reader
	stdin io.WriteCloser
}

func startPeerChild(t *testing.T, mode string) *peerChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPeerAbortChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envPeerAbortChild+"="+mode)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &peerChild{cmd: cmd, out: bufio.NewReader(stdout), stdin: stdin}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := c.readLine(10 * time.Second)
	require.NoError(t, err)
	addr, ok := strings.CutPrefix(line, "ADDR ")
	require.True(t, ok, "child said %q", line)
	c.addr = addr
	return c
}

// readLine reads the child's next line of output, waiting at most d.
func (c *peerChild) readLine(d time.Duration) (string, error) {
	got := make(chan string, 1)
	fail := make(chan error, 1)
	go func() {
		l, err := c.out.ReadString('\n')
		if err != nil {
			fail <- err
			return
		}
		got <- strings.TrimSpace(l)
	}()
	select {
	case l := <-got:
		return l, nil
	case err := <-fail:
		return "", err
	case <-time.After(d):
		return "", fmt.Errorf("no line from the child within %v", d)
	}
}

// TestPeerAbortChild is the child of the tests below: it shares a flag
// page and its pidfd at an ipc server and prints the address. Mode
// "wait" then prints ABORTED once its abort flag is set (from another
// process) and waits to be killed; mode "destroy" waits for a line on
// stdin, marks its page freed, as Destroy does, and exits.
func TestPeerAbortChild(t *testing.T) {
	mode := os.Getenv(envPeerAbortChild)
	if mode == "" {
		t.Skip("only runs as a child of the peer-abort tests")
	}
	seg, err := ipc.CreateSegment("ncclgo-flags-child", flagPageBytes())
	require.NoError(t, err)
	srv, err := ipc.Listen(ipc.NewName("ncclgo-flags"))
	require.NoError(t, err)
	fd, err := seg.Dup()
	require.NoError(t, err)
	require.NoError(t, srv.Add(flagPageKey, fd))
	pfd, err := ipc.SelfPidfd()
	require.NoError(t, err)
	require.NoError(t, srv.Add(pidfdKey, pfd))
	fmt.Printf("ADDR %s\n", srv.Addr())
	flags := (*hostFlags)(seg.Ptr())
	switch mode {
	case "wait":
		for flags.abort.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		fmt.Println("ABORTED")
		time.Sleep(time.Minute)
	case "destroy":
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		flags.freed.Store(1)
		os.Exit(0)
	}
}

func newTestPages(buf *syncBuffer) *peerPages {
	return &peerPages{log: slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo}))}
}

func fdCount(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(es)
}

// TestPeerAbortSetsFlagInAnotherProcess: the flag page of a rank of
// another process, mapped here, is that process's memory: the store here
// reaches the child, which sees its abort flag set.
func TestPeerAbortSetsFlagInAnotherProcess(t *testing.T) {
	if os.Getenv(envPeerAbortChild) != "" {
		t.Skip("child process")
	}
	c := startPeerChild(t, "wait")
	var log syncBuffer
	pp := newTestPages(&log)
	require.NoError(t, pp.add(context.Background(), 1, transport.Peer{PID: c.cmd.Process.Pid, Host: "h"}, c.addr, true))
	pp.endRank(1)
	line, err := c.readLine(10 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "ABORTED", line)
	waitLogged(t, &log, "ended the kernels of rank(s) 1 (pid")
	pp.endRank(1)
	assert.Equal(t, 1, strings.Count(log.String(), "ended the kernels"), "logged once")
	require.NoError(t, pp.Close())
}

// TestPeerAbortEndsKilledProcess: when a peer process is killed (as
// TestMultiProcessKill does), the watch of its pidfd sets its ranks'
// abort flags at once, without any report from the liveness watcher or
// the proxy; Close then leaves no descriptor or goroutine behind.
func TestPeerAbortEndsKilledProcess(t *testing.T) {
	if os.Getenv(envPeerAbortChild) != "" {
		t.Skip("child process")
	}
	c := startPeerChild(t, "wait")
	fds, gs := fdCount(t), goruntime.NumGoroutine()
	var log syncBuffer
	pp := newTestPages(&log)
	require.NoError(t, pp.add(context.Background(), 3, transport.Peer{PID: c.cmd.Process.Pid, Host: "h"}, c.addr, true))
	page := (*hostFlags)(pp.procs[0].pages[0].Ptr())
	time.Sleep(50 * time.Millisecond)
	assert.Zero(t, page.abort.Load(), "a live peer's kernels are left alone")
	killed := time.Now()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
	for page.abort.Load() == 0 {
		require.Less(t, time.Since(killed), 5*time.Second, "the killed peer's abort flag was not set")
		time.Sleep(time.Millisecond)
	}
	t.Logf("abort flag set %v after the kill", time.Since(killed))
	// The flag is stored before the line is logged.
	waitLogged(t, &log, "ended the kernels of rank(s) 3")
	assert.Contains(t, log.String(), "its process ended without destroying the communicator")
	require.NoError(t, pp.Close())
	require.NoError(t, pp.Close(), "Close twice")
	assert.Equal(t, fds, fdCount(t), "descriptors left open")
	leakcheck.WaitGoroutines(t, gs)
}

// TestPeerAbortSkipsDestroyedPeer: a peer process that destroyed its
// communicator (its page says freed) and then exits has no kernels left:
// nothing is stored and nothing is logged.
func TestPeerAbortSkipsDestroyedPeer(t *testing.T) {
	if os.Getenv(envPeerAbortChild) != "" {
		t.Skip("child process")
	}
	c := startPeerChild(t, "destroy")
	var log syncBuffer
	pp := newTestPages(&log)
	require.NoError(t, pp.add(context.Background(), 1, transport.Peer{PID: c.cmd.Process.Pid, Host: "h"}, c.addr, true))
	proc := pp.procs[0]
	_, err := io.WriteString(c.stdin, "destroy\n")
	require.NoError(t, err)
	require.NoError(t, c.cmd.Wait())
	for deadline := time.Now().Add(5 * time.Second); !proc.ended.Load(); {
		require.True(t, time.Now().Before(deadline), "the peer's exit was not seen")
		time.Sleep(time.Millisecond)
	}
	assert.Zero(t, (*hostFlags)(proc.pages[0].Ptr()).abort.Load())
	assert.Empty(t, log.String())
	require.NoError(t, pp.Close())
}

// TestProxyFailedEndsExitedPeer: a NET connection lost without a goodbye
// ends the kernels of a peer process that has ended before this rank goes
// on (idle here); a goodbye (ErrPeerAborted: the peer ends its own
// kernels) or a peer still alive ends nothing.
func TestProxyFailedEndsExitedPeer(t *testing.T) {
	if os.Getenv(envPeerAbortChild) != "" {
		t.Skip("child process")
	}
	c := startPeerChild(t, "wait")
	var log syncBuffer
	e := logged(t, &log)
	pp := &peerPages{log: e.log}
	require.NoError(t, pp.add(context.Background(), 1, transport.Peer{PID: c.cmd.Process.Pid, Host: "h"}, c.addr, true))
	e.orphans.Store(pp)
	page := (*hostFlags)(pp.procs[0].pages[0].Ptr())
	vanished := errors.New("transport: rank 0 receiving from rank 1: net: peer 10.0.0.2:4242: the peer closed the connection: its process exited without destroying the communicator, or was killed: EOF")
	e.proxyFailed(vanished)
	assert.Zero(t, page.abort.Load(), "a live peer")
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
	_ = c.cmd.Wait()
	e.proxyFailed(peerAbortErr())
	e.proxyFailed(vanished)
	assert.EqualValues(t, 1, page.abort.Load(), "the dead peer's abort flag")
	// The watch of the peer's pidfd may have ended it first, and log now.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(log.String(), "ended the kernels of rank(s) 1"); {
		require.True(t, time.Now().Before(deadline), "not logged: %s", log.String())
		time.Sleep(time.Millisecond)
	}
	assert.False(t, e.Aborted(), "idle: no abort of this rank")
	require.NoError(t, e.Destroy())
	assert.Nil(t, e.orphans.Load(), "Destroy unmaps the peers' pages")
}

// peerAbortRanks runs sharePeerFlags on n host-only engines of an
// in-process bootstrap, each as a process of its own (pid 1000+r), on
// machine[r]; share[r] says whether rank r shares its page. It returns
// the engines (whose orphans are set) and their pages.
func peerAbortRanks(t *testing.T, machine []string, share []bool) ([]*Engine, []*ipc.Segment) {
	t.Helper()
	n := len(machine)
	nets, err := bootstrap.NewInProcessOptions(n, bootstrap.Options{Timeout: 20 * time.Second})
	require.NoError(t, err)
	peers := make([]transport.Peer, n)
	for r := range peers {
		peers[r] = transport.Peer{PID: 1000 + r, Host: fmt.Sprintf("fake%d", r)} // fake hosts: NCCL_HOSTID per process
	}
	es := make([]*Engine, n)
	segs := make([]*ipc.Segment, n)
	for r := range n {
		es[r] = fakeEngine(t, r, n)
		es[r].net = nets[r]
		if share[r] {
			segs[r], err = ipc.CreateSegment("ncclgo-flags-test", flagPageBytes())
			require.NoError(t, err)
			t.Cleanup(func() { segs[r].Close() })
		}
	}
	pps, errs := testutil.OnEveryRank(n, func(r int) (*peerPages, error) {
		return sharePeerFlags(context.Background(), nets[r], r, peers, machine[r], segs[r], ipc.SelfPidfd, es[r].log)
	})
	for r := range n {
		require.NoError(t, errs[r], "rank %d", r)
		es[r].orphans.Store(pps[r])
	}
	return es, segs
}

// TestPeerLostEndsPeerKernels: ranks of other processes of this machine
// (fake hosts included) map each other's flag pages, not those of another
// machine; a rank that learns from its liveness watcher that a peer died
// sets that peer's abort flag (seen through the peer's own mapping)
// before aborting itself. Destroy leaves no descriptor or goroutine.
func TestPeerLostEndsPeerKernels(t *testing.T) {
	fds, gs := fdCount(t), goruntime.NumGoroutine()
	es, segs := peerAbortRanks(t, []string{"boot:a", "boot:a", "boot:b"}, []bool{true, true, true})
	require.NotNil(t, es[0].orphans.Load())
	require.NotNil(t, es[1].orphans.Load())
	assert.Nil(t, es[2].orphans.Load(), "rank 2 is alone on its machine")
	assert.Equal(t, []int{1}, es[0].orphans.Load().procs[0].ranks)
	assert.Len(t, es[0].orphans.Load().procs, 1, "rank 2's page is not mapped by rank 0")
	es[0].Fault(0, &PeerLost{Rank: 1, PID: 1001, Host: "fake1"})
	assert.EqualValues(t, 1, (*hostFlags)(segs[1].Ptr()).abort.Load(), "rank 1's abort flag, seen in its own mapping")
	assert.True(t, es[0].Aborted())
	assert.Zero(t, (*hostFlags)(segs[2].Ptr()).abort.Load())
	assert.Zero(t, (*hostFlags)(segs[0].Ptr()).abort.Load())
	es[2].Fault(0, &PeerLost{Rank: 0, PID: 1000, Host: "fake0"})
	assert.Zero(t, (*hostFlags)(segs[0].Ptr()).abort.Load(), "rank 2 holds no page of another machine")
	for _, e := range es {
		_ = e.Destroy() // aborted ones say so
		assert.Nil(t, e.orphans.Load())
	}
	for _, s := range segs {
		require.NoError(t, s.Close())
	}
	assert.Equal(t, fds, fdCount(t), "descriptors left open")
	leakcheck.WaitGoroutines(t, gs)
}

// TestPeerAbortOff: a rank that shares no page (NCCLGO_PEER_ABORT=0) is
// mapped by no one and maps nothing; the others still map each other.
func TestPeerAbortOff(t *testing.T) {
	es, segs := peerAbortRanks(t, []string{"boot:a", "boot:a", "boot:a"}, []bool{true, false, true})
	assert.Nil(t, es[1].orphans.Load(), "rank 1 maps nothing")
	for _, r := range []int{0, 2} {
		pp := es[r].orphans.Load()
		require.NotNil(t, pp, "rank %d", r)
		require.Len(t, pp.procs, 1)
		assert.Equal(t, []int{2 - r}, pp.procs[0].ranks, "rank %d maps rank %d only", r, 2-r)
	}
	es[0].Fault(0, &PeerLost{Rank: 1})
	es[0].Fault(0, &PeerLost{Rank: 2}) // the first report aborts; every one ends its peer
	assert.EqualValues(t, 1, (*hostFlags)(segs[2].Ptr()).abort.Load())
	for _, e := range es {
		_ = e.Destroy()
	}
}

// waitLogged waits up to 5 s for log to hold s: the peer pages store the
// abort flag before they log that they did, and the test sees the flag
// (or the child's answer to it) first.
func waitLogged(t *testing.T, log *syncBuffer, s string) {
	t.Helper()
	assert.Eventually(t, func() bool { return strings.Contains(log.String(), s) }, 5*time.Second, time.Millisecond,
		"%q not logged; the log: %s", s, log.String())
}
