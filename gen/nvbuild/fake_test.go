package nvbuild

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/kset"
)

// fakeNVCC is a stand-in for nvcc, nvlink and fatbinary (dispatching on its
// own name). It logs every invocation to $root/log, resolves #include "x"
// through the -I dirs (recursively) for the dependency file, and writes
// outputs whose content depends on the inputs. A source containing
// FAKE_ERROR fails to compile; FAKE_SLEEP makes the compile take a while.
const fakeNVCC = `#!/bin/sh
root=$(cd "$(dirname "$0")/../.." && pwd)
log="$root/log"
tool=$(basename "$0")
case "$tool" in
nvcc)
  case "$1" in
  --version) cat "$root/version"; exit 0;;
  --list-gpu-code) printf 'sm_70\nsm_75\nsm_80\nsm_86\nsm_87\nsm_89\nsm_90\n'; exit 0;;
  esac
  out=; dep=; src=; target=; incs=
  while [ $# -gt 0 ]; do
    case "$1" in
    -o) out=$2; shift;;
    -MF) dep=$2; shift;;
    -arch=*) target=${1#-arch=};;
    -gencode=*) target=${1##*code=};;
    -I*) incs="$incs ${1#-I}";;
    *.cu) src=$1;;
    esac
    shift
  done
  echo "compile $target $src" >> "$log"
  mkdir -p "$root/running"
  touch "$root/running/$$"
  echo "concurrent $(ls "$root/running" | wc -l)" >> "$log"
  if grep -q FAKE_SLEEP "$src"; then sleep 1; fi
  if grep -q FAKE_SLEEP_LONG "$src"; then sleep 5; fi
  if grep -q FAKE_ERROR "$src"; then
    echo "$src(3): error: identifier \"boom\" is undefined" >&2
    rm -f "$root/running/$$"
    exit 2
  fi
  if grep -q FAKE_WARN "$src"; then echo "$src(1): warning: fake warning" >&2; fi
  # Resolve includes breadth first.
  queue=$src; deps=
  while [ -n "$queue" ]; do
    set -- $queue; cur=$1; shift; queue="$*"
    for h in $(sed -n 's/^#include "\(.*\)"/\1/p' "$cur"); do
      for d in $incs; do
        if [ -f "$d/$h" ]; then
          case " $deps " in *" $d/$h "*) ;; *) deps="$deps $d/$h"; queue="$queue $d/$h";; esac
          break
        fi
      done
    done
  done
  { echo "$out : $src \\"; for d in $deps; do echo "    $d \\"; done; echo; } > "$dep"
  { echo "OBJ $target $src"; cat "$src"; for d in $deps; do cat "$d"; done; } > "$out"
  rm -f "$root/running/$$"
  ;;
nvlink)
  out=; arch=; ins=
  while [ $# -gt 0 ]; do
    case "$1" in
    -o) out=$2; shift;;
    -arch=*) arch=${1#-arch=};;
    -*) ;;
    *) ins="$ins $1";;
    esac
    shift
  done
  echo "nvlink $arch" >> "$log"
  if [ -f "$root/nvlink_fail" ]; then echo "nvlink error: undefined reference to 'addOne'" >&2; exit 1; fi
  { echo "LINKED $arch"; cat $ins; } > "$out"
  ;;
fatbinary)
  out=
  for a in "$@"; do
    case "$a" in
    --create=*) out=${a#--create=};;
    --image3=*) f=${a##*file=}; echo "IMAGE $a" >> "$out.tmp"; cat "$f" >> "$out.tmp";;
    esac
  done
  echo "fatbinary" >> "$log"
  mv "$out.tmp" "$out"
  ;;
esac
`

// fakeKernelSet is a generated tree's kernelset.json.
const fakeKernelSet = `{"format": 1, "abi": "00000000deadbeef", "filter": "AllReduce Sum f32 * *", "arches": ["sm_90"],
 "func_table": "ngDevFuncTable", "funcs": [{"f": "AllReduce Sum f32 RING LL", "k": 0, "s": true, "i": true}],
 "kernels": [{"f": "AllReduce Sum f32 RING LL", "sym": "ngDevKernel_AllReduce_Sum_f32_RING_LL"}], "aliases": {}}`

