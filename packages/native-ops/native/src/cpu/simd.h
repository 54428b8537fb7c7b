// SIMD traits for the CPU attention kernels: one struct per instruction set
// (AVX-512, AVX2+FMA, and a portable GCC/Clang vector-extension fallback),
// each with the handful of operations the kernels need (load, store, fma,
// broadcast, min / max, division, a lane select, and a masked exp2). The
// kernels in kernels-impl.h are templates over these structs; which one runs
// is chosen at run time in dispatch.cc. This header defines nothing that depends on ONNX Runtime.
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
  // Queries and keys per block of the forward, and of the backward, whose
  // items stream every query block past one key block: more keys per block
  // reuse each streamed query block more, fewer queries keep its [keys]
  // [queries] scores and dS in cache. The backward's were the fastest of 13
  // shapes from 32 x 128 to 128 x 64 (one thread, 4 heads of 32, causal,
  // seq 4096-16384). The key blocks are multiples of both tile shapes' rows
  // (6 and 8), the query blocks of MR (8): the products whose rows are
  // queries have 2 vectors of columns at head dim 32, so they use MR.
  static constexpr int64_t BLOCK_Q = 96, BLOCK_K = 96;
  static constexpr int64_t BWD_BLOCK_Q = 64, BWD_BLOCK_K = 192;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  // min and max return b where either is NaN (x86 semantics; the portable
  // struct matches), so min(hi, max(lo, x)) keeps a NaN x.
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V neg_abs(V a) { return _mm512_or_ps(a, _mm512_set1_ps(-0.0f)); }
  // c >= 0 ? a : b lane by lane (b where c is NaN).
  static V select_nonneg(V c, V a, V b) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(c, _mm512_setzero_ps(), _CMP_GE_OQ), b, a);
  }
  // Lanes [0, n) of p set to -inf (n in [0, W]).
  static void mask_prefix_neg_inf(float* p, int n) {
    if (n <= 0) return;
    __mmask16 m = n >= W ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
    _mm512_mask_storeu_ps(p, m, _mm512_set1_ps(-INFINITY));
  }
  // exp2(x), exactly 0 where x < kExp2Min or x is NaN; +inf where 2^x
  // overflows (scalef saturates, so x needs no upper clamp here).
  static V exp2(V x) {
    __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExp2Min), _CMP_GE_OQ);
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
  static constexpr int64_t BWD_BLOCK_Q = 48, BWD_BLOCK_K = 48;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V neg_abs(V a) { return _mm256_or_ps(a, _mm256_set1_ps(-0.0f)); }
  static V select_nonneg(V c, V a, V b) { return _mm256_blendv_ps(b, a, _mm256_cmp_ps(c, _mm256_setzero_ps(), _CMP_GE_OQ)); }
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
  typedef int32_t M __attribute__((vector_size(32)));  // lane masks: -1 true, 0 false
  static constexpr int W = 8;
  static constexpr int MR = 4, NV = 2;
  static constexpr int MR_WIDE = 4, NV_WIDE = 2;
  static constexpr int64_t BLOCK_Q = 32, BLOCK_K = 32;
  static constexpr int64_t BWD_BLOCK_Q = 32, BWD_BLOCK_K = 32;
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
  // Comparisons in 16-byte halves and selects by bit masks: GCC 12 lowers a
  // comparison of two 32-byte vectors to one scalar compare per lane when the
  // target's vectors are 16 bytes (SSE2, NEON), and `m ? a : b` with it.
  typedef float H __attribute__((vector_size(16)));
  typedef int32_t HM __attribute__((vector_size(16)));
  static void halves(V v, H* lo, H* hi) {
    std::memcpy(lo, &v, sizeof *lo);
    std::memcpy(hi, reinterpret_cast<const char*>(&v) + sizeof *lo, sizeof *hi);
  }
  static M join(HM lo, HM hi) {
    M m;
    std::memcpy(&m, &lo, sizeof lo);
    std::memcpy(reinterpret_cast<char*>(&m) + sizeof lo, &hi, sizeof hi);
    return m;
  }
  static M gt(V a, V b) {
    H a0, a1, b0, b1;
    halves(a, &a0, &a1);
    halves(b, &b0, &b1);
    return join(a0 > b0, a1 > b1);
  }
  static M ge(V a, V b) {
    H a0, a1, b0, b1;
    halves(a, &a0, &a1);
    halves(b, &b0, &b1);
    return join(a0 >= b0, a1 >= b1);
  }
  static V blend(M m, V a, V b) { return (V)((m & (M)a) | (~m & (M)b)); }
  static V max(V a, V b) { return blend(gt(a, b), a, b); }
  static V min(V a, V b) { return blend(gt(b, a), a, b); }
  static V div(V a, V b) { return a / b; }
  static V neg_abs(V a) { return (V)((M)a | (M{} + INT32_MIN)); }  // not set1(-0.0f): that is 0 + -0 = +0
  static V select_nonneg(V c, V a, V b) { return blend(ge(c, zero()), a, b); }
  static void mask_prefix_neg_inf(float* p, int n) {
    for (int i = 0; i < n && i < W; ++i) p[i] = -INFINITY;
  }
  // The AVX2 struct's exp2 in vector extensions (a per-lane std::exp2 made
  // the GELU kernels about 10x slower than ONNX Runtime's).
  static V exp2(V x) {
    const M keep = ge(x, set1(kExp2Min));  // false for NaN
    x = blend(keep, x, set1(kExp2Min));
    x = min(x, set1(127.0f));
    // round half away from zero: n in [-126, 127], f in [-0.5, 0.5]
    const M n = __builtin_convertvector(x + blend(ge(x, zero()), set1(0.5f), set1(-0.5f)), M);
    const V f = x - __builtin_convertvector(n, V);
    V p = set1(kExp2C6);
    p = p * f + kExp2C5;
    p = p * f + kExp2C4;
    p = p * f + kExp2C3;
    p = p * f + kExp2C2;
    p = p * f + kExp2C1;
    p = p * f + 1.0f;
    const V scale = (V)((n + 127) << 23);  // 2^n
    return (V)(keep & (M)(p * scale));
  }
};
#endif

}  // namespace ulysses
