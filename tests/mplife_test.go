package tests

// The lifetime of the multi-process tests' rank processes: they die with
// the test process that started them, and they time out before it does,
// so that a hang shows the children's own dump instead of a parent's
// -test.timeout panic that loses their output and leaves them running.
//
//	parent's -test.timeout ─────────────────────────────────────────┤
//	the parent's bound on the children (ctx)  ───────────────┤ reserve: SIGQUIT,
//	                                                           │ their dumps, the report
//	a child's -test.timeout ─────────────────────────┤ lead
//	a child's wait for one group ──────────┤ (never past its own deadline)

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mpEnvParent is the parent's pid in a child's environment: the child
// exits once its parent is another (mpWatchParent).
const mpEnvParent = "NCCLGO_MP_PARENT"

// mpTimes are the bounds of one multi-process test.
type mpTimes struct {
	// Kids is the parent's bound on the children: its context, at whose
	// end each child gets SIGQUIT (a goroutine dump), then SIGKILL after
	// Lead.
	Kids time.Duration
	// Child is each child's -test.timeout: Lead before Kids, so that a
	// child stuck past it panics with its own dump first.
	Child time.Duration
	// Lead is the gap between a child's timeout and the parent's kill.
	Lead time.Duration
}

// mpTimesFor derives the bounds from left, the time until the parent's
// own deadline (ok false: none), and long, the test's budget otherwise.
// The parent keeps a reserve of an eighth of left (2 s to 10 s) to
// collect and print the children's output.
func mpTimesFor(left time.Duration, ok bool, long time.Duration) mpTimes {
	kids := long
	if ok {
		reserve := min(max(left/8, 2*time.Second), 10*time.Second)
		kids = min(kids, left-reserve)
	}
	kids = max(kids, 2*time.Second)
	lead := min(max(kids/10, time.Second), 5*time.Second)
	return mpTimes{Kids: kids, Child: kids - lead, Lead: lead}
}

// mpContext is the context of a multi-process test whose budget is
// mpBudget(long), cut to what the parent's -test.timeout leaves.
func mpContext(t *testing.T, long time.Duration) (context.Context, context.CancelFunc) {
	dl, ok := t.Deadline()
	tm := mpTimesFor(time.Until(dl), ok, mpBudget(long))
	return context.WithTimeout(context.Background(), tm.Kids)
}

// mpChildTimes is the bounds of the children of a parent whose context is
// ctx (from mpContext).
func mpChildTimes(ctx context.Context) mpTimes {
	dl, ok := ctx.Deadline()
	if !ok {
		return mpTimesFor(0, false, 10*time.Minute)
	}
	left := time.Until(dl)
	lead := min(max(left/10, time.Second), 5*time.Second)
	return mpTimes{Kids: left, Child: max(left-lead, time.Second), Lead: lead}
}

// mpCommand is the command that runs this test binary with args as a
// rank process of a parent whose context is ctx: it dies with the parent
// (mpDieWithParent); at ctx's end it gets SIGQUIT, so that it prints its
// goroutines, and SIGKILL Lead later.
func mpCommand(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.SysProcAttr = mpDieWithParent()
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = mpChildTimes(ctx).Lead
	return cmd
}

