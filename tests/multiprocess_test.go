package tests

// Ranks as processes. The test binary re-executes itself as the rank
// processes (the child role: TestMultiProcessChild), passing the unique id
// and the placement through the environment; the parent holds the
// bootstrap root and checks what the children print.
//
//	NCCLGO_MP_NPROCS          processes (default 2)
//	NCCLGO_MP_RANKS_PER_PROC  ranks in each process (default 1), or a list
//	                          of them, one per process ("2,1": process 0 has
//	                          ranks 0 and 1, process 1 rank 2; then
//	                          NCCLGO_MP_NPROCS, when set, must agree)
//	NCCLGO_TEST_DEVICES       device ordinals; process p and all its ranks
//	                          run on the (p mod len)-th (default "0": then
//	                          the processes share GPU 0, which needs MPS)
//	NCCLGO_MP_KILL_BYTES      bytes of the kill test's AllReduce (default 1 GiB;
//	                          64 MiB with -test.short)
//	NCCLGO_MP_HOSTS           fake hosts (default 0: the processes keep the
//	                          environment's host): the processes split in that
//	                          many blocks of consecutive processes, each block
//	                          its own NCCL_HOSTID, so that NET joins the blocks
//	                          and P2P or SHM the processes of one block
//	NCCLGO_MP_CASES           a regular expression: the suite runs only the
//	                          cases whose "name type count=N" it matches
//	                          ("AllReduce Sum Float32 count=1001")
//	NCCLGO_MP_WINDOWS         "1": every rank registers its send and receive
//	                          buffers as windows (Comm.RegisterWindow), so
//	                          that DIRECT runs across processes (with
//	                          NCCL_ALGO=direct the suite runs only it: the
//	                          collectives without DIRECT are skipped);
//	                          "vmm": the same on buffers allocated as
//	                          ncclMemAlloc allocates (cuMemCreate, POSIX fd
//	                          handles; send and receive two mappings side by
//	                          side in one reservation, as PyTorch's expandable
//	                          segments lay them out), and on one host every
//	                          window must get DIRECT (MPWIN direct=true): run
//	                          it where DIRECT runs across processes (MPS, P2P)
//
// -test.short drops the 4 Mi-element cases and keeps 4 of the 12 types.
// NCCL_P2P_DISABLE=1 (SHM) and the other NCCL_* variables reach the
// children unchanged (NCCL_HOSTID too, unless NCCLGO_MP_HOSTS replaces it).
//
// With fake hosts each child also prints, per connection it sends on, the
// transport (MPVIA lines, from the communicator's log), and TestMultiProcess
// checks that ranks of different hosts used NET and ranks of one host did
// not; that NCCL_PROTO=LL128 alone leaves the collectives nothing to run
// (LL128 is off when a connection crosses NET: each is refused with
// tune.ErrNoChoice, and Send/Recv, which NCCL_PROTO does not steer, runs);
// and that something ran otherwise. NCCL_ALGO=PAT skips the test where the
// build has no PAT (kspace.Implemented).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/internal/numfmt"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/kernels"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// The child's environment.
const (
	mpEnvRole    = "NCCLGO_MP_ROLE" // "suite" or "kill"
	mpEnvID      = "NCCLGO_MP_ID"   // UniqueID in text form
	mpEnvRank    = "NCCLGO_MP_RANK" // first rank of the process
	mpEnvNRanks  = "NCCLGO_MP_NRANKS"
	mpEnvLocal   = "NCCLGO_MP_LOCAL"    // ranks in the process
	mpEnvDevice  = "NCCLGO_MP_DEVICE"   // the process's device
	mpEnvDir     = "NCCLGO_MP_DIR"      // scratch directory shared by the processes
	mpEnvVictim  = "NCCLGO_MP_VICTIM"   // the rank the kill test kills
	mpEnvShort   = "NCCLGO_MP_SHORT"    // "true": the parent ran with -test.short
	mpEnvHostsOn = "NCCLGO_MP_HOSTMODE" // "true": report the transports (MPVIA)
	mpResultLine = "MPRESULT"

	mpEnvHosts = "NCCLGO_MP_HOSTS"
	mpEnvCases = "NCCLGO_MP_CASES"
	// mpEnvWindows "1" registers every rank's buffers as windows; "vmm"
	// allocates them as ncclMemAlloc does first.
	mpEnvWindows = "NCCLGO_MP_WINDOWS"
	envHostID    = "NCCL_HOSTID"
)

// mpGPU skips without a driver, a kernel image or enough devices.
func mpGPU(t *testing.T) {
	t.Helper()
	if err := cuda.Init(); err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	if _, _, err := kernels.FindImage(""); err != nil {
		t.Skipf("no kernel image (build one with `make kernels` or set %s): %v", kernels.EnvFatbin, err)
	}
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := strings.TrimSpace(os.Getenv(name))
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	require.NoError(t, err, "%s=%q", name, s)
	return v
}

// mpLayout is the placement of the ranks on processes and devices.
type mpLayout struct {
	nProcs, perProc int
	// counts are the ranks of each process where they differ
	// (NCCLGO_MP_RANKS_PER_PROC="2,1"); nil: perProc each.
	counts []int
	devs   []int // per process
	// hosts is the number of fake hosts (NCCLGO_MP_HOSTS); below 2 the
	// processes keep the environment's NCCL_HOSTID.
	hosts int
}

// count is the number of ranks of process p.
func (l mpLayout) count(p int) int {
	if l.counts != nil {
		return l.counts[p]
	}
	return l.perProc
}

// first is the first rank of process p (its ranks are consecutive).
func (l mpLayout) first(p int) int {
	if l.counts == nil {
		return p * l.perProc
	}
	f := 0
	for _, c := range l.counts[:p] {
		f += c
	}
	return f
}

// nRanks is the number of ranks of all processes.
func (l mpLayout) nRanks() int { return l.first(l.nProcs) }

// procOf is the process of rank r.
func (l mpLayout) procOf(r int) int {
	for p := range l.nProcs {
		if r < l.first(p)+l.count(p) {
			return p
		}
	}
	return l.nProcs
}

// ranksDesc is the ranks per process for a log line: "2" or "2,1".
func (l mpLayout) ranksDesc() string {
	if l.counts == nil {
		return strconv.Itoa(l.perProc)
	}
	parts := make([]string, len(l.counts))
	for i, c := range l.counts {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, ",")
}

// hostOf is the fake host of process p: blocks of consecutive processes,
// as ncclperf's -hosts splits its ranks.
func (l mpLayout) hostOf(p int) int {
	if l.hosts < 2 {
		return 0
	}
	return p * l.hosts / l.nProcs
}

// hostEnv is process p's NCCL_HOSTID setting (none without fake hosts):
// <prefix>-host<k>, the prefix the environment's NCCL_HOSTID, else
// "mp<pid>" so that two parents' hosts differ.
func (l mpLayout) hostEnv(p, pid int, base string) []string {
	if l.hosts < 2 {
		return nil
	}
	prefix := base
	if prefix == "" {
		prefix = "mp" + strconv.Itoa(pid)
	}
	return []string{envHostID + "=" + prefix + "-host" + strconv.Itoa(l.hostOf(p)), mpEnvHostsOn + "=true"}
}

