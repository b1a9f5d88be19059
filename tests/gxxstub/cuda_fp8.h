#pragma once
// Stub for tests/gxxcheck.sh (see cuda_runtime.h).
struct __nv_fp8_e4m3 { unsigned char x; __nv_fp8_e4m3() = default; explicit __nv_fp8_e4m3(float); explicit operator float() const; };
struct __nv_fp8_e5m2 { unsigned char x; __nv_fp8_e5m2() = default; explicit __nv_fp8_e5m2(float); explicit operator float() const; };
