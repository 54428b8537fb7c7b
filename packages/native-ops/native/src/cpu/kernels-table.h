// The per-instruction-set entry points of the CPU kernels (one table per
// kernels-*.cc translation unit) that dispatch.cc chooses between at run time.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention-cpu.h"

namespace ulysses {

struct KernelTable {
  const char* name = nullptr;
  int64_t block_q = 0;      // queries per block of the forward
  int64_t block_k = 0;      // keys per block of the forward
  int64_t bwd_block_q = 0;  // and of the backward
  int64_t bwd_block_k = 0;
  int64_t width = 0;    // floats per vector: dq partials are padded to it
  size_t (*forward_scratch_floats)(const AttentionProblem&) = nullptr;
  void (*forward_item)(const ForwardArgs&, int64_t b, int64_t h, int64_t qb, float* scratch) = nullptr;
  // The backward's prologue packs q and dO once per query block (b, h, qb)
  // into a shared buffer that every key-block item then reads.
  size_t (*backward_packed_floats)(const AttentionProblem&) = nullptr;
  void (*backward_pack)(const BackwardArgs&, int64_t b, int64_t h, int64_t qb, float* packed) = nullptr;
  size_t (*backward_scratch_floats)(const AttentionProblem&) = nullptr;
  void (*backward_item)(const BackwardArgs&, const float* packed, int64_t b, int64_t kvh, int64_t kb, float* dq_acc,
                        float* scratch) = nullptr;
  // GELU (tanh approximation) over n floats, single pass (see gelu_forward_cpu).
  void (*gelu_forward)(const float* x, float* y, int64_t n) = nullptr;
  void (*gelu_backward)(const float* x, const float* dy, float* dx, int64_t n) = nullptr;
  // target[i] += term[i] over n floats (see add_into_cpu).
  void (*add_into)(float* target, const float* term, int64_t n) = nullptr;
  // into[i][o] += sum_r x[r][i] dy[r][o] for columns o in [o0, o1) (see weight_gradient_cpu).
  void (*weight_gradient)(const float* x, const float* dy, float* into, int64_t rows, int64_t in, int64_t out, int64_t o0,
                          int64_t o1) = nullptr;
  // y[r][o] = sum_i x[r][i] w[i][o] for columns o in [o0, o1) (see matmul_cpu).
  void (*matmul)(const float* x, const float* w, float* y, int64_t rows, int64_t in, int64_t out, int64_t o0,
                 int64_t o1) = nullptr;
  // Rotary embedding and LayerNorm, single pass per row (see rope_cpu, layer_norm_forward_cpu).
  void (*rope)(const float* x, const float* cos, const float* sin, float* y, int64_t tokens, int64_t heads, int64_t d,
               int64_t table_rows, int64_t first_row, bool backward) = nullptr;
  void (*layer_norm_forward)(const float* x, const float* gamma, const float* beta, float eps, float* y, float* mean,
                             float* rstd, int64_t rows, int64_t h) = nullptr;
  void (*layer_norm_backward)(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                              float* dx, double* dgamma, double* dbeta, int64_t rows, int64_t h) = nullptr;
  // Cross-entropy per row, its gradient in place (see cross_entropy_cpu).
  void (*cross_entropy)(float* logits, const int32_t* labels, float* row_loss, int32_t* argmax, int64_t rows, int64_t vocab,
                        int32_t ignore, bool has_grad, float grad_scale) = nullptr;
};

// Each returns false when this build or this processor lacks the instruction set.
bool avx512_kernels(KernelTable* out);
bool avx2_kernels(KernelTable* out);
void portable_kernels(KernelTable* out);

}  // namespace ulysses
