// The loop of adamw_update_cpu (see adamw.cc), compiled by adamw.cc for any
// x86-64 and by adamw-avx512.cc for AVX-512. Both files turn float
// contraction off, so the vectorised loop does the same correctly rounded
// float64 operations, in the same order, as the scalar one and JavaScript.
// Internal linkage: the two copies are compiled for different targets and
// must not be merged by the linker.
#pragma once

#include <cmath>
#include <cstdint>

#include "attention-cpu.h"

namespace ulysses {
namespace {

// One loop per case, so that the mask is read unconditionally where there is
// one and the compiler can vectorise both (a select, not a branch).
template <bool kMasked>
void adamw_elements(const AdamWArgs& a, float* __restrict params, float* __restrict m, float* __restrict v,
                    const float* __restrict grads, const uint8_t* __restrict mask) {
  const double b1 = a.beta1, b2 = a.beta2, one_b1 = 1 - a.beta1, one_b2 = 1 - a.beta2;
  // per-step constants, computed as AdamW.update computes them
  const double step_size = a.lr / a.c1, inv_sqrt_c2 = 1 / std::sqrt(a.c2);
  const double decay = a.decay, eps = a.eps;
  const int64_t n = a.n;
  for (int64_t i = 0; i < n; ++i) {
    const double g = grads[i];
    const double p0 = params[i];
    const double p = !kMasked || mask[i] == 1 ? p0 - decay * p0 : p0;
    const double mi = b1 * m[i] + one_b1 * g;
    const double vi = b2 * v[i] + one_b2 * g * g;
    m[i] = static_cast<float>(mi);
    v[i] = static_cast<float>(vi);
    params[i] = static_cast<float>(p - (step_size * mi) / (std::sqrt(vi) * inv_sqrt_c2 + eps));
  }
}

inline void adamw_loop(const AdamWArgs& a) {
  // the arrays must not overlap (the binding checks): restrict lets the compiler vectorise without a runtime check
  if (a.decay_mask != nullptr)
    adamw_elements<true>(a, a.params, a.m, a.v, a.grads, a.decay_mask);
  else
    adamw_elements<false>(a, a.params, a.m, a.v, a.grads, nullptr);
}

}  // namespace
}  // namespace ulysses
