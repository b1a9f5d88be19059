#pragma once
// Stub for tests/gxxcheck.sh (see cuda_runtime.h).
struct __half { unsigned short x; __half() = default; __half(float); operator float() const; };
typedef __half half;
half __hadd(half, half); half __hmul(half, half); bool __hlt(half, half); bool __hgt(half, half);
half __float2half_rn(float); half __float2half(float); float __half2float(half);
