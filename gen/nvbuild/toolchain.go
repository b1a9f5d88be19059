package nvbuild

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
)

// ErrNoNVCC means no CUDA compiler was found.
var ErrNoNVCC = errors.New("nvcc not found: install the CUDA toolkit, or set CUDA_HOME (nvcc is $CUDA_HOME/bin/nvcc) or NVCC (the nvcc binary)")

// FindNVCC locates nvcc: explicit (Options.NVCC), else $NVCC, else
// $CUDA_HOME/bin/nvcc, else nvcc on PATH, else /usr/local/cuda/bin/nvcc.
// An explicit path or $NVCC that does not exist is an error rather than a
// reason to look elsewhere. Every failure wraps ErrNoNVCC.
func FindNVCC(explicit string) (string, error) {
	if explicit != "" {
		return checkExecutable(explicit, "--nvcc/Options.NVCC")
	}
	if env := os.Getenv("NVCC"); env != "" {
		return checkExecutable(env, "$NVCC")
	}
	var tried []string
	if home := os.Getenv("CUDA_HOME"); home != "" {
		p := filepath.Join(home, "bin", exeName("nvcc"))
		if isExecutable(p) {
			return p, nil
		}
		tried = append(tried, p+" ($CUDA_HOME)")
	}
	if p, err := exec.LookPath("nvcc"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		return p, nil
	}
	tried = append(tried, "PATH")
	def := "/usr/local/cuda/bin/nvcc"
	if isExecutable(def) {
		return def, nil
	}
	tried = append(tried, def)
	return "", fmt.Errorf("%w (tried %s)", ErrNoNVCC, strings.Join(tried, ", "))
}

func checkExecutable(p, origin string) (string, error) {
	if !strings.ContainsRune(p, filepath.Separator) && !strings.ContainsRune(p, '/') {
		lp, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("%w (%s=%q is not on PATH)", ErrNoNVCC, origin, p)
		}
		p = lp
	}
	if !isExecutable(p) {
		return "", fmt.Errorf("%w (%s=%q is not an executable file)", ErrNoNVCC, origin, p)
	}
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	return p, nil
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() {
		return false
	}
	return runtime.GOOS == "windows" || st.Mode().Perm()&0o111 != 0
}

func exeName(s string) string {
	if runtime.GOOS == "windows" {
		return s + ".exe"
	}
	return s
}

// toolchain is one CUDA toolkit's tools plus what a build needs to know
// about them.
type toolchain struct {
	nvcc, nvlink, fatbinary string
	version                 string   // nvcc --version output, part of every cache key
	release                 string   // "13.0"
	releaseNum              int      // 13000, comparable with Requires.CUDART
	gpuCodes                []string // nvcc --list-gpu-code (sm_* only); nil if unknown
}

var releaseRE = regexp.MustCompile(`release (\d+)\.(\d+)`)

func probeToolchain(ctx context.Context, nvcc string) (*toolchain, error) {
	tc := &toolchain{nvcc: nvcc}
	out, err := exec.CommandContext(ctx, nvcc, "--version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s --version: %v\n%s", nvcc, err, out)
	}
	tc.version = string(out)
	if m := releaseRE.FindStringSubmatch(tc.version); m != nil {
		tc.release = m[1] + "." + m[2]
		var maj, min int
		fmt.Sscan(m[1], &maj)
		fmt.Sscan(m[2], &min)
		tc.releaseNum = maj*1000 + min*10
	}
	if out, err := exec.CommandContext(ctx, nvcc, "--list-gpu-code").Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "sm_") {
				tc.gpuCodes = append(tc.gpuCodes, f)
			}
		}
	}
	if tc.nvlink, err = siblingTool(nvcc, "nvlink"); err != nil {
		return nil, err
	}
	if tc.fatbinary, err = siblingTool(nvcc, "fatbinary"); err != nil {
		return nil, err
	}
	return tc, nil
}

