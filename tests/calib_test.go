package tests

import (
	"os/exec"
	"path/filepath"
	"testing"
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
