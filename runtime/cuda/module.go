package cuda

/*
#include <stdlib.h>
#include <string.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"
)

// Module is a loaded CUDA module (cubin, fatbin or PTX).
type Module struct {
	ctx *Context
	h   C.CUmodule
}

// Function is a kernel of a Module.
type Function struct {
	mod  *Module
	h    C.CUfunction
	name string
}

// FunctionAttribute selects a kernel property (CUfunction_attribute).
type FunctionAttribute int

// Function attributes (values of CUfunction_attribute).
const (
	FuncAttrMaxThreadsPerBlock         FunctionAttribute = 0
	FuncAttrSharedSizeBytes            FunctionAttribute = 1
	FuncAttrConstSizeBytes             FunctionAttribute = 2
	FuncAttrLocalSizeBytes             FunctionAttribute = 3
	FuncAttrNumRegs                    FunctionAttribute = 4
	FuncAttrPTXVersion                 FunctionAttribute = 5
	FuncAttrBinaryVersion              FunctionAttribute = 6
	FuncAttrMaxDynamicSharedSizeBytes  FunctionAttribute = 8
	FuncAttrPreferredSharedMemCarveout FunctionAttribute = 9
)

const jitLogSize = 16 << 10

// LoadModule loads a cubin, fatbin or PTX image into the context
// (cuModuleLoadDataEx). The image is copied into C memory and
// NUL-terminated, so it may be PTX text without a trailing NUL. A failed
// load includes the JIT error log when the driver wrote one.
func (c *Context) LoadModule(image []byte) (*Module, error) {
	h, err := c.ctx("LoadModule")
	if err != nil {
		return nil, err
	}
	if len(image) == 0 {
		return nil, badArg("LoadModule", "empty image")
	}
	buf := C.malloc(C.size_t(len(image) + 1))
	if buf == nil {
		return nil, fmt.Errorf("cuda: LoadModule: cannot allocate %d bytes: %w", len(image)+1, ErrOutOfMemory)
	}
	defer C.free(buf)
	C.memcpy(buf, unsafe.Pointer(&image[0]), C.size_t(len(image)))
	*(*byte)(unsafe.Add(buf, len(image))) = 0
	log := (*C.char)(C.calloc(jitLogSize, 1))
	defer C.free(unsafe.Pointer(log))
	var m C.CUmodule
	if err := check("cuModuleLoadData", Result(C.ncu_module_load(h, &m, buf, log, jitLogSize))); err != nil {
		err = c.wrap(fmt.Sprintf("LoadModule(%d-byte image)", len(image)), err)
		if l := strings.TrimSpace(C.GoString(log)); l != "" {
			err = fmt.Errorf("%w; JIT log: %s", err, l)
		}
		return nil, err
	}
	return &Module{ctx: c, h: m}, nil
}

// module checks that the driver is usable and m is loaded.
func (m *Module) module(op string) (C.CUcontext, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	if m == nil || m.h == nil {
		return nil, badArg(op, "nil or unloaded *Module")
	}
	return m.ctx.ctx(op)
}

// Unload unloads the module (cuModuleUnload); its functions become
// unusable.
func (m *Module) Unload() error {
	c, err := m.module("Module.Unload")
	if err != nil {
		return err
	}
	h := m.h
	m.h = nil
	return m.ctx.wrap("Module.Unload", check("cuModuleUnload", Result(C.ncu_module_unload(c, h))))
}

// Function looks up a kernel by its (extern "C" or mangled) name
// (cuModuleGetFunction).
func (m *Module) Function(name string) (*Function, error) {
	c, err := m.module("Module.Function")
	if err != nil {
		return nil, err
	}
	if name == "" {
		return nil, badArg("Module.Function", "empty function name")
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var f C.CUfunction
	if err := check("cuModuleGetFunction", Result(C.ncu_module_function(c, &f, m.h, cname))); err != nil {
		return nil, m.ctx.wrap(fmt.Sprintf("Module.Function(%q)", name), err)
	}
	return &Function{mod: m, h: f, name: name}, nil
}

// Global returns the address and size of a __device__ variable of the
// module (cuModuleGetGlobal_v2).
func (m *Module) Global(name string) (DevicePtr, uint64, error) {
	c, err := m.module("Module.Global")
	if err != nil {
		return 0, 0, err
	}
	if name == "" {
		return 0, 0, badArg("Module.Global", "empty symbol name")
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var p C.CUdeviceptr
	var n C.size_t
	if err := check("cuModuleGetGlobal", Result(C.ncu_module_global(c, &p, &n, m.h, cname))); err != nil {
		return 0, 0, m.ctx.wrap(fmt.Sprintf("Module.Global(%q)", name), err)
	}
	return DevicePtr(p), uint64(n), nil
}

// Name returns the name the function was looked up by.
func (f *Function) Name() string {
	if f == nil {
		return ""
	}
	return f.name
}

// function checks that the driver is usable and f's module is loaded.
func (f *Function) function(op string) (C.CUcontext, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	if f == nil || f.h == nil {
		return nil, badArg(op, "nil *Function")
	}
	return f.mod.module(fmt.Sprintf("%s(%q)", op, f.name))
}

// MaxActiveBlocksPerSM returns how many blocks of blockSize threads using
// dynSmem bytes of dynamic shared memory fit on one multiprocessor at once
// (cuOccupancyMaxActiveBlocksPerMultiprocessor).
func (f *Function) MaxActiveBlocksPerSM(blockSize int, dynSmem uint64) (int, error) {
	c, err := f.function("MaxActiveBlocksPerSM")
	if err != nil {
		return 0, err
	}
	if blockSize <= 0 {
		return 0, badArg("MaxActiveBlocksPerSM", "function %q: block size %d", f.name, blockSize)
	}
	var n C.int
	if err := check("cuOccupancyMaxActiveBlocksPerMultiprocessor", Result(C.ncu_occupancy(c, &n, f.h, C.int(blockSize), C.size_t(dynSmem)))); err != nil {
		return 0, f.mod.ctx.wrap(fmt.Sprintf("MaxActiveBlocksPerSM(%q, block %d, smem %d)", f.name, blockSize, dynSmem), err)
	}
	return int(n), nil
}

// Load makes sure the kernel's code is on the device now (cuFuncLoad; an
// attribute query before CUDA 12.4). Under lazy module loading, the default
// since CUDA 11.7, a kernel is otherwise loaded at its first launch, and
// that load may wait for the device to drain: kernels that spin-waiting
// on each other would then deadlock, one of them running and the other
// never loaded.
func (f *Function) Load() error {
	c, err := f.function("Function.Load")
	if err != nil {
		return err
	}
	if err := check("cuFuncLoad", Result(C.ncu_func_load(c, f.h))); err != nil {
		return f.mod.ctx.wrap(fmt.Sprintf("Function.Load(%q)", f.name), err)
	}
	return nil
}

// Attribute returns a property of the kernel (cuFuncGetAttribute).
func (f *Function) Attribute(a FunctionAttribute) (int, error) {
	c, err := f.function("Function.Attribute")
	if err != nil {
		return 0, err
	}
	var v C.int
	if err := check("cuFuncGetAttribute", Result(C.ncu_func_attribute(c, &v, C.int(a), f.h))); err != nil {
		return 0, f.mod.ctx.wrap(fmt.Sprintf("Function.Attribute(%q, %d)", f.name, int(a)), err)
	}
	return int(v), nil
}

// SetAttribute sets a settable kernel property, such as
// FuncAttrMaxDynamicSharedSizeBytes (cuFuncSetAttribute).
func (f *Function) SetAttribute(a FunctionAttribute, v int) error {
	c, err := f.function("Function.SetAttribute")
	if err != nil {
		return err
	}
	return f.mod.ctx.wrap(fmt.Sprintf("Function.SetAttribute(%q, %d, %d)", f.name, int(a), v),
		check("cuFuncSetAttribute", Result(C.ncu_func_set_attribute(c, f.h, C.int(a), C.int(v)))))
}
