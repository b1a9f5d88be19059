package kernels

import (
	"errors"
	"fmt"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
)

// Errors of Resolve and Lookup, for errors.Is.
var (
	// ErrInvalid: the combination is never a valid function (an algorithm
	// the collective lacks, a protocol the algorithm cannot run, a type the
	// op does not support).
	ErrInvalid = errors.New("kernels: invalid function")
	// ErrNotBuilt: the function is valid but the kernel set was built with a
	// filter that left it out.
	ErrNotBuilt = errors.New("kernels: function not built")
	// ErrUnsupported: the function is in the kernel set but cannot run:
	// ncclgo has no device implementation of its algorithm, or the device
	// lacks what it needs (an SM arch).
	ErrUnsupported = errors.New("kernels: function unsupported")
)

// tables are the host dispatch tables of one kernel set: the generated
// ones (the full space this binary was compiled with), or those a loaded
// set's manifest describes (see tablesOf).
type tables struct {
	filter    string
	funcTable string
	funcs     []generated.FuncInfo
	kernels   []generated.KernelInfo
	// rowToID maps a row (kspace.RowOf) to its function id; -1 marks a row
	// the set does not have.
	rowToID []int16
}

var genTables = &tables{
	filter:    generated.Filter,
	funcTable: generated.FuncTableSymbol,
	funcs:     generated.Funcs,
	kernels:   generated.Kernels,
	rowToID:   generated.RowToID,
}

// describeFilter names the filter a kernel set was built with.
func describeFilter(f string) string {
	if f == "" {
		return `no filter (every function)`
	}
	return fmt.Sprintf("filter %q", f)
}

// Resolve returns the device function table id of f in the kernel set
// that this binary's generated tables describe (the full space, unless
// generated/ was regenerated with a filter), without touching CUDA. A
// loaded set resolves through its own manifest: see Set.Resolve. Errors wrap ErrInvalid
// (with kspace.Requirements' reason), ErrNotBuilt (naming the filter the
// set was built with) or ErrUnsupported (no device implementation).
func Resolve(f kspace.Func) (funcID int, err error) { return genTables.resolve(f) }

// Available reports whether f can run with the generated tables' kernel
// set, device requirements aside: Resolve succeeds. Set.Available answers
// for a loaded set.
func Available(f kspace.Func) bool {
	_, err := Resolve(f)
	return err == nil
}

func (t *tables) resolve(f kspace.Func) (int, error) {
	if f.Kind != kspace.Ordinary {
		return -1, fmt.Errorf("%w: %v is not a collective function", ErrInvalid, f)
	}
	if !inRange(f) {
		return -1, fmt.Errorf("%w: %+v has a field out of range", ErrInvalid, f)
	}
	row, ok := kspace.RowOf(f)
	if !ok {
		return -1, fmt.Errorf("%w: %v: %s has no algorithm %s", ErrInvalid, f, f.Coll, f.Algo)
	}
	if _, why, ok := kspace.Requirements(f); !ok {
		return -1, fmt.Errorf("%w: %v: %s", ErrInvalid, f, why)
	}
	id := -1
	if row < len(t.rowToID) {
		id = int(t.rowToID[row])
	}
	if id < 0 || t.funcs[id].Func.Kind == kspace.Nop {
		return -1, fmt.Errorf("%w: %v is not in this kernel set (built with %s)", ErrNotBuilt, f, describeFilter(t.filter))
	}
	if !t.funcs[id].Implemented {
		return -1, fmt.Errorf("%w: %v: ncclgo has no device implementation of %s for %s", ErrUnsupported, f, f.Algo, f.Coll)
	}
	return id, nil
}

// inRange checks the fields that apply to f's collective; RowOf checks
// the algorithm and protocol.
func inRange(f kspace.Func) bool {
	if f.Coll < 0 || f.Coll >= kspace.NumColls {
		return false
	}
	if f.Coll == kspace.SendRecv {
		return true
	}
	if f.Algo < 0 || f.Algo >= kspace.NumAlgos || f.Proto < 0 || f.Proto >= kspace.NumProtos {
		return false
	}
	if f.Coll.HasRedOp() {
		return f.RedOp >= 0 && f.RedOp < kspace.NumRedOps && f.Type >= 0 && f.Type < kspace.NumTypes
	}
	return true
}
