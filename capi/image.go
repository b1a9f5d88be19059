package main

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>

static char ncclgo_anchor;

// ncclgo_library_path is the path of the shared object this code is in
// (dladdr of a static symbol of it), or NULL.
static const char* ncclgo_library_path(void) {
  Dl_info info;
  if (dladdr(&ncclgo_anchor, &info) == 0 || info.dli_fname == NULL) return NULL;
  return info.dli_fname;
}
*/
import "C"

import (
	"os"
	"path/filepath"
	"sync"

	"github.com/ncclgo/ncclgo/runtime/kernels"
)

// imageName is the kernel image's file name beside the library.
const imageName = "ncclgo.fatbin"

// besideImage returns the kernel image beside the library
// (<dir of libnccl.so.2>/ncclgo.fatbin) when neither $NCCLGO_FATBIN nor an
// embedded image provides one, and "" otherwise: then kernels.FindImage
// searches as it always does.
var besideImage = sync.OnceValue(func() string {
	if os.Getenv(kernels.EnvFatbin) != "" {
		return ""
	}
	if _, src, err := kernels.FindImage(""); err == nil && src == kernels.EmbeddedSource {
		return ""
	}
	return imageBeside(libraryPath())
})

func libraryPath() string {
	p := C.ncclgo_library_path()
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

// imageBeside returns dir(lib)/ncclgo.fatbin if that file exists.
func imageBeside(lib string) string {
	if lib == "" {
		return ""
	}
	if r, err := filepath.EvalSymlinks(lib); err == nil {
		lib = r
	}
	p := filepath.Join(filepath.Dir(lib), imageName)
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
		return p
	}
	return ""
}
