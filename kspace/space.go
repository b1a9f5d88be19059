package kspace

import (
	"errors"
	"fmt"
	"slices"
)

// Space is the kernel space of one build: every row, which rows are valid and
// built, the device function table and the specialized kernels, all derived
// from the model and the build's filter.
type Space struct {
	Filter Filter
	// Rows lists every function row, in row order.
	Rows []Func
	// RowFunc gives, per row, the function that serves it: the row itself
	// when built, NopFunc when valid but filtered out. Valid[row] is false
	// for rows that are never valid.
	RowFunc []Func
	Valid   []bool
	// Funcs is the device function table: the primary functions, sorted.
	Funcs []Func
	// RowToID maps each row to its index in Funcs, or -1 when invalid.
	RowToID []int
	// Kernels lists the specialized kernels (and Generic, when used), sorted.
	Kernels []Func
	// KernelOf gives, per entry of Funcs, the index in Kernels of the kernel
	// that runs it.
	KernelOf []int

	funcIndex   map[Func]int
	kernelIndex map[Func]int
}

// ErrEmptyFilter is returned by NewSpace when the filter selects no function.
var ErrEmptyFilter = errors.New("the filter selects no function")

// NewSpace builds the space of a build that keeps the functions f selects.
func NewSpace(f Filter) (*Space, error) {
	s := &Space{Filter: f, Rows: Rows()}
	n := len(s.Rows)
	s.RowFunc = make([]Func, n)
	s.Valid = make([]bool, n)
	s.RowToID = make([]int, n)
	prim := map[Func]bool{}
	built := 0
	for i, fn := range s.Rows {
		_, _, ok := Requirements(fn)
		s.Valid[i] = ok
		switch {
		case !ok:
			continue
		case f.Match(fn):
			s.RowFunc[i] = fn
			built++
		default:
			s.RowFunc[i] = NopFunc
		}
		prim[Primary(s.RowFunc[i])] = true
	}
	if built == 0 {
		return nil, fmt.Errorf("filter %q: %w", f, ErrEmptyFilter)
	}
	for fn := range prim {
		s.Funcs = append(s.Funcs, fn)
	}
	slices.SortFunc(s.Funcs, compareFuncs)
	s.funcIndex = make(map[Func]int, len(s.Funcs))
	for i, fn := range s.Funcs {
		s.funcIndex[fn] = i
	}
	for i := range s.Rows {
		s.RowToID[i] = -1
		if s.Valid[i] {
			s.RowToID[i] = s.funcIndex[Primary(s.RowFunc[i])]
		}
	}
	kset := map[Func]bool{}
	for _, fn := range s.Funcs {
		kset[s.kernelFor(fn)] = true
	}
	for k := range kset {
		s.Kernels = append(s.Kernels, k)
	}
	slices.SortFunc(s.Kernels, compareFuncs)
	s.kernelIndex = make(map[Func]int, len(s.Kernels))
	for i, k := range s.Kernels {
		s.kernelIndex[k] = i
	}
	s.KernelOf = make([]int, len(s.Funcs))
	for i, fn := range s.Funcs {
		s.KernelOf[i] = s.kernelIndex[s.kernelFor(fn)]
	}
	return s, nil
}

func compareFuncs(a, b Func) int {
	switch {
	case a.Less(b):
		return -1
	case b.Less(a):
		return 1
	}
	return 0
}

// kernelFor is the kernel that runs fn: its preferred specialized kernel, or
// the generic kernel when the filter left that kernel's function out.
func (s *Space) kernelFor(fn Func) Func {
	k := preferredKernel(fn)
	if k.Kind == Ordinary && !s.Filter.Match(k) {
		return GenericKernel
	}
	return k
}

// FuncID returns fn's index in the device function table, or -1.
func (s *Space) FuncID(fn Func) int {
	if id, ok := s.funcIndex[fn]; ok {
		return id
	}
	return -1
}

// KernelID returns k's index in Kernels, or -1.
func (s *Space) KernelID(k Func) int {
	if id, ok := s.kernelIndex[k]; ok {
		return id
	}
	return -1
}

// Specialized reports whether Funcs[id] runs inline in a kernel of its own
// rather than through the table.
func (s *Space) Specialized(id int) bool {
	return s.Kernels[s.KernelOf[id]] == s.Funcs[id]
}

