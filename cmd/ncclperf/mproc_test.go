package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/launch"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// The test binary runs as ncclperf itself (main, with os.Args) when
// envMain is set: the -np tests start it so, and its -np spawns it again
// as the ranks, which inherit the variables. envFake replaces the GPU with
// fakes: "slow1" makes rank 1's calls take fakeDelay, "die1" kills rank
// 1's process in the middle of the sweep, at the call after which rank 0's
// stream never gets idle (a kernel waiting for the dead rank).
// envShowSeed makes each fake rank print the data seed it checks with,
// envShowHost its NCCL_HOSTID.
const (
	envMain     = "NCCLPERF_TEST_MAIN"
	envFake     = "NCCLPERF_TEST_FAKE"
	envShowSeed = "NCCLPERF_TEST_SHOW_SEED"
	envShowHost = "NCCLPERF_TEST_SHOW_HOST"
	fakeDelay   = 20 * time.Millisecond
)

func TestMain(m *testing.M) {
	if os.Getenv(envMain) == "1" {
		if mode := os.Getenv(envFake); mode != "" {
			installFakeGPU(mode)
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// installFakeGPU replaces the device with fakes: two devices, streams
// always idle, and a backend whose calls sleep or die as mode says.
func installFakeGPU(mode string) {
	deviceCount = func() (int, error) { return 2, nil }
	openRanks = func(devices []int) ([]rankBuffers, func(), error) {
		return make([]rankBuffers, len(devices)), func() {}, nil
	}
	streamIdle = func(*cuda.Stream) (bool, error) { return !fakeHung.Load(), nil }
	openOurs = func(c *config) (backend, error) {
		if os.Getenv(envShowSeed) == "1" {
			fmt.Fprintf(os.Stderr, "fake rank %d: data seed %d\n", c.rank0, c.seed.Value)
		}
		if os.Getenv(envShowHost) == "1" {
			v, ok := os.LookupEnv(envHostID)
			fmt.Fprintf(os.Stderr, "fake rank %d: NCCL_HOSTID %q set %v\n", c.rank0, v, ok)
		}
		return &procBackend{rank: c.rank0, mode: mode}, nil
	}
}

// fakeHung makes the fake streams busy for ever.
var fakeHung atomic.Bool

// procBackend is the backend of a fake rank process.
type procBackend struct {
	fakeBackend
	rank  int
	mode  string
	calls int
}

func (b *procBackend) Run(coll, []cuda.DevicePtr, []cuda.DevicePtr, int, dataType, redOp, int, []*cuda.Stream) error {
	b.calls++
	switch {
	case b.rank == 1 && b.mode == "slow1":
		time.Sleep(fakeDelay)
	case b.rank == 1 && b.mode == "die1" && b.calls == 3:
		os.Exit(7)
	case b.rank == 0 && b.mode == "die1" && b.calls == 3:
		fakeHung.Store(true)
	}
	return nil
}

// runMain runs the test binary as ncclperf with args and returns its
// combined output, its exit code and how long it took.
func runMain(t *testing.T, fake string, args ...string) (string, int, time.Duration) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envMain+"=1", envFake+"="+fake)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), code, time.Since(start)
}

// assertReaped checks that every rank process the launcher's error names
// is gone.
func assertReaped(t *testing.T, out string, ranks int) {
	t.Helper()
	m := regexp.MustCompile(`launch: rank (\d+) \(pid (\d+)\)`).FindAllStringSubmatch(out, -1)
	require.Len(t, m, ranks, out)
	for _, g := range m {
		pid, _ := strconv.Atoi(g[2])
		err := syscall.Kill(pid, 0)
		assert.ErrorIs(t, err, syscall.ESRCH, "rank %s (pid %d) still exists", g[1], pid)
	}
}

