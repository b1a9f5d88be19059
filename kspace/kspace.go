// Package kspace is the single model of ncclgo's collective kernel space: the
// collectives, device reduction ops, data types, algorithms and protocols,
// which of their combinations are valid, what each needs from CUDA, which
// functions share an implementation, which get a specialized kernel, and the
// row order from which the host computes a function id.
//
// Every emitter in package gen and every runtime table derives from this
// package; nothing else re-encodes the space. The enumeration values match
// nccl.h and NCCL's device.h, so ids computed here agree with NCCL's.
package kspace

import (
	"fmt"
	"strings"
)

// Coll is a collective as the device sees it.
type Coll int

// The collectives, in NCCL's order up to AllReduce with AllGatherV added
// (NCCL's ncclFunc_t values are in Colls).
const (
	Broadcast Coll = iota
	Reduce
	AllGather
	AllGatherV
	ReduceScatter
	AllReduce
	SendRecv
	NumColls = iota
)

func (c Coll) String() string {
	if c < 0 || int(c) >= len(Colls) {
		return fmt.Sprintf("Coll(%d)", int(c))
	}
	return Colls[c].Name
}

// Lower is the snake_case stem used in file names ("all_reduce").
func (c Coll) Lower() string { return Colls[c].Lower }

// HasRedOp reports whether the collective reduces, and so carries a
// reduction op and a data type in its function.
func (c Coll) HasRedOp() bool { return Colls[c].Reduces }

// BusFactor converts the collective's algorithm bandwidth on n ranks to bus
// bandwidth, as nccl-tests defines it.
func (c Coll) BusFactor(n int) float64 { return Colls[c].Bus.Factor(n) }

// Blocks returns how many blocks of a call's size one rank's send and
// receive buffers hold when c runs on n ranks. A call's size (the count of
// nccl.h's calls, runtime/enqueue's Task.Bytes) is the whole buffer for
// AllReduce, Reduce and Broadcast (1, 1), one rank's block for AllGather
// (1, n: every rank's block lands in recv) and ReduceScatter (n, 1: send
// holds a block for every rank), and the message for SendRecv (1, 1).
// AllGatherV counts as AllGather (its blocks, which may differ, come with
// the call). The larger of the two is the whole buffer of the call.
func (c Coll) Blocks(n int) (send, recv int) {
	switch c {
	case AllGather, AllGatherV:
		return 1, n
	case ReduceScatter:
		return n, 1
	default:
		return 1, 1
	}
}

// Extents returns the sizes in bytes of one rank's send and receive
// buffers for a call of c of size bytes on n ranks (see Blocks). The
// caller checks that they fit in a uint64.
func (c Coll) Extents(bytes uint64, n int) (send, recv uint64) {
	s, r := c.Blocks(n)
	return bytes * uint64(s), bytes * uint64(r)
}

// RedOp is a device reduction op (NCCL's ncclDevRedOp_t).
type RedOp int

// The device reduction ops, in NCCL's order.
const (
	Sum RedOp = iota
	Prod
	MinMax
	PreMulSum
	SumPostDiv
	NumRedOps = iota
)

func (o RedOp) String() string {
	if o < 0 || int(o) >= len(RedOps) {
		return fmt.Sprintf("RedOp(%d)", int(o))
	}
	return RedOps[o].Name
}

// Type is a data type, with nccl.h's ncclDataType_t values.
type Type int

// The data types, with nccl.h's values.
const (
	I8 Type = iota
	U8
	I32
	U32
	I64
	U64
	F16
	F32
	F64
	BF16
	F8E4M3
	F8E5M2
	NumTypes = iota
)

func (t Type) String() string {
	if t < 0 || int(t) >= len(Types) {
		return fmt.Sprintf("Type(%d)", int(t))
	}
	return Types[t].Name
}

// Size is the size of one element in bytes.
func (t Type) Size() int { return Types[t].Size }

// IsInteger reports whether t is a signed or unsigned integer type.
func (t Type) IsInteger() bool { return !Types[t].Float }

