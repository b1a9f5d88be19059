// ng_reduce.h — reduction operators over ncclgo's 12 element types.
//
// An operator is a small struct built from the work descriptor:
//   T reduce(T a, T b)  combines two values (commutative);
//   T pre(T x)          applied to a rank's own input before it is combined
//                       (PreMulSum: x * scalar; identity otherwise);
//   T post(T x)         applied once to the final result (SumPostDiv: x / divisor).
//   kPre / kPost        whether pre / post do anything (lets loops skip them).
// ngPackReduce/ngPackPre/ngPackPost apply them lane-wise to 8- or 16-byte packs.
//
// redOpArg conventions (ngDevWork.redOpArg):
//   MinMax     : bit 0: 1 = min, 0 = max; bit 63 set = compare as signed
//                (the generator maps signed MinMax onto the unsigned functions).
//   PreMulSum  : the scalar's bits (type T, zero-extended), or with
//                NG_WORK_REDOP_ARG_PTR a device pointer to a T.
//   SumPostDiv : the divisor in bits 0..62; bit 63 set = divide as signed
//                (the runtime maps signed types onto the unsigned functions).
// Half-precision arithmetic is native on sm_80+ (bf16) / sm_53+ (half); fp8
// types compute in float and round back.
#ifndef NG_REDOPS_H_
#define NG_REDOPS_H_

#include <stdint.h>
#include <type_traits>

// ---- scalar arithmetic per type -----------------------------------------------

template <typename T>
struct ngArith {
  static __device__ __forceinline__ T add(T a, T b) { return a + b; }
  static __device__ __forceinline__ T mul(T a, T b) { return a * b; }
  static __device__ __forceinline__ T min(T a, T b) { return b < a ? b : a; }
  static __device__ __forceinline__ T max(T a, T b) { return b > a ? b : a; }
};

// 8-bit integers promote to int in C++; keep them wrapping.
template <typename T>
struct ngArith8 {
  static __device__ __forceinline__ T add(T a, T b) { return (T)(a + b); }
  static __device__ __forceinline__ T mul(T a, T b) { return (T)(a * b); }
  static __device__ __forceinline__ T min(T a, T b) { return b < a ? b : a; }
  static __device__ __forceinline__ T max(T a, T b) { return b > a ? b : a; }
};
template <>
struct ngArith<uint8_t> : ngArith8<uint8_t> {};
template <>
struct ngArith<int8_t> : ngArith8<int8_t> {};

template <>
struct ngArith<half> {
  static __device__ __forceinline__ half add(half a, half b) { return __hadd(a, b); }
  static __device__ __forceinline__ half mul(half a, half b) { return __hmul(a, b); }
  static __device__ __forceinline__ half min(half a, half b) { return __hlt(b, a) ? b : a; }
  static __device__ __forceinline__ half max(half a, half b) { return __hgt(b, a) ? b : a; }
};

#if CUDART_VERSION >= 11000
template <>
struct ngArith<__nv_bfloat16> {
  typedef __nv_bfloat16 T;
  static __device__ __forceinline__ float f(T x) { return __bfloat162float(x); }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  static __device__ __forceinline__ T add(T a, T b) { return __hadd(a, b); }
  static __device__ __forceinline__ T mul(T a, T b) { return __hmul(a, b); }
#else
  static __device__ __forceinline__ T add(T a, T b) { return __float2bfloat16(f(a) + f(b)); }
  static __device__ __forceinline__ T mul(T a, T b) { return __float2bfloat16(f(a) * f(b)); }
#endif
  static __device__ __forceinline__ T min(T a, T b) { return f(b) < f(a) ? b : a; }
  static __device__ __forceinline__ T max(T a, T b) { return f(b) > f(a) ? b : a; }
};
#endif

