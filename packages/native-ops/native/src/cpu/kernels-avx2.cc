// The CPU kernels compiled for AVX2 with FMA (see kernels-avx512.cc for why the
// target is set by pragma).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// Standard headers first, so that their inline functions keep the default target.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC target("avx2,fma")
#endif
#define ULYSSES_SIMD_AVX2 1
#include "kernels-impl.h"

namespace ulysses {
bool avx2_kernels(KernelTable* out) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return false;
  *out = impl::make_table<Avx2>("avx2");
  return true;
}
}  // namespace ulysses
#if defined(__clang__)
#pragma clang attribute pop
#endif
#else
#include "kernels-table.h"
namespace ulysses {
bool avx2_kernels(KernelTable*) { return false; }
}  // namespace ulysses
#endif
