package nvbuild

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/kset"
)

// Options configures Build. The zero value builds ./generated for the local
// GPU's arch into build/ncclgo.fatbin.
type Options struct {
	// GenDir holds manifest.json and the generated sources (default "generated").
	GenDir string
	// Arches are SASS targets like "sm_80", "sm_90" (see KnownArches; "90"
	// and "9.0" are accepted too). Empty: the local GPU's (DetectArch), else
	// the manifest's "arches", else DefaultArch.
	Arches []string
	// Jobs is the number of parallel nvcc processes (default runtime.NumCPU()).
	Jobs int
	// Out is the fatbin to write (default build/ncclgo.fatbin).
	Out string
	// CacheDir holds the content-addressed cache (default DefaultCacheDir()).
	CacheDir string
	// NVCC is the nvcc binary (default: see FindNVCC).
	NVCC string
	// Progress receives progress output; a terminal gets a redrawn status
	// line. Nil: silent.
	Progress io.Writer
	// ExtraFlags go to every nvcc compile after the manifest's nvcc_flags,
	// e.g. "-Xptxas=-maxrregcount=96", "-lineinfo". They are part of the
	// cache key.
	ExtraFlags []string
	// PTX adds the forward-compatible PTX image of the newest arch (LTO
	// compiles of every unit and one whole-program LTO link, which takes
	// minutes for the full kernel set); see the package documentation.
	PTX bool
}

// Result describes a finished build.
type Result struct {
	Out    string   // the file written: the kernel set (manifest and fatbin), or a bare fatbin without kernelset.json
	Size   int64    // its size in bytes
	Arches []string // SASS images, oldest first ("sm_80", "sm_90")
	// ArchSource says where Arches came from: "options", "local GPU",
	// "manifest" or "default".
	ArchSource string
	PTXArch    string // "compute_90", or "" without Options.PTX
	Filter     string // the manifest's filter
	ABI        string // the kernel set's ABI version ("" for a bare fatbin)
	Units      int    // translation units in the manifest

	Compiled int // nvcc compiles run
	Cached   int // compiles answered by the cache
	Linked   int // nvlink runs
	// LinkCached counts link steps (SASS per arch, PTX) answered by the cache.
	LinkCached int
	// Packed is false when the fatbin came from the cache (no fatbinary run).
	Packed bool
	// Unchanged is true when Out already had exactly this content.
	Unchanged bool

	NVCC        string // the nvcc used
	NVCCRelease string // "13.0"
	Warnings    []string
	Elapsed     time.Duration
}

// ToolError is a failed nvcc, nvlink or fatbinary run.
type ToolError struct {
	Step   string   // "compile", "link" or "pack"
	File   string   // the unit file, relative to the generated tree (compile)
	Target string   // "sm_90", "lto_90" (compile); "sm_90", "compute_90" (link)
	Args   []string // the command line
	Output string   // what the tool wrote (stderr and stdout)
	Err    error    // usually an *exec.ExitError
}

func (e *ToolError) Error() string {
	var b strings.Builder
	switch e.Step {
	case "compile":
		fmt.Fprintf(&b, "nvcc failed on %s for %s: %v", e.File, e.Target, e.Err)
	case "link":
		fmt.Fprintf(&b, "nvlink failed linking %s: %v", e.Target, e.Err)
	default:
		fmt.Fprintf(&b, "%s failed: %v", e.Step, e.Err)
	}
	if out := strings.TrimSpace(e.Output); out != "" {
		b.WriteString("\n")
		b.WriteString(out)
	} else {
		fmt.Fprintf(&b, "\n(no output; command: %s)", strings.Join(e.Args, " "))
	}
	return b.String()
}

func (e *ToolError) Unwrap() error { return e.Err }

const maxToolOutput = 256 << 10

// target is one compile flavour: SASS for an arch, or LTO IR for the PTX.
type target struct {
	name string // "sm_90" or "lto_90"
	arch string // "sm_90" (sass) or "90" (lto: the compute arch number)
	lto  bool
	ext  string
}

type task struct {
	unit    *Unit
	tgt     *target
	args    []string // without -MMD/-MF/-o/source
	depsKey string
	objKey  string
	cached  bool
	size    int64
}

