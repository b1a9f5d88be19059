package kspace

// NCCLAPI is the level of NCCL's API that ncclgo implements: the public Go
// package reports it (ncclgo.Version). The C ABI's nccl.h and
// ncclGetVersion carry gen's NCCLMajor, NCCLMinor and NCCLPatch instead,
// so that clients enable what that level offers.
var NCCLAPI = APIVersion{Major: 2, Minor: 28, Patch: 3}

// APIVersion is an NCCL version.
type APIVersion struct{ Major, Minor, Patch int }

// Code is NCCL_VERSION_CODE's value: major*10000 + minor*100 + patch (the
// encoding NCCL uses from 2.9 on).
func (v APIVersion) Code() int { return v.Major*10000 + v.Minor*100 + v.Patch }
