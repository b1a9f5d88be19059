package ncclgo_test

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/kernels"
)

// TestExamplesOnGPU runs the GPU examples (which have no Output comment, so
// that `go test` compiles them everywhere) where a GPU exists, and checks
// what each prints.
func TestExamplesOnGPU(t *testing.T) {
	if err := cuda.Init(); err != nil {
		t.Skipf("GPU examples skipped: no CUDA driver: %v", err)
	}
	if n, err := cuda.DeviceCount(); err != nil || n == 0 {
		t.Skipf("GPU examples skipped: no CUDA device (%v)", err)
	}
	if _, _, err := kernels.FindImage(""); err != nil {
		t.Skipf("GPU examples skipped: no kernel image (make kernels, or NCCLGO_FATBIN): %v", err)
	}
	for _, ex := range []struct {
		name string
		run  func()
		want string
	}{
		{"InitAll", ExampleInitAll, "rank 0 got [3 3 3 3]"},
		{"InitRank", ExampleInitRank, "max: 20 20"},
		{"Group", ExampleGroup, "sum: 3 gathered: 1 2"},
		{"Group_Send", ExampleGroup_Send, "rank 1 received 1"},
	} {
		t.Run(ex.name, func(t *testing.T) {
			got := capture(t, ex.run)
			if strings.TrimSpace(got) != ex.want {
				t.Fatalf("Example%s printed %q, want %q", ex.name, got, ex.want)
			}
		})
	}
}

// capture runs fn with os.Stdout redirected and returns what it printed.
func capture(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		var b bytes.Buffer
		_, _ = io.Copy(&b, r)
		done <- b.String()
	}()
	defer func() { os.Stdout = old }()
	fn()
	os.Stdout = old
	_ = w.Close()
	return <-done
}
