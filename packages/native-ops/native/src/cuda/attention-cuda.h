// CUDA versions of the attention kernels (attention-cuda.cu), on device
// memory (the document ids too, when given) in the same layouts as the CPU
// kernels (cpu/attention-cpu.h), with the same masks, queued on the given
// cudaStream_t. Compiled only when nvcc exists at build time
// (ULYSSES_WITH_CUDA). head_dim up to 256. Throw std::runtime_error on a CUDA
// error or an unsupported size.
#pragma once

#include "cpu/attention-cpu.h"

namespace ulysses {

void attention_forward_cuda(const ForwardArgs& args, void* stream);
void attention_backward_cuda(const BackwardArgs& args, void* stream);

}  // namespace ulysses