type builder struct {
	opt     Options
	m       *Manifest
	gen     string // absolute GenDir
	tc      *toolchain
	nvvm    string
	store   store
	hasher  *fileHasher
	prog    *progress
	arches  []string
	targets []*target
	tasks   []*task

	mu       sync.Mutex
	res      *Result
	firstErr error
	cancel   context.CancelFunc
}

// Build compiles, links and packs the generated tree; see the package
// documentation for the steps and the cache. On an nvcc failure the build
// stops (running compiles are killed) and the error is a *ToolError naming
// the unit and the arch, with nvcc's output.
func Build(ctx context.Context, opt Options) (*Result, error) {
	start := time.Now()
	if opt.GenDir == "" {
		opt.GenDir = "generated"
	}
	if opt.Jobs <= 0 {
		opt.Jobs = runtime.NumCPU()
	}
	if opt.Out == "" {
		opt.Out = filepath.Join("build", "ncclgo.fatbin")
	}
	if opt.CacheDir == "" {
		opt.CacheDir = DefaultCacheDir()
	}
	m, err := LoadManifest(opt.GenDir)
	if err != nil {
		return nil, err
	}
	arches, archSource, err := resolveArches(opt.Arches, m)
	if err != nil {
		return nil, err
	}
	nvcc, err := FindNVCC(opt.NVCC)
	if err != nil {
		return nil, err
	}
	tc, err := probeToolchain(ctx, nvcc)
	if err != nil {
		return nil, err
	}
	if err := tc.checkArches(arches); err != nil {
		return nil, err
	}
	cacheDir, err := filepath.Abs(opt.CacheDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	gen, err := filepath.Abs(opt.GenDir)
	if err != nil {
		return nil, err
	}
	b := &builder{
		opt: opt, m: m, gen: gen, tc: tc,
		store: store{dir: cacheDir}, hasher: newFileHasher(),
		prog: newProgress(opt.Progress, start), arches: arches,
		res: &Result{
			Out: opt.Out, Arches: arches, ArchSource: archSource, Filter: m.Filter, Units: len(m.Units),
			NVCC: nvcc, NVCCRelease: tc.release,
		},
	}
	if opt.PTX {
		if b.nvvm, err = nvvmPath(nvcc, cacheDir); err != nil {
			return nil, err
		}
	}
	cleanStaleTmp(filepath.Join(cacheDir, "tmp"))
	if err := b.run(ctx); err != nil {
		return nil, err
	}
	b.res.Elapsed = time.Since(start)
	b.finalLine()
	return b.res, nil
}

func resolveArches(given []string, m *Manifest) ([]string, string, error) {
	if len(given) > 0 {
		a, err := ParseArches(given)
		return a, "options", err
	}
	if a, ok := DetectArch(); ok {
		return []string{a}, "local GPU", nil
	}
	if len(m.Arches) > 0 {
		a, err := ParseArches(m.Arches)
		if err != nil {
			return nil, "", fmt.Errorf("manifest arches: %w", err)
		}
		return a, "manifest", nil
	}
	return []string{DefaultArch}, "default", nil
}

func (b *builder) run(ctx context.Context) error {
	for _, a := range b.arches {
		b.targets = append(b.targets, &target{name: a, arch: a, ext: ".cubin"})
	}
	if b.opt.PTX {
		n := ptxArchFor(b.arches[len(b.arches)-1])
		b.targets = append(b.targets, &target{name: "lto_" + n, arch: n, lto: true, ext: ".fatbin"})
		b.res.PTXArch = "compute_" + n
	}
	if err := b.plan(); err != nil {
		return err
	}

	var todo []*task
	for _, t := range b.tasks {
		if t.cached {
			b.res.Cached++
		} else {
			todo = append(todo, t)
		}
	}
	slices.SortStableFunc(todo, func(x, y *task) int {
		if x.tgt.lto != y.tgt.lto { // the PTX link is the long serial step: feed it first
			if x.tgt.lto {
				return -1
			}
			return 1
		}
		return int(y.size - x.size) // big units first
	})
	targetsDesc := strings.Join(b.arches, " ")
	if b.res.PTXArch != "" {
		targetsDesc += " + PTX " + b.res.PTXArch
	}
	archFrom := ""
	if b.res.ArchSource != "options" {
		archFrom = " (arch from " + b.res.ArchSource + ")"
	}
	b.prog.step("ncclgo build: %d units for %s%s, nvcc %s, %d jobs: %d to compile, %d cached",
		len(b.m.Units), targetsDesc, archFrom, b.tc.release, b.opt.Jobs, len(todo), b.res.Cached)
	b.notes()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b.cancel = cancel

	pending := map[*target]*sync.WaitGroup{}
	for _, tg := range b.targets {
		pending[tg] = new(sync.WaitGroup)
	}
	for _, t := range todo {
		pending[t.tgt].Add(1)
	}
	var compilesLeft sync.WaitGroup
	compilesLeft.Add(len(todo))

	b.prog.begin(len(todo))
	queue := make(chan *task)
	var all sync.WaitGroup
	for i := 0; i < min(b.opt.Jobs, max(len(todo), 1)); i++ {
		all.Add(1)
		go func() {
			defer all.Done()
			for t := range queue {
				if ctx.Err() == nil {
					if err := b.compile(ctx, t); err != nil {
						b.fail(err)
					}
				}
				pending[t.tgt].Done()
				compilesLeft.Done()
			}
		}()
	}
	all.Add(1)
	go func() {
		defer all.Done()
		defer close(queue)
		for _, t := range todo {
			select {
			case queue <- t:
			case <-ctx.Done():
				// Account for the tasks never handed out.
				pending[t.tgt].Done()
				compilesLeft.Done()
			}
		}
	}()
	all.Add(1)
	go func() {
		defer all.Done()
		compilesLeft.Wait()
		if ctx.Err() == nil {
			b.prog.setPhase("linking")
		}
	}()

	linked := make([]string, len(b.targets)) // link keys
	for i, tg := range b.targets {
		all.Add(1)
		go func() {
			defer all.Done()
			pending[tg].Wait()
			if ctx.Err() != nil {
				return
			}
			key, err := b.link(ctx, tg)
			if err != nil {
				b.fail(err)
				return
			}
			linked[i] = key
		}()
	}
	all.Wait()
	b.prog.end()
	if err := b.err(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.pack(ctx, linked)
}

func (b *builder) fail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.firstErr == nil {
		b.firstErr = err
		b.cancel()
	}
}

func (b *builder) err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.firstErr
}

