package bootstrap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTimeoutValidation: NCCL_BOOTSTRAP_TIMEOUT and Options.Timeout must
// be finite and within [MinTimeout, MaxTimeout]; NaN used to become a
// −2562047 h timeout and 1e-12 a zero one.
func TestTimeoutValidation(t *testing.T) {
	for _, v := range []string{"NaN", "nan", "-NaN", "Inf", "+Inf", "-Inf", "1e-12", "0.0000001", "0", "-1", "1e300", "604801", "2s", "soon"} {
		t.Setenv(envTimeout, v)
		d, err := Options{}.timeout()
		require.Error(t, err, "%s=%s gave %v", envTimeout, v, d)
		require.ErrorContains(t, err, fmt.Sprintf("%s=%q", envTimeout, v))
		require.ErrorContains(t, err, "want a number of seconds in 0.001..604800")
	}
	for v, want := range map[string]time.Duration{"0.001": time.Millisecond, "1.5": 1500 * time.Millisecond, " 7 ": 7 * time.Second, "604800": MaxTimeout} {
		t.Setenv(envTimeout, v)
		d, err := Options{}.timeout()
		require.NoError(t, err, v)
		assert.Equal(t, want, d, v)
	}
	for _, d := range []time.Duration{time.Nanosecond, 999 * time.Microsecond, -time.Second, MaxTimeout + 1, math.MaxInt64} {
		_, err := Options{Timeout: d}.timeout()
		require.ErrorContains(t, err, "Options.Timeout="+d.String(), d)
	}
}

// TestRanksBounded: 2^32+1 ranks used to wrap to a 1-rank communicator
// on the wire and 2^24+1 to fail with a bare EOF.
func TestRanksBounded(t *testing.T) {
	ctx := context.Background()
	root, id, err := NewRoot(ctx, loopbackOpts(2*time.Second))
	require.NoError(t, err)
	defer root.Close()
	for _, n := range []int{0, -1, MaxRanks + 1, 1<<24 + 1, 1<<32 + 1, math.MaxInt} {
		start := time.Now()
		_, err := Init(ctx, id, 0, n, loopbackOpts(2*time.Second))
		require.ErrorContains(t, err, fmt.Sprintf("nRanks=%d: want 1..%d", n, MaxRanks))
		require.Less(t, time.Since(start), time.Second, "rejected before any network traffic")
		_, err = NewInProcessOptions(n, Options{})
		require.ErrorContains(t, err, fmt.Sprintf("nRanks=%d: want 1..%d", n, MaxRanks))
	}
	// A hello on the wire cannot claim more either.
	h := hello{magic: 1, kind: helloPeer, rank: 0, nRanks: MaxRanks + 1}
	_, err = decodeHello(h.encode(), 1)
	require.ErrorIs(t, err, ErrBadMagic)
	require.Less(t, rootReplyLimit(MaxRanks), 1<<28, "the largest table stays a sane allocation")
}

// TestMaxMessageSize: the limit is configurable, bounded, and enforced on
// both ends.
func TestMaxMessageSize(t *testing.T) {
	_, err := Options{MaxMessageSize: -1}.maxMessage()
	require.ErrorContains(t, err, "Options.MaxMessageSize=-1")
	_, err = Options{MaxMessageSize: MaxMessageSize + 1}.maxMessage()
	require.ErrorContains(t, err, "Options.MaxMessageSize=1073741825")
	opts := loopbackOpts(5 * time.Second)
	opts.MaxMessageSize = 100
	nets := initTCP(t, 2, opts)
	err = nets[0].Send(context.Background(), 1, 0, make([]byte, 101))
	require.ErrorContains(t, err, "101-byte message exceeds the 100 byte limit")
	require.NoError(t, nets[0].Send(context.Background(), 1, 0, make([]byte, 100)))
	got, err := nets[1].Recv(context.Background(), 0, 0)
	require.NoError(t, err)
	require.Len(t, got, 100)
}

// forge dials addr and says hello as rank `as` of n with the magic of id.
func forge(t *testing.T, addr string, id UniqueID, as, n int, token uint64) net.Conn {
	t.Helper()
	return dialHello(t, addr, id, hello{kind: helloPeer, rank: as, nRanks: n, token: token})
}

// dialHello dials addr and sends h with the magic of id, by hand.
func dialHello(t *testing.T, addr string, id UniqueID, h hello) net.Conn {
	t.Helper()
	magic, _, err := id.decode()
	require.NoError(t, err)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	h.magic = magic
	require.NoError(t, writeFrame(c, h.encode()))
	return c
}

// waitClosed waits until the other side closes c and returns how long
// that took.
func waitClosed(t *testing.T, c net.Conn, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	require.NoError(t, c.SetReadDeadline(start.Add(limit)))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %v", limit)
	}
	return time.Since(start)
}