// TestSpawnNoDriver: without a CUDA driver every rank of -np 2 fails with
// the same clear message, and the launcher exits non-zero naming each,
// with no rank left behind.
func TestSpawnNoDriver(t *testing.T) {
	if err := cuda.Init(); err == nil {
		t.Skip("a CUDA driver is present: this test needs a machine without one")
	}
	out, code, took := runMain(t, "", "-np", "2", "-b", "8", "-e", "64")
	assert.Equal(t, 1, code, out)
	for r := range 2 {
		assert.Contains(t, out, fmt.Sprintf("ncclperf: rank %d of 2: cuda: no usable CUDA driver", r), out)
	}
	assert.Contains(t, out, noDriverHint)
	assert.Regexp(t, `ncclperf: -np 2: launch: rank 0 \(pid \d+\): exit status 1`, out)
	assert.Regexp(t, `launch: rank 1 \(pid \d+\): exit status 1`, out)
	assertReaped(t, out, 2)
	assert.Less(t, took, 10*time.Second)
}

// TestSpawnFakeSweep runs -np 2 through the launcher, the control channel
// and the per-size exchange with a fake device whose rank 1 is slow:
// rank 0 prints one table whose times are the maximum (-a 3) or rank 0's
// (-a 0).
func TestSpawnFakeSweep(t *testing.T) {
	timesOf := func(out string) []float64 {
		var ts []float64
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) < 13 || strings.HasPrefix(line, "#") {
				continue
			}
			oop, err1 := strconv.ParseFloat(f[5], 64)
			ip, err2 := strconv.ParseFloat(f[9], 64)
			require.NoError(t, errors.Join(err1, err2), line)
			ts = append(ts, oop, ip)
		}
		return ts
	}
	args := []string{"-np", "2", "-b", "8", "-e", "64", "-c", "0", "-n", "2", "-w", "1"}
	out, code, _ := runMain(t, "slow1", append(args, "-a", "3")...)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "# ncclperf: allreduce, 2 ranks on devices [0 1], float sum")
	assert.Contains(t, out, "# 2 processes of one rank each (launcher: ncclgo); time: maximum over ranks (-a 3)")
	assert.Equal(t, 1, strings.Count(out, "# Avg bus bandwidth"), "only rank 0 prints: %s", out)
	ts := timesOf(out)
	require.Len(t, ts, 8, out) // 8, 16, 32, 64 B, out-of-place and in-place
	for _, v := range ts {
		assert.GreaterOrEqual(t, v, float64(fakeDelay.Microseconds()), "the slow rank's time: %s", out)
	}

	out, code, _ = runMain(t, "slow1", append(args, "-a", "0", "-devices", "1,0")...)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "2 ranks on devices [1 0]")
	for _, v := range timesOf(out) {
		assert.Less(t, v, float64(fakeDelay.Microseconds()), "rank 0's own time: %s", out)
	}
}

// TestSpawnRankDies: rank 1's process dies in the middle of the sweep
// while rank 0 drains a stream that will never be idle; rank 0 reports it
// by rank and pid and exits non-zero, the launcher names both and leaves
// no process behind.
func TestSpawnRankDies(t *testing.T) {
	out, code, took := runMain(t, "die1", "-np", "2", "-b", "8", "-e", "1K", "-c", "0", "-n", "2", "-w", "1")
	assert.Equal(t, 1, code, out)
	assert.Regexp(t, `ncclperf: rank 0 of 2: warm-up: rank 1 \(pid \d+\) exited before the job finished`, out)
	assert.Regexp(t, `launch: rank 1 \(pid \d+\): exit status 7`, out)
	assert.Regexp(t, `launch: rank 0 \(pid \d+\): exit status 1`, out)
	assertReaped(t, out, 2)
	assert.Less(t, took, killGrace, "rank 0 noticed on its own, before the launcher's kill")
}