func mpPlacement(t *testing.T) mpLayout {
	l, err := mpRanksPerProc(os.Getenv("NCCLGO_MP_RANKS_PER_PROC"), os.Getenv("NCCLGO_MP_NPROCS"))
	require.NoError(t, err)
	l.hosts = envInt(t, mpEnvHosts, 0)
	if l.hosts < 0 || l.hosts > l.nProcs {
		t.Fatalf("%s=%d: want 0 (no fake hosts) to NCCLGO_MP_NPROCS=%d", mpEnvHosts, l.hosts, l.nProcs)
	}
	devs := mpDevices(t)
	n, err := cuda.DeviceCount()
	require.NoError(t, err)
	seen := map[int]bool{}
	shared := -1
	for p := range l.nProcs {
		d := devs[p%len(devs)]
		if d >= n {
			t.Skipf("NCCLGO_TEST_DEVICES names device %d, but there are %d devices", d, n)
		}
		if seen[d] {
			shared = d
		}
		seen[d] = true
		l.devs = append(l.devs, d)
	}
	if shared >= 0 && !topo.MPSActive(os.Getenv) {
		t.Skipf("%d processes on devices %v share GPU %d, which needs MPS (not running); set NCCLGO_TEST_DEVICES to one device per process",
			l.nProcs, l.devs, shared)
	}
	return l
}

// mpRanksPerProc parses NCCLGO_MP_RANKS_PER_PROC (per, default 1: a count
// for every process, or a comma-separated count per process) and
// NCCLGO_MP_NPROCS (procs, default 2, or the list's length).
func mpRanksPerProc(per, procs string) (mpLayout, error) {
	l := mpLayout{nProcs: 2, perProc: 1}
	per, procs = strings.TrimSpace(per), strings.TrimSpace(procs)
	if procs != "" {
		n, err := strconv.Atoi(procs)
		if err != nil || n < 1 {
			return l, fmt.Errorf("NCCLGO_MP_NPROCS=%q: want a process count of at least 1", procs)
		}
		l.nProcs = n
	}
	if per == "" {
		return l, nil
	}
	fields := strings.Split(per, ",")
	counts := make([]int, len(fields))
	for i, f := range fields {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 1 {
			return l, fmt.Errorf("NCCLGO_MP_RANKS_PER_PROC=%q: want ranks per process (at least 1), one count or one per process", per)
		}
		counts[i] = c
	}
	if len(counts) == 1 {
		l.perProc = counts[0]
		return l, nil
	}
	if procs != "" && l.nProcs != len(counts) {
		return l, fmt.Errorf("NCCLGO_MP_RANKS_PER_PROC=%q gives %d processes, NCCLGO_MP_NPROCS=%s", per, len(counts), procs)
	}
	l.nProcs, l.counts = len(counts), counts
	return l, nil
}

// mpDevices parses NCCLGO_TEST_DEVICES (default "0").
func mpDevices(t *testing.T) []int {
	devs := []int{0}
	if s := strings.TrimSpace(os.Getenv("NCCLGO_TEST_DEVICES")); s != "" {
		devs = nil
		for _, f := range strings.Split(s, ",") {
			d, err := strconv.Atoi(strings.TrimSpace(f))
			require.NoError(t, err, "NCCLGO_TEST_DEVICES=%q", s)
			devs = append(devs, d)
		}
	}
	return devs
}

// mpChild is a running rank process.
type mpChild struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	out   strings.Builder
	lines chan string
	done  chan error
}

// startChild starts cmd with its output collected into a new mpChild: every
// line goes to output, and to lines while a reader keeps up; done reports
// the exit once all output has been read.
func startChild(t *testing.T, cmd *exec.Cmd) *mpChild {
	t.Helper()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	k := &mpChild{cmd: cmd, lines: make(chan string, 1024), done: make(chan error, 1)}
	require.NoError(t, cmd.Start())
	eof := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			k.mu.Lock()
			k.out.WriteString(sc.Text() + "\n")
			k.mu.Unlock()
			select {
			case k.lines <- sc.Text():
			default:
			}
		}
		close(k.lines)
		close(eof)
	}()
	go func() { err := cmd.Wait(); pw.Close(); <-eof; k.done <- err }()
	return k
}

func (c *mpChild) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// mpStart starts the rank processes of a communicator whose root runs here.
// ctx (from mpContext) bounds them: each child's -test.timeout ends a
// little before it (mpChildTimes), each dies with this process
// (mpCommand, mpWatchParent).
func mpStart(t *testing.T, ctx context.Context, l mpLayout, role string, extra ...string) []*mpChild {
	t.Helper()
	id, err := ncclgo.GetUniqueID(ctx)
	require.NoError(t, err)
	dir := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		if l.hosts >= 2 && strings.HasPrefix(kv, envHostID+"=") {
			continue // replaced per process
		}
		if !strings.HasPrefix(kv, "NCCLGO_MP_") || strings.HasPrefix(kv, mpEnvCases+"=") || strings.HasPrefix(kv, mpEnvWindows+"=") {
			env = append(env, kv)
		}
	}
	var kids []*mpChild
	for p := range l.nProcs {
		cmd := mpCommand(ctx, "-test.run=^TestMultiProcessChild$", "-test.count=1", "-test.v", "-test.timeout="+mpChildTimes(ctx).Child.String())
		hostEnv := l.hostEnv(p, os.Getpid(), os.Getenv(envHostID))
		cmd.Env = append(append(append(env[:len(env):len(env)], extra...), hostEnv...),
			mpEnvRole+"="+role, mpEnvID+"="+id.String(), mpEnvRank+"="+strconv.Itoa(l.first(p)),
			mpEnvNRanks+"="+strconv.Itoa(l.nRanks()), mpEnvLocal+"="+strconv.Itoa(l.count(p)),
			mpEnvDevice+"="+strconv.Itoa(l.devs[p]), mpEnvDir+"="+dir, mpEnvShort+"="+strconv.FormatBool(testing.Short()),
			mpEnvParent+"="+strconv.Itoa(os.Getpid()))
		k := startChild(t, cmd)
		kids = append(kids, k)
	}
	return kids
}