// mpWatchParent ends this process, a rank process, once the parent named
// by mpEnvParent is gone (this process then has another parent): the
// parent-death signal is Linux's alone and is sent for a thread, and a
// parent may die before the signal is armed. It polls every 200 ms until
// the test ends.
func mpWatchParent(t *testing.T) {
	s := os.Getenv(mpEnvParent)
	if s == "" {
		return
	}
	want, err := strconv.Atoi(s)
	require.NoError(t, err, "%s=%q: want the parent's pid", mpEnvParent, s)
	check := func() {
		if got := os.Getppid(); got != want {
			fmt.Fprintf(os.Stderr, "MPORPHAN pid=%d: the parent %d is gone (parent now %d); exiting\n", os.Getpid(), want, got)
			os.Exit(3)
		}
	}
	check()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				check()
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// mpWaitBound is the bound of a child's wait for one group: testWait(),
// but ending lead before the child's own -test.timeout, so that a hang
// prints its dump (waitAll) before the test binary panics.
func mpWaitBound(t *testing.T, lead time.Duration) time.Duration {
	d := testWait()
	if dl, ok := t.Deadline(); ok {
		d = min(d, max(time.Until(dl)-lead, time.Second))
	}
	return d
}

func TestMultiProcessTimes(t *testing.T) {
	// The matrix's runs: -test.timeout=85s under a 90 s harness. The
	// children's panic comes before the parent's kill, which comes before
	// the parent's own panic with time to print.
	tm := mpTimesFor(85*time.Second, true, 2*time.Minute)
	assert.Equal(t, mpTimes{Kids: 75 * time.Second, Child: 70 * time.Second, Lead: 5 * time.Second}, tm)
	// No -test.timeout: the budget.
	assert.Equal(t, 8*time.Minute, mpTimesFor(0, false, 8*time.Minute).Kids)
	// A budget shorter than the deadline wins.
	assert.Equal(t, 2*time.Minute, mpTimesFor(10*time.Minute, true, 2*time.Minute).Kids)
	for _, left := range []time.Duration{3 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 10 * time.Minute} {
		tm := mpTimesFor(left, true, time.Hour)
		assert.Less(t, tm.Child, tm.Kids, "left %v", left)
		assert.Positive(t, tm.Child, "left %v", left)
		if left >= 10*time.Second {
			assert.LessOrEqual(t, tm.Kids, left-2*time.Second, "left %v: the parent keeps a reserve", left)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 75*time.Second)
	defer cancel()
	ct := mpChildTimes(ctx)
	assert.InDelta(t, float64(70*time.Second), float64(ct.Child), float64(time.Second))
	cmd := mpCommand(ctx, "-test.run=^$")
	assert.Equal(t, ct.Lead, cmd.WaitDelay)
	assert.NotNil(t, cmd.Cancel)
}

// The orphan test's roles (mpEnvOrphan): the parent starts a child with
// mode's protection, prints its pid and panics, as a -test.timeout does;
// the child waits to be ended.
const (
	mpEnvOrphan     = "NCCLGO_MP_ORPHAN"      // "parent" or "child"
	mpEnvOrphanMode = "NCCLGO_MP_ORPHAN_MODE" // "pdeathsig" or "watch"
)

var mpOrphanPID = regexp.MustCompile(`MPORPHANCHILD pid=(\d+)`)

// TestMultiProcessOrphans: a parent that dies (here it panics, as a
// -test.timeout does) takes its rank processes with it, through the
// parent-death signal alone (mpCommand, Linux) and through the child's
// watch alone (mpWatchParent).
func TestMultiProcessOrphans(t *testing.T) {
	if os.Getenv(mpEnvRole) != "" || os.Getenv(mpEnvOrphan) != "" {
		t.Skip("child process")
	}
	modes := []string{"watch"}
	if mpDieWithParent() != nil {
		modes = append(modes, "pdeathsig")
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestMultiProcessOrphanHelper$", "-test.count=1", "-test.v", "-test.timeout=1m")
			cmd.Env = append(os.Environ(), mpEnvOrphan+"=parent", mpEnvOrphanMode+"="+mode)
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "the parent must die:\n%s", out)
			m := mpOrphanPID.FindSubmatch(out)
			require.NotNil(t, m, "the parent printed no child pid:\n%s", out)
			pid, _ := strconv.Atoi(string(m[1]))
			start := time.Now()
			for procAlive(pid) {
				if time.Since(start) > 10*time.Second {
					syscall.Kill(pid, syscall.SIGKILL)
					t.Fatalf("%s: the child (pid %d) still runs 10 s after its parent died:\n%s", mode, pid, out)
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("%s: the child (pid %d) ended %v after its parent", mode, pid, time.Since(start).Round(time.Millisecond))
		})
	}
}

// procAlive reports whether process pid exists and is not a zombie (a
// reparented child that nobody reaps stays one).
func procAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil // no /proc: the signal probe
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestMultiProcessOrphanHelper is the parent and the child of
// TestMultiProcessOrphans; it skips unless started by it.
func TestMultiProcessOrphanHelper(t *testing.T) {
	switch os.Getenv(mpEnvOrphan) {
	case "parent":
		args := []string{"-test.run=^TestMultiProcessOrphanHelper$", "-test.count=1", "-test.v", "-test.timeout=2m"}
		env := append(os.Environ(), mpEnvOrphan+"=child")
		var cmd *exec.Cmd
		switch mode := os.Getenv(mpEnvOrphanMode); mode {
		case "pdeathsig":
			cmd = mpCommand(context.Background(), args...) // no mpEnvParent: no watch
		case "watch":
			cmd = exec.Command(os.Args[0], args...) // no parent-death signal
			env = append(env, mpEnvParent+"="+strconv.Itoa(os.Getpid()))
		default:
			t.Fatalf("%s=%q: want pdeathsig or watch", mpEnvOrphanMode, mode)
		}
		cmd.Env = env
		pr, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = cmd.Stdout
		require.NoError(t, cmd.Start())
		sc := bufio.NewScanner(pr)
		for sc.Scan() && !strings.Contains(sc.Text(), "MPORPHANREADY") {
		}
		fmt.Printf("MPORPHANCHILD pid=%d\n", cmd.Process.Pid)
		panic("the parent dies, as its -test.timeout makes it")
	case "child":
		mpWatchParent(t)
		fmt.Println("MPORPHANREADY")
		time.Sleep(time.Minute) // ended by then, or the test fails
		t.Fatal("the child outlived its parent by a minute")
	default:
		t.Skip("only runs as a process of TestMultiProcessOrphans")
	}
}
