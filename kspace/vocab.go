package kspace

import "strings"

// This file is ncclgo's vocabulary: every enumeration (collectives,
// reduction ops, data types, algorithms, protocols) described once, as a
// table indexed by its Go constant. Names, C spellings, NCCL's values, sizes
// and bus-bandwidth factors are read from here by the kspace methods, the
// generator (C macros in ngabi.h, Go tables), the public package's DataType
// and RedOp, the tuner, ncclperf and every error text that lists valid
// values. Adding a data type is one row in Types plus its device code.

// Bus is how a collective's bus bandwidth relates to its algorithm
// bandwidth (nccl-tests' definition: busbw = algbw × Factor(n ranks)), so
// that one number compares with the hardware's link speed.
type Bus int

// The bus-bandwidth factors.
const (
	// BusOne is 1: every byte crosses one link (Broadcast, Reduce, SendRecv).
	BusOne Bus = iota
	// BusSpread is (n-1)/n: every rank's share crosses to the n-1 others
	// (AllGather, ReduceScatter, nccl-tests' alltoall).
	BusSpread
	// BusAllReduce is 2(n-1)/n: a ReduceScatter and an AllGather.
	BusAllReduce
)

// AllToAllBus is the factor of nccl-tests' alltoall, which is no device
// collective of its own (SendRecv with every peer).
const AllToAllBus = BusSpread

// Factor is the factor for n ranks.
func (b Bus) Factor(n int) float64 {
	switch b {
	case BusSpread:
		return float64(n-1) / float64(n)
	case BusAllReduce:
		return 2 * float64(n-1) / float64(n)
	default: // BusOne
		return 1
	}
}

// CollInfo describes one device collective.
type CollInfo struct {
	Name  string // "AllReduce": function names, filters, NG_COLL_<Name>, the Go constant
	Lower string // "all_reduce": file names
	// NCCLName and NCCLValue are NCCL's ncclFunc_t enumerator and value
	// (NCCLName is empty where NCCL has none). Coll's own values differ
	// from NCCL's from AllGatherV on.
	NCCLName  string
	NCCLValue int
	// Reduces is true for the collectives that combine values: their
	// functions carry a reduction op and a data type, and they move
	// elements. The others move bytes, whatever the type.
	Reduces bool
	Bus     Bus // its bus-bandwidth factor
}

// Colls describes the collectives.
var Colls = [NumColls]CollInfo{
	Broadcast:     {Name: "Broadcast", Lower: "broadcast", NCCLName: "ncclFuncBroadcast", NCCLValue: 0, Bus: BusOne},
	Reduce:        {Name: "Reduce", Lower: "reduce", NCCLName: "ncclFuncReduce", NCCLValue: 1, Reduces: true, Bus: BusOne},
	AllGather:     {Name: "AllGather", Lower: "all_gather", NCCLName: "ncclFuncAllGather", NCCLValue: 2, Bus: BusSpread},
	AllGatherV:    {Name: "AllGatherV", Lower: "all_gather_v", NCCLValue: -1, Bus: BusSpread},
	ReduceScatter: {Name: "ReduceScatter", Lower: "reduce_scatter", NCCLName: "ncclFuncReduceScatter", NCCLValue: 3, Reduces: true, Bus: BusSpread},
	AllReduce:     {Name: "AllReduce", Lower: "all_reduce", NCCLName: "ncclFuncAllReduce", NCCLValue: 4, Reduces: true, Bus: BusAllReduce},
	SendRecv:      {Name: "SendRecv", Lower: "sendrecv", NCCLName: "ncclFuncSendRecv", NCCLValue: 5, Bus: BusOne},
}

// RedOpInfo describes one device reduction op.
type RedOpInfo struct {
	Name string // "Sum": function names, filters, the device's ngOp<Name>, the Go constant
	// NCCLName is NCCL's ncclDevRedOp_t enumerator; its value is the op's.
	NCCLName string
}

// RedOps describes the device reduction ops.
var RedOps = [NumRedOps]RedOpInfo{
	Sum:        {Name: "Sum", NCCLName: "ncclDevSum"},
	Prod:       {Name: "Prod", NCCLName: "ncclDevProd"},
	MinMax:     {Name: "MinMax", NCCLName: "ncclDevMinMax"},
	PreMulSum:  {Name: "PreMulSum", NCCLName: "ncclDevPreMulSum"},
	SumPostDiv: {Name: "SumPostDiv", NCCLName: "ncclDevSumPostDiv"},
}

// APIRedOp is a reduction op of the public API: nccl.h's ncclRedOp_t.
type APIRedOp int

