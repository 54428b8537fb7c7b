// SIMD traits for the CPU attention kernels: one struct per instruction set
// (AVX-512, AVX2+FMA, and a portable GCC/Clang vector-extension fallback),
// each with the handful of operations the kernels need (load, store, fma,
// broadcast, max, and a masked exp2). The kernels in kernels-impl.h are
// templates over these structs; which one runs is chosen at run time in
// dispatch.cc. This header defines nothing that depends on ONNX Runtime.
//
// Include it only after the translation unit has selected its target (see the
// kernels-*.cc files): the AVX structs use intrinsics that need it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace ulysses {

// 2^f on f in [-0.5, 0.5]: Taylor coefficients of exp(f ln 2), degree 6.
// Relative error below 1.3e-7 (the float32 rounding error is 6e-8).
constexpr float kExp2C1 = 0.6931471805599453f;
constexpr float kExp2C2 = 0.2402265069591007f;
constexpr float kExp2C3 = 0.05550410866482158f;
constexpr float kExp2C4 = 0.009618129107628477f;
constexpr float kExp2C5 = 0.0013333558146428443f;
constexpr float kExp2C6 = 0.00015403530393381608f;
// exp2(x) for x below this (or NaN) is flushed to exactly 0.
constexpr float kExp2Min = -126.0f;

#if defined(ULYSSES_SIMD_AVX512)
struct Avx512 {
  using V = __m512;
  static constexpr int W = 16;
  // Register tiles (MR rows x NV vectors): 24 accumulators of 32 registers.
  static constexpr int MR = 8, NV = 3;
  static constexpr int MR_WIDE = 6, NV_WIDE = 4;
  // Queries and keys per block: multiples of both tile shapes.
  static constexpr int64_t BLOCK_Q = 96, BLOCK_K = 96;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  // Lanes [0, n) of p set to -inf (n in [0, W]).
  static void mask_prefix_neg_inf(float* p, int n) {
    if (n <= 0) return;
    __mmask16 m = n >= W ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
    _mm512_mask_storeu_ps(p, m, _mm512_set1_ps(-INFINITY));
  }
  // exp2(x), exactly 0 where x < kExp2Min or x is NaN.
  static V exp2(V x) {
    __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExp2Min), _CMP_GE_OQ);
    x = _mm512_min_ps(x, _mm512_set1_ps(127.0f));
    V n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V f = _mm512_sub_ps(x, n);
    V p = _mm512_set1_ps(kExp2C6);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExp2C5));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExp2C4));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExp2C3));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExp2C2));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExp2C1));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(keep, p, n);
  }
};
#endif

#if defined(ULYSSES_SIMD_AVX2)
struct Avx2 {
  using V = __m256;
  static constexpr int W = 8;
  // 12 accumulators of 16 registers.
  static constexpr int MR = 6, NV = 2;
  static constexpr int MR_WIDE = 4, NV_WIDE = 3;
  static constexpr int64_t BLOCK_Q = 48, BLOCK_K = 48;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static void mask_prefix_neg_inf(float* p, int n) {
    for (int i = 0; i < n && i < W; ++i) p[i] = -INFINITY;
  }
  static V exp2(V x) {
    V keep = _mm256_cmp_ps(x, _mm256_set1_ps(kExp2Min), _CMP_GE_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kExp2Min)), _mm256_set1_ps(127.0f));
    V n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V f = _mm256_sub_ps(x, n);
    V p = _mm256_set1_ps(kExp2C6);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kExp2C5));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kExp2C4));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kExp2C3));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kExp2C2));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kExp2C1));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
  }
};
#endif

#if defined(ULYSSES_SIMD_PORTABLE)
// GCC/Clang vector extensions: compiles on any target (x86 without AVX2,
// arm64 NEON, ...); the compiler picks the instructions.
struct Portable {
  typedef float V __attribute__((vector_size(32)));
  static constexpr int W = 8;
  static constexpr int MR = 4, NV = 2;
  static constexpr int MR_WIDE = 4, NV_WIDE = 2;
  static constexpr int64_t BLOCK_Q = 32, BLOCK_K = 32;
  static V zero() { return V{}; }
  static V set1(float x) { return V{} + x; }
  static V load(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(float* p, V v) { std::memcpy(p, &v, sizeof v); }
  static V fma(V a, V b, V c) { return a * b + c; }
  static V mul(V a, V b) { return a * b; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V max(V a, V b) { return a > b ? a : b; }
  static void mask_prefix_neg_inf(float* p, int n) {
    for (int i = 0; i < n && i < W; ++i) p[i] = -INFINITY;
  }
  static V exp2(V x) {
    V r;
    for (int i = 0; i < W; ++i) {
      float xi = x[i];
      r[i] = (xi >= kExp2Min) ? std::exp2(xi < 127.0f ? xi : 127.0f) : 0.0f;
    }
    return r;
  }
};
#endif

}  // namespace ulysses
