package main

/*
#undef NCCLGO_TYPES_ONLY
#include "nccl.h"
*/
import "C"

import "unsafe"

// cAllReduce calls the C entry ncclAllReduce (scope.c) as a host does,
// through its scope: the tests' way in, since a test cannot call C.
func cAllReduce(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, o C.ncclRedOp_t, h C.ncclComm_t, stream unsafe.Pointer) result {
	return C.ncclAllReduce(send, recv, count, dt, o, h, C.cudaStream_t(stream))
}