// The public reduction ops, with nccl.h's values.
const (
	APISum APIRedOp = iota
	APIProd
	APIMax
	APIMin
	APIAvg
	NumAPIRedOps = iota
)

// APIRedOpInfo describes one reduction op of the public API.
type APIRedOpInfo struct {
	GoName string // the public Go constant ("Sum")
	CName  string // nccl.h's enumerator ("ncclSum"); its value is the op's
	// TestsName is nccl-tests' name ("sum"), which ncclperf prints.
	TestsName string
	// Dev is the device op that runs it (Max and Min run MinMax; Avg runs
	// PreMulSum for floats and SumPostDiv for integers).
	Dev RedOp
}

// APIRedOps describes the public reduction ops.
var APIRedOps = [NumAPIRedOps]APIRedOpInfo{
	APISum:  {GoName: "Sum", CName: "ncclSum", TestsName: "sum", Dev: Sum},
	APIProd: {GoName: "Prod", CName: "ncclProd", TestsName: "prod", Dev: Prod},
	APIMax:  {GoName: "Max", CName: "ncclMax", TestsName: "max", Dev: MinMax},
	APIMin:  {GoName: "Min", CName: "ncclMin", TestsName: "min", Dev: MinMax},
	APIAvg:  {GoName: "Avg", CName: "ncclAvg", TestsName: "avg", Dev: SumPostDiv},
}

// TypeInfo describes one data type. Its value (the Type) is nccl.h's.
type TypeInfo struct {
	Name   string // "f32": function names, filters, file names
	GoName string // the public Go constant ("Float32"); kspace's is Name upper-cased
	CName  string // nccl.h's enumerator ("ncclFloat32")
	CType  string // the device's element type ("float")
	// TestsName is nccl-tests' name ("float"), which ncclperf prints.
	TestsName string
	// Aliases are nccl.h's alias names (ncclInt is ncclInt32): parsers accept
	// them, and the public package has Go constants of the same names.
	Aliases []string
	Size    int  // bytes per element
	Signed  bool // a signed integer
	Float   bool // a floating-point type
	// Req is what reducing functions of the type need from CUDA.
	Req Req
}

// Types describes the data types.
var Types = [NumTypes]TypeInfo{
	I8:     {Name: "i8", GoName: "Int8", CName: "ncclInt8", CType: "int8_t", TestsName: "int8", Aliases: []string{"Char"}, Size: 1, Signed: true},
	U8:     {Name: "u8", GoName: "Uint8", CName: "ncclUint8", CType: "uint8_t", TestsName: "uint8", Size: 1},
	I32:    {Name: "i32", GoName: "Int32", CName: "ncclInt32", CType: "int32_t", TestsName: "int32", Aliases: []string{"Int"}, Size: 4, Signed: true},
	U32:    {Name: "u32", GoName: "Uint32", CName: "ncclUint32", CType: "uint32_t", TestsName: "uint32", Size: 4},
	I64:    {Name: "i64", GoName: "Int64", CName: "ncclInt64", CType: "int64_t", TestsName: "int64", Size: 8, Signed: true},
	U64:    {Name: "u64", GoName: "Uint64", CName: "ncclUint64", CType: "uint64_t", TestsName: "uint64", Size: 8},
	F16:    {Name: "f16", GoName: "Float16", CName: "ncclFloat16", CType: "half", TestsName: "half", Aliases: []string{"Half"}, Size: 2, Float: true},
	F32:    {Name: "f32", GoName: "Float32", CName: "ncclFloat32", CType: "float", TestsName: "float", Aliases: []string{"Float"}, Size: 4, Float: true},
	F64:    {Name: "f64", GoName: "Float64", CName: "ncclFloat64", CType: "double", TestsName: "double", Aliases: []string{"Double"}, Size: 8, Float: true},
	BF16:   {Name: "bf16", GoName: "Bfloat16", CName: "ncclBfloat16", CType: "__nv_bfloat16", TestsName: "bfloat16", Size: 2, Float: true, Req: Req{CUDART: 11000}},
	F8E4M3: {Name: "f8e4m3", GoName: "Float8e4m3", CName: "ncclFloat8e4m3", CType: "__nv_fp8_e4m3", TestsName: "f8e4m3", Size: 1, Float: true, Req: Req{CUDART: 11080, Arch: 900}},
	F8E5M2: {Name: "f8e5m2", GoName: "Float8e5m2", CName: "ncclFloat8e5m2", CType: "__nv_fp8_e5m2", TestsName: "f8e5m2", Size: 1, Float: true, Req: Req{CUDART: 11080, Arch: 900}},
}