// commonFlags are the compile flags shared by every unit and target.
func (b *builder) commonFlags() []string {
	user := slices.Concat(b.m.NVCCFlags, b.opt.ExtraFlags)
	var f []string
	if !hasFlag(user, "-std", "--std") {
		f = append(f, "-std=c++17")
	}
	if !hasFlag(user, "--expt-relaxed-constexpr", "-expt-relaxed-constexpr") {
		f = append(f, "--expt-relaxed-constexpr")
	}
	f = append(f, "-Wno-deprecated-gpu-targets")
	for _, d := range b.m.IncludeDirs {
		f = append(f, "-I"+d)
	}
	return append(f, user...)
}

func hasFlag(args []string, names ...string) bool {
	for _, a := range args {
		for _, n := range names {
			if a == n || strings.HasPrefix(a, n+"=") {
				return true
			}
		}
	}
	return false
}

func (b *builder) plan() error {
	common := b.commonFlags()
	for i := range b.m.Units {
		u := &b.m.Units[i]
		src := b.resolve(u.File)
		srcHash, err := b.hasher.hash(src)
		if err != nil {
			return fmt.Errorf("%s: %w", u.File, err)
		}
		var size int64
		if st, err := os.Stat(src); err == nil {
			size = st.Size()
		}
		for _, tg := range b.targets {
			var args []string
			if tg.lto {
				args = []string{"-fatbin", "-rdc=true", fmt.Sprintf("-gencode=arch=compute_%s,code=lto_%s", tg.arch, tg.arch)}
			} else {
				args = []string{"-cubin", "-rdc=true", "-arch=" + tg.arch}
			}
			args = append(args, common...)
			t := &task{unit: u, tgt: tg, args: args, size: size}
			t.depsKey = hashStrings(cacheSchema, b.tc.version, "compile", tg.name, strings.Join(args, "\x00"), u.File, srcHash)
			if rec, ok := b.store.readDeps(t.depsKey); ok {
				if key, err := b.objKey(t.depsKey, rec.Deps); err == nil && fileExists(b.store.path("obj", key, tg.ext)) {
					t.objKey, t.cached = key, true
				}
			}
			b.tasks = append(b.tasks, t)
		}
	}
	return nil
}

