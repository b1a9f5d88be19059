package kspace

// NCCLAPI is the level of NCCL's API that ncclgo implements, the one fact
// behind the public Go package's ncclgo.Version, the C ABI's nccl.h
// (gen's NCCLMajor, NCCLMinor, NCCLPatch) and ncclGetVersion. It is 2.28.7,
// the first release whose nccl.h declares ncclCommRevoke and
// NCCL_REVOKE_DEFAULT (NCCL's nccl.h is the same through 2.28.9).
var NCCLAPI = APIVersion{Major: 2, Minor: 28, Patch: 7}

// APIVersion is an NCCL version.
type APIVersion struct{ Major, Minor, Patch int }

// Code is NCCL_VERSION_CODE's value: major*10000 + minor*100 + patch (the
// encoding NCCL uses from 2.9 on).
func (v APIVersion) Code() int { return v.Major*10000 + v.Minor*100 + v.Patch }