// IsSigned reports whether t is a signed integer type.
func (t Type) IsSigned() bool { return Types[t].Signed }

// Unsigned maps a signed integer type to its unsigned twin (the integer
// type of the same size that is not signed); other types map to themselves.
func (t Type) Unsigned() Type {
	if !t.IsSigned() {
		return t
	}
	for u := Type(0); u < NumTypes; u++ {
		if u.IsInteger() && !u.IsSigned() && u.Size() == t.Size() {
			return u
		}
	}
	panic("kspace: no unsigned twin of " + t.String())
}

// Algo is a collective algorithm (NCCL_ALGO_*).
type Algo int

// The algorithms, in NCCL's order (NCCL_ALGO_* values), then ncclgo's own.
//
// Direct is ncclgo's: every rank loads its peers' user buffers itself
// (devicesrc/direct.h), with no connection FIFO in between, which only
// ranks that share memory can do (see DirectInfo in runtime/comm). NCCL
// has no such value; its name is "DIRECT" (NCCL_ALGO=Direct), distinct
// from COLLNET_DIRECT, which names the CollNet algorithm.
const (
	Tree Algo = iota
	Ring
	CollNetDirect
	CollNetChain
	NVLS
	NVLSTree
	PAT
	Direct
	NumAlgos = iota
)

func (a Algo) String() string {
	if a < 0 || int(a) >= len(Algos) {
		return fmt.Sprintf("Algo(%d)", int(a))
	}
	return Algos[a].Name
}

// IsNVLS reports whether the algorithm uses NVLink SHARP (multicast).
func (a Algo) IsNVLS() bool { return a == NVLS || a == NVLSTree }

// Proto is a protocol (NCCL_PROTO_*).
type Proto int

// The protocols, in NCCL's order.
const (
	LL Proto = iota
	LL128
	Simple
	NumProtos = iota
)

func (p Proto) String() string {
	if p < 0 || int(p) >= len(Protos) {
		return fmt.Sprintf("Proto(%d)", int(p))
	}
	return Protos[p].Name
}

// AlgosOf lists, per collective, the algorithms it has device functions for,
// in row order.
var AlgosOf = [NumColls][]Algo{
	Broadcast:     {Ring, Direct},
	Reduce:        {Ring},
	AllGather:     {Ring, CollNetDirect, NVLS, PAT, Direct},
	AllGatherV:    {Ring},
	ReduceScatter: {Ring, CollNetDirect, NVLS, PAT, Direct},
	AllReduce:     {Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, Direct},
	SendRecv:      nil,
}

// Implemented reports whether ncclgo's device library implements the
// algorithm: RING for every collective, TREE for AllReduce, PAT for
// AllGather and ReduceScatter (devicesrc/pat.h), DIRECT for AllReduce,
// AllGather, ReduceScatter and Broadcast (devicesrc/direct.h). Functions of other
// algorithms are enumerated and compiled to stubs that report
// "unsupported"; the runtime never selects them.
func Implemented(c Coll, a Algo) bool {
	switch {
	case c == SendRecv:
		return true
	case a == Ring:
		return true
	case a == Tree:
		return c == AllReduce
	case a == PAT:
		return c == AllGather || c == ReduceScatter
	case a == Direct:
		return c == AllReduce || c == AllGather || c == ReduceScatter || c == Broadcast
	}
	return false
}

// Func is one device function: a point of the kernel space. Fields that do
// not apply to its collective hold -1 (see NoRedOp and friends). Nop is the
// function that filtered-out rows map to; Generic names the kernel that
// dispatches through the device function table.
type Func struct {
	Coll  Coll
	RedOp RedOp
	Type  Type
	Algo  Algo
	Proto Proto
	// Kind tells the special functions apart from ordinary ones.
	Kind Kind
}

// Kind distinguishes ordinary functions from the no-op function and the
// generic kernel.
type Kind int

// The kinds of Func.
const (
	Ordinary Kind = iota
	Nop           // a row that the build's filter left out
	Generic       // the kernel that runs any function through the table
)

// Unset marks a field of Func that does not apply.
const Unset = -1