func TestParseNp(t *testing.T) {
	c, err := parseFlags([]string{"-np", "4", "-devices", "0,1,0,1", "-r", "3"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, 4, c.np)
	assert.Equal(t, 4, c.nRanks, "-np sets the communicator's size")
	assert.Equal(t, []int{0, 1, 0, 1}, c.devices)
	assert.Equal(t, avgMean, c.average, "nccl-tests' default -a 1")
	assert.Nil(t, c.place)

	for want, args := range map[string][]string{
		"-np -1: want a number of processes":     {"-np", "-1"},
		"-np 2 with -g/--ngpus 2":                {"-np", "2", "-g", "2"},
		"-devices lists 1 devices for -np 2":     {"-np", "2", "-devices", "0"},
		"-r/--root 2: want a root in [0, 2)":     {"-np", "2", "-r", "2"},
		"-a/--average 4: want 0 (rank 0), 1":     {"-a", "4"},
		"-a/--average -1: want 0 (rank 0), 1 (m": {"--average", "-1"},
	} {
		_, err := parseFlags(args, &bytes.Buffer{})
		assert.ErrorContains(t, err, want, "%v", args)
	}

	mpi := &launch.Place{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Launcher: "mpirun"}
	c, err = parseArgs([]string{"-r", "1", "-a", "3"}, &bytes.Buffer{}, mpi)
	require.NoError(t, err, "the job's size bounds -r")
	assert.Equal(t, 2, c.nRanks)
	assert.Equal(t, mpi, c.place)
	assert.Equal(t, avgMax, c.average)
	_, err = parseArgs([]string{"-np", "2"}, &bytes.Buffer{}, mpi)
	assert.NoError(t, err, "-np that matches the job")
	_, err = parseArgs([]string{"-np", "3"}, &bytes.Buffer{}, mpi)
	assert.ErrorContains(t, err, "-np 3, but mpirun started 2 processes")
	_, err = parseArgs([]string{"-g", "2"}, &bytes.Buffer{}, mpi)
	assert.ErrorContains(t, err, "-g/--ngpus 2 under mpirun: each process of the job is one rank")
	_, err = parseArgs([]string{"-devices", "0,1,2"}, &bytes.Buffer{}, mpi)
	assert.ErrorContains(t, err, "-devices lists 3 devices for -g/--ngpus 2 ranks")
}

func TestParseHosts(t *testing.T) {
	for args, want := range map[string]int{"-np 4 -hosts 2": 2, "-np 3 -hosts 3": 3, "-np 2 -hosts 1": 1, "-np 2 -hosts 0": 0, "-np 2": 0, "-hosts 1": 1, "-hosts 0": 0} {
		c, err := parseFlags(strings.Fields(args), &bytes.Buffer{})
		require.NoError(t, err, args)
		assert.Equal(t, want, c.hosts, args)
	}
	for args, want := range map[string]string{
		"-np 2 -hosts -1": "-hosts -1: want 0 or 1 (one host) or a number of fake hosts from 2 to -np's",
		"-hosts 2":        "-hosts 2 without -np: the fake hosts are ncclperf's own children",
		"-np 2 -hosts 3":  "-hosts 3 with -np 2: want at most one host per process, 0 to 2",
	} {
		_, err := parseFlags(strings.Fields(args), &bytes.Buffer{})
		assert.ErrorContains(t, err, want, args)
	}
	mpi := &launch.Place{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, Launcher: "mpirun"}
	_, err := parseArgs([]string{"-hosts", "2"}, &bytes.Buffer{}, mpi)
	assert.ErrorContains(t, err, "-hosts 2 without -np", "under mpirun the processes' NCCL_HOSTID is the user's")
}

// TestHostEnv: the ranks of -np n -hosts h get NCCL_HOSTID <prefix>-host<k>
// in blocks of consecutive ranks, none empty, and everything else of the
// launcher's environment.
func TestHostEnv(t *testing.T) {
	hosts := func(base []string, n, h int) []string {
		env := hostEnv(base, n, h, 42)
		var ids []string
		for r := range n {
			e := env(r)
			var id []string
			for _, kv := range e {
				if v, ok := strings.CutPrefix(kv, envHostID+"="); ok {
					id = append(id, v)
				}
			}
			require.LessOrEqual(t, len(id), 1, "rank %d: NCCL_HOSTID set twice: %q", r, e)
			assert.Contains(t, e, "KEEP=1", "rank %d", r)
			if len(id) == 1 {
				ids = append(ids, id[0])
			} else {
				ids = append(ids, "")
			}
		}
		return ids
	}
	base := []string{"KEEP=1"}
	assert.Equal(t, []string{"", "", ""}, hosts(base, 3, 0), "-hosts 0: one host, NCCL_HOSTID untouched")
	assert.Equal(t, []string{"", ""}, hosts(base, 2, 1))
	assert.Equal(t, []string{"ncclperf42-host0", "ncclperf42-host1"}, hosts(base, 2, 2))
	assert.Equal(t, []string{"ncclperf42-host0", "ncclperf42-host0", "ncclperf42-host1", "ncclperf42-host1"}, hosts(base, 4, 2))
	assert.Equal(t, []string{"ncclperf42-host0", "ncclperf42-host0", "ncclperf42-host0", "ncclperf42-host1", "ncclperf42-host1"}, hosts(base, 5, 2))
	assert.Equal(t, []string{"ncclperf42-host0", "ncclperf42-host0", "ncclperf42-host1", "ncclperf42-host2", "ncclperf42-host3"}, hosts(base, 5, 4),
		"every host has a rank")
	user := []string{"NCCL_HOSTID=lab", "KEEP=1"}
	assert.Equal(t, []string{"lab-host0", "lab-host1", "lab-host2"}, hosts(user, 3, 3), "the user's NCCL_HOSTID is the prefix")
	assert.Equal(t, []string{"lab", "lab"}, hosts(user, 2, 1), "one host: the user's NCCL_HOSTID as it is")
	assert.Equal(t, []string{"ncclperf42-host0", "ncclperf42-host1"}, hosts([]string{"NCCL_HOSTID=", "KEEP=1"}, 2, 2), "empty: unset")
	for n := 1; n <= 9; n++ {
		for h := 2; h <= n; h++ {
			seen := map[int]bool{}
			for r := range n {
				k := hostOf(r, n, h)
				require.True(t, k >= 0 && k < h && (r == 0 || k >= hostOf(r-1, n, h)), "n %d h %d r %d: host %d", n, h, r, k)
				seen[k] = true
			}
			assert.Len(t, seen, h, "n %d h %d: a host without ranks", n, h)
		}
	}
}

// TestSpawnHosts runs -np 4 -hosts 2 through the launcher: each child
// reports the NCCL_HOSTID it was started with.
func TestSpawnHosts(t *testing.T) {
	ids := func(out string) map[string]string {
		m := map[string]string{}
		for _, g := range regexp.MustCompile(`fake rank (\d+): NCCL_HOSTID "(.*)" set (true|false)`).FindAllStringSubmatch(out, -1) {
			m[g[1]] = g[2] + " " + g[3]
		}
		return m
	}
	t.Setenv(envShowHost, "1")
	args := []string{"-b", "8", "-e", "8", "-c", "0", "-n", "1", "-w", "0"}
	t.Setenv(envHostID, "")
	os.Unsetenv(envHostID)
	out, code, _ := runMain(t, "none", append([]string{"-np", "4", "-hosts", "2"}, args...)...)
	require.Equal(t, 0, code, out)
	got := ids(out)
	m := regexp.MustCompile(`^ncclperf(\d+)-host0 true$`).FindStringSubmatch(got["0"])
	require.NotNil(t, m, "rank 0's host id: %s", out)
	pfx := "ncclperf" + m[1]
	assert.Equal(t, map[string]string{"0": pfx + "-host0 true", "1": pfx + "-host0 true", "2": pfx + "-host1 true", "3": pfx + "-host1 true"}, got, out)

	out, code, _ = runMain(t, "none", append([]string{"-np", "2"}, args...)...)
	require.Equal(t, 0, code, out)
	assert.Equal(t, map[string]string{"0": " false", "1": " false"}, ids(out), "no -hosts: NCCL_HOSTID left unset")

	t.Setenv(envHostID, "job7")
	out, code, _ = runMain(t, "none", append([]string{"-np", "3", "-hosts", "3"}, args...)...)
	require.Equal(t, 0, code, out)
	assert.Equal(t, map[string]string{"0": "job7-host0 true", "1": "job7-host1 true", "2": "job7-host2 true"}, ids(out), out)
}

func TestRankDevice(t *testing.T) {
	p := launch.Place{Rank: 3, Size: 4, LocalRank: 3, LocalSize: 4}
	assert.Equal(t, 1, rankDevice(nil, p, 2), "round-robin over the visible GPUs")
	assert.Equal(t, 3, rankDevice(nil, p, 8))
	assert.Equal(t, 0, rankDevice(nil, p, 0), "no GPU: device 0, whose use reports the error")
	assert.Equal(t, 5, rankDevice([]int{0, 0, 0, 5}, p, 2), "-devices lists each rank's")
	p = launch.Place{Rank: 5, Size: 8, LocalRank: 1, LocalSize: 4}
	assert.Equal(t, 1, rankDevice(nil, p, 4), "the rank within its host picks the GPU")
}

func TestCombineRows(t *testing.T) {
	c := &config{coll: collAllReduce, dt: float32T, nRanks: 3}
	rw := func(oop, ip float64, wrong int) row {
		return row{bytes: 1 << 20, count: 1 << 18, oop: result{usec: oop, hostUsec: oop / 2, wrong: wrong}, ip: result{usec: ip, wrong: 1}}
	}
	rows := []row{rw(100, 40, 0), rw(300, 50, 2), rw(200, 30, 5)}
	for avg, want := range map[int][2]float64{avgRank0: {100, 40}, avgMean: {200, 40}, avgMin: {100, 30}, avgMax: {300, 50}} {
		c.average = avg
		got, err := c.combineRows(rows)
		require.NoError(t, err)
		assert.InDelta(t, want[0], got.oop.usec, 1e-9, averageNames[avg])
		assert.InDelta(t, want[1], got.ip.usec, 1e-9, averageNames[avg])
		assert.InDelta(t, want[0]/2, got.oop.hostUsec, 1e-9, averageNames[avg])
		assert.Equal(t, 7, got.oop.wrong, "wrong counts add up")
		assert.Equal(t, 3, got.ip.wrong)
		algbw, busbw := c.bandwidth(1<<18, want[0])
		assert.InDelta(t, algbw, got.oop.algbw, 1e-12)
		assert.InDelta(t, busbw, got.oop.busbw, 1e-12)
		assert.InDelta(t, float64(1<<20)/want[0]/1e3*4/3, got.oop.busbw, 1e-9, "busbw of 3 ranks: 2(n-1)/n")
	}
	bad := []row{rw(1, 1, 0), {bytes: 8, count: 2}}
	_, err := c.combineRows(bad)
	assert.ErrorContains(t, err, "rank 1 measured 8 B")
	_, err = c.combineRows(nil)
	assert.Error(t, err)
}

// TestUnderOtherLaunchers starts two ranks as mpirun and torchrun would
// (their variables, no -np): each runs as one rank of the job without
// spawning, and rank 0 prints the table.
func TestUnderOtherLaunchers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	job := strconv.FormatInt(time.Now().UnixNano(), 10)
	for name, vars := range map[string]func(r int) []string{
		"mpirun": func(r int) []string {
			return []string{"OMPI_COMM_WORLD_RANK=" + strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=" + strconv.Itoa(r),
				"OMPI_COMM_WORLD_LOCAL_SIZE=2", "OMPI_MCA_ess_base_jobid=" + job}
		},
		"torchrun": func(r int) []string {
			return []string{"RANK=" + strconv.Itoa(r), "WORLD_SIZE=2", "LOCAL_RANK=" + strconv.Itoa(r), "LOCAL_WORLD_SIZE=2",
				"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + strconv.Itoa(port-1)}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("TMPDIR", t.TempDir())
			var cmds [2]*exec.Cmd
			var outs [2]bytes.Buffer
			for r := range 2 {
				cmds[r] = exec.Command(os.Args[0], "-b", "8", "-e", "16", "-c", "0", "-n", "1", "-w", "0")
				cmds[r].Env = append(append(os.Environ(), envMain+"=1", envFake+"=slow1"), vars(r)...)
				cmds[r].Stdout, cmds[r].Stderr = &outs[r], &outs[r]
				require.NoError(t, cmds[r].Start())
			}
			for r := range 2 {
				assert.NoError(t, cmds[r].Wait(), "rank %d: %s", r, outs[r].String())
			}
			assert.Contains(t, outs[0].String(), "# 2 processes of one rank each (launcher: "+name+")")
			assert.Regexp(t, `\n +16 +4 +float`, outs[0].String())
			assert.Empty(t, outs[1].String(), "only rank 0 prints")
		})
	}
}