#if CUDART_VERSION >= 11080
template <typename F8>
struct ngArithFp8 {
  static __device__ __forceinline__ float f(F8 x) { return static_cast<float>(x); }
  static __device__ __forceinline__ F8 add(F8 a, F8 b) { return F8(f(a) + f(b)); }
  static __device__ __forceinline__ F8 mul(F8 a, F8 b) { return F8(f(a) * f(b)); }
  static __device__ __forceinline__ F8 min(F8 a, F8 b) { return f(b) < f(a) ? b : a; }
  static __device__ __forceinline__ F8 max(F8 a, F8 b) { return f(b) > f(a) ? b : a; }
};
template <>
struct ngArith<__nv_fp8_e4m3> : ngArithFp8<__nv_fp8_e4m3> {};
template <>
struct ngArith<__nv_fp8_e5m2> : ngArithFp8<__nv_fp8_e5m2> {};
#endif

// A product rounded on its own: PreMulSum's pre must not contract with the
// add that follows into an fma, or a 2-rank one-hop AllReduce (all_reduce.h)
// would round differently on its two ranks (fma(x0, s, p1) on one, fma(x1,
// s, p0) on the other). nvcc contracts by default (--fmad=true); the _rn
// intrinsics are never contracted. A half or bf16 product is exact in float
// (11 and 8 significant bits), so one rounding to the type gives the IEEE
// product (bf16 results below float's normal range round twice).
template <typename T>
__device__ __forceinline__ T ngMulRn(T a, T b) { return ngArith<T>::mul(a, b); }
template <>
__device__ __forceinline__ float ngMulRn<float>(float a, float b) { return __fmul_rn(a, b); }
template <>
__device__ __forceinline__ double ngMulRn<double>(double a, double b) { return __dmul_rn(a, b); }
template <>
__device__ __forceinline__ half ngMulRn<half>(half a, half b) {
  return __float2half_rn(__fmul_rn(__half2float(a), __half2float(b)));
}
#if CUDART_VERSION >= 11000
template <>
__device__ __forceinline__ __nv_bfloat16 ngMulRn<__nv_bfloat16>(__nv_bfloat16 a, __nv_bfloat16 b) {
  return __float2bfloat16_rn(__fmul_rn(__bfloat162float(a), __bfloat162float(b)));
}
#endif

// Raw bit copy between a T and an integer of the same or larger size.
template <typename T>
__device__ __forceinline__ T ngBitsTo(uint64_t bits) {
  T v;
  memcpy(&v, &bits, sizeof(T)); // little endian: the low bytes
  return v;
}

// ---- operators ------------------------------------------------------------------

template <typename T>
struct ngOpCopy {
  static constexpr bool kPre = false, kPost = false;
  __device__ __forceinline__ explicit ngOpCopy(const struct ngDevWork&) {}
  __device__ __forceinline__ T reduce(T a, T b) const { (void)a; return b; }
  __device__ __forceinline__ T pre(T x) const { return x; }
  __device__ __forceinline__ T post(T x) const { return x; }
};

template <typename T>
struct ngOpSum {
  static constexpr bool kPre = false, kPost = false;
  __device__ __forceinline__ explicit ngOpSum(const struct ngDevWork&) {}
  __device__ __forceinline__ T reduce(T a, T b) const { return ngArith<T>::add(a, b); }
  __device__ __forceinline__ T pre(T x) const { return x; }
  __device__ __forceinline__ T post(T x) const { return x; }
};

template <typename T>
struct ngOpProd {
  static constexpr bool kPre = false, kPost = false;
  __device__ __forceinline__ explicit ngOpProd(const struct ngDevWork&) {}
  __device__ __forceinline__ T reduce(T a, T b) const { return ngArith<T>::mul(a, b); }
  __device__ __forceinline__ T pre(T x) const { return x; }
  __device__ __forceinline__ T post(T x) const { return x; }
};

template <typename T> struct ngSigned { typedef T type; };
template <> struct ngSigned<uint8_t> { typedef int8_t type; };
template <> struct ngSigned<uint32_t> { typedef int32_t type; };
template <> struct ngSigned<uint64_t> { typedef int64_t type; };