// siblingTool finds a CUDA tool next to nvcc (also next to the file nvcc
// links to), else on PATH.
func siblingTool(nvcc, name string) (string, error) {
	dirs := []string{filepath.Dir(nvcc)}
	if real, err := filepath.EvalSymlinks(nvcc); err == nil {
		dirs = append(dirs, filepath.Dir(real))
	}
	for _, d := range dirs {
		if p := filepath.Join(d, exeName(name)); isExecutable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: found %s but not %s next to it or on PATH (incomplete CUDA toolkit?)", ErrNoNVCC, nvcc, name)
}

func (tc *toolchain) checkArches(arches []string) error {
	if tc.gpuCodes == nil {
		return nil
	}
	var bad []string
	for _, a := range arches {
		found := false
		for _, c := range tc.gpuCodes {
			if c == a {
				found = true
				break
			}
		}
		if !found {
			bad = append(bad, a)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: nvcc %s (%s) cannot compile for %s; it supports %s", ErrBadArch, tc.release, tc.nvcc, strings.Join(bad, " "), strings.Join(tc.gpuCodes, " "))
	}
	return nil
}

// nvvmPath finds the directory nvlink -lto wants as -nvvmpath: one holding
// lib64/libnvvm.so and libdevice/. NVIDIA's toolkits have it at
// <nvcc>/../../nvvm. Distribution packages (Debian's nvidia-cuda-toolkit)
// scatter the pieces; for those a shim directory of symlinks is made under
// the cache.
func nvvmPath(nvcc, cacheDir string) (string, error) {
	var roots []string
	for _, p := range []string{nvcc, evalOr(nvcc)} {
		roots = append(roots, filepath.Dir(filepath.Dir(p)))
	}
	lib := "lib64"
	so := "libnvvm.so"
	if runtime.GOOS == "windows" {
		lib, so = "bin", "nvvm64_40_0.dll"
	}
	for _, r := range roots {
		d := filepath.Join(r, "nvvm")
		if fileExists(filepath.Join(d, lib, so)) {
			return d, nil
		}
	}
	// Scattered layout.
	var libnvvm, libdevice string
	for _, c := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"} {
		if p := filepath.Join(c, so); fileExists(p) {
			libnvvm = p
			break
		}
	}
	for _, r := range roots {
		for _, c := range []string{filepath.Join(r, "libdevice"), filepath.Join(r, "nvvm", "libdevice")} {
			if fileExists(c) {
				libdevice = c
				break
			}
		}
	}
	if libdevice == "" && fileExists("/usr/lib/nvidia-cuda-toolkit/libdevice") {
		libdevice = "/usr/lib/nvidia-cuda-toolkit/libdevice"
	}
	if libnvvm == "" || libdevice == "" {
		return "", fmt.Errorf("cannot find libnvvm (needed by nvlink -lto for the PTX image) near %s; build with NoPTX (--no-ptx) or install the full CUDA toolkit", nvcc)
	}
	shim := filepath.Join(cacheDir, "nvvm-shim", hashStrings(libnvvm, libdevice)[:16])
	if fileExists(filepath.Join(shim, lib, so)) {
		return shim, nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(shim), ".shim-*")
	if err != nil {
		if err := os.MkdirAll(filepath.Dir(shim), 0o755); err != nil {
			return "", err
		}
		if tmp, err = os.MkdirTemp(filepath.Dir(shim), ".shim-*"); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(filepath.Join(tmp, lib), 0o755); err != nil {
		return "", err
	}
	if err := os.Symlink(libnvvm, filepath.Join(tmp, lib, so)); err != nil {
		return "", err
	}
	if err := os.Symlink(libdevice, filepath.Join(tmp, "libdevice")); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, shim); err != nil {
		os.RemoveAll(tmp)
		if !fileExists(filepath.Join(shim, lib, so)) {
			return "", err
		}
	}
	return shim, nil
}

func evalOr(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
