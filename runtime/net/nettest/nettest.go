// Package nettest builds the test net plugin of runtime/net
// (testdata/sockplugin.c, a small NCCL net plugin over TCP) for the tests
// of packages that use runtime/net.
package nettest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// PluginSource is the test plugin's C file; the loader's ABI header is in
// its parent's parent (runtime/net).
func PluginSource() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "sockplugin.c")
}

// BuildPlugin compiles the test plugin with the C compiler ($CC, else cc)
// into t's temporary directory as libnccl-net-<name>.so, with the given
// -D defines (NET_VERSION=8, FAIL_INIT, ...), and returns the file's path.
// It skips t when there is no C compiler.
func BuildPlugin(t testing.TB, name string, defines ...string) string {
	t.Helper()
	cc := "cc"
	if v := os.Getenv("CC"); v != "" {
		cc = strings.Fields(v)[0]
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) to build the test net plugin: %v", cc, err)
	}
	src := PluginSource()
	out := filepath.Join(t.TempDir(), fmt.Sprintf("libnccl-net-%s.so", name))
	args := []string{"-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I", filepath.Dir(filepath.Dir(src)), "-o", out}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	args = append(args, src)
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("building the test net plugin: %s %s: %v\n%s", cc, strings.Join(args, " "), err, b)
	}
	return out
}