// fakeEnv is a fake CUDA toolkit plus a generated tree.
type fakeEnv struct {
	root, nvcc, gen, cache, out string
}

func newFakeEnv(t *testing.T) *fakeEnv {
	t.Helper()
	root := t.TempDir()
	e := &fakeEnv{
		root:  root,
		nvcc:  filepath.Join(root, "cuda", "bin", "nvcc"),
		gen:   filepath.Join(root, "src", "generated"),
		cache: filepath.Join(root, "cache"),
		out:   filepath.Join(root, "build", "ncclgo.fatbin"),
	}
	bin := filepath.Dir(e.nvcc)
	require.NoError(t, os.MkdirAll(bin, 0o755))
	for _, n := range []string{"nvcc", "nvlink", "fatbinary"} {
		require.NoError(t, os.WriteFile(filepath.Join(bin, n), []byte(fakeNVCC), 0o755))
	}
	// A toolkit-like nvvm dir so nvvmPath is satisfied.
	require.NoError(t, os.MkdirAll(filepath.Join(root, "cuda", "nvvm", "lib64"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "cuda", "nvvm", "lib64", "libnvvm.so"), nil, 0o644))
	e.setVersion(t, "Cuda compilation tools, release 12.4, V12.4.131")

	e.write(t, "src/devicesrc/common.h", "#pragma once\n#include \"op.h\"\n")
	e.write(t, "src/devicesrc/op.h", "#pragma once\n// op v1\n")
	e.write(t, "src/devicesrc/table.h", "#pragma once\n// table v1\n")
	e.write(t, "src/generated/include/ngabi.h", "#pragma once\n// abi v1\n")
	e.write(t, "src/generated/cuda/all_reduce_sum_f32.cu", "#include \"ngabi.h\"\n#include \"common.h\"\n// allreduce\n")
	e.write(t, "src/generated/cuda/all_gather.cu", "#include \"ngabi.h\"\n// allgather\n")
	e.write(t, "src/generated/cuda/device_table.cu", "#include \"ngabi.h\"\n#include \"table.h\"\n// table\n")
	e.writeManifest(t, []string{"cuda/all_reduce_sum_f32.cu", "cuda/all_gather.cu", "cuda/device_table.cu"})
	e.write(t, "src/generated/"+kset.FileName, fakeKernelSet)
	return e
}

func (e *fakeEnv) write(t *testing.T, rel, content string) {
	t.Helper()
	p := filepath.Join(e.root, filepath.FromSlash(rel))
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
}

func (e *fakeEnv) writeManifest(t *testing.T, files []string) {
	t.Helper()
	var units []string
	for _, f := range files {
		units = append(units, `{"file": "`+f+`", "coll": "X", "functions": [], "kernels": ["K"], "requires": {"cudart": 0, "arch": 0}}`)
	}
	e.write(t, "src/generated/manifest.json", `{"version": 1, "filter": "", "arches": ["sm_90"],
 "include_dirs": ["include", "../devicesrc"], "nvcc_flags": ["-std=c++17"],
 "units": [`+strings.Join(units, ",\n")+`]}`)
}

func (e *fakeEnv) setVersion(t *testing.T, v string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(e.root, "version"), []byte(v+"\n"), 0o644))
}

// takeLog returns the tool invocations since the last call (concurrency
// lines dropped) and clears the log.
func (e *fakeEnv) takeLog(t *testing.T) []string {
	t.Helper()
	p := filepath.Join(e.root, "log")
	data, err := os.ReadFile(p)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	require.NoError(t, os.Remove(p))
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if l != "" && !strings.HasPrefix(l, "concurrent ") {
			out = append(out, l)
		}
	}
	return out
}

func (e *fakeEnv) opts() Options {
	return Options{GenDir: e.gen, Arches: []string{"sm_80", "sm_90"}, Jobs: 4, Out: e.out, CacheDir: e.cache, NVCC: e.nvcc, PTX: true}
}
