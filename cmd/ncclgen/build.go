package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/ncclgo/ncclgo/devicesrc"
	"github.com/ncclgo/ncclgo/gen"
	"github.com/ncclgo/ncclgo/gen/nvbuild"
	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kset"
)

// runBuild implements `ncclgen build`.
func runBuild(args []string, stdout, stderr io.Writer) error {
	c := newCommand("build", "", "Compiles a kernel set into one file: a manifest (filter, arches, ABI version, function table)\n"+
		"in front of a fatbin (SASS per arch; with --ptx, plus PTX of the newest).\n\n"+
		"With --only, or where no generated tree exists (a module that requires ncclgo), the sources are\n"+
		"generated from the model and device library built into ncclgen, into the cache directory:\n"+
		"generated/ is left alone and ncclgo's own directory may be read-only.", stdout)
	arch := c.String("arch", "", "target `arches`, comma separated, e.g. sm_80,sm_90 (default: the local GPU's, else the manifest's, else "+nvbuild.DefaultArch+")")
	only := c.String("only", "", "build only the functions matching this `filter`, e.g. 'AllReduce Sum f32 * *'")
	jobs := c.IntP("jobs", "j", 0, "`number` of parallel nvcc jobs (default: number of CPUs)")
	out := c.String("out", filepath.Join("build", "ncclgo.fatbin"), "kernel set `file` to write")
	cache := c.String("cache", "", "cache `directory` for nvcc outputs and generated trees (default: "+nvbuild.DefaultCacheDir()+")")
	genDir := c.String("gen", "generated", "generated tree (`directory`) holding manifest.json; with --only, where to generate (when not given: a directory under --cache)")
	nvcc := c.String("nvcc", "", "nvcc `binary` (default: $NVCC, $CUDA_HOME/bin/nvcc, PATH, /usr/local/cuda/bin/nvcc)")
	ptx := c.Bool("ptx", false, "add a PTX image of the newest arch for newer GPUs (LTO compiles and a whole-program link: minutes for the full set)")
	xflags := c.StringArray("Xnvcc", nil, "extra nvcc `flag` for every compile, e.g. --Xnvcc=-Xptxas=-maxrregcount=96 (repeatable)")
	if err := c.parse(args, 0, 0); err != nil {
		return ok(err)
	}
	var arches []string
	if *arch != "" {
		var err error
		if arches, err = nvbuild.ParseArches([]string{*arch}); err != nil {
			return c.usageErr(fmt.Errorf("--arch: %w", err))
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir := *genDir
	own := !c.Changed("gen") && !fileExists(filepath.Join(dir, nvbuild.ManifestName))
	if *only != "" || own {
		if _, err := spaceOf(*only); err != nil {
			return c.usageErr(fmt.Errorf("--only: %w", err))
		}
		genArches := arches
		if len(genArches) == 0 {
			if a, ok := nvbuild.DetectArch(); ok {
				genArches = []string{a}
			}
		}
		cacheDir := *cache
		if cacheDir == "" {
			cacheDir = nvbuild.DefaultCacheDir()
		}
		var err error
		if dir, err = generateForBuild(dir, c.Changed("gen"), cacheDir, *only, genArches); err != nil {
			return fmt.Errorf("build: generating %q: %w", *only, err)
		}
		fmt.Fprintf(stdout, "ncclgen build: sources for %s in %s\n", describe(*only), dir)
	}

	res, err := nvbuild.Build(ctx, nvbuild.Options{
		GenDir:     dir,
		Arches:     arches,
		Jobs:       *jobs,
		Out:        *out,
		CacheDir:   *cache,
		NVCC:       *nvcc,
		Progress:   stdout,
		ExtraFlags: *xflags,
		PTX:        *ptx,
	})
	if errors.Is(err, nvbuild.ErrNoNVCC) {
		return fmt.Errorf("build: %w; or pass --nvcc /path/to/nvcc (the sources are ready in %s)", err, dir)
	}
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	if *only != "" && !strings.EqualFold(strings.TrimSpace(res.Filter), strings.TrimSpace(*only)) {
		fmt.Fprintf(stderr, "ncclgen build: warning: %s was generated with filter %q, not %q\n", dir, res.Filter, *only)
	}
	return nil
}

func describe(only string) string {
	if strings.TrimSpace(only) == "" {
		return "every function"
	}
	return fmt.Sprintf("filter %q", only)
}

// generateForBuild writes the sources of the kernel set for filter, with
// a copy of the device library, and returns their directory: dir when
// explicit, else a directory under cacheDir named by the content's hash
// (so concurrent builds of different sets or ncclgo versions never share
// one). Everything comes from the model, templates and headers built into
// this binary.
func generateForBuild(dir string, explicit bool, cacheDir, filter string, arches []string) (string, error) {
	files, err := generateFiles(filter, arches, "devicesrc")
	if err != nil {
		return "", err
	}
	err = fs.WalkDir(devicesrc.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(devicesrc.FS, p)
		files[path.Join("devicesrc", p)] = b
		return err
	})
	if err != nil {
		return "", err
	}
	if !explicit {
		names := make([]string, 0, len(files))
		for n := range files {
			names = append(names, n)
		}
		sort.Strings(names)
		h := sha256.New()
		for _, n := range names {
			fmt.Fprintf(h, "%s\x00%d\x00", n, len(files[n]))
			h.Write(files[n])
		}
		dir = filepath.Join(cacheDir, "gen", hex.EncodeToString(h.Sum(nil))[:16])
	}
	if err := gen.WriteDir(dir, files); err != nil {
		return "", err
	}
	// WriteDir leaves files it does not own; drop device headers that
	// the library no longer has.
	old, _ := filepath.Glob(filepath.Join(dir, "devicesrc", "*"))
	for _, p := range old {
		if _, ok := files[path.Join("devicesrc", filepath.Base(p))]; !ok {
			if err := os.Remove(p); err != nil {
				return "", err
			}
		}
	}
	return dir, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// runInspect implements `ncclgen inspect`.
func runInspect(args []string, stdout, stderr io.Writer) error {
	c := newCommand("inspect", "FILE ", "Prints what a kernel set (the file ncclgen build writes) holds.", stdout)
	fatbin := c.String("fatbin", "", "also write the set's bare image (for cuobjdump) to this `file`")
	if err := c.parse(args, 1, 1); err != nil {
		return ok(err)
	}
	b, err := os.ReadFile(c.Arg(0))
	if err != nil {
		return err
	}
	m, img, err := kset.Split(b)
	if err != nil {
		return fmt.Errorf("%s: %w", c.Arg(0), err)
	}
	abi := m.ABI
	if m.ABI == generated.ABIVersion {
		abi += " (this ncclgo's)"
	} else {
		abi += fmt.Sprintf(" (this ncclgo's is %s: it would refuse the set)", generated.ABIVersion)
	}
	ptx := m.PTX
	if ptx == "" {
		ptx = "none"
	}
	fmt.Fprintf(stdout, "kernel set: %s\nfilter:     %s\nabi:        %s\narches:     %s (PTX: %s)\nfunctions:  %d\nkernels:    %d\nimage:      %d bytes\n",
		c.Arg(0), describe(m.Filter), abi, strings.Join(m.Arches, " "), ptx, len(m.Funcs), len(m.Kernels), len(img))
	if *fatbin != "" {
		if err := os.WriteFile(*fatbin, img, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s\n", *fatbin)
	}
	return nil
}
