package kernels

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kset"
	"github.com/ncclgo/ncclgo/kspace"
)

// ErrABI is wrapped by the error that refuses a kernel set built for
// another host↔device ABI.
var ErrABI = errors.New("kernels: kernel set ABI mismatch")

// ABIError refuses a kernel set whose ABI version is not this binary's.
type ABIError struct {
	// Set is the kernel set's ABI version, Runtime this binary's
	// (generated.ABIVersion).
	Set, Runtime string
	// Filter is the kernel set's filter.
	Filter string
}

func (e *ABIError) Error() string {
	return fmt.Sprintf("kernels: kernel set (%s) has ABI version %s but this ncclgo has ABI version %s; rebuild it with this ncclgo's ncclgen (go run github.com/ncclgo/ncclgo/cmd/ncclgen build ...)",
		describeFilter(e.Filter), e.Set, e.Runtime)
}

// Unwrap returns ErrABI.
func (e *ABIError) Unwrap() error { return ErrABI }

// splitSet separates a kernel-set file into the tables its manifest
// describes and the image to load. A bare image (no manifest) is refused:
// without one, nothing says which function id is which.
func splitSet(b []byte) (*tables, *kset.Manifest, []byte, error) {
	m, img, err := kset.Split(b)
	if errors.Is(err, kset.ErrNoManifest) {
		return nil, nil, nil, fmt.Errorf("%w: the image has no kernel-set manifest (a bare fatbin, built by hand or by an older ncclgen); rebuild it with ncclgen build (this ncclgo's ABI version is %s)",
			ErrMismatch, generated.ABIVersion)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrMismatch, err)
	}
	tab, err := tablesOf(m)
	if err != nil {
		return nil, nil, nil, err
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(img)))%16 != 0 {
		img = append([]byte(nil), img...) // the driver wants an aligned image
	}
	return tab, m, img, nil
}

// tablesOf builds the host dispatch tables of the kernel set m describes,
// against this binary's kernel-space model: each function name maps to the
// model's row, so the table works whatever row order the builder's model
// had. Functions this model does not know keep their id but no row maps to
// them.
func tablesOf(m *kset.Manifest) (*tables, error) {
	if m.ABI != generated.ABIVersion {
		return nil, &ABIError{Set: m.ABI, Runtime: generated.ABIVersion, Filter: m.Filter}
	}
	rows := kspace.Rows()
	t := &tables{
		filter:    m.Filter,
		funcTable: m.FuncTable,
		funcs:     make([]generated.FuncInfo, len(m.Funcs)),
		kernels:   make([]generated.KernelInfo, len(m.Kernels)),
		rowToID:   make([]int16, len(rows)),
	}
	for i := range t.rowToID {
		t.rowToID[i] = -1
	}
	for i, k := range m.Kernels {
		f, ok := parseName(k.Name)
		t.kernels[i] = generated.KernelInfo{Func: f, Symbol: k.Symbol}
		if ok {
			t.kernels[i].Req = kspace.KernelReq(f)
		}
	}
	setRow := func(name string, id int) {
		f, ok := parseName(name)
		if !ok || f.Kind != kspace.Ordinary {
			return
		}
		if row, ok := kspace.RowOf(f); ok && row < len(t.rowToID) {
			t.rowToID[row] = int16(id)
		}
	}
	for id, fn := range m.Funcs {
		f, ok := parseName(fn.Name)
		info := generated.FuncInfo{Func: f, Kernel: fn.Kernel, Specialized: fn.Specialized, Implemented: ok && fn.Implemented}
		if ok {
			info.Symbol = "ngDevFunc_" + f.Symbol()
			info.Req = kspace.KernelReq(f)
		} else {
			info.Func = kspace.NopFunc // a function this model lacks: never resolved
		}
		t.funcs[id] = info
		setRow(fn.Name, id)
	}
	for name, id := range m.Aliases {
		setRow(name, id)
	}
	return t, nil
}

// parseName parses a manifest's function or kernel name.
func parseName(s string) (kspace.Func, bool) {
	switch s {
	case "Nop":
		return kspace.NopFunc, true
	case "Generic":
		return kspace.GenericKernel, true
	}
	f, err := kspace.ParseFunc(s)
	return f, err == nil
}
