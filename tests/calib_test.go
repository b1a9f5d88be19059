package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNCCLLoopCompiles builds calib/ncclloop.c (the calibrate step of
// gpu-verify.sh builds it on the GPU machine) with every warning an
// error, and checks that it refuses bad arguments before loading anything.
func TestNCCLLoopCompiles(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skipf("no C compiler (cc) on PATH: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "ncclloop")
	out, err := exec.Command(cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-o", bin, "calib/ncclloop.c", "-ldl").CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, out)
	}
	for _, args := range [][]string{{"-c", "alltoall"}, {"-g", "0"}, {"-b", "64", "-e", "8"}, {"-t", "0"}, {"-t", "x"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Errorf("ncclloop %v: exit %v, want 2 (bad argument)\n%s", args, err, out)
		}
	}
}

// TestCalibrateCompare runs calib/compare.awk, the calibrate step's
// judgement, on outputs shaped like nccl-tests' and ncclperf's: the best
// process is the lowest per-process median over cycles (not the best
// cycle), 0-byte rows are left out and counted, ncclperf's NCCL time is
// column 14 after ncclgo's sweep, and the verdict names each size outside
// 5 % with its ratio.
func TestCalibrateCompare(t *testing.T) {
	awk, err := exec.LookPath("awk")
	if err != nil {
		t.Skipf("no awk on PATH: %v", err)
	}
	// nccl-tests' row: size count type redop root, then time algbw busbw
	// #wrong out-of-place and in-place.
	nt := func(size int, us float64) string {
		return fmt.Sprintf("%12d %12d %8s %6s %6d %9.2f %7.2f %7.2f %6d %9.2f %7.2f %7.2f %6d\n", size, size/4, "float", "sum", -1, us, 0.0, 0.0, 0, us, 0.0, 0.0, 0)
	}
	// ncclperf's row after ncclgo's sweep: ncclgo's 13 columns, then
	// NCCL's time, busbw, the ratio and "by".
	np := func(size int, ours, nccl float64) string {
		return strings.TrimSuffix(nt(size, ours), "\n") + fmt.Sprintf(" %9.2f %7.2f %7.3f %5s\n", nccl, 0.0, nccl/ours, "time")
	}
	dir := t.TempDir()
	write := func(name string, lines ...string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("# header\n"+strings.Join(lines, "")), 0o644))
	}
	// Process 1 of nccl-tests: two cycles at 8 B (median 5.20), one 0-byte
	// no-op row; process 2 slow.
	write("allreduce-nt-1.txt", nt(0, 0.35), nt(8, 5.00), nt(1024, 5.00), nt(8, 5.40), nt(1024, 5.00))
	write("allreduce-nt-2.txt", nt(8, 6.50), nt(1024, 6.60))
	write("allreduce-np-1.txt", np(8, 9.0, 5.30), np(1024, 9.5, 5.40))
	write("allreduce-np-2.txt", np(8, 9.1, 6.40), np(1024, 9.6, 6.30))
	write("allreduce-ntcpu.txt", nt(8, 4.9), nt(1024, 4.8))
	files, err := filepath.Glob(filepath.Join(dir, "allreduce-*.txt"))
	require.NoError(t, err)
	run := func(st string) string {
		args := append([]string{"-v", "coll=allreduce", "-v", "st=" + st, "-f", "calib/compare.awk"}, files...)
		out, err := exec.Command(awk, args...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	out := run("bestproc")
	assert.Contains(t, out, "judged on the bestproc")
	assert.Contains(t, out, "1 nccl-tests 0-byte rows (no-ops) left out")
	assert.Contains(t, out, "# allreduce     2 sizes, 1 within 5 %; outside: 1024:1.080", out)
	assert.Regexp(t, `(?m)^ +8 +5\.20 +5\.30 +1\.019 +yes `, out, "8 B: process 1's median of 5.00 and 5.40, against 5.30")
	assert.Regexp(t, `(?m)^ +8 .* 9\.00 +1\.731$`, out, "ncclgo's column: its best process over nccl-tests'")
	// Judged on the best cycle instead, 8 B is 5.30 / 5.00.
	assert.Contains(t, run("best"), "outside: 8:1.060 1024:1.080")
}
