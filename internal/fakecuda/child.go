package fakecuda

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
)

// ChildEnv names, in a test binary that InChild re-executes, the fake
// driver library the child is to load.
const ChildEnv = "NCCLGO_TEST_FAKE_DRIVER"

// InChild runs the test name (t's, or the top-level test that t runs
// under) in a child process of the test binary whose CUDA driver is the
// fake, so that a package's tests can count driver calls while its other
// tests run on the real driver.
//
// In the parent (ChildEnv unset) it builds the fake into a temporary
// directory, runs the child with ChildEnv and libraryEnv (the variable
// through which runtime/cuda loads its driver: cuda.LibraryEnv) naming
// it, and what env returns (env may be nil; it runs in the parent only,
// after the build), logs the child's output, fails t if the child
// failed, and returns ok false. It skips t under -short (the build takes
// the C compiler and seconds) and where the fake cannot be built.
//
// In the child it locks the calling goroutine to its OS thread for the
// rest of the test (the fake's current context is per thread, as the
// driver's is: a goroutine that moved between threads would count one
// cuCtxSetCurrent more) and returns the fake's path and ok true; the
// caller then runs the test's body.
func InChild(t testing.TB, name, libraryEnv string, env func(t testing.TB) []string) (lib string, ok bool) {
	t.Helper()
	if lib := os.Getenv(ChildEnv); lib != "" {
		runtime.LockOSThread()
		t.Cleanup(runtime.UnlockOSThread)
		return lib, true
	}
	if testing.Short() {
		t.Skip("builds a fake driver library")
	}
	lib, err := Build(t.TempDir())
	if err != nil {
		t.Skip("no fake driver: " + err.Error())
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), ChildEnv+"="+lib, libraryEnv+"="+lib)
	if env != nil {
		cmd.Env = append(cmd.Env, env(t)...)
	}
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	if err != nil {
		t.Fatalf("fakecuda: the child running %s: %v", name, err)
	}
	return "", false
}
