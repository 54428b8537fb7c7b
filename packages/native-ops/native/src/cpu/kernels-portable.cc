// The CPU kernels for any processor, through GCC/Clang vector extensions.
#define ULYSSES_SIMD_PORTABLE 1
#include "kernels-impl.h"

namespace ulysses {
void portable_kernels(KernelTable* out) { *out = impl::make_table<Portable>("portable"); }
}  // namespace ulysses
