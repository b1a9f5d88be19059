package gen

import (
	"crypto/sha256"
	"fmt"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/ncclgo/ncclgo/kspace"
)

// The NCCL API level that the C ABI (capi, libnccl.so.2) implements: the
// nccl.h it emits declares this version, and ncclGetVersion returns its
// code. It is kspace.NCCLAPI, the one place that says it. The version must
// match the declarations: ncclSince says which release introduced the
// newest of them.
var (
	NCCLMajor = kspace.NCCLAPI.Major
	NCCLMinor = kspace.NCCLAPI.Minor
	NCCLPatch = kspace.NCCLAPI.Patch
)

// ncclSince gives, for the functions of NCCLFuncs that NCCL added within
// 2.28, the NCCL_VERSION_CODE of the first release whose nccl.h declares
// them; nccl.h may claim no older version than the newest of these.
var ncclSince = map[string]int{
	"CommRevoke": 22807,
}

// NCCLVersionCode is NCCL_VERSION(NCCLMajor, NCCLMinor, NCCLPatch).
var NCCLVersionCode = kspace.NCCLAPI.Code()

// CEnum is one value of a C enum of nccl.h.
type CEnum struct {
	Name    string
	Value   int
	Aliases []string // other names of the same value (ncclChar for ncclInt8)
}

// NCCLResults are nccl.h's ncclResult_t codes.
var NCCLResults = []CEnum{
	{Name: "ncclSuccess", Value: 0},
	{Name: "ncclUnhandledCudaError", Value: 1},
	{Name: "ncclSystemError", Value: 2},
	{Name: "ncclInternalError", Value: 3},
	{Name: "ncclInvalidArgument", Value: 4},
	{Name: "ncclInvalidUsage", Value: 5},
	{Name: "ncclRemoteError", Value: 6},
	{Name: "ncclInProgress", Value: 7},
	{Name: "ncclNumResults", Value: 8},
}

// NCCLRedOps are nccl.h's built-in ncclRedOp_t values (the host ops; the
// device ops of kspace.RedOp implement them).
var NCCLRedOps = []CEnum{
	{Name: "ncclSum", Value: 0},
	{Name: "ncclProd", Value: 1},
	{Name: "ncclMax", Value: 2},
	{Name: "ncclMin", Value: 3},
	{Name: "ncclAvg", Value: 4},
	{Name: "ncclNumOps", Value: 5},
}

// ncclTypeNames are nccl.h's names of each kspace.Type, with their aliases.
var ncclTypeNames = [kspace.NumTypes][]string{
	kspace.I8:     {"ncclInt8", "ncclChar"},
	kspace.U8:     {"ncclUint8"},
	kspace.I32:    {"ncclInt32", "ncclInt"},
	kspace.U32:    {"ncclUint32"},
	kspace.I64:    {"ncclInt64"},
	kspace.U64:    {"ncclUint64"},
	kspace.F16:    {"ncclFloat16", "ncclHalf"},
	kspace.F32:    {"ncclFloat32", "ncclFloat"},
	kspace.F64:    {"ncclFloat64", "ncclDouble"},
	kspace.BF16:   {"ncclBfloat16"},
	kspace.F8E4M3: {"ncclFloat8e4m3"},
	kspace.F8E5M2: {"ncclFloat8e5m2"},
}

// NCCLDataTypes are nccl.h's ncclDataType_t values: the kspace types, by
// value, and ncclNumTypes.
func NCCLDataTypes() []CEnum {
	out := make([]CEnum, 0, kspace.NumTypes+1)
	for t := range kspace.Type(kspace.NumTypes) {
		n := ncclTypeNames[t]
		out = append(out, CEnum{Name: n[0], Value: int(t), Aliases: n[1:]})
	}
	return append(out, CEnum{Name: "ncclNumTypes", Value: kspace.NumTypes})
}

// CField is a field of a C struct of nccl.h and its initializer.
type CField struct {
	CType, Name, Init string
}

// NCCLConfigFields is ncclConfig_t as NCCL 2.28 lays it out, with
// NCCL_CONFIG_INITIALIZER's values.
var NCCLConfigFields = []CField{
	{"size_t", "size", "sizeof(ncclConfig_t)"},
	{"unsigned int", "magic", "0xcafebeef"},
	{"unsigned int", "version", "NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)"},
	{"int", "blocking", "NCCL_CONFIG_UNDEF_INT"},
	{"int", "cgaClusterSize", "NCCL_CONFIG_UNDEF_INT"},
	{"int", "minCTAs", "NCCL_CONFIG_UNDEF_INT"},
	{"int", "maxCTAs", "NCCL_CONFIG_UNDEF_INT"},
	{"const char *", "netName", "NCCL_CONFIG_UNDEF_PTR"},
	{"int", "splitShare", "NCCL_CONFIG_UNDEF_INT"},
	{"int", "trafficClass", "NCCL_CONFIG_UNDEF_INT"},
	{"const char *", "commName", "NCCL_CONFIG_UNDEF_PTR"},
	{"int", "collnetEnable", "NCCL_CONFIG_UNDEF_INT"},
	{"int", "CTAPolicy", "NCCL_CONFIG_UNDEF_INT"},
	{"int", "shrinkShare", "NCCL_CONFIG_UNDEF_INT"},
	{"int", "nvlsCTAs", "NCCL_CONFIG_UNDEF_INT"},
	{"int", "nChannelsPerNetPeer", "NCCL_CONFIG_UNDEF_INT"},
	{"int", "nvlinkCentricSched", "NCCL_CONFIG_UNDEF_INT"},
}