// Names returns every name t is known by, kspace's first: Name, GoName,
// CName, TestsName and the aliases, without repeats (case-insensitively).
func (t Type) Names() []string {
	ti := Types[t]
	var out []string
	for _, n := range append([]string{ti.Name, ti.GoName, ti.CName, ti.TestsName}, ti.Aliases...) {
		dup := false
		for _, o := range out {
			dup = dup || strings.EqualFold(o, n)
		}
		if !dup {
			out = append(out, n)
		}
	}
	return out
}

// LookupType finds a type by any of its Names, case-insensitively.
func LookupType(s string) (Type, bool) {
	for t := Type(0); t < NumTypes; t++ {
		for _, n := range t.Names() {
			if strings.EqualFold(n, s) {
				return t, true
			}
		}
	}
	return 0, false
}

// AlgoInfo describes one algorithm. Its value is NCCL's NCCL_ALGO_* value.
type AlgoInfo struct {
	Name     string // "RING": function names, filters, NG_ALGO_<Name>
	GoName   string // kspace's Go constant ("Ring")
	NCCLName string // NCCL's ncclAlgoStr ("Ring"), the names NCCL_ALGO accepts
}

// Algos describes the algorithms.
var Algos = [NumAlgos]AlgoInfo{
	Tree:          {Name: "TREE", GoName: "Tree", NCCLName: "Tree"},
	Ring:          {Name: "RING", GoName: "Ring", NCCLName: "Ring"},
	CollNetDirect: {Name: "COLLNET_DIRECT", GoName: "CollNetDirect", NCCLName: "CollNetDirect"},
	CollNetChain:  {Name: "COLLNET_CHAIN", GoName: "CollNetChain", NCCLName: "CollNetChain"},
	NVLS:          {Name: "NVLS", GoName: "NVLS", NCCLName: "NVLS"},
	NVLSTree:      {Name: "NVLS_TREE", GoName: "NVLSTree", NCCLName: "NVLSTree"},
	PAT:           {Name: "PAT", GoName: "PAT", NCCLName: "PAT"},
	Direct:        {Name: "DIRECT", GoName: "Direct", NCCLName: "Direct"},
}

// ProtoInfo describes one protocol. Its value is NCCL's NCCL_PROTO_* value.
type ProtoInfo struct {
	Name     string // "SIMPLE": function names, filters, NG_PROTO_<Name>
	GoName   string // kspace's Go constant ("Simple")
	NCCLName string // NCCL's ncclProtoStr ("Simple"), the names NCCL_PROTO accepts
}

// Protos describes the protocols.
var Protos = [NumProtos]ProtoInfo{
	LL:     {Name: "LL", GoName: "LL", NCCLName: "LL"},
	LL128:  {Name: "LL128", GoName: "LL128", NCCLName: "LL128"},
	Simple: {Name: "SIMPLE", GoName: "Simple", NCCLName: "Simple"},
}

// names collects one field of a table.
func names[E any](table []E, field func(E) string) []string {
	out := make([]string, len(table))
	for i, e := range table {
		out[i] = field(e)
	}
	return out
}

// CollNames lists the collectives' names, in value order.
func CollNames() []string { return names(Colls[:], func(c CollInfo) string { return c.Name }) }

// RedOpNames lists the device reduction ops' names, in value order.
func RedOpNames() []string { return names(RedOps[:], func(o RedOpInfo) string { return o.Name }) }

// TypeNames lists the types' kspace names ("f32"), in value order.
func TypeNames() []string { return names(Types[:], func(t TypeInfo) string { return t.Name }) }

// AlgoNames lists the algorithms' names ("RING"), in value order.
func AlgoNames() []string { return names(Algos[:], func(a AlgoInfo) string { return a.Name }) }

// ProtoNames lists the protocols' names ("SIMPLE"), in value order.
func ProtoNames() []string { return names(Protos[:], func(p ProtoInfo) string { return p.Name }) }

// AlgoNCCLNames lists NCCL's names of the algorithms (ncclAlgoStr: "Ring"),
// in value order.
func AlgoNCCLNames() []string {
	return names(Algos[:], func(a AlgoInfo) string { return a.NCCLName })
}

// ProtoNCCLNames lists NCCL's names of the protocols (ncclProtoStr:
// "Simple"), in value order.
func ProtoNCCLNames() []string {
	return names(Protos[:], func(p ProtoInfo) string { return p.NCCLName })
}

// TestsTypeNames lists nccl-tests' names of the types ("float"), in value
// order.
func TestsTypeNames() []string {
	return names(Types[:], func(t TypeInfo) string { return t.TestsName })
}

// TestsRedOpNames lists nccl-tests' names of the public reduction ops
// ("sum"), in value order.
func TestsRedOpNames() []string {
	return names(APIRedOps[:], func(o APIRedOpInfo) string { return o.TestsName })
}