func (b *builder) resolve(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(b.gen, filepath.FromSlash(p))
}

// objKey hashes the deps key with every dependency's path and content.
func (b *builder) objKey(depsKey string, deps []string) (string, error) {
	deps = slices.Clone(deps)
	slices.Sort(deps)
	parts := []string{depsKey}
	for _, d := range deps {
		h, err := b.hasher.hash(b.resolve(d))
		if errors.Is(err, fs.ErrNotExist) {
			// A listed file that is gone (or never existed) is part of the
			// key as such: if it appears, the key changes.
			h, err = "absent", nil
		}
		if err != nil {
			return "", err
		}
		parts = append(parts, d, h)
	}
	return hashStrings(parts...), nil
}

func (b *builder) notes() {
	newest := archNum(b.arches[len(b.arches)-1])
	var archUnits, rtUnits []string
	needArch, needRT := 0, 0
	for _, u := range b.m.Units {
		if u.Requires.Arch > newest {
			archUnits = append(archUnits, u.File)
			needArch = max(needArch, u.Requires.Arch)
		}
		if b.tc.releaseNum > 0 && u.Requires.CUDART > b.tc.releaseNum {
			rtUnits = append(rtUnits, u.File)
			needRT = max(needRT, u.Requires.CUDART)
		}
	}
	if len(archUnits) > 0 {
		b.warn(fmt.Sprintf("note: %d unit(s) need up to sm_%d (e.g. %s) but the newest target is %s; their functions compile to stubs",
			len(archUnits), needArch/10, archUnits[0], b.arches[len(b.arches)-1]))
	}
	if len(rtUnits) > 0 {
		b.warn(fmt.Sprintf("note: %d unit(s) need CUDA %d.%d (e.g. %s) but nvcc is %s; their functions compile to stubs",
			len(rtUnits), needRT/1000, needRT%1000/10, rtUnits[0], b.tc.release))
	}
}

func (b *builder) warn(s string) {
	b.mu.Lock()
	b.res.Warnings = append(b.res.Warnings, s)
	b.mu.Unlock()
	b.prog.step("%s", strings.TrimRight(s, "\n"))
}

// runTool runs a CUDA tool in the generated tree and returns its output.
func (b *builder) runTool(ctx context.Context, tool string, args []string) (string, error) {
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Dir = b.gen
	var out limitedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	setProcessGroup(cmd)
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	return out.String(), err
}

func (b *builder) compile(ctx context.Context, t *task) error {
	tmp, err := b.store.tempDir()
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "out"+t.tgt.ext)
	dep := filepath.Join(tmp, "out.d")
	argv := slices.Concat(t.args, []string{"-MMD", "-MF", dep, "-o", out, t.unit.File})
	began := time.Now()
	output, err := b.runTool(ctx, b.tc.nvcc, argv)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &ToolError{Step: "compile", File: t.unit.File, Target: t.tgt.name,
			Args: append([]string{b.tc.nvcc}, argv...), Output: output, Err: err}
	}
	elapsed := time.Since(began)
	data, err := os.ReadFile(dep)
	if err != nil {
		return fmt.Errorf("%s %s: nvcc wrote no dependency file: %w", t.unit.File, t.tgt.name, err)
	}
	self := filepath.Clean(b.resolve(t.unit.File))
	var deps []string
	for _, d := range parseDepfile(data) {
		if filepath.Clean(b.resolve(d)) != self {
			deps = append(deps, d)
		}
	}
	key, err := b.objKey(t.depsKey, deps)
	if err != nil {
		return fmt.Errorf("%s %s: hashing its includes: %w", t.unit.File, t.tgt.name, err)
	}
	if err := b.store.put(out, b.store.path("obj", key, t.tgt.ext)); err != nil {
		return err
	}
	if err := b.store.writeDeps(t.depsKey, &depsRecord{Deps: deps}); err != nil {
		return err
	}
	t.objKey = key
	b.mu.Lock()
	b.res.Compiled++
	b.mu.Unlock()
	if s := strings.TrimSpace(output); s != "" {
		b.warn(fmt.Sprintf("nvcc output for %s %s:\n%s", t.unit.File, t.tgt.name, s))
	}
	b.prog.compiled(filepath.Base(t.unit.File), t.tgt.name, elapsed)
	return nil
}

