// The two ONNX Runtime custom ops of the "ulysses" domain, written against the
// C API's OrtCustomOp struct:
//   FlashAttention(q, k, v [, q_documents, k_documents]) -> (out, lse)
//   FlashAttentionGrad(q, k, v, out, dout, lse [, q_documents, k_documents]) -> (dq, dk, dv)
// attributes: causal (int, 0 or 1), scale (float; default 1/sqrt(headDim)).
// The optional document inputs (int32 [batch, seq_q] and [batch, seq_k],
// given together, never decreasing along a row) mask attention to the keys
// of each query's own document (packed sequences).
// Shapes follow attention-cpu.h. Each op instance carries the thread count its
// CPU kernel uses, so every runtime (see addon.cc) registers its own copies.
// A CUDA variant of each op is registered too when the addon was built with
// nvcc; ONNX Runtime picks it only for sessions with the CUDA provider.
#pragma once

#include <onnxruntime_c_api.h>

#include "cpu/attention-cpu.h"

namespace ulysses {

constexpr const char* kCustomOpDomain = "ulysses";
constexpr const char* kForwardOpName = "FlashAttention";
constexpr const char* kBackwardOpName = "FlashAttentionGrad";

enum class OpKind { Forward, Backward };

struct FlashOp {
  OrtCustomOp base;  // first member: ONNX Runtime hands back &base
  OpKind kind;
  bool cuda;
  int threads;
  CpuIsa isa;
};

// Fills every callback of op->base for the given kind and provider.
void init_flash_op(FlashOp* op, OpKind kind, bool cuda, int threads, CpuIsa isa);

// True when this build contains the CUDA kernels.
bool cuda_compiled();

}  // namespace ulysses
