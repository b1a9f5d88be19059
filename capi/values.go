package main

// Values of the generated nccl.h as Go constants, for the tests (a
// _test.go file cannot use cgo).

/*
#include "nccl.h"
*/
import "C"

const (
	cSuccess            = C.ncclSuccess
	cUnhandledCudaError = C.ncclUnhandledCudaError
	cSystemError        = C.ncclSystemError
	cInternalError      = C.ncclInternalError
	cInvalidArgument    = C.ncclInvalidArgument
	cInvalidUsage       = C.ncclInvalidUsage
	cRemoteError        = C.ncclRemoteError
	cInProgress         = C.ncclInProgress
	cSum                = C.ncclSum
	cProd               = C.ncclProd
	cMax                = C.ncclMax
	cMin                = C.ncclMin
	cAvg                = C.ncclAvg
	cNumOps             = C.ncclNumOps
	cFloat32            = C.ncclFloat32
	cBfloat16           = C.ncclBfloat16
	cNumTypes           = C.ncclNumTypes
	cUniqueIDBytes      = C.NCCL_UNIQUE_ID_BYTES
	cVersionCode        = C.NCCL_VERSION_CODE
)

// commHandle is ncclComm_t, for the tests.
type commHandle = C.ncclComm_t

// uniqueID is ncclUniqueId, for the tests.
type uniqueID = C.ncclUniqueId

// sizeT is size_t, for the tests.
type sizeT = C.size_t
