package ncclgo

import (
	"fmt"
	"runtime/debug"

	"github.com/ncclgo/ncclgo/kspace"
)

// modulePath is this module's import path, for finding its version in the
// build information of the program that links it.
const modulePath = "github.com/ncclgo/ncclgo"

// VersionInfo says which NCCL API level ncclgo implements and which ncclgo
// this is.
type VersionInfo struct {
	// NCCLMajor, NCCLMinor and NCCLPatch are the NCCL API level that ncclgo
	// implements. The C ABI's nccl.h and ncclGetVersion carry the level
	// that the generator writes into the header, which can differ.
	NCCLMajor, NCCLMinor, NCCLPatch int
	// Module is ncclgo's own version: the module version the program was
	// built with ("v0.4.0", a pseudo-version), or "devel" when ncclgo is the
	// main module or the build carries no module information.
	Module string
}

// NCCLCode returns the API level as NCCL_VERSION_CODE encodes it
// (major*10000 + minor*100 + patch).
func (v VersionInfo) NCCLCode() int {
	return kspace.APIVersion{Major: v.NCCLMajor, Minor: v.NCCLMinor, Patch: v.NCCLPatch}.Code()
}

// String returns "ncclgo MODULE (NCCL API MAJOR.MINOR.PATCH)".
func (v VersionInfo) String() string {
	return fmt.Sprintf("ncclgo %s (NCCL API %d.%d.%d)", v.Module, v.NCCLMajor, v.NCCLMinor, v.NCCLPatch)
}

// Version reports the NCCL API level ncclgo implements and ncclgo's own
// version.
func Version() VersionInfo {
	v := VersionInfo{NCCLMajor: kspace.NCCLAPI.Major, NCCLMinor: kspace.NCCLAPI.Minor, NCCLPatch: kspace.NCCLAPI.Patch, Module: "devel"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.Module = moduleVersion(bi)
	}
	return v
}

// moduleVersion finds ncclgo's version in a program's build information.
func moduleVersion(bi *debug.BuildInfo) string {
	if bi.Main.Path == modulePath {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			return bi.Main.Version
		}
		return "devel"
	}
	for _, d := range bi.Deps {
		if d.Path != modulePath {
			continue
		}
		if d.Replace != nil {
			if d.Replace.Version != "" {
				return d.Replace.Version
			}
			return "devel"
		}
		return d.Version
	}
	return "devel"
}