// TestForgedFrame: a connection with a valid hello (the forger knows the
// id) then a 1 GiB length used to pin 1 GiB indefinitely and lock the real
// rank out. Now the frame is refused at once, the log names the peer and
// the length, and the real rank still gets through.
func TestForgedFrame(t *testing.T) {
	logs := &lockedBuffer{}
	opts := loopbackOpts(5 * time.Second)
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	id, conns := tcpConns(t, 2, opts)
	ctx := context.Background()

	c := forge(t, conns[0].PeerAddr(0), id, 1, 2, conns[0].tokens[1])
	defer c.Close()
	_, err := c.Write(binary.BigEndian.AppendUint32(nil, 1<<30))
	require.NoError(t, err)
	took := waitClosed(t, c, 2*time.Second)
	t.Logf("oversize frame: connection closed after %v", took)
	assert.Contains(t, logs.String(), "frame too long: 1073741824 bytes, limit 67108873")
	assert.Contains(t, logs.String(), "peer=1")

	// A length within the limit whose body never comes: dropped after the
	// timeout, not held forever.
	opts2 := loopbackOpts(300 * time.Millisecond)
	opts2.Logger = quietLogger
	id2, conns2 := tcpConns(t, 2, opts2)
	c2 := forge(t, conns2[0].PeerAddr(0), id2, 1, 2, conns2[0].tokens[1])
	defer c2.Close()
	_, err = c2.Write(binary.BigEndian.AppendUint32(nil, 1000))
	require.NoError(t, err)
	took = waitClosed(t, c2, 3*time.Second)
	t.Logf("stalled body: connection closed after %v", took)

	// The real rank 1 is not locked out by the forger.
	for _, cs := range [][]*Conn{conns, conns2} {
		require.NoError(t, cs[1].Send(ctx, 0, 5, []byte("real")))
		got, err := cs[0].Recv(ctx, 1, 5)
		require.NoError(t, err)
		require.Equal(t, "real", string(got))
	}
}

// tcpConns is initTCP returning the id and the *Conns.
func tcpConns(t *testing.T, n int, opts Options) (UniqueID, []*Conn) {
	t.Helper()
	ctx := context.Background()
	root, id, err := NewRoot(ctx, opts)
	require.NoError(t, err)
	defer root.Close()
	conns, errs := startRanks(ctx, id, seq(n), n, opts)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	return id, conns
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// TestSilentStrangersClosed: connections that never say hello are closed
// after min(5 s, timeout) (here lowered), not held until the root's
// deadline.
func TestSilentStrangersClosed(t *testing.T) {
	old := maxHelloWait
	maxHelloWait = 200 * time.Millisecond
	defer func() { maxHelloWait = old }()
	ctx := context.Background()
	root, id, err := NewRoot(ctx, loopbackOpts(30*time.Second))
	require.NoError(t, err)
	defer root.Close()
	const k = 20
	var wg sync.WaitGroup
	tooks := make([]time.Duration, k)
	for i := range k {
		c, err := net.Dial("tcp", id.Addr())
		require.NoError(t, err)
		defer c.Close()
		wg.Go(func() { tooks[i] = waitClosed(t, c, 5*time.Second) })
	}
	wg.Wait()
	t.Logf("silent strangers closed after %v..%v", tooks[0], tooks[k-1])
	// The root still serves the ranks.
	conns, errs := startRanks(ctx, id, seq(2), 2, loopbackOpts(30*time.Second))
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		defer conns[r].Close()
	}
}

// flakyListener fails Accept with the errors in errs, then behaves.
type flakyListener struct {
	net.Listener
	mu   sync.Mutex
	errs []error
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		l.mu.Unlock()
		return nil, err
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// TestAcceptLoopSurvivesErrors: a failed Accept (EMFILE, ENFILE,
// ECONNABORTED, anything but a closed listener) used to end the accept
// loop for good.
func TestAcceptLoopSurvivesErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	opErr := func(e syscall.Errno) error {
		return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", e)}
	}
	fl := &flakyListener{Listener: ln, errs: []error{opErr(syscall.EMFILE), opErr(syscall.EMFILE), opErr(syscall.ENFILE), opErr(syscall.ECONNABORTED), errors.New("odd")}}
	quit := make(chan struct{})
	got := make(chan net.Conn, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		acceptLoop(fl, quit, quietLogger, func(c net.Conn) bool { got <- c; return true })
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	select {
	case sc := <-got:
		sc.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the accept loop gave up after the errors")
	}
	ln.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the accept loop did not stop when its listener closed")
	}
}

// envFDChild marks the child role of TestFDPressure.
const envFDChild = "NCCLGO_BOOTSTRAP_TEST_FDCHILD"