// TestMultiProcess runs the collectives with ranks in separate processes:
// AllReduce (sum, max; in and out of place), AllGather, ReduceScatter,
// Broadcast and Send/Recv, over several types and sizes. With fake hosts
// (NCCLGO_MP_HOSTS) it also checks the transports and the forced
// algorithms' and protocols' behaviour across NET (see the file's doc).
func TestMultiProcess(t *testing.T) {
	if os.Getenv(mpEnvRole) != "" {
		t.Skip("child process")
	}
	mpGPU(t)
	l := mpPlacement(t)
	filter := mpCaseFilter(t)
	run := mpFilter(mpCases(l.nRanks(), testing.Short()), filter)
	if len(run) == 0 {
		t.Fatalf("%s=%q matches none of the suite's cases for %d ranks", mpEnvCases, filter, l.nRanks())
	}
	sel := mpSelections(t)
	if l.hosts >= 2 {
		if why := sel.patMissing(); why != "" {
			t.Skip(why)
		}
	}
	ctx, cancel := mpContext(t, 8*time.Minute)
	defer cancel()
	start := time.Now()
	kids := mpStart(t, ctx, l, "suite")
	// Every child's end and output first: one's failure (a hang, say)
	// often explains another's, and all of them must show.
	outs := make([]string, len(kids))
	var failed []string
	for p, k := range kids {
		err := <-k.done
		outs[p] = k.output()
		if err != nil {
			failed = append(failed, fmt.Sprintf("process %d: %v", p, err))
			continue
		}
		for r := l.first(p); r < l.first(p)+l.count(p); r++ {
			if !regexp.MustCompile(fmt.Sprintf(`%s rank=%d pid=\d+ cases=\d+ skipped=\d+ failed=0`, mpResultLine, r)).MatchString(outs[p]) {
				failed = append(failed, fmt.Sprintf("process %d: no clean %s line for rank %d", p, mpResultLine, r))
			}
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%s\n%s", strings.Join(failed, "\n"), allOutputs(kids))
	}
	for p, out := range outs {
		t.Logf("process %d (device %d, host %d):\n%s", p, l.devs[p], l.hostOf(p), grepLines(out, mpResultLine, "via ", "MPVIA", "MPBUFS", "MPSKIP", "MPWIN"))
	}
	if os.Getenv(mpEnvWindows) == "vmm" && l.hosts < 2 {
		require.NoError(t, mpCheckWindows(outs, l.nRanks()))
	}
	if l.hosts >= 2 {
		summary, err := mpCheckHosts(l, sel, run, outs)
		require.NoError(t, err)
		t.Logf("MPHOSTS hosts=%d procs=%d ranks/proc=%s NCCL_ALGO=%q NCCL_PROTO=%q %s in %v",
			l.hosts, l.nProcs, l.ranksDesc(), os.Getenv("NCCL_ALGO"), os.Getenv("NCCL_PROTO"), summary, time.Since(start).Round(time.Millisecond))
	}
}

// mpWinLine is a child's line for a window it registered.
var mpWinLine = regexp.MustCompile(`MPWIN rank=(\d+) buf=\S+ bytes=\d+ direct=(\w+)`)

// mpCheckWindows checks that each of the n ranks registered two windows
// (send, receive) and that DIRECT runs on every one of them.
func mpCheckWindows(outs []string, n int) error {
	var errs []error
	count := 0
	for _, out := range outs {
		for _, m := range mpWinLine.FindAllStringSubmatch(out, -1) {
			count++
			if m[2] != "true" {
				errs = append(errs, fmt.Errorf("rank %s: a window without DIRECT (its INFO line says why: run with NCCL_DEBUG=INFO): %s", m[1], m[0]))
			}
		}
	}
	if count != 2*n {
		errs = append(errs, fmt.Errorf("%d MPWIN lines, want %d (2 per rank)", count, 2*n))
	}
	return errors.Join(errs...)
}

// mpCaseFilter is NCCLGO_MP_CASES compiled (nil when unset).
func mpCaseFilter(t *testing.T) *regexp.Regexp {
	s := os.Getenv(mpEnvCases)
	if s == "" {
		return nil
	}
	re, err := regexp.Compile(s)
	require.NoError(t, err, "%s=%q: want a regular expression over \"name type count=N\"", mpEnvCases, s)
	return re
}

// mpFilter keeps the cases whose description re matches (all for nil).
func mpFilter(cs []mpCase, re *regexp.Regexp) []mpCase {
	if re == nil {
		return cs
	}
	var out []mpCase
	for _, c := range cs {
		if re.MatchString(c.what()) {
			out = append(out, c)
		}
	}
	return out
}

// what describes the case: "AllReduce Sum Float32 count=1001".
func (c mpCase) what() string { return fmt.Sprintf("%s %s count=%d", c.name, c.dt, c.count) }

// mpSel is the environment's NCCL_ALGO and NCCL_PROTO, parsed.
type mpSel struct {
	algo  config.AlgoSelection
	proto config.ProtoSelection
}

func mpSelections(t *testing.T) mpSel {
	var s mpSel
	var err error
	s.algo, err = config.ParseAlgoSelection(os.Getenv("NCCL_ALGO"))
	require.NoError(t, err)
	s.proto, err = config.ParseProtoSelection(os.Getenv("NCCL_PROTO"))
	require.NoError(t, err)
	return s
}

// patMissing says why a run is pointless: NCCL_ALGO leaves AllGather and
// ReduceScatter PAT alone while the build has no PAT; "" otherwise.
func (s mpSel) patMissing() string {
	for _, c := range []kspace.Coll{kspace.AllGather, kspace.ReduceScatter} {
		if s.algo.Allows(c, kspace.PAT) && !s.algo.Allows(c, kspace.Ring) && !kspace.Implemented(c, kspace.PAT) {
			return fmt.Sprintf("NCCL_ALGO=%q leaves %s only PAT, which this build does not implement (kspace.Implemented)", s.algo, c)
		}
	}
	return ""
}

// ll128Only reports whether NCCL_PROTO leaves the collectives only LL128,
// which NET connections turn off.
func (s mpSel) ll128Only() bool {
	for _, c := range []kspace.Coll{kspace.AllReduce, kspace.AllGather, kspace.ReduceScatter, kspace.Broadcast} {
		if s.proto.Allows(c, kspace.LL) || s.proto.Allows(c, kspace.Simple) {
			return false
		}
	}
	return true
}

var (
	mpViaLine  = regexp.MustCompile(`MPVIA from=(\d+) to=(\d+) via=(\S+)`)
	mpSkipLine = regexp.MustCompile(`MPSKIP case="([^"]*)" err=(.*)`)
	mpResult   = regexp.MustCompile(mpResultLine + ` rank=(\d+) pid=\d+ cases=(\d+) skipped=(\d+) failed=(\d+)`)
)

// mpCheckHosts checks the children's outputs of a run over fake hosts:
// every connection between ranks of different hosts went through NET and
// every other one did not, both kinds appear (the second where a host has
// several ranks), and the skipped cases (of run, the cases the children
// ran) are the ones the selections explain. It returns a summary ("via NET/Socket×12,P2P/CUMEM×4 ran=20
// skipped=4").
func mpCheckHosts(l mpLayout, sel mpSel, run []mpCase, outs []string) (string, error) {
	var errs []error
	hostOfRank := func(r int) int { return l.hostOf(l.procOf(r)) }
	vias := map[string]int{}
	cross, inside := 0, 0
	for p, out := range outs {
		for _, m := range mpViaLine.FindAllStringSubmatch(out, -1) {
			from, _ := strconv.Atoi(m[1])
			to, _ := strconv.Atoi(m[2])
			via := m[3]
			vias[via]++
			if l.procOf(from) != p {
				errs = append(errs, fmt.Errorf("process %d reported rank %d's connection, which is not one of its ranks", p, from))
			}
			net := strings.HasPrefix(via, "NET")
			switch {
			case hostOfRank(from) != hostOfRank(to):
				cross++
				if !net {
					errs = append(errs, fmt.Errorf("rank %d (host %d) -> rank %d (host %d) via %s: want NET across hosts", from, hostOfRank(from), to, hostOfRank(to), via))
				}
			default:
				inside++
				if net {
					errs = append(errs, fmt.Errorf("rank %d -> rank %d (both host %d) via %s: want P2P or SHM inside a host", from, to, hostOfRank(from), via))
				}
			}
		}
	}
	perHost := map[int]int{}
	mostPerHost := 0
	for r := range l.nRanks() {
		perHost[hostOfRank(r)]++
		mostPerHost = max(mostPerHost, perHost[hostOfRank(r)])
	}
	if cross == 0 {
		errs = append(errs, fmt.Errorf("no connection between hosts reported (MPVIA lines)"))
	}
	if mostPerHost > 1 && inside == 0 {
		errs = append(errs, fmt.Errorf("%d ranks on a host but no connection inside a host reported", mostPerHost))
	}
	// Cases: every process skips alike (the plan fails on every rank).
	cases, skipped := -1, -1
	for p, out := range outs {
		for _, m := range mpResult.FindAllStringSubmatch(out, -1) {
			c, _ := strconv.Atoi(m[2])
			s, _ := strconv.Atoi(m[3])
			if cases >= 0 && (c != cases || s != skipped) {
				errs = append(errs, fmt.Errorf("process %d: rank %s ran %d cases, skipped %d; another rank %d, skipped %d", p, m[1], c, s, cases, skipped))
			}
			cases, skipped = c, s
		}
	}
	skips := mpSkipLine.FindAllStringSubmatch(outs[0], -1)
	if len(skips) != skipped {
		errs = append(errs, fmt.Errorf("process 0 skipped %d cases but explained %d (MPSKIP lines)", skipped, len(skips)))
	}
	for _, m := range skips {
		if !strings.Contains(m[2], tune.ErrNoChoice.Error()) {
			errs = append(errs, fmt.Errorf("case %q skipped for a reason other than tune.ErrNoChoice: %s", m[1], m[2]))
		}
	}
	ll128 := sel.ll128Only()
	if ll128 {
		// Across NET, forced LL128 refuses every collective, naming LL128;
		// Send/Recv (not steered by NCCL_PROTO) runs.
		for _, m := range skips {
			if strings.HasPrefix(m[1], "SendRecv") {
				errs = append(errs, fmt.Errorf("case %q skipped under NCCL_PROTO=%s: Send/Recv is not steered by it", m[1], sel.proto))
			}
			if !strings.Contains(m[2], "LL128") {
				errs = append(errs, fmt.Errorf("case %q: the refusal does not name LL128: %s", m[1], m[2]))
			}
		}
		want := 0
		for _, c := range run {
			if strings.HasPrefix(c.name, "SendRecv") {
				want++
			}
		}
		if ran := cases - skipped; ran != want {
			errs = append(errs, fmt.Errorf("NCCL_PROTO=%s across NET: %d cases ran, want the %d Send/Recv cases only", sel.proto, ran, want))
		}
	} else if cases >= 0 && skipped >= cases {
		errs = append(errs, fmt.Errorf("all %d cases skipped: the case list (%s) has nothing NCCL_ALGO=%q NCCL_PROTO=%q can run", cases, mpEnvCases, sel.algo, sel.proto))
	}
	if cases < 0 {
		errs = append(errs, fmt.Errorf("no %s line", mpResultLine))
	} else if cases != len(run) {
		errs = append(errs, fmt.Errorf("the children ran %d cases, want %d", cases, len(run)))
	}
	names := make([]string, 0, len(vias))
	for v, n := range vias {
		names = append(names, fmt.Sprintf("%s×%d", v, n))
	}
	slices.Sort(names)
	summary := fmt.Sprintf("via %s cases=%d ran=%d skipped=%d", strings.Join(names, ","), cases, cases-skipped, skipped)
	// The most connection buffers a rank set up (MPBUFS), when reported.
	most := -1
	for _, out := range outs {
		for _, m := range mpBufsLine.FindAllStringSubmatch(out, -1) {
			mib, _ := strconv.Atoi(m[3])
			most = max(most, mib)
		}
	}
	if most >= 0 {
		summary += fmt.Sprintf(" buffers≤%dMiB/rank", most)
	}
	if ll128 {
		summary += " (LL128 forced: collectives refused with ErrNoChoice)"
	}
	return summary, errors.Join(errs...)
}

// mpBudget bounds a whole multi-process test (the children are killed
// when it runs out): 2 minutes with -test.short, so that a hang cannot eat
// a suite run's time.
func mpBudget(long time.Duration) time.Duration {
	if testing.Short() {
		return min(long, 2*time.Minute)
	}
	return long
}

func grepLines(s string, subs ...string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for _, sub := range subs {
			if strings.Contains(line, sub) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// TestMultiProcessSharedGPURefused starts 2 processes on device 0 (the
// first of NCCLGO_TEST_DEVICES) without MPS: InitRank must fail on both,
// promptly, with ErrSharedGPUNeedsMPS, never hang.
func TestMultiProcessSharedGPURefused(t *testing.T) {
	if os.Getenv(mpEnvRole) != "" {
		t.Skip("child process")
	}
	mpGPU(t)
	if topo.MPSActive(os.Getenv) {
		t.Skip("MPS is running: processes may share a GPU")
	}
	d := mpDevices(t)[0]
	l := mpLayout{nProcs: 2, perProc: 1, devs: []int{d, d}}
	ctx, cancel := mpContext(t, time.Minute)
	defer cancel()
	start := time.Now()
	kids := mpStart(t, ctx, l, "refused", "NCCLGO_MPS=0")
	for p, k := range kids {
		err := <-k.done
		out := k.output()
		require.NoError(t, err, "process %d:\n%s", p, out)
		require.Contains(t, out, "MPREFUSED", "process %d:\n%s", p, out)
		t.Log(grepLines(out, "MPREFUSED"))
	}
	assert.Less(t, time.Since(start), 30*time.Second)
}

// mpRefused is the child role of TestMultiProcessSharedGPURefused.
func mpRefused(t *testing.T, id ncclgo.UniqueID, rank, n, dev int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := ncclgo.InitRank(ctx, n, id, rank, dev, nil)
	if err == nil {
		c.Destroy()
	}
	require.ErrorIs(t, err, ncclgo.ErrSharedGPUNeedsMPS)
	fmt.Printf("MPREFUSED rank=%d err=%v\n", rank, err)
}

// TestMultiProcessKill SIGKILLs the last rank's process during a loop of
// large AllReduces: every other rank must fail within 10 s with an error
// that names the lost rank, then Destroy, and form a new communicator on
// the same GPUs that passes an AllReduce. With fake hosts
// (NCCLGO_MP_HOSTS) the victim is on the last host, so the survivors of
// other hosts learn of it through NET alone. Where the processes share a
// GPU under MPS, the victim's kernel still runs when it dies, and MPS
// then fails every client of the GPU (its fatal-fault containment,
// measured in tests/mpsprobe): a survivor's Destroy may then fail with
// ErrContextLostAfterAbort, naming the lost rank, and no communicator can
// be rebuilt in that process; the test accepts that under MPS only.
func TestMultiProcessKill(t *testing.T) {
	if os.Getenv(mpEnvRole) != "" {
		t.Skip("child process")
	}
	mpGPU(t)
	l := mpPlacement(t)
	if l.nProcs < 2 {
		t.Skip("the kill test needs at least 2 processes")
	}
	l.perProc, l.counts = 1, nil
	victim := l.nProcs - 1
	ctx, cancel := mpContext(t, 5*time.Minute)
	defer cancel()
	kids := mpStart(t, ctx, l, "kill", mpEnvVictim+"="+strconv.Itoa(victim))
	// Wait until every rank has finished two AllReduces.
	looping := map[int]bool{}
	re := regexp.MustCompile(`MPLOOP rank=(\d+) iter=(\d+)`)
	deadline := time.After(3 * time.Minute)
	for len(looping) < l.nProcs {
		for p, k := range kids {
			select {
			case line, ok := <-k.lines:
				if !ok {
					t.Fatalf("process %d ended before the kill:\n%s", p, k.output())
				}
				if m := re.FindStringSubmatch(line); m != nil && m[2] != "0" {
					looping[p] = true
				}
			case <-deadline:
				t.Fatalf("the ranks did not loop within 3 minutes; outputs:\n%s", allOutputs(kids))
			default:
			}
		}
		time.Sleep(time.Millisecond)
	}
	killed := time.Now()
	require.NoError(t, kids[victim].cmd.Process.Signal(syscall.SIGKILL))
	t.Logf("killed rank %d (pid %d)", victim, kids[victim].cmd.Process.Pid)
	<-kids[victim].done
	lost := regexp.MustCompile(`MPLOST rank=(\d+) at=(\d+) err=(.*)`)
	var slowest time.Duration
	for p, k := range kids[:victim] {
		err := <-k.done
		out := k.output()
		require.NoError(t, err, "survivor %d:\n%s", p, out)
		m := lost.FindStringSubmatch(out)
		require.NotNil(t, m, "survivor %d printed no MPLOST line:\n%s", p, out)
		at, _ := strconv.ParseInt(m[2], 10, 64)
		after := time.Unix(0, at).Sub(killed)
		assert.Less(t, after, 10*time.Second, "survivor %d noticed after %v", p, after)
		assert.Contains(t, m[3], fmt.Sprintf("rank %d ", victim), "survivor %d's error must name the lost rank", p)
		if ctxLost := regexp.MustCompile(`MPCTXLOST rank=\d+ err=(.*)`).FindStringSubmatch(out); ctxLost != nil {
			// Under MPS the victim's running kernel took every client of
			// the GPU down (MPS's fatal-fault containment); the child
			// accepts that only under MPS, after naming the lost rank.
			t.Logf("survivor %d: its CUDA context failed after the loss (MPS): %s", p, ctxLost[1])
		} else {
			assert.Contains(t, out, "MPREBUILT", "survivor %d: a new communicator on the same GPUs", p)
		}
		t.Logf("survivor %d (host %d): error after %v: %s", p, l.hostOf(p), after.Round(time.Millisecond), m[3])
		slowest = max(slowest, after)
	}
	t.Logf("MPKILL hosts=%d procs=%d victim=%d (host %d) slowest survivor noticed after %v (limit 10s)",
		max(l.hosts, 1), l.nProcs, victim, l.hostOf(victim), slowest.Round(time.Millisecond))
}

func allOutputs(kids []*mpChild) string {
	var b strings.Builder
	for p, k := range kids {
		fmt.Fprintf(&b, "--- process %d\n%s", p, k.output())
	}
	return b.String()
}

// mpRank is one rank of a child process with its stream and buffers.
type mpRank struct {
	comm       *ncclgo.Comm
	ctx        *cuda.Context
	stream     *cuda.Stream
	send, recv cuda.DevicePtr
	bytes      uint64
}

// TestMultiProcessChild is the rank process of the tests above; it skips
// unless started by them.
func TestMultiProcessChild(t *testing.T) {
	role := os.Getenv(mpEnvRole)
	if role == "" {
		t.Skip("only runs as a child of TestMultiProcess, TestMultiProcessKill or TestMultiProcessSharedGPURefused")
	}
	mpWatchParent(t)
	id, err := ncclgo.ParseUniqueID(os.Getenv(mpEnvID))
	require.NoError(t, err)
	first := envInt(t, mpEnvRank, -1)
	n := envInt(t, mpEnvNRanks, -1)
	local := envInt(t, mpEnvLocal, 1)
	dev := envInt(t, mpEnvDevice, 0)
	if role == "refused" {
		mpRefused(t, id, first, n, dev)
		return
	}
	short := os.Getenv(mpEnvShort) == "true"
	bufBytes := uint64(mpMaxCount(short)+1)*8 + 64 // the largest case, one element off alignment, 8-byte elements
	if role == "kill" {
		def := 1 << 30
		if short {
			def = 64 << 20
		}
		bufBytes = uint64(envInt(t, "NCCLGO_MP_KILL_BYTES", def))
	}
	if role != "kill" {
		bufBytes *= uint64(max(n, 1)) // AllGather's output, ReduceScatter's input
	}
	var opts *ncclgo.Options
	var vias *viaLog
	if os.Getenv(mpEnvHostsOn) == "true" {
		vias = newViaLog(os.Getenv("NCCL_DEBUG"))
		opts = &ncclgo.Options{Logger: slog.New(vias)}
	}
	ranks := mpInit(t, id, first, n, local, dev, bufBytes, opts)
	if vias != nil {
		vias.print()
	}
	switch role {
	case "suite":
		mpSuite(t, ranks, n, short)
	case "kill":
		mpKill(t, ranks, n, envInt(t, mpEnvVictim, n-1), dev, bufBytes)
	default:
		t.Fatalf("%s=%q: want suite or kill", mpEnvRole, role)
	}
}

// viaLog is a slog.Handler that notes the transport of each connection
// from the communicator's log ("Channel 00/0 : 0[0] -> 1[0] via
// NET/Socket") and passes the records at or above its level (Info under
// NCCL_DEBUG=INFO or TRACE, else Warn) on to standard error.
type viaLog struct {
	st   *viaState
	next slog.Handler
	rank string // the records' "rank" attribute, once bound (the engine's logger)
}

type viaState struct {
	mu    sync.Mutex
	seen  map[string]bool
	lines []string
}

var mpChannelLine = regexp.MustCompile(`^Channel \d+/\d+ : (\d+)\[\d+\] -> (\d+)\[\d+\] via (\S+)`)

// mpBuffersLine is the engine's line on the buffers its connections took
// (runtime/comm's Init); the child repeats it as an MPBUFS line.
var mpBuffersLine = regexp.MustCompile(`^connected (\d+) edges, (\d+) MiB of buffers`)

// mpBufsLine is a child's MPBUFS line.
var mpBufsLine = regexp.MustCompile(`MPBUFS rank=(\d+) edges=(\d+) mib=(\d+)`)

func newViaLog(debug string) *viaLog {
	level := slog.LevelWarn
	if d := strings.ToUpper(debug); d == "INFO" || d == "TRACE" {
		level = slog.LevelDebug
	}
	return &viaLog{st: &viaState{seen: map[string]bool{}}, next: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})}
}

// Enabled takes Info and above (the connection lines are Info), and what
// the next handler takes.
func (h *viaLog) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h *viaLog) Handle(ctx context.Context, r slog.Record) error {
	if m := mpChannelLine.FindStringSubmatch(r.Message); m != nil {
		line := fmt.Sprintf("MPVIA from=%s to=%s via=%s", m[1], m[2], m[3])
		h.st.mu.Lock()
		if !h.st.seen[line] {
			h.st.seen[line] = true
			h.st.lines = append(h.st.lines, line)
		}
		h.st.mu.Unlock()
	}
	if m := mpBuffersLine.FindStringSubmatch(r.Message); m != nil && h.rank != "" {
		line := fmt.Sprintf("MPBUFS rank=%s edges=%s mib=%s", h.rank, m[1], m[2])
		h.st.mu.Lock()
		h.st.lines = append(h.st.lines, line)
		h.st.mu.Unlock()
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *viaLog) WithAttrs(as []slog.Attr) slog.Handler {
	rank := h.rank
	for _, a := range as {
		if a.Key == "rank" {
			rank = a.Value.String()
		}
	}
	return &viaLog{st: h.st, next: h.next.WithAttrs(as), rank: rank}
}

func (h *viaLog) WithGroup(name string) slog.Handler {
	return &viaLog{st: h.st, next: h.next.WithGroup(name), rank: h.rank}
}

// print writes one MPVIA line per distinct (sender, receiver, transport)
// and each rank's MPBUFS line.
func (h *viaLog) print() {
	h.st.mu.Lock()
	defer h.st.mu.Unlock()
	for _, l := range h.st.lines {
		fmt.Println(l)
	}
}

// mpInit creates the process's ranks, concurrently, with their buffers.
func mpInit(t *testing.T, id ncclgo.UniqueID, first, n, local, dev int, bufBytes uint64, opts *ncclgo.Options) []*mpRank {
	t.Helper()
	ranks := make([]*mpRank, local)
	errs := make([]error, local)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range local {
		wg.Go(func() {
			c, err := ncclgo.InitRank(ctx, n, id, first+i, dev, opts)
			if err != nil {
				errs[i] = err
				return
			}
			ranks[i] = &mpRank{comm: c, bytes: bufBytes}
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "InitRank of rank %d", first+i)
	}
	d, err := cuda.GetDevice(dev)
	require.NoError(t, err)
	for _, r := range ranks {
		r.ctx, err = d.PrimaryContext()
		require.NoError(t, err)
		r.stream, err = r.ctx.NewStream(false)
		require.NoError(t, err)
		var free func()
		if os.Getenv(mpEnvWindows) == "vmm" {
			free = mpAllocVMM(t, r, bufBytes)
		} else {
			r.send, err = r.ctx.MemAlloc(bufBytes)
			require.NoError(t, err)
			r.recv, err = r.ctx.MemAlloc(bufBytes)
			require.NoError(t, err)
			free = func() {
				r.ctx.MemFree(r.send)
				r.ctx.MemFree(r.recv)
			}
		}
		t.Cleanup(func() {
			free()
			r.stream.Destroy()
			r.ctx.Release()
		})
	}
	if w := os.Getenv(mpEnvWindows); w == "1" || w == "vmm" {
		// Collective: every rank at once, send then recv on each.
		werrs := make([]error, len(ranks))
		var wg sync.WaitGroup
		for i, r := range ranks {
			wg.Go(func() {
				for _, p := range []cuda.DevicePtr{r.send, r.recv} {
					w, err := r.comm.RegisterWindow(ctx, p, bufBytes)
					if err != nil {
						werrs[i] = err
						return
					}
					fmt.Printf("MPWIN rank=%d buf=%#x bytes=%d direct=%v\n", r.comm.Rank(), uint64(p), bufBytes, w.Direct())
				}
			})
		}
		wg.Wait()
		for i, err := range werrs {
			require.NoError(t, err, "RegisterWindow of rank %d", first+i)
		}
	}
	t.Cleanup(func() {
		for _, r := range ranks {
			if r.comm != nil {
				// When: a peer that still waits for this rank's last
				// sends (NET: the proxy ships them after the kernel
				// ends) shows whether they were cut off by this Destroy.
				rank := r.comm.Rank()
				fmt.Printf("MPDESTROY rank=%d at=%d\n", rank, time.Now().UnixNano())
				err := r.comm.Destroy()
				fmt.Printf("MPDESTROY rank=%d done=%d err=%v\n", rank, time.Now().UnixNano(), err)
				assert.NoError(t, err)
			}
		}
	})
	return ranks
}

// mpAllocVMM allocates r's send and receive buffers as ncclMemAlloc does
// (VMM, exportable as POSIX fds, the recommended granularity), as two
// mappings side by side in one reservation, and returns what frees them.
func mpAllocVMM(t *testing.T, r *mpRank, bufBytes uint64) func() {
	t.Helper()
	prop := cuda.AllocProp{HandleTypes: cuda.MemHandlePOSIXFD}
	gran, err := r.ctx.MemGranularityFor(prop, true)
	require.NoError(t, err)
	n := (bufBytes + gran - 1) / gran * gran
	va, err := r.ctx.MemAddressReserve(2*n, gran)
	require.NoError(t, err)
	var hs [2]cuda.MemHandle
	for i := range hs {
		hs[i], err = r.ctx.MemCreateWith(n, prop)
		require.NoError(t, err, "cuMemCreate of %d bytes with POSIX fd handles", n)
		require.NoError(t, r.ctx.MemMap(va+cuda.DevicePtr(uint64(i)*n), n, hs[i]))
	}
	require.NoError(t, r.ctx.MemSetAccess(va, 2*n))
	r.send, r.recv = va, va+cuda.DevicePtr(n)
	return func() {
		assert.NoError(t, r.ctx.MemUnmap(va, 2*n))
		for _, h := range hs {
			assert.NoError(t, r.ctx.MemRelease(h))
		}
		assert.NoError(t, r.ctx.MemAddressFree(va, 2*n))
	}
}

// mpValue is element i of rank r's input: small integers, so that sums of
// up to 11 ranks are exact in every type tested (int8 and half included);
// fp8 types get 0 and 1 only.
func mpValue(r, i int) float64 { return float64((i*7+r*3)%11 + 1) }

// mpValueOf is mpValue for type dt.
func mpValueOf(dt ncclgo.DataType) func(r, i int) float64 {
	if dt == ncclgo.Float8e4m3 || dt == ncclgo.Float8e5m2 {
		return func(r, i int) float64 { return float64((i*7 + r*3) % 2) }
	}
	return mpValue
}

func mpEncode(dt ncclgo.DataType, vals func(i int) float64, count int) []byte {
	v := make([]float64, count)
	for i := range v {
		v[i] = vals(i)
	}
	return numfmt.Encode(kspace.Type(dt), v)
}

func (r *mpRank) upload(t *testing.T, p cuda.DevicePtr, b []byte) {
	if len(b) > 0 {
		require.NoError(t, r.ctx.MemcpyHtoD(p, unsafe.Pointer(&b[0]), uint64(len(b))))
	}
}

func (r *mpRank) download(t *testing.T, p cuda.DevicePtr, n int) []byte {
	b := make([]byte, n)
	if n > 0 {
		require.NoError(t, r.ctx.MemcpyDtoH(unsafe.Pointer(&b[0]), p, uint64(n)))
	}
	return b
}

// mpCase is one collective call on every rank and what each rank's output
// must hold. Offsets are in elements from the start of the rank's buffers.
type mpCase struct {
	name  string
	dt    ncclgo.DataType
	count int
	// in gives rank r's input element i; inCount its length, inOff where
	// it goes (in the send buffer, or the receive buffer when inRecv).
	in      func(r, i int) float64
	inCount int
	inOff   func(r int) int
	inRecv  bool
	// issue adds rank r's call to g.
	issue func(g *ncclgo.Group, r int, rk *mpRank) error
	// want gives rank r's output element i; outCount its length, outOff
	// where it is in the receive buffer (or the send buffer when outSend).
	want     func(r, i int) float64
	outCount int
	outOff   func(r int) int
	outSend  bool
}

// mpMaxCount is the largest count of the cases.
func mpMaxCount(short bool) int {
	if short {
		return 65536 + 3
	}
	return 4<<20 + 5
}

// mpTypes are the types the multi-process suite runs (all of nccl.h's).
var mpTypes = []ncclgo.DataType{ncclgo.Int8, ncclgo.Uint8, ncclgo.Int32, ncclgo.Uint32, ncclgo.Int64, ncclgo.Uint64,
	ncclgo.Float16, ncclgo.Float32, ncclgo.Float64, ncclgo.Bfloat16, ncclgo.Float8e4m3, ncclgo.Float8e5m2}

// mpCases lists the cases for n ranks: for every type and count, AllReduce
// (Sum; Min and Max at one count), AllGather, ReduceScatter, Broadcast and
// a Send/Recv ring shift; every other case in place, and odd counts' cases
// one element off alignment.
func mpCases(n int, short bool) []mpCase {
	var cs []mpCase
	at := func(k int) func(int) int { return func(int) int { return k } }
	counts := []int{1, 1000 + 1, 65536 + 3, mpMaxCount(false)}
	if short {
		counts = counts[:3]
	}
	types := mpTypes
	if short {
		types = []ncclgo.DataType{ncclgo.Uint8, ncclgo.Int32, ncclgo.Float32, ncclgo.Bfloat16}
	}
	for _, dt := range types {
		val := mpValueOf(dt)
		reduce := func(op ncclgo.RedOp, i int) float64 {
			acc := val(0, i)
			for r := 1; r < n; r++ {
				switch v := val(r, i); op {
				case ncclgo.Sum:
					acc += v
				case ncclgo.Max:
					acc = max(acc, v)
				case ncclgo.Min:
					acc = min(acc, v)
				default:
					panic(fmt.Sprintf("no reference for %v", op))
				}
			}
			return acc
		}
		for ci, count := range counts {
			off := count % 2 // odd counts: one element off alignment
			inPlace := ci%2 == 1
			ops := []ncclgo.RedOp{ncclgo.Sum}
			if ci == 1 {
				ops = append(ops, ncclgo.Min, ncclgo.Max)
			}
			for _, op := range ops {
				c := mpCase{name: fmt.Sprintf("AllReduce %v", op), dt: dt, count: count, in: val, inCount: count, inOff: at(off),
					want: func(_, i int) float64 { return reduce(op, i) }, outCount: count, outOff: at(off)}
				c.inRecv = inPlace
				c.issue = func(g *ncclgo.Group, r int, rk *mpRank) error {
					send, recv := rk.addr(dt, false, off), rk.addr(dt, true, off)
					if inPlace {
						send = recv
					}
					return g.AllReduce(rk.comm, send, recv, count, dt, op, rk.stream)
				}
				cs = append(cs, c)
			}
			// AllGather: in place, rank r's block already sits at block r of
			// the output.
			ag := mpCase{name: "AllGather", dt: dt, count: count, in: val, inCount: count, inOff: at(off),
				want: func(_, i int) float64 { return val(i/count, i%count) }, outCount: n * count, outOff: at(off)}
			if inPlace {
				ag.inRecv, ag.inOff = true, func(r int) int { return off + r*count }
			}
			ag.issue = func(g *ncclgo.Group, r int, rk *mpRank) error {
				send := rk.addr(dt, false, off)
				if inPlace {
					send = rk.addr(dt, true, off+r*count)
				}
				return g.AllGather(rk.comm, send, rk.addr(dt, true, off), count, dt, rk.stream)
			}
			// ReduceScatter: in place, the result lands at block r of the input.
			rs := mpCase{name: "ReduceScatter Sum", dt: dt, count: count, in: val, inCount: n * count, inOff: at(off),
				want: func(r, i int) float64 { return reduce(ncclgo.Sum, r*count+i) }, outCount: count, outOff: at(off)}
			if inPlace {
				rs.outSend, rs.outOff = true, func(r int) int { return off + r*count }
			}
			rs.issue = func(g *ncclgo.Group, r int, rk *mpRank) error {
				recv := rk.addr(dt, true, off)
				if inPlace {
					recv = rk.addr(dt, false, off+r*count)
				}
				return g.ReduceScatter(rk.comm, rk.addr(dt, false, off), recv, count, dt, ncclgo.Sum, rk.stream)
			}
			bc := mpCase{name: "Broadcast", dt: dt, count: count, in: val, inCount: count, inOff: at(off), inRecv: inPlace,
				want: func(_, i int) float64 { return val(n-1, i) }, outCount: count, outOff: at(off)}
			bc.issue = func(g *ncclgo.Group, r int, rk *mpRank) error {
				send, recv := rk.addr(dt, false, off), rk.addr(dt, true, off)
				if inPlace {
					send = recv
				}
				return g.Broadcast(rk.comm, send, recv, count, dt, n-1, rk.stream)
			}
			sr := mpCase{name: "SendRecv ring", dt: dt, count: count, in: val, inCount: count, inOff: at(off),
				want: func(r, i int) float64 { return val((r+n-1)%n, i) }, outCount: count, outOff: at(off)}
			sr.issue = func(g *ncclgo.Group, r int, rk *mpRank) error {
				if err := g.Send(rk.comm, rk.addr(dt, false, off), count, dt, (r+1)%n, rk.stream); err != nil {
					return err
				}
				return g.Recv(rk.comm, rk.addr(dt, true, off), count, dt, (r+n-1)%n, rk.stream)
			}
			cs = append(cs, ag, rs, bc, sr)
		}
	}
	return cs
}

// addr is element off of the rank's send or receive buffer, for type dt.
func (r *mpRank) addr(dt ncclgo.DataType, recv bool, off int) cuda.DevicePtr {
	p := r.send
	if recv {
		p = r.recv
	}
	return p + cuda.DevicePtr(off*dt.Size())
}

// mpSuite runs every case (NCCLGO_MP_CASES's) on the process's ranks and
// prints one result line per rank. Cases that the tuner refuses (a
// function not in the kernel build, or nothing NCCL_ALGO and NCCL_PROTO
// leave) are skipped, every rank alike, each with an MPSKIP line.
func mpSuite(t *testing.T, ranks []*mpRank, n int, short bool) {
	cases := mpFilter(mpCases(n, short), mpCaseFilter(t))
	failed, skipped := 0, 0
	for _, c := range cases {
		what := c.what()
		es := c.dt.Size()
		for _, rk := range ranks {
			r := rk.comm.Rank()
			// Poison both buffers, then place the input.
			require.NoError(t, rk.ctx.MemsetD8(rk.send, 0xA5, rk.bytes))
			require.NoError(t, rk.ctx.MemsetD8(rk.recv, 0xA5, rk.bytes))
			in := mpEncode(c.dt, func(i int) float64 { return c.in(r, i) }, c.inCount)
			rk.upload(t, rk.addr(c.dt, c.inRecv, c.inOff(r)), in)
			require.NoError(t, rk.ctx.Synchronize())
		}
		g := ncclgo.NewGroup()
		for _, rk := range ranks {
			require.NoError(t, c.issue(g, rk.comm.Rank(), rk), what)
		}
		// End plans every call before it launches any: a function missing
		// from the build fails here on every rank alike, launching nothing.
		err := g.End()
		if errors.Is(err, tune.ErrNoChoice) {
			skipped++
			fmt.Printf("MPSKIP case=%q err=%v\n", what, err)
			continue
		}
		require.NoError(t, err, what)
		comms := make([]*ncclgo.Comm, len(ranks))
		for i, rk := range ranks {
			comms[i] = rk.comm
		}
		// On a hang the dump shows this process's ranks' connections,
		// before this process's -test.timeout would end it without one.
		waitFrom := time.Now()
		errs, hang := waitAllWithin(what, comms, mpWaitBound(t, 5*time.Second))
		if hang != nil {
			// Against the peers' MPDESTROY times: did a peer destroy
			// while this process still waited for its data?
			fmt.Printf("MPHANG case=%q pid=%d waited_from=%d\n", what, os.Getpid(), waitFrom.UnixNano())
			for _, c := range comms {
				c.Abort()
			}
			t.Fatal(hang)
		}
		for i, err := range errs {
			require.NoError(t, err, "%s: rank %d", what, comms[i].Rank())
		}
		for _, rk := range ranks {
			r := rk.comm.Rank()
			got := numfmt.Decode(kspace.Type(c.dt), rk.download(t, rk.addr(c.dt, !c.outSend, c.outOff(r)), c.outCount*es))
			bad := 0
			for i, g := range got {
				if w := c.want(r, i); w != g {
					if bad < 3 {
						t.Errorf("%s: rank %d element %d = %v, want %v", what, r, i, g, w)
					}
					bad++
				}
			}
			if bad > 0 {
				failed++
				t.Errorf("%s: rank %d: %d of %d elements wrong", what, r, bad, c.outCount)
			}
		}
	}
	for _, rk := range ranks {
		fmt.Printf("%s rank=%d pid=%d cases=%d skipped=%d failed=%d\n", mpResultLine, rk.comm.Rank(), os.Getpid(), len(cases), skipped, failed)
	}
}

// mpKill loops AllReduces of bufBytes until one fails (the victim is
// killed by the parent meanwhile), prints when and why, then proves the
// GPU still works with a new communicator of the survivors.
func mpKill(t *testing.T, ranks []*mpRank, n, victim, dev int, bufBytes uint64) {
	require.Len(t, ranks, 1, "the kill test runs one rank per process")
	rk := ranks[0]
	r := rk.comm.Rank()
	count := int(bufBytes / 4)
	var failure error
	for iter := 0; iter < 10000 && failure == nil; iter++ {
		failure = rk.comm.AllReduce(rk.send, rk.recv, count, ncclgo.Float32, ncclgo.Sum, rk.stream)
		if failure == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			failure = rk.comm.Wait(ctx)
			cancel()
		}
		if failure == nil {
			fmt.Printf("MPLOOP rank=%d iter=%d\n", r, iter)
		}
	}
	require.Error(t, failure, "rank %d: the loop ended without an error", r)
	fmt.Printf("MPLOST rank=%d at=%d err=%v\n", r, time.Now().UnixNano(), failure)
	if r == victim {
		t.Fatalf("the victim survived")
	}
	start := time.Now()
	err := rk.comm.Destroy()
	rk.comm = nil
	if errors.Is(err, ncclgo.ErrContextLostAfterAbort) && topo.MPSActive(os.Getenv) {
		// MPS took this client down with the victim (its kernel was
		// running when it was killed): no communicator can be rebuilt in
		// this process. The parent accepts this under MPS only.
		require.ErrorContains(t, err, fmt.Sprintf("rank %d ", victim), "rank %d: the error names the lost rank", r)
		fmt.Printf("MPCTXLOST rank=%d err=%v\n", r, err)
		return
	}
	require.NoError(t, err)
	fmt.Printf("MPDESTROYED rank=%d in=%v\n", r, time.Since(start))

	// A new communicator of the survivors (ranks 0..victim-1 keep their
	// numbers) on the same GPUs; rank 0 publishes its id in the scratch
	// directory.
	survivors := n - 1
	idFile := filepath.Join(os.Getenv(mpEnvDir), "rebuild-id")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var id ncclgo.UniqueID
	if r == 0 {
		var err error
		id, err = ncclgo.GetUniqueID(ctx)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(idFile+".tmp", []byte(id.String()), 0o600))
		require.NoError(t, os.Rename(idFile+".tmp", idFile))
	} else {
		for {
			b, err := os.ReadFile(idFile)
			if err == nil {
				id, err = ncclgo.ParseUniqueID(string(b))
				require.NoError(t, err)
				break
			}
			require.NoError(t, ctx.Err(), "rank 0 published no new id")
			time.Sleep(10 * time.Millisecond)
		}
	}
	c, err := ncclgo.InitRank(ctx, survivors, id, r, dev, nil)
	require.NoError(t, err, "rank %d: a new communicator after the loss", r)
	defer func() { require.NoError(t, c.Destroy()) }()
	const small = 4096
	rk.upload(t, rk.send, mpEncode(ncclgo.Float32, func(i int) float64 { return mpValue(r, i) }, small))
	require.NoError(t, rk.ctx.Synchronize())
	require.NoError(t, c.AllReduce(rk.send, rk.recv, small, ncclgo.Float32, ncclgo.Sum, rk.stream))
	require.NoError(t, c.Wait(ctx))
	got := numfmt.Decode(kspace.F32, rk.download(t, rk.recv, small*4))
	for i := range small {
		want := 0.0
		for s := range survivors {
			want += mpValue(s, i)
		}
		require.Equal(t, want, got[i], "rank %d element %d after the rebuild", r, i)
	}
	fmt.Printf("MPREBUILT rank=%d\n", r)
}