// The generator maps signed MinMax (non-NVLS) onto the unsigned function, so
// bit 63 of redOpArg asks for signed comparison; bit 0 chooses min (1) or max (0).
template <typename T>
struct ngOpMinMax {
  static constexpr bool kPre = false, kPost = false;
  bool isMin, isSigned;
  __device__ __forceinline__ explicit ngOpMinMax(const struct ngDevWork& w)
      : isMin((w.redOpArg & 1) != 0), isSigned((w.redOpArg >> 63) != 0) {}
  __device__ __forceinline__ T reduce(T a, T b) const {
    typedef typename ngSigned<T>::type S;
    if constexpr (!std::is_same<S, T>::value) {
      if (isSigned) {
        S sa, sb;
        memcpy(&sa, &a, sizeof(T));
        memcpy(&sb, &b, sizeof(T));
        return isMin ? (sb < sa ? b : a) : (sb > sa ? b : a);
      }
    }
    return isMin ? ngArith<T>::min(a, b) : ngArith<T>::max(a, b);
  }
  __device__ __forceinline__ T pre(T x) const { return x; }
  __device__ __forceinline__ T post(T x) const { return x; }
};

template <typename T>
struct ngOpPreMulSum {
  static constexpr bool kPre = true, kPost = false;
  T scalar;
  __device__ __forceinline__ explicit ngOpPreMulSum(const struct ngDevWork& w) {
    if (w.flags & NG_WORK_REDOP_ARG_PTR) {
      scalar = *reinterpret_cast<const T*>(w.redOpArg);
    } else {
      scalar = ngBitsTo<T>(w.redOpArg);
    }
  }
  __device__ __forceinline__ T reduce(T a, T b) const { return ngArith<T>::add(a, b); }
  __device__ __forceinline__ T pre(T x) const { return ngMulRn<T>(x, scalar); }
  __device__ __forceinline__ T post(T x) const { return x; }
};

template <typename T>
struct ngOpSumPostDiv {
  static constexpr bool kPre = false, kPost = true;
  uint64_t divisor;
  bool isSigned;
  __device__ __forceinline__ explicit ngOpSumPostDiv(const struct ngDevWork& w)
      : divisor(w.redOpArg & ~(1ull << 63)), isSigned((w.redOpArg >> 63) != 0) {
    if (divisor == 0) divisor = 1;
  }
  __device__ __forceinline__ T reduce(T a, T b) const { return ngArith<T>::add(a, b); }
  __device__ __forceinline__ T pre(T x) const { return x; }
  __device__ __forceinline__ T post(T x) const {
    typedef typename ngSigned<T>::type S;
    if (isSigned) return (T)((S)x / (S)(int64_t)divisor);
    return (T)(x / (T)divisor);
  }
};

// ---- packs ----------------------------------------------------------------------
// P is uint64_t (8 bytes) or uint4 (16 bytes); lanes are sizeof(P)/sizeof(T) values of T.

template <typename T, typename Op, typename P>
__device__ __forceinline__ P ngPackReduce(const Op& op, P a, P b) {
  constexpr int N = sizeof(P) / sizeof(T);
  T ea[N], eb[N];
  memcpy(ea, &a, sizeof(P));
  memcpy(eb, &b, sizeof(P));
#pragma unroll
  for (int i = 0; i < N; i++) ea[i] = op.reduce(ea[i], eb[i]);
  P r;
  memcpy(&r, ea, sizeof(P));
  return r;
}

// ngPackMap applies f to every lane of a: op.pre (Post false) or op.post
// (Post true), and returns a itself when the op has none.
template <typename T, bool Post, typename Op, typename P>
__device__ __forceinline__ P ngPackMap(const Op& op, P a) {
  if (!(Post ? Op::kPost : Op::kPre)) return a;
  constexpr int N = sizeof(P) / sizeof(T);
  T ea[N];
  memcpy(ea, &a, sizeof(P));
#pragma unroll
  for (int i = 0; i < N; i++) ea[i] = Post ? op.post(ea[i]) : op.pre(ea[i]);
  P r;
  memcpy(&r, ea, sizeof(P));
  return r;
}

template <typename T, typename Op, typename P>
__device__ __forceinline__ P ngPackPre(const Op& op, P a) {
  return ngPackMap<T, false>(op, a);
}

template <typename T, typename Op, typename P>
__device__ __forceinline__ P ngPackPost(const Op& op, P a) {
  return ngPackMap<T, true>(op, a);
}

#endif // NG_REDOPS_H_