// TestFDPressure runs, in a child process with RLIMIT_NOFILE lowered to
// 64, a root flooded by silent strangers until its Accept fails with
// EMFILE; the strangers are closed after the hello wait, and two real
// ranks then check in. Before, the first EMFILE ended the accept loop and
// no rank could ever check in.
func TestFDPressure(t *testing.T) {
	if os.Getenv(envFDChild) != "" {
		fdPressureChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFDPressure$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envFDChild+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	require.NoError(t, err)
}

func fdPressureChild(t *testing.T) {
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 64, Max: 64}))
	old := maxHelloWait
	maxHelloWait = 300 * time.Millisecond
	defer func() { maxHelloWait = old }()
	ctx := context.Background()
	logs := &lockedBuffer{}
	opts := loopbackOpts(20 * time.Second)
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	root, id, err := NewRoot(ctx, opts)
	require.NoError(t, err)
	defer root.Close()
	// Dial until the process runs out of descriptors: each stranger costs
	// one here and one in the root, so the root's Accept hits EMFILE.
	var strangers []net.Conn
	for range 200 {
		c, err := net.Dial("tcp", id.Addr())
		if err != nil {
			break
		}
		strangers = append(strangers, c)
	}
	t.Logf("%d strangers connected", len(strangers))
	// The root may have accepted every stranger before the last dial ran
	// out of descriptors. Take every descriptor left, then free one for one
	// more stranger: its connection waits in the backlog while the root's
	// Accept has no descriptor to give it.
	var spare []*os.File
	for range 200 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		spare = append(spare, f)
	}
	if len(spare) > 0 {
		spare[len(spare)-1].Close()
		spare = spare[:len(spare)-1]
		if c, err := net.Dial("tcp", id.Addr()); err == nil {
			strangers = append(strangers, c)
		}
	}
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "too many open files") }, 5*time.Second, 10*time.Millisecond,
		"the root's Accept should have failed with EMFILE")
	for _, f := range spare {
		f.Close()
	}
	// Strangers hang up once the root closes their connection.
	var wg sync.WaitGroup
	for _, c := range strangers {
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		})
	}
	wg.Wait()
	start := time.Now()
	conns, errs := startRanks(ctx, id, seq(2), 2, opts)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		defer conns[r].Close()
	}
	require.NoError(t, root.Wait(ctx))
	t.Logf("ranks checked in %v after the fd pressure ended", time.Since(start))
}

// TestCancelledCollectiveOneRank: an AllGather cancelled on rank 0 only
// used to leave its block queued at rank 1, whose next AllGather returned
// it as a success (stale data). Now every later collective fails with
// ErrCollectiveBroken on both ranks; Send and Recv still work.
func TestCancelledCollectiveOneRank(t *testing.T) {
	for _, kind := range []string{"tcp", "inprocess"} {
		for _, n := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/%d", kind, n), func(t *testing.T) {
				var nets []Network
				if kind == "tcp" {
					nets = initTCP(t, n, loopbackOpts(10*time.Second))
				} else {
					var err error
					nets, err = NewInProcessOptions(n, Options{Timeout: 10 * time.Second})
					require.NoError(t, err)
				}
				testCancelledCollective(t, nets)
			})
		}
	}
}

func collOf(nw Network) *collState {
	switch v := nw.(type) {
	case *Conn:
		return v.coll()
	case *inProcRank:
		return v.coll()
	}
	panic("unknown network")
}

func testCancelledCollective(t *testing.T, nets []Network) {
	ctx := context.Background()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := nets[0].AllGather(short, []byte("stale"))
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrCollectiveBroken, "the failing call reports its own cause")
	// The notice reaches every peer (asynchronously over TCP).
	for i, nw := range nets {
		require.Eventually(t, func() bool { return collOf(nw).brokenAtSeq() == 1 }, 5*time.Second, time.Millisecond, "rank %d never heard", i)
	}
	errs := make([]error, len(nets))
	outs := make([][][]byte, len(nets))
	var wg sync.WaitGroup
	for i, nw := range nets {
		wg.Go(func() { outs[i], errs[i] = nw.AllGather(ctx, fmt.Appendf(nil, "fresh %d", i)) })
	}
	wg.Wait()
	for i := range nets {
		require.ErrorIs(t, errs[i], ErrCollectiveBroken, "rank %d returned %q", i, outs[i])
		require.Nil(t, outs[i])
	}
	require.ErrorContains(t, errs[1], "collective #1")
	require.ErrorIs(t, nets[1].Barrier(ctx), ErrCollectiveBroken)
	t.Logf("clear error on every rank %v after the cancelled call began", time.Since(start))
	// Point-to-point is unaffected.
	require.NoError(t, nets[0].Send(ctx, 1, 3, []byte("p2p")))
	got, err := nets[1].Recv(ctx, 0, 3)
	require.NoError(t, err)
	require.Equal(t, "p2p", string(got))
}