// TestMultiProcessCasesFit checks, without a GPU, that every case's input
// and output lie within the buffers a child allocates, for several rank
// counts, and that each case's expectation is defined on every element.
func TestMultiProcessCasesFit(t *testing.T) {
	for _, short := range []bool{true, false} {
		for _, n := range []int{2, 3, 4, 8} {
			bufBytes := (uint64(mpMaxCount(short)+1)*8 + 64) * uint64(n)
			cases := mpCases(n, short)
			require.NotEmpty(t, cases)
			for _, c := range cases {
				es := uint64(c.dt.Size())
				for r := range n {
					assert.LessOrEqual(t, uint64(c.inOff(r)+c.inCount)*es, bufBytes, "%s %s count=%d n=%d: input", c.name, c.dt, c.count, n)
					assert.LessOrEqual(t, uint64(c.outOff(r)+c.outCount)*es, bufBytes, "%s %s count=%d n=%d: output", c.name, c.dt, c.count, n)
				}
				assert.False(t, math.IsNaN(c.want(n-1, c.outCount-1)))
			}
		}
	}
}

// The vmm mode's check: two windows per rank, each with DIRECT.
func TestMultiProcessCheckWindows(t *testing.T) {
	line := func(r int, direct bool) string {
		return fmt.Sprintf("MPWIN rank=%d buf=0x7f00 bytes=4096 direct=%v\n", r, direct)
	}
	ok := []string{line(0, true) + line(0, true), line(1, true) + "noise\n" + line(1, true)}
	require.NoError(t, mpCheckWindows(ok, 2))
	assert.ErrorContains(t, mpCheckWindows([]string{ok[0], line(1, true) + line(1, false)}, 2), "rank 1: a window without DIRECT")
	assert.ErrorContains(t, mpCheckWindows(ok[:1], 2), "2 MPWIN lines, want 4 (2 per rank)")
}
