package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ncclgo/ncclgo/gen/nvbuild"
)

// generateForBuild generates the tree for `ncclgen build --only FILTER` into
// dir (creating or refreshing it), for the given target archs. The
// generator's author sets it; while it is nil, --only is an error.
var generateForBuild func(ctx context.Context, dir, filter string, arches []string) error

// runBuild implements `ncclgen build`.
func runBuild(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	arch := fs.String("arch", "", "target archs, comma separated, e.g. sm_80,sm_90 (default: the local GPU's, else the manifest's, else "+nvbuild.DefaultArch+")")
	only := fs.String("only", "", "generate and build only the kernels matching this filter, e.g. 'AllReduce Sum f32 * *'")
	jobs := fs.Int("j", 0, "parallel nvcc jobs (default: number of CPUs)")
	out := fs.String("out", filepath.Join("build", "ncclgo.fatbin"), "fatbin to write")
	cache := fs.String("cache", "", "cache directory (default: "+nvbuild.DefaultCacheDir()+")")
	gen := fs.String("gen", "generated", "generated tree holding manifest.json (with --only: where to generate; default build/gen-<filter hash>)")
	nvcc := fs.String("nvcc", "", "nvcc binary (default: $NVCC, $CUDA_HOME/bin/nvcc, PATH, /usr/local/cuda/bin/nvcc)")
	ptx := fs.Bool("ptx", false, "add a PTX image of the newest arch for newer GPUs (LTO compiles and a whole-program link: minutes for the full set)")
	var xflags multiFlag
	fs.Var(&xflags, "Xnvcc", "extra nvcc flag for every compile, e.g. -Xnvcc=-Xptxas=-maxrregcount=96 (repeatable)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: ncclgen build [flags]\n\nCompiles the generated CUDA sources into one fatbin (SASS per arch; with --ptx, plus PTX of the newest).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("build: unexpected arguments %q", fs.Args())
	}
	genSet := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "gen" {
			genSet = true
		}
	})

	var arches []string
	if *arch != "" {
		var err error
		if arches, err = nvbuild.ParseArches([]string{*arch}); err != nil {
			return fmt.Errorf("build: --arch: %w", err)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	genDir := *gen
	if *only != "" {
		if generateForBuild == nil {
			return errors.New("build: --only needs the generator, which is not linked into this ncclgen; run `ncclgen generate` with the filter and build with --gen")
		}
		if !genSet {
			sum := sha256.Sum256([]byte(strings.TrimSpace(*only)))
			genDir = filepath.Join(filepath.Dir(*out), "gen-"+hex.EncodeToString(sum[:])[:12])
		}
		genArches := arches
		if len(genArches) == 0 {
			if a, ok := nvbuild.DetectArch(); ok {
				genArches = []string{a}
			}
		}
		if err := generateForBuild(ctx, genDir, *only, genArches); err != nil {
			return fmt.Errorf("build: generating %q into %s: %w", *only, genDir, err)
		}
	}

	res, err := nvbuild.Build(ctx, nvbuild.Options{
		GenDir:     genDir,
		Arches:     arches,
		Jobs:       *jobs,
		Out:        *out,
		CacheDir:   *cache,
		NVCC:       *nvcc,
		Progress:   stdout,
		ExtraFlags: xflags,
		PTX:        *ptx,
	})
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	if *only != "" && !strings.EqualFold(strings.TrimSpace(res.Filter), strings.TrimSpace(*only)) {
		fmt.Fprintf(stderr, "ncclgen build: warning: %s was generated with filter %q, not %q\n", genDir, res.Filter, *only)
	}
	return nil
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }
