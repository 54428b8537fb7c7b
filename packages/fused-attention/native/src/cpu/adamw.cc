// AdamW's update of one slice of a flat parameter vector, element by element
// in float64 with the operations, in the order, of @ulysses/training's AdamW
// (JavaScript numbers are IEEE float64): the same bits as that loop. Float
// contraction is off for this file, since a fused multiply-add rounds once
// where JavaScript rounds twice; division and square root are correctly
// rounded in both, and -fno-math-errno only drops errno for sqrt of a
// negative, which the second moment never is (NaN stays NaN either way).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <cmath>
#include <cstdint>

#include "attention-cpu.h"

namespace ulysses {

void adamw_update_cpu(const AdamWArgs& a) {
  const double b1 = a.beta1, b2 = a.beta2, one_b1 = 1 - a.beta1, one_b2 = 1 - a.beta2;
  // per-step constants, computed as AdamW.update computes them
  const double step_size = a.lr / a.c1, inv_sqrt_c2 = 1 / std::sqrt(a.c2);
  for (int64_t i = 0; i < a.n; ++i) {
    const double g = a.grads[i];
    double p = a.params[i];
    if (!a.decay_mask || a.decay_mask[i] == 1) p -= a.decay * p;
    const double mi = b1 * a.m[i] + one_b1 * g;
    const double vi = b2 * a.v[i] + one_b2 * g * g;
    a.m[i] = static_cast<float>(mi);
    a.v[i] = static_cast<float>(vi);
    a.params[i] = static_cast<float>(p - (step_size * mi) / (std::sqrt(vi) * inv_sqrt_c2 + a.eps));
  }
}

}  // namespace ulysses
