// NCCL's profiling names (pnccl*), each calling its nccl* export; the
// wrappers are generated from the C API table (gen/ncclh.go).
#undef NCCLGO_TYPES_ONLY
#include "ncclgo_pnccl.h"
