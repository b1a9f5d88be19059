package topo

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

// NVML, loaded with dlopen at the first use: the library is not linked
// against libnvidia-ml, so that a host without it (or a client that links
// against libnccl.so.2) never needs its symbols. nvmlPciInfo_t and the
// signatures are NVML's (nvml.h, stable since NVML 5).
typedef struct {
	char busIdLegacy[16];
	unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
	char busId[32];
	char pad[64]; // room for fields a later NVML may add
} ngNvmlPciInfo;

typedef int (*ngNvmlInit_t)(void);
typedef int (*ngNvmlHandle_t)(const char*, void**);
typedef int (*ngNvmlLinkState_t)(void*, unsigned int, int*);
typedef int (*ngNvmlRemotePci_t)(void*, unsigned int, ngNvmlPciInfo*);
typedef const char* (*ngNvmlErrorString_t)(int);

static struct {
	ngNvmlHandle_t handle;
	ngNvmlLinkState_t linkState;
	ngNvmlRemotePci_t remotePci;
	ngNvmlErrorString_t errorString;
} ngNvml;

// ngNvmlLoad opens lib and resolves the symbols; it returns 0, or -1 with
// what failed in err (dlerror's text), or the nvmlInit_v2 result (> 0).
static int ngNvmlLoad(const char* lib, char* err, size_t n) {
	void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char* e = dlerror();
		strncpy(err, e ? e : "dlopen failed", n - 1);
		return -1;
	}
	ngNvmlInit_t init = (ngNvmlInit_t)dlsym(h, "nvmlInit_v2");
	ngNvml.handle = (ngNvmlHandle_t)dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
	ngNvml.linkState = (ngNvmlLinkState_t)dlsym(h, "nvmlDeviceGetNvLinkState");
	ngNvml.remotePci = (ngNvmlRemotePci_t)dlsym(h, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
	ngNvml.errorString = (ngNvmlErrorString_t)dlsym(h, "nvmlErrorString");
	if (!init || !ngNvml.handle || !ngNvml.linkState || !ngNvml.remotePci || !ngNvml.errorString) {
		snprintf(err, n, "%s lacks one of nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2, nvmlDeviceGetNvLinkState, nvmlDeviceGetNvLinkRemotePciInfo_v2, nvmlErrorString", lib);
		dlclose(h);
		return -1;
	}
	return init();
}

static const char* ngNvmlError(int r) { return ngNvml.errorString(r); }

static int ngNvmlDevice(const char* busID, void** dev) { return ngNvml.handle(busID, dev); }

// ngNvmlLink reports link's far end in busId when the link is active: 0,
// or NVML's error (a link the GPU lacks), or -1 when it is not active.
static int ngNvmlLink(void* dev, unsigned int link, char* busId, size_t n) {
	int state = 0;
	int r = ngNvml.linkState(dev, link, &state);
	if (r != 0) {
		return r;
	}
	if (state != 1) { // NVML_FEATURE_ENABLED
		return -1;
	}
	ngNvmlPciInfo pci;
	memset(&pci, 0, sizeof pci);
	r = ngNvml.remotePci(dev, link, &pci);
	if (r != 0) {
		return r;
	}
	strncpy(busId, pci.busId, n - 1);
	busId[n - 1] = 0;
	return 0;
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// nvmlLibrary is the NVML library dlopen loads (a test points it elsewhere
// before the first use).
var nvmlLibrary = "libnvidia-ml.so.1"

// nvmlMaxLinks is NVML_NVLINK_MAX_LINKS of current NVML; a GPU with fewer
// links answers an error for the others, which are skipped.
const nvmlMaxLinks = 36

var (
	nvmlOnce sync.Once
	nvmlErr  error
)

// nvmlInit loads NVML and initializes it, once; its absence is an error
// wrapping ErrNoNVML, which callers tolerate (NVLink counts unknown).
func nvmlInit() error {
	nvmlOnce.Do(func() {
		lib := C.CString(nvmlLibrary)
		defer C.free(unsafe.Pointer(lib))
		var msg [512]C.char
		switch r := C.ngNvmlLoad(lib, &msg[0], C.size_t(len(msg))); {
		case r < 0:
			nvmlErr = fmt.Errorf("%w: %s", ErrNoNVML, C.GoString(&msg[0]))
		case r > 0:
			nvmlErr = fmt.Errorf("%w: nvmlInit_v2: %s", ErrNoNVML, C.GoString(C.ngNvmlError(r)))
		}
	})
	return nvmlErr
}

func nvmlLinks(busID string) ([]string, error) {
	if err := nvmlInit(); err != nil {
		return nil, err
	}
	id := C.CString(busID)
	defer C.free(unsafe.Pointer(id))
	var dev unsafe.Pointer
	if r := C.ngNvmlDevice(id, &dev); r != 0 {
		return nil, fmt.Errorf("%w: nvmlDeviceGetHandleByPciBusId_v2(%s): %s", ErrNoNVML, busID, C.GoString(C.ngNvmlError(r)))
	}
	var remotes []string
	var buf [32]C.char
	for link := range nvmlMaxLinks {
		if C.ngNvmlLink(dev, C.uint(link), &buf[0], C.size_t(len(buf))) == 0 {
			remotes = append(remotes, C.GoString(&buf[0]))
		}
	}
	return remotes, nil
}