// link device-links one target's objects (or returns the cached image) and
// returns the link key.
func (b *builder) link(ctx context.Context, tg *target) (string, error) {
	var objs []*task
	for _, t := range b.tasks {
		if t.tgt == tg {
			objs = append(objs, t)
		}
	}
	slices.SortFunc(objs, func(x, y *task) int { return strings.Compare(x.unit.File, y.unit.File) })
	var flags []string
	ext, label := ".cubin", tg.name
	if tg.lto {
		flags = []string{"-lto", "-arch=compute_" + tg.arch, "-emit-ptx", "--suppress-stack-size-warning"}
		ext, label = ".ptx", "compute_"+tg.arch
	} else {
		flags = []string{"-arch=" + tg.arch, "--suppress-stack-size-warning"}
	}
	parts := []string{cacheSchema, b.tc.version, "link", strings.Join(flags, "\x00")}
	var inputs []string
	for _, t := range objs {
		parts = append(parts, t.objKey)
		inputs = append(inputs, b.store.path("obj", t.objKey, tg.ext))
	}
	key := hashStrings(parts...)
	dst := b.store.path("link", key, ext)
	if fileExists(dst) {
		b.mu.Lock()
		b.res.LinkCached++
		b.mu.Unlock()
		return key, nil
	}
	tmp, err := b.store.tempDir()
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "linked"+ext)
	argv := slices.Clone(flags)
	if tg.lto {
		argv = append(argv, "-nvvmpath="+b.nvvm)
	}
	argv = append(argv, "-o", out)
	argv = append(argv, inputs...)
	began := time.Now()
	output, err := b.runTool(ctx, b.tc.nvlink, argv)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", &ToolError{Step: "link", Target: label, Args: append([]string{b.tc.nvlink}, argv...), Output: output, Err: err}
	}
	if !fileExists(out) {
		return "", &ToolError{Step: "link", Target: label, Args: append([]string{b.tc.nvlink}, argv...), Output: output,
			Err: errors.New("nvlink succeeded but wrote no output")}
	}
	if s := strings.TrimSpace(output); s != "" {
		b.warn(fmt.Sprintf("nvlink output for %s:\n%s", label, s))
	}
	if err := b.store.put(out, dst); err != nil {
		return "", err
	}
	b.mu.Lock()
	b.res.Linked++
	b.mu.Unlock()
	what := "SASS"
	if tg.lto {
		what = "PTX (LTO)"
	}
	b.prog.step("linked %s %s (%d objects, %s)", what, label, len(inputs), fmtDur(time.Since(began)))
	return key, nil
}

// wrap returns the kernel-set file (package kset) of the fatbin at fat:
// the generated tree's kernelset.json, with the arches actually built,
// in front of the image. It is cached next to the fatbin. Without a
// kernelset.json (a tree from an older generator) it returns fat as is,
// with a warning: the runtime refuses images without a manifest.
func (b *builder) wrap(fat, fatKey string) (string, error) {
	js, err := os.ReadFile(filepath.Join(b.gen, kset.FileName))
	if errors.Is(err, fs.ErrNotExist) {
		b.res.Warnings = append(b.res.Warnings, fmt.Sprintf("%s has no %s: the output is a bare fatbin, which ncclgo's runtime refuses; regenerate the tree with this ncclgen", b.opt.GenDir, kset.FileName))
		return fat, nil
	}
	if err != nil {
		return "", err
	}
	m, err := kset.Decode(js)
	if err != nil {
		return "", fmt.Errorf("%s: %w", filepath.Join(b.opt.GenDir, kset.FileName), err)
	}
	m.Arches = b.arches
	m.PTX = b.res.PTXArch
	b.res.ABI = m.ABI
	enc, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	out := b.store.path("kset", hashStrings(cacheSchema, "kset", fatKey, string(enc)), ".kset")
	if fileExists(out) {
		return out, nil
	}
	img, err := os.ReadFile(fat)
	if err != nil {
		return "", err
	}
	set, err := kset.Wrap(m, img)
	if err != nil {
		return "", err
	}
	if err := writeFileAtomic(out, set); err != nil {
		return "", err
	}
	return out, nil
}