// NopFunc is the function that filtered-out rows map to.
var NopFunc = Func{Coll: Unset, RedOp: Unset, Type: Unset, Algo: Unset, Proto: Unset, Kind: Nop}

// GenericKernel is the kernel that runs any function through the table.
var GenericKernel = Func{Coll: Unset, RedOp: Unset, Type: Unset, Algo: Unset, Proto: Unset, Kind: Generic}

// SendRecvFunc is the single point-to-point function.
var SendRecvFunc = Func{Coll: SendRecv, RedOp: Unset, Type: Unset, Algo: Unset, Proto: Unset}

// Fields returns the function's words in "Coll RedOp Type Algo Proto" order,
// leaving out the fields that do not apply. This is the string the filter
// matches.
func (f Func) Fields() []string {
	switch f.Kind {
	case Nop:
		return []string{"Nop"}
	case Generic:
		return []string{"Generic"}
	case Ordinary: // its words follow
	}
	w := []string{f.Coll.String()}
	if f.RedOp != Unset {
		w = append(w, f.RedOp.String())
	}
	if f.Type != Unset {
		w = append(w, f.Type.String())
	}
	if f.Algo != Unset {
		w = append(w, f.Algo.String())
	}
	if f.Proto != Unset {
		w = append(w, f.Proto.String())
	}
	return w
}

// String is the function's words joined by spaces ("AllReduce Sum f32 RING LL").
func (f Func) String() string { return strings.Join(f.Fields(), " ") }

// Symbol is the function's C identifier stem ("AllReduce_Sum_f32_RING_LL").
func (f Func) Symbol() string { return strings.Join(f.Fields(), "_") }

// key orders functions as NCCL's generator sorts them: by their words,
// with absent fields sorting first.
func (f Func) key() [5]string {
	var k [5]string
	switch f.Kind {
	case Nop:
		k[0] = "Nop"
		return k
	case Generic:
		k[0] = "Generic"
		return k
	case Ordinary: // its words follow
	}
	k[0] = f.Coll.String()
	if f.RedOp != Unset {
		k[1] = f.RedOp.String()
	}
	if f.Type != Unset {
		k[2] = f.Type.String()
	}
	if f.Algo != Unset {
		k[3] = f.Algo.String()
	}
	if f.Proto != Unset {
		k[4] = f.Proto.String()
	}
	return k
}

