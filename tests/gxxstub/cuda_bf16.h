#pragma once
// Stub for tests/gxxcheck.sh (see cuda_runtime.h).
struct __nv_bfloat16 { unsigned short x; __nv_bfloat16() = default; __nv_bfloat16(float); operator float() const; };
__nv_bfloat16 __hadd(__nv_bfloat16, __nv_bfloat16); __nv_bfloat16 __hmul(__nv_bfloat16, __nv_bfloat16);
__nv_bfloat16 __float2bfloat16_rn(float); __nv_bfloat16 __float2bfloat16(float); float __bfloat162float(__nv_bfloat16);