// InlineArch is the first SM arch (major*100 + minor*10, as __CUDA_ARCH__)
// whose kernels run their InlineSiblings: before it, ptxas cannot fit the
// RING SIMPLE engine next to LL within a kernel's 96 registers without
// spilling (nvcc 13: 152 bytes on sm_80), so every sibling stays behind
// the device function table there.
const InlineArch = 900

// Sibling is a function that a kernel runs without the device function
// table besides its own (Space.InlineSiblings).
type Sibling struct {
	Func Func
	ID   int // Func's table id
	// LLOneShot: the kernel runs only the works of Func that take DIRECT's
	// LL one-shot (a channel share small enough, or a one-pass launch's);
	// the others go through the table.
	LLOneShot bool
}

// InlineSiblings lists the functions kernel k runs inline besides its
// own, each where the space has it and ncclgo implements it, from
// InlineArch up. A RING LL kernel runs:
//
//   - its SIMPLE sibling, so that large ring calls skip the table call
//     and its register saves;
//   - for AllReduce, the DIRECT LL one-shot of every op of its type: the
//     smallest AllReduces on ranks that share memory, where a table call
//     cost 1.3-1.5 µs a call on the H200 (session 24).
//
// Other kernels and the fp8 types run none: the TREE SIMPLE engine and the
// fp8 conversions need more registers than a kernel has (ptxas would
// spill in the kernel's LL path too).
func (s *Space) InlineSiblings(k Func) []Sibling {
	if k.Kind != Ordinary || k.Algo != Ring || k.Proto != LL || k.Type == F8E4M3 || k.Type == F8E5M2 {
		return nil
	}
	var out []Sibling
	add := func(f Func, oneShot bool) {
		if id := s.FuncID(f); id >= 0 && Implemented(f.Coll, f.Algo) {
			out = append(out, Sibling{Func: f, ID: id, LLOneShot: oneShot})
		}
	}
	simple := k
	simple.Proto = Simple
	add(simple, false)
	if k.Coll == AllReduce {
		for op := RedOp(0); op < NumRedOps; op++ {
			d := k
			d.RedOp, d.Algo, d.Proto = op, Direct, Simple
			add(d, true)
		}
	}
	return out
}

// KernelReq is what a kernel needs: its function's requirements (none for the
// generic kernel).
func KernelReq(k Func) Req {
	r, _, _ := Requirements(k)
	return r
}

// Summary counts the space: rows, valid rows, device functions and kernels.
type Summary struct {
	Rows, Valid, Functions, Kernels int
}

func (s Summary) String() string {
	return fmt.Sprintf("rows=%d valid=%d functions=%d kernels=%d", s.Rows, s.Valid, s.Functions, s.Kernels)
}

// Summary counts the space.
func (s *Space) Summary() Summary {
	v := 0
	for _, ok := range s.Valid {
		if ok {
			v++
		}
	}
	return Summary{Rows: len(s.Rows), Valid: v, Functions: len(s.Funcs), Kernels: len(s.Kernels)}
}

// Unit is one CUDA translation unit: the functions of one collective, op and
// type, and the kernels specialized on them.
type Unit struct {
	// Name is the file name ("all_reduce_sum_f32.cu").
	Name    string
	Coll    Coll
	Funcs   []Func
	Kernels []Func
}

// UnitName is the translation unit that implements fn.
func UnitName(fn Func) string {
	name := fn.Coll.Lower()
	if fn.RedOp != Unset {
		name += "_" + lowerASCII(fn.RedOp.String())
	}
	if fn.Type != Unset {
		name += "_" + fn.Type.String()
	}
	return name + ".cu"
}

func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// Units partitions the built functions and their kernels into translation
// units, sorted by name. The no-op function and the generic kernel live in
// the device table's unit, not here.
func (s *Space) Units() []Unit {
	byName := map[string]*Unit{}
	var names []string
	get := func(fn Func) *Unit {
		n := UnitName(fn)
		u := byName[n]
		if u == nil {
			u = &Unit{Name: n, Coll: fn.Coll}
			byName[n] = u
			names = append(names, n)
		}
		return u
	}
	for _, fn := range s.Funcs {
		if fn.Kind == Ordinary {
			u := get(fn)
			u.Funcs = append(u.Funcs, fn)
		}
	}
	for _, k := range s.Kernels {
		if k.Kind == Ordinary {
			u := get(k)
			u.Kernels = append(u.Kernels, k)
		}
	}
	slices.Sort(names)
	units := make([]Unit, len(names))
	for i, n := range names {
		units[i] = *byName[n]
	}
	return units
}
