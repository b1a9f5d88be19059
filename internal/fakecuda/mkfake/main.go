// Command mkfake writes the counting fake of the CUDA driver
// (internal/fakecuda) and a fake kernel set of the whole kernel space into
// a directory, and prints the environment that makes an ncclgo program
// (ncclperf, say) run on them without a GPU:
//
//	eval "$(go run ./internal/fakecuda/mkfake -dir /tmp/fakegpu)"
//	ncclperf -g 2 -b 8 -e 8 -n 20000 -hosttime -c 0
//
// Nothing runs on a device: ncclperf -hosttime then measures the host's
// cost of each call alone.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ncclgo/ncclgo/gen"
	"github.com/ncclgo/ncclgo/internal/fakecuda"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/kernels"
)

func main() {
	dir := flag.String("dir", "", "directory to write libcuda-fake.so and fake.fatbin into (made if missing)")
	flag.Parse()
	if err := run(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "mkfake:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	if dir == "" {
		return fmt.Errorf("-dir is empty: want the directory to write the fake driver and kernel set into")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	lib, err := fakecuda.Build(dir)
	if err != nil {
		return err
	}
	s, err := kspace.NewSpace(kspace.Filter{})
	if err != nil {
		return err
	}
	set, err := fakecuda.KernelSet(gen.KernelSet(s, []string{"sm_90"}))
	if err != nil {
		return err
	}
	fatbin := filepath.Join(dir, "fake.fatbin")
	if err := os.WriteFile(fatbin, set, 0o644); err != nil {
		return err
	}
	fmt.Printf("export %s='%s'\nexport %s='%s'\n", cuda.LibraryEnv, lib, kernels.EnvFatbin, fatbin)
	return nil
}
