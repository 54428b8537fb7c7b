// The CPU kernels' entry points: FlashAttention-style attention forward
// (out and the row log-sum-exp) and backward (dq, dk, dv) on raw float32
// memory in the layout of the LocalAttention contract:
//   q, out, dout, dq  [batch, seq_q, heads, head_dim]
//   k, v, dk, dv      [batch, seq_k, kv_heads, head_dim]
//   lse               [batch, heads, seq_q]   (natural log; -inf for a query
//                                              that attends no key)
//   doc_q             [batch, seq_q]  int32 document ids (optional, with doc_k)
//   doc_k             [batch, seq_k]
// Causal masking is bottom-right aligned: query i attends key j when
// j <= i + seq_k - seq_q. Document masking (packed sequences): query i attends
// key j only when doc_q[b, i] == doc_k[b, j]; the ids never decrease along a
// row, so the keys of a run of queries form one contiguous range, and the
// kernels visit only the key (query) blocks inside it. These functions
// validate nothing (the custom op does) and know nothing of ONNX Runtime.
#pragma once

#include <cstdint>

namespace ulysses {

struct AttentionProblem {
  int64_t batch = 0;
  int64_t seq_q = 0;
  int64_t seq_k = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  bool causal = false;
  float scale = 0.0f;
};

struct ForwardArgs {
  AttentionProblem p;
  const float* q;
  const float* k;
  const float* v;
  float* out;
  float* lse;
  // Both nullptr (no document masking) or both set; see above.
  const int32_t* doc_q = nullptr;
  const int32_t* doc_k = nullptr;
};

struct BackwardArgs {
  AttentionProblem p;
  const float* q;
  const float* k;
  const float* v;
  const float* out;
  const float* dout;
  const float* lse;
  float* dq;
  float* dk;
  float* dv;
  const int32_t* doc_q = nullptr;
  const int32_t* doc_k = nullptr;
};

// Instruction sets of the kernels. Auto: the best this processor has
// (ULYSSES_FUSED_ATTENTION_ISA=avx2|portable in the environment narrows it).
enum class CpuIsa { Auto, Avx512, Avx2, Portable };

// Parses "auto", "avx512", "avx2" or "portable"; false for anything else.
bool parse_cpu_isa(const char* name, CpuIsa* out);

// The name of the instruction set `isa` resolves to on this machine, or
// nullptr when this processor (or build) lacks it.
const char* cpu_isa_name(CpuIsa isa = CpuIsa::Auto);

// Both run on `threads` threads (the calling thread plus threads - 1 started
// for the call). The forward's result does not depend on the thread count,
// nor does the backward's with at least 2 (batch, kv head) groups per thread
// (each group runs on one thread, which owns its dq rows); with fewer, the
// backward splits key blocks and sums per-thread dq partials in a fixed order,
// so it is reproducible for a given thread count. Throw std::bad_alloc on
// allocation failure.
// `isa` must be one cpu_isa_name accepts.
void attention_forward_cpu(const ForwardArgs& args, int threads, CpuIsa isa = CpuIsa::Auto);
void attention_backward_cpu(const BackwardArgs& args, int threads, CpuIsa isa = CpuIsa::Auto);

// GELU, tanh approximation (ONNX Gelu approximate="tanh"), elementwise over n
// floats in one pass on the calling thread: y = gelu(x), dx = dy * gelu'(x).
// The output may be the same array as an input, but must not partly overlap
// one. Finite for every finite input; gelu(+inf) = +inf, gelu(-inf) = -0,
// NaN propagates. The formulas are in kernels-impl.h.
void gelu_forward_cpu(const float* x, float* y, int64_t n, CpuIsa isa = CpuIsa::Auto);
void gelu_backward_cpu(const float* x, const float* dy, float* dx, int64_t n, CpuIsa isa = CpuIsa::Auto);

// One AdamW update of n elements (see adamw.cc): params, m and v in place,
// from grads; decay_mask null (decay everywhere) or one byte per element (1:
// decay). c1 and c2 are the bias corrections 1 - beta^step, decay is lr *
// weight decay. The arrays must not overlap. `isa` picks the loop's build
// (AVX-512's, or the baseline x86-64 one for avx2 and portable); the bits
// are the same on each.
struct AdamWArgs {
  float* params;
  const float* grads;
  float* m;
  float* v;
  const uint8_t* decay_mask;
  int64_t n;
  double beta1, beta2, eps, lr, decay, c1, c2;
};
void adamw_update_cpu(const AdamWArgs& args, CpuIsa isa = CpuIsa::Auto);

// target[i] += term[i] over n floats, in place on the calling thread, with
// the bits of float32 additions one element at a time (JavaScript's
// `t[i] += d[i]` on Float32Arrays). term may be target, but must not partly
// overlap it.
void add_into_cpu(float* target, const float* term, int64_t n, CpuIsa isa = CpuIsa::Auto);

// The weight gradient of y = x w added in place: into[i][o] += sum over r of
// x[r][i] dy[r][o], with x [rows][in], dy [rows][out] and into [in][out] row
// major; into must not overlap x or dy. The columns are split over `threads`
// (the caller's thread and threads - 1 more); each element's sum runs over
// the rows in order whatever the split.
void weight_gradient_cpu(const float* x, const float* dy, float* into, int64_t rows, int64_t in, int64_t out, int threads,
                         CpuIsa isa = CpuIsa::Auto);

// The product y = x w: y[r][o] = sum over i of x[r][i] w[i][o], with x
// [rows][in], w [in][out] and y [rows][out] row major; y must not overlap x or
// w. Made for deep products (in far above out: the tied LM head's input
// gradient dLogits E), whose w it reads from memory once. The columns are split
// over `threads` as in weight_gradient_cpu; the result does not depend on it.
void matmul_cpu(const float* x, const float* w, float* y, int64_t rows, int64_t in, int64_t out, int threads,
                CpuIsa isa = CpuIsa::Auto);

// Rotary embedding ("rotate half") of x [tokens][heads][head_dim] by the
// cos and sin tables [table_rows][head_dim] (row token % table_rows), as
// the ONNX graphs of @ulysses/kernels compute it; backward: the transpose
// (the formulas are in kernels-impl.h). y may be x, but must not partly
// overlap it. The tokens are split over `threads` (the calling thread and
// threads - 1 more) when each gets at least 64K floats.
void rope_cpu(const float* x, const float* cos, const float* sin, float* y, int64_t tokens, int64_t heads, int64_t head_dim,
              int64_t table_rows, bool backward, int threads = 1, CpuIsa isa = CpuIsa::Auto);

// LayerNorm over the last axis of x [rows][h]: y, and each row's mean and
// rstd = 1 / sqrt(var + eps); the backward gives dx [rows][h] and dgamma,
// dbeta [h] (summed in float64 over chunks of 256 rows, the chunks' sums
// added in order: the same bits for any thread count). Outputs must not
// overlap inputs. Rows are split over `threads` as rope's tokens.
void layer_norm_forward_cpu(const float* x, const float* gamma, const float* beta, float eps, float* y, float* mean,
                            float* rstd, int64_t rows, int64_t h, int threads = 1, CpuIsa isa = CpuIsa::Auto);
void layer_norm_backward_cpu(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                             float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t h, int threads = 1,
                             CpuIsa isa = CpuIsa::Auto);

// Cross-entropy of each row of logits [rows][vocab] against labels[r], in
// place: row_loss[r] = logsumexp(row) - row[label], argmax[r] = the first
// index of the row's largest value; with has_grad the row is overwritten by
// grad_scale (softmax(row) - onehot(label)), the loss's gradient, so the
// logits need no second buffer. Rows labelled `ignore` get loss 0, argmax -1
// and a zero gradient. Every other label must lie in [0, vocab). Rows are
// split over `threads` as rope's tokens.
void cross_entropy_cpu(float* logits, const int32_t* labels, float* row_loss, int32_t* argmax, int64_t rows, int64_t vocab,
                       int32_t ignore, bool has_grad, float grad_scale, int threads = 1, CpuIsa isa = CpuIsa::Auto);

}  // namespace ulysses