// Less orders functions by their words, as the device function table does.
func (f Func) Less(g Func) bool {
	a, b := f.key(), g.key()
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// Req is what a function needs to be compiled: a minimum CUDA runtime
// version (CUDART_VERSION) and a minimum SM arch (__CUDA_ARCH__, 900 for
// sm_90). The zero Req runs everywhere.
type Req struct {
	CUDART int
	Arch   int
}

// IsZero reports whether r places no requirement.
func (r Req) IsZero() bool { return r == Req{} }

func (r Req) String() string {
	if r.IsZero() {
		return "none"
	}
	var parts []string
	if r.CUDART != 0 {
		parts = append(parts, fmt.Sprintf("CUDA >= %d.%d", r.CUDART/1000, r.CUDART%1000/10))
	}
	if r.Arch != 0 {
		parts = append(parts, fmt.Sprintf("sm_%d+", r.Arch/10))
	}
	return strings.Join(parts, ", ")
}

// nvlsSupports mirrors the type/op limits of NVLink SHARP reductions.
func nvlsSupports(op RedOp, t Type) bool {
	switch t {
	case I32, U32, I64, U64, F16, BF16:
		return op == Sum || op == MinMax
	case F32, F64:
		return op == Sum
	case I8, U8, F8E4M3, F8E5M2: // NVLS reduces no 8-bit type
	}
	return false
}

// Requirements returns what f needs, or ok=false with the reason it is never
// valid.
func Requirements(f Func) (r Req, why string, ok bool) {
	if f.Kind != Ordinary || f.Coll == SendRecv {
		return Req{}, "", true
	}
	if f.Proto != Simple && f.Algo != Ring && f.Algo != Tree {
		return Req{}, fmt.Sprintf("protocol %s runs only with RING and TREE, not %s (which moves data with SIMPLE)", f.Proto, f.Algo), false
	}
	if f.Coll.HasRedOp() {
		if f.RedOp == SumPostDiv && !f.Type.IsInteger() {
			return Req{}, fmt.Sprintf("SumPostDiv is only for integer types, not %s", f.Type), false
		}
		tr := Types[f.Type].Req
		r.CUDART = max(r.CUDART, tr.CUDART)
		r.Arch = max(r.Arch, tr.Arch)
	}
	if f.Algo == Direct && f.RedOp == PreMulSum {
		// Each rank reduces its peers' inputs itself, so it would apply
		// its own scalar to them, and a PreMulSum's scalar is per rank.
		return Req{}, "DIRECT does not run PreMulSum: each rank would scale its peers' inputs by its own scalar", false
	}
	if f.Algo.IsNVLS() {
		if f.Coll.HasRedOp() && !nvlsSupports(f.RedOp, f.Type) {
			return Req{}, fmt.Sprintf("%s does not support %s on %s", f.Algo, f.RedOp, f.Type), false
		}
		r.CUDART = max(r.CUDART, 12010)
		r.Arch = max(r.Arch, 900)
	}
	return r, "", true
}

// Primary maps f to the representative of its equivalence class: signed
// integer Sum, Prod, PreMulSum and SumPostDiv share the unsigned
// implementation, and so does signed MinMax except with NVLS.
func Primary(f Func) Func {
	if f.Kind != Ordinary || !f.Coll.HasRedOp() || !f.Type.IsSigned() {
		return f
	}
	switch f.RedOp {
	case Sum, Prod, PreMulSum, SumPostDiv:
		f.Type = f.Type.Unsigned()
	case MinMax:
		if !f.Algo.IsNVLS() {
			f.Type = f.Type.Unsigned()
		}
	}
	return f
}

// preferredKernel is the kernel that would run f without a table call, before
// filtering: one per type for reductions (Sum, LL, TREE or RING), one per
// byte-moving collective, one for SendRecv.
func preferredKernel(f Func) Func {
	switch {
	case f.Kind == Nop || f.Kind == Generic:
		return GenericKernel
	case f.Coll == SendRecv:
		return SendRecvFunc
	case !f.Coll.HasRedOp():
		return Func{Coll: f.Coll, RedOp: Unset, Type: Unset, Algo: Ring, Proto: LL}
	}
	algo := Ring
	if f.Algo == Tree {
		algo = Tree
	}
	return Primary(Func{Coll: f.Coll, RedOp: Sum, Type: f.Type, Algo: algo, Proto: LL})
}

// FirstOwnAlgo is the first algorithm that is ncclgo's, not NCCL's: the
// algorithms before it have NCCL's NCCL_ALGO_* values, and their rows keep
// NCCL's function ids (see Rows).
const FirstOwnAlgo = Direct

// sectionAlgos lists c's algorithms of one section of the rows: NCCL's
// (own false) or ncclgo's own (own true), in AlgosOf order.
func sectionAlgos(c Coll, own bool) []Algo {
	var out []Algo
	for _, a := range AlgosOf[c] {
		if (a >= FirstOwnAlgo) == own {
			out = append(out, a)
		}
	}
	return out
}

// rowsOf enumerates one section's rows, collective by collective in the
// host's row order.
func rowsOf(own bool) []Func {
	var rows []Func
	for _, c := range []Coll{AllGather, Broadcast, AllGatherV} {
		for _, a := range sectionAlgos(c, own) {
			for p := Proto(0); p < NumProtos; p++ {
				rows = append(rows, Func{Coll: c, RedOp: Unset, Type: Unset, Algo: a, Proto: p})
			}
		}
	}
	for _, c := range []Coll{AllReduce, Reduce, ReduceScatter} {
		for op := RedOp(0); op < NumRedOps; op++ {
			for t := Type(0); t < NumTypes; t++ {
				for _, a := range sectionAlgos(c, own) {
					for p := Proto(0); p < NumProtos; p++ {
						rows = append(rows, Func{Coll: c, RedOp: op, Type: t, Algo: a, Proto: p})
					}
				}
			}
		}
	}
	return rows
}

// Rows enumerates the function rows in the order from which the host
// computes a function id (see RowOf): SendRecv, then the rows of NCCL's
// algorithms in NCCL's order (so that their ids agree with NCCL's), then
// the rows of ncclgo's own algorithms (FirstOwnAlgo on) in the same order.
func Rows() []Func {
	rows := append([]Func{SendRecvFunc}, rowsOf(false)...)
	return append(rows, rowsOf(true)...)
}

// sectionBases gives, per collective, the row of its first function in
// one section, the section starting at row start, and the row after it.
func sectionBases(own bool, start int) (base [NumColls]int, end int) {
	row := start
	for _, c := range []Coll{AllGather, Broadcast, AllGatherV} {
		base[c] = row
		row += len(sectionAlgos(c, own)) * int(NumProtos)
	}
	for _, c := range []Coll{AllReduce, Reduce, ReduceScatter} {
		base[c] = row
		row += int(NumRedOps) * int(NumTypes) * len(sectionAlgos(c, own)) * int(NumProtos)
	}
	return base, row
}

// RowBases gives, per collective, the row of its first function of NCCL's
// algorithms; with AlgoIndex it lets the host compute a row arithmetically
// (see RowOf).
func RowBases() [NumColls]int {
	base, _ := sectionBases(false, 1) // row 0 is SendRecv
	base[SendRecv] = 0
	return base
}

// AlgoIndex returns a's position in AlgosOf[c], or -1.
func AlgoIndex(c Coll, a Algo) int {
	for i, x := range AlgosOf[c] {
		if x == a {
			return i
		}
	}
	return -1
}

// rowSection is what RowOf needs of one section of the rows (NCCL's
// algorithms, or ncclgo's own), computed once from sectionBases and
// sectionAlgos so that a lookup allocates nothing.
type rowSection struct {
	base [NumColls]int
	// n is the number of the collective's algorithms in the section.
	n [NumColls]int
	// pos is an algorithm's position among them (-1: not in the section).
	pos [NumColls][NumAlgos]int8
}

// rowSections are NCCL's section (rows from 1: row 0 is SendRecv) and
// ncclgo's own, which follows it.
var rowSections = func() (s [2]rowSection) {
	base, end := sectionBases(false, 1)
	s[0].base = base
	s[1].base, _ = sectionBases(true, end)
	for i, own := range []bool{false, true} {
		for c := Coll(0); c < NumColls; c++ {
			for a := range s[i].pos[c] {
				s[i].pos[c][a] = -1
			}
			algos := sectionAlgos(c, own)
			s[i].n[c] = len(algos)
			for j, a := range algos {
				s[i].pos[c][a] = int8(j)
			}
		}
	}
	return s
}()

// RowOf computes f's row by arithmetic, the way the host does at run time;
// ok is false for a combination that has no row.
func RowOf(f Func) (row int, ok bool) {
	if f.Kind != Ordinary {
		return 0, false
	}
	if f.Coll == SendRecv {
		return 0, true
	}
	if AlgoIndex(f.Coll, f.Algo) < 0 || f.Proto < 0 || f.Proto >= NumProtos {
		return 0, false
	}
	sec := &rowSections[0]
	if f.Algo >= FirstOwnAlgo {
		sec = &rowSections[1]
	}
	ai := int(sec.pos[f.Coll][f.Algo])
	nA := sec.n[f.Coll]
	b := sec.base[f.Coll]
	if !f.Coll.HasRedOp() {
		return b + ai*int(NumProtos) + int(f.Proto), true
	}
	if f.RedOp < 0 || f.RedOp >= NumRedOps || f.Type < 0 || f.Type >= NumTypes {
		return 0, false
	}
	return b + ((int(f.RedOp)*int(NumTypes)+int(f.Type))*nA+ai)*int(NumProtos) + int(f.Proto), true
}
