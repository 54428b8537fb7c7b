// adamw_update_cpu's loop (adamw-impl.h) compiled for AVX-512 (BW for the
// decay mask's bytes), with float contraction off as in adamw.cc. The target
// is set by pragma, so the rest of the addon needs no -mavx512 flag; without
// AVX-512 (or on another architecture) adamw_update_avx512 returns false and
// adamw.cc's loop runs.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cmath>
#include <cstdint>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2"))), apply_to = function)
#else
#pragma GCC optimize("fp-contract=off")
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,avx2,prefer-vector-width=512")
#endif
#include "adamw-impl.h"

namespace ulysses {
bool adamw_update_avx512(const AdamWArgs& a) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl") ||
      !__builtin_cpu_supports("avx512bw"))
    return false;
  adamw_loop(a);
  return true;
}
}  // namespace ulysses
#if defined(__clang__)
#pragma clang attribute pop
#endif
#else
#include "attention-cpu.h"
namespace ulysses {
bool adamw_update_avx512(const AdamWArgs&) { return false; }
}  // namespace ulysses
#endif
