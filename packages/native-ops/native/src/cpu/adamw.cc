// AdamW's update of one slice of a flat parameter vector, element by element
// in float64 with the operations, in the order, of @ulysses/training's AdamW
// (JavaScript numbers are IEEE float64): the same bits as that loop. Float
// contraction is off for this file, since a fused multiply-add rounds once
// where JavaScript rounds twice; division and square root are correctly
// rounded in both, and -fno-math-errno only drops errno for sqrt of a
// negative, which the second moment never is (NaN stays NaN either way).
// For the avx512 instruction set (the automatic choice on a processor with
// AVX-512) the same loop runs as compiled by adamw-avx512.cc: 8 float64
// lanes instead of SSE2's 2, the same bits.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <cstring>

#include "adamw-impl.h"

namespace ulysses {

bool adamw_update_avx512(const AdamWArgs& a);

void adamw_update_cpu(const AdamWArgs& a, CpuIsa isa) {
  // the name the kernels' choice resolves to (ULYSSES_FUSED_ATTENTION_ISA narrows auto)
  const char* name = cpu_isa_name(isa);
  if (name != nullptr && std::strcmp(name, "avx512") == 0 && adamw_update_avx512(a)) return;
  adamw_loop(a);
}

}  // namespace ulysses
