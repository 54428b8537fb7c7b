// The CPU kernels compiled for AVX-512 (F, DQ, VL) with FMA. The target is set
// per function by pragma, so the rest of the addon needs no -mavx512 flag and
// still loads on processors without it (the table is then never chosen).
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
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx512dq,avx512vl,avx2,fma")
#endif
#define ULYSSES_SIMD_AVX512 1
#include "kernels-impl.h"

namespace ulysses {
bool avx512_kernels(KernelTable* out) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl")) return false;
  *out = impl::make_table<Avx512>("avx512");
  return true;
}
}  // namespace ulysses
#if defined(__clang__)
#pragma clang attribute pop
#endif
#else
#include "kernels-table.h"
namespace ulysses {
bool avx512_kernels(KernelTable*) { return false; }
}  // namespace ulysses
#endif