// TestOneSeedPerJob: the ranks of a job in several processes check with
// one data seed, rank 0's, with NCCLGO_TEST_SEED unset (each process drew
// its own from the clock, so every rank checked other ranks' outputs
// against data they never sent) and with it set to different values.
func TestOneSeedPerJob(t *testing.T) {
	seeds := func(out string) map[string]string {
		m := map[string]string{}
		for _, g := range regexp.MustCompile(`fake rank (\d+): data seed (\d+)`).FindAllStringSubmatch(out, -1) {
			m[g[1]] = g[2]
		}
		return m
	}
	t.Setenv(envShowSeed, "1")
	t.Setenv("NCCLGO_TEST_SEED", "") // unset: each process draws one
	args := []string{"-b", "8", "-e", "16", "-c", "0", "-n", "1", "-w", "0"}
	for try := range 3 {
		out, code, _ := runMain(t, "none", append([]string{"-np", "2"}, args...)...)
		require.Equal(t, 0, code, out)
		s := seeds(out)
		require.Len(t, s, 2, out)
		require.Equal(t, s["0"], s["1"], "-np 2, try %d: the ranks' data seeds differ: %s", try, out)
	}

	// Under mpirun each process starts on its own, with its own
	// environment: rank 0's seed is the job's.
	t.Setenv("TMPDIR", t.TempDir())
	job := strconv.FormatInt(time.Now().UnixNano(), 10)
	var cmds [2]*exec.Cmd
	var outs [2]bytes.Buffer
	for r := range 2 {
		cmds[r] = exec.Command(os.Args[0], args...)
		cmds[r].Env = append(os.Environ(), envMain+"=1", envFake+"=none", "NCCLGO_TEST_SEED="+strconv.Itoa(100+r),
			"OMPI_COMM_WORLD_RANK="+strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK="+strconv.Itoa(r),
			"OMPI_COMM_WORLD_LOCAL_SIZE=2", "OMPI_MCA_ess_base_jobid="+job)
		cmds[r].Stdout, cmds[r].Stderr = &outs[r], &outs[r]
		require.NoError(t, cmds[r].Start())
	}
	for r := range 2 {
		require.NoError(t, cmds[r].Wait(), "rank %d: %s", r, outs[r].String())
	}
	for r := range 2 {
		assert.Equal(t, map[string]string{strconv.Itoa(r): "100"}, seeds(outs[r].String()), "rank %d under mpirun", r)
	}
}

// TestSeedInHeader: with -c, the table says which seed the data came
// from and how to replay it.
func TestSeedInHeader(t *testing.T) {
	c := &config{coll: collAllReduce, dt: float32T, op: opSum, nRanks: 2, devices: []int{0, 1}, iters: 1, check: true, checkMax: 64,
		seed: dataSeed{Value: 42}}
	var out bytes.Buffer
	(&table{c: c, ours: "2 ranks"}).header(&out)
	assert.Contains(t, out.String(), "; data seed 42 (replay with NCCLGO_TEST_SEED=42)\n")
	c.seed.Fixed = true
	out.Reset()
	(&table{c: c, ours: "2 ranks"}).header(&out)
	assert.Contains(t, out.String(), "; data seed 42 (NCCLGO_TEST_SEED)\n")
}