// TestCancelledCollectiveWakesPeer: a peer already blocked in the same
// collective is woken by the notice instead of waiting out its timeout.
func TestCancelledCollectiveWakesPeer(t *testing.T) {
	nets := initTCP(t, 3, loopbackOpts(30*time.Second))
	ctx := context.Background()
	var wg sync.WaitGroup
	var err1 error
	var took time.Duration
	wg.Go(func() {
		start := time.Now()
		_, err1 = nets[1].AllGather(ctx, []byte("b"))
		took = time.Since(start)
	})
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err0 := nets[0].AllGather(short, []byte("a"))
	wg.Wait()
	require.Error(t, err0)
	require.ErrorIs(t, err1, ErrCollectiveBroken)
	require.Less(t, took, 5*time.Second)
	t.Logf("peer woken after %v", took)
}

// envKillChild marks the child role of TestPeerProcessKilled.
const envKillChild = "NCCLGO_BOOTSTRAP_TEST_KILLCHILD"

// TestPeerProcessKilled: rank 1 is another process that checks in, says
// hello to rank 0, then is killed (SIGKILL) while rank 0 waits in Recv and
// in an AllGather. Both fail with ErrPeerClosed long before the timeout.
func TestPeerProcessKilled(t *testing.T) {
	if os.Getenv(envKillChild) != "" {
		killChild(t)
		return
	}
	ctx := context.Background()
	opts := loopbackOpts(30 * time.Second)
	root, id, err := NewRoot(ctx, opts)
	require.NoError(t, err)
	defer root.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPeerProcessKilled$", "-test.count=1")
	cmd.Env = append(os.Environ(), envKillChild+"=1", envID+"="+id.String())
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	c, err := Init(ctx, id, 0, 2, opts)
	require.NoError(t, err)
	defer c.Close()
	got, err := c.Recv(ctx, 1, 1)
	require.NoError(t, err)
	require.Equal(t, "hello", string(got))
	errs := make(chan error, 2)
	go func() { _, err := c.Recv(ctx, 1, 2); errs <- err }()
	go func() { _, err := c.AllGather(ctx, []byte("x")); errs <- err }()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	require.NoError(t, cmd.Process.Kill())
	for range 2 {
		select {
		case err := <-errs:
			require.ErrorIs(t, err, ErrPeerClosed)
			require.ErrorContains(t, err, "rank 1")
		case <-time.After(10 * time.Second):
			t.Fatal("a killed peer was not noticed")
		}
	}
	t.Logf("killed peer noticed after %v: Recv and AllGather fail with ErrPeerClosed", time.Since(start))
	_ = cmd.Wait()
}

func killChild(t *testing.T) {
	id, err := ParseUniqueID(os.Getenv(envID))
	require.NoError(t, err)
	ctx := context.Background()
	c, err := Init(ctx, id, 1, 2, loopbackOpts(30*time.Second))
	require.NoError(t, err)
	require.NoError(t, c.Send(ctx, 0, 1, []byte("hello")))
	time.Sleep(time.Minute) // until killed
}

// TestCollectiveWithEndedContext: a collective called with a context that
// has already ended fails, whatever the timing (the peer's block may be
// queued already, and a send may still win against the ended context),
// and breaks the collective on every rank, which a peer waiting in the
// same collective hears. Many rounds, since the races are chance.
func TestCollectiveWithEndedContext(t *testing.T) {
	for _, kind := range []string{"tcp", "inprocess"} {
		t.Run(kind, func(t *testing.T) {
			for round := range 40 {
				var nets []Network
				if kind == "tcp" {
					nets = initTCP(t, 2, loopbackOpts(10*time.Second))
				} else {
					var err error
					nets, err = NewInProcessOptions(2, Options{Timeout: 10 * time.Second})
					require.NoError(t, err)
				}
				peer := make(chan error, 1)
				go func() {
					_, err := nets[1].AllGather(context.Background(), []byte("peer"))
					peer <- err
				}()
				time.Sleep(time.Duration(round%4) * time.Millisecond) // before and after rank 1's block arrives
				ended, cancel := context.WithCancelCause(context.Background())
				cause := errors.New("ended before the call")
				cancel(cause)
				_, err := nets[0].AllGather(ended, []byte("mine"))
				require.ErrorIs(t, err, cause, "round %d", round)
				select {
				case err := <-peer:
					require.ErrorIs(t, err, ErrCollectiveBroken, "round %d", round)
				case <-time.After(5 * time.Second):
					t.Fatalf("round %d: the peer waiting in the collective was not told", round)
				}
				for _, nw := range nets {
					_ = nw.Close()
				}
			}
		})
	}
}