// CFunc is a function of the C API: every one is declared as nccl<Name>
// and as its profiling alias pnccl<Name>.
type CFunc struct {
	Ret, Name, Params string
}

// NCCLFuncs is the C API that nccl.h declares and libnccl.so.2 exports, in
// nccl.h's order.
var NCCLFuncs = []CFunc{
	{"ncclResult_t", "MemAlloc", "void** ptr, size_t size"},
	{"ncclResult_t", "MemFree", "void* ptr"},
	{"ncclResult_t", "GetVersion", "int* version"},
	{"ncclResult_t", "GetUniqueId", "ncclUniqueId* uniqueId"},
	{"ncclResult_t", "CommInitRankConfig", "ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config"},
	{"ncclResult_t", "CommInitRank", "ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank"},
	{"ncclResult_t", "CommInitAll", "ncclComm_t* comm, int ndev, const int* devlist"},
	{"ncclResult_t", "CommFinalize", "ncclComm_t comm"},
	{"ncclResult_t", "CommDestroy", "ncclComm_t comm"},
	{"ncclResult_t", "CommAbort", "ncclComm_t comm"},
	{"ncclResult_t", "CommRevoke", "ncclComm_t comm, int revokeFlags"},
	{"ncclResult_t", "CommSplit", "ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config"},
	{"ncclResult_t", "CommShrink", "ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags"},
	{"ncclResult_t", "CommInitRankScalable", "ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config"},
	{"const char*", "GetErrorString", "ncclResult_t result"},
	{"const char*", "GetLastError", "ncclComm_t comm"},
	{"ncclResult_t", "CommGetAsyncError", "ncclComm_t comm, ncclResult_t* asyncError"},
	{"ncclResult_t", "CommCount", "const ncclComm_t comm, int* count"},
	{"ncclResult_t", "CommCuDevice", "const ncclComm_t comm, int* device"},
	{"ncclResult_t", "CommUserRank", "const ncclComm_t comm, int* rank"},
	{"ncclResult_t", "CommRegister", "const ncclComm_t comm, void* buff, size_t size, void** handle"},
	{"ncclResult_t", "CommDeregister", "const ncclComm_t comm, void* handle"},
	{"ncclResult_t", "CommWindowRegister", "ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags"},
	{"ncclResult_t", "CommWindowDeregister", "ncclComm_t comm, ncclWindow_t win"},
	{"ncclResult_t", "RedOpCreatePreMulSum", "ncclRedOp_t* op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm"},
	{"ncclResult_t", "RedOpDestroy", "ncclRedOp_t op, ncclComm_t comm"},
	{"ncclResult_t", "Reduce", "const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream"},
	{"ncclResult_t", "Bcast", "void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream"},
	{"ncclResult_t", "Broadcast", "const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream"},
	{"ncclResult_t", "AllReduce", "const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream"},
	{"ncclResult_t", "ReduceScatter", "const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream"},
	{"ncclResult_t", "AllGather", "const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream"},
	{"ncclResult_t", "AlltoAll", "const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream"},
	{"ncclResult_t", "Gather", "const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream"},
	{"ncclResult_t", "Scatter", "const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream"},
	{"ncclResult_t", "Send", "const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream"},
	{"ncclResult_t", "Recv", "void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream"},
	{"ncclResult_t", "GroupStart", "void"},
	{"ncclResult_t", "GroupEnd", "void"},
	{"ncclResult_t", "GroupSimulateEnd", "ncclSimInfo_t* simInfo"},
}

// Args is the call's argument list: the parameter names of Params.
func (f CFunc) Args() string {
	if f.Params == "void" {
		return ""
	}
	var names []string
	for _, p := range strings.Split(f.Params, ",") {
		p = strings.TrimSpace(p)
		names = append(names, p[strings.LastIndexAny(p, " *")+1:])
	}
	return strings.Join(names, ", ")
}

func emitPNCCL() ([]byte, error) { return execTemplate("pnccl.h.tmpl", NCCLFuncs) }

func emitNCCLHeader() ([]byte, error) {
	for _, f := range NCCLFuncs {
		if f.Name == "" || strings.HasPrefix(f.Name, "nccl") {
			return nil, fmt.Errorf("gen: nccl.h: function name %q: want the name without its nccl prefix", f.Name)
		}
	}
	return execTemplate("nccl.h.tmpl", struct {
		Major, Minor, Patch, Code int
		Results, RedOps, Types    []CEnum
		Config                    []CField
		Funcs                     []CFunc
	}{NCCLMajor, NCCLMinor, NCCLPatch, NCCLVersionCode, NCCLResults, NCCLRedOps, NCCLDataTypes(), NCCLConfigFields, NCCLFuncs})
}

// emitGoNCCLH emits the Go side of nccl.h: its API level and a digest of
// its bytes. capi compiles nccl.h through cgo, and Go's build cache does
// not track headers outside a package's directory; since capi imports the
// generated package, any change of the header changes this file and so
// rebuilds capi against the new header.
func emitGoNCCLH(header []byte, opts Options) ([]byte, error) {
	f := jen.NewFile(opts.GoPackage)
	f.HeaderComment(Header)
	f.Comment("NCCLVersionCode is the NCCL API level of include/nccl.h (NCCL_VERSION_CODE).")
	f.Const().Id("NCCLVersionCode").Op("=").Lit(NCCLVersionCode)
	f.Comment("NCCLHeaderSHA256 is the SHA-256 of include/nccl.h.")
	f.Const().Id("NCCLHeaderSHA256").Op("=").Lit(fmt.Sprintf("%x", sha256.Sum256(header)))
	return render(f)
}