// pack builds (or fetches) the fatbin and installs it, wrapped as a
// kernel set, at Out.
func (b *builder) pack(ctx context.Context, linkKeys []string) error {
	parts := []string{cacheSchema, b.tc.version, "fatbin"}
	var argv []string
	for i, tg := range b.targets {
		parts = append(parts, tg.name, linkKeys[i])
		if tg.lto {
			argv = append(argv, fmt.Sprintf("--image3=kind=ptx,sm=%s,file=%s", tg.arch, b.store.path("link", linkKeys[i], ".ptx")))
		} else {
			argv = append(argv, fmt.Sprintf("--image3=kind=elf,sm=%s,file=%s", smNumber(tg.arch), b.store.path("link", linkKeys[i], ".cubin")))
		}
	}
	key := hashStrings(parts...)
	fat := b.store.path("fatbin", key, ".fatbin")
	var err error
	if !fileExists(fat) {
		tmp, err := b.store.tempDir()
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		out := filepath.Join(tmp, "out.fatbin")
		argv = append([]string{"-64", "--create=" + out}, argv...)
		output, err := b.runTool(ctx, b.tc.fatbinary, argv)
		if err == nil && !fileExists(out) {
			err = errors.New("fatbinary succeeded but wrote no output")
		}
		if err != nil {
			return &ToolError{Step: "pack", Target: "fatbin", Args: append([]string{b.tc.fatbinary}, argv...), Output: output, Err: err}
		}
		if err := b.store.put(out, fat); err != nil {
			return err
		}
		b.res.Packed = true
	}
	if fat, err = b.wrap(fat, key); err != nil {
		return err
	}
	same, err := sameContent(fat, b.opt.Out)
	if err != nil {
		return err
	}
	if same {
		b.res.Unchanged = true
	} else if err := copyFileAtomic(fat, b.opt.Out); err != nil {
		return fmt.Errorf("writing %s: %w", b.opt.Out, err)
	}
	st, err := os.Stat(b.opt.Out)
	if err != nil {
		return err
	}
	b.res.Size = st.Size()
	return nil
}

func sameContent(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	sb, err := os.Stat(b)
	if err != nil || sa.Size() != sb.Size() {
		return false, nil
	}
	h := newFileHasher()
	ha, err := h.hash(a)
	if err != nil {
		return false, err
	}
	hb, err := h.hash(b)
	if err != nil {
		return false, nil
	}
	return ha == hb, nil
}

func (b *builder) finalLine() {
	r := b.res
	imgs := strings.Join(r.Arches, " ")
	if r.PTXArch != "" {
		imgs += " + PTX " + r.PTXArch
	}
	state := ""
	if r.Unchanged {
		state = ", unchanged"
	}
	b.prog.step("built %s (%s; %s%s) in %s: %d compiled, %d cached, %d linked, %d link cached",
		r.Out, fmtSize(r.Size), imgs, state, fmtDur(r.Elapsed), r.Compiled, r.Cached, r.Linked, r.LinkCached)
}

// cleanStaleTmp removes temporary job dirs left by builds that were killed.
func cleanStaleTmp(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > 24*time.Hour {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// limitedBuffer keeps the first maxToolOutput bytes of a tool's output.
type limitedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	cut bool
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := maxToolOutput - l.buf.Len(); room < len(p) {
		if room > 0 {
			l.buf.Write(p[:room])
		}
		l.cut = true
		return len(p), nil
	}
	l.buf.Write(p)
	return len(p), nil
}

func (l *limitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.buf.String()
	if l.cut {
		s += "\n[... output truncated ...]"
	}
	return s
}
