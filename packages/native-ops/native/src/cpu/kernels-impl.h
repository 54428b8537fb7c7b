// The tiled attention kernels, written once as templates over a SIMD traits
// struct (simd.h) and instantiated per instruction set by kernels-*.cc.
//
// Layout trick: scores are held transposed, S^T [keys][queries], with the
// queries on the vector lanes. Then the online softmax's per-query max, sum
// and rescale are plain element-wise vector operations (no horizontal
// reductions), K and V are read straight from the caller's memory as the
// broadcast operand of the small matrix products, and only Q (and dO in the
// backward) is repacked per block. All products go through one register-tiled
// kernel, C[M][N] (+)= A[M][K] B[K][N], where A is read by broadcast with any
// row and column stride and B has N contiguous floats per row.
//
// This file does the arithmetic of one work item; splitting the work across
// threads and choosing the instruction set is dispatch.cc's job.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "attention-cpu.h"
#include "kernels-table.h"
#include "simd.h"

namespace ulysses {
// Internal linkage: each kernels-*.cc compiles these for its own target, and
// the copies must not be merged by the linker.
namespace {
namespace impl {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The forward copies each key block's k rows together when they lie this many bytes apart or more (see forward_item).
constexpr ptrdiff_t kPackedKeyStrideBytes = 1024;

}  // namespace impl

#include "gemm.h"

namespace impl {

// Rows j of st [nk][ld] (keys j0 + j) lose the queries i0 + i they may not
// see under bottom-right causal masking: i < j0 + j - offset - i0.
template <class I>
void mask_causal(float* st, int64_t nk, int64_t ld, int64_t j0, int64_t i0, int64_t offset) {
  for (int64_t j = 0; j < nk; ++j) {
    const int64_t lim = std::min<int64_t>(j0 + j - offset - i0, ld);
    for (int64_t c = 0; c < lim; c += I::W) I::mask_prefix_neg_inf(st + j * ld + c, static_cast<int>(lim - c));
  }
}

// Document masking. The ids never decrease along a batch row, so the keys a
// run of queries may see (and the queries that may see a run of keys) form
// one contiguous range, found by binary search: the items loop over that
// range only, and mask element-wise only the blocks that hold more than one
// document.

// Index of the first id in row [0, n) that is >= id.
inline int64_t first_at_least(const int32_t* row, int64_t n, int32_t id) { return std::lower_bound(row, row + n, id) - row; }

// Index of the first id in row [0, n) that is > id.
inline int64_t first_above(const int32_t* row, int64_t n, int32_t id) { return std::upper_bound(row, row + n, id) - row; }

// True when queries with ids dq[0, nq) and keys with ids dk[0, nk) all belong
// to one document: none of their scores is masked.
inline bool one_document(const int32_t* dq, int64_t nq, const int32_t* dk, int64_t nk) {
  return dq[0] == dq[nq - 1] && dk[0] == dk[nk - 1] && dq[0] == dk[0];
}

// Rows j of st [nk][ld] (a key of document dk[j]) lose the queries c < nq of
// other documents (dq[c] != dk[j]). Both runs of ids are sorted, so the
// queries kept by row j are one run [lo, hi) that only moves forward with j.
inline void mask_documents(float* st, int64_t nk, int64_t nq, int64_t ld, const int32_t* dq, const int32_t* dk) {
  int64_t lo = 0, hi = 0;
  for (int64_t j = 0; j < nk; ++j) {
    while (lo < nq && dq[lo] < dk[j]) ++lo;
    hi = std::max(hi, lo);
    while (hi < nq && dq[hi] <= dk[j]) ++hi;
    float* row = st + j * ld;
    for (int64_t c = 0; c < lo; ++c) row[c] = -INFINITY;
    for (int64_t c = hi; c < nq; ++c) row[c] = -INFINITY;
  }
}

// Packs rows [i0, i0 + nq) of x (row stride `stride`, head_dim d) transposed
// into xt [d][ldt], times `mul`; columns nq .. ldt are zero.
inline void pack_transposed(const float* x, ptrdiff_t stride, int64_t nq, int64_t d, float mul, float* xt,
                            int64_t ldt) {
  for (int64_t e = 0; e < d; ++e) {
    float* row = xt + e * ldt;
    for (int64_t i = 0; i < nq; ++i) row[i] = x[i * stride + e] * mul;
    for (int64_t i = nq; i < ldt; ++i) row[i] = 0.0f;
  }
}

// Packs nq rows of x (row stride `stride`) into xr [nq][dp], zero-padded.
inline void pack_rows(const float* x, ptrdiff_t stride, int64_t nq, int64_t d, int64_t dp, float* xr) {
  for (int64_t i = 0; i < nq; ++i) {
    float* row = xr + i * dp;
    for (int64_t e = 0; e < d; ++e) row[e] = x[i * stride + e];
    for (int64_t e = d; e < dp; ++e) row[e] = 0.0f;
  }
}

template <class I>
size_t forward_scratch_floats(const AttentionProblem& p) {
  return static_cast<size_t>(2 * p.head_dim * I::BLOCK_Q + I::BLOCK_K * I::BLOCK_Q + 3 * I::BLOCK_Q + I::BLOCK_K * p.head_dim);
}

// Forward of query block qb of head h in batch b.
template <class I>
void forward_item(const ForwardArgs& a, int64_t b, int64_t h, int64_t qb, float* scratch) {
  using V = typename I::V;
  constexpr int W = I::W;
  const AttentionProblem& p = a.p;
  const int64_t d = p.head_dim, group = p.heads / p.kv_heads, kvh = h / group;
  const int64_t offset = p.seq_k - p.seq_q;
  const int64_t i0 = qb * I::BLOCK_Q, nq = std::min<int64_t>(I::BLOCK_Q, p.seq_q - i0), nqp = round_up(nq, W);
  const ptrdiff_t qstride = p.heads * d, kvstride = p.kv_heads * d;
  float* qt = scratch;             // [d][nqp]  q * scale * log2(e), transposed
  float* ot = qt + d * I::BLOCK_Q;       // [d][nqp]  unnormalised output, transposed
  float* st = ot + d * I::BLOCK_Q;       // [nk][nqp] scores, then probabilities
  float* m = st + I::BLOCK_K * I::BLOCK_Q;     // running max (log2 units)
  float* l = m + I::BLOCK_Q;             // running sum
  float* alpha = l + I::BLOCK_Q;         // rescale factor of this key block
  float* krows = alpha + I::BLOCK_Q;     // [nk][d] this key block's k rows, when the heads interleave
  const float c = p.scale * kLog2e;

  pack_transposed(a.q + ((b * p.seq_q + i0) * p.heads + h) * d, qstride, nq, d, c, qt, nqp);
  std::fill(ot, ot + d * nqp, 0.0f);
  std::fill(m, m + nqp, -INFINITY);
  std::fill(l, l + nqp, 0.0f);

  // Keys [kbegin, kend): the causal limit, and with documents the keys from
  // the first of this block's first document to the last of its last one.
  int64_t kbegin = 0;
  int64_t kend = p.causal ? std::clamp<int64_t>(i0 + nq + offset, 0, p.seq_k) : p.seq_k;
  const int32_t* docq = a.doc_q ? a.doc_q + b * p.seq_q + i0 : nullptr;  // [nq] this block's ids
  const int32_t* dock = a.doc_k ? a.doc_k + b * p.seq_k : nullptr;       // [seq_k] the batch row's ids
  if (docq) {
    kbegin = first_at_least(dock, p.seq_k, docq[0]);
    kend = std::min(kend, first_above(dock, p.seq_k, docq[nq - 1]));
  }
  const float* kbase = a.k + (b * p.seq_k * p.kv_heads + kvh) * d;
  const float* vbase = a.v + (b * p.seq_k * p.kv_heads + kvh) * d;
  for (int64_t j0 = kbegin; j0 < kend; j0 += I::BLOCK_K) {
    const int64_t nk = std::min<int64_t>(I::BLOCK_K, kend - j0);
    // The scores' product reads each k row once per vector block of queries. The rows lie kv_heads * d floats
    // apart, and at 1 KiB or more the block's rows crowd a few of L1's sets and are evicted between those reads:
    // copied together first, they stay (15% on the forward at 8 heads of 32; at 4 heads the copy costs more than it
    // saves).
    const float* kblock = kbase + j0 * kvstride;
    ptrdiff_t kld = kvstride;
    if (kvstride * static_cast<ptrdiff_t>(sizeof(float)) >= kPackedKeyStrideBytes) {
      for (int64_t j = 0; j < nk; ++j) std::copy(kblock + j * kvstride, kblock + j * kvstride + d, krows + j * d);
      kblock = krows;
      kld = d;
    }
    gemm<I>(nk, nqp, d, kblock, kld, 1, qt, nqp, st, nqp, false);
    if (p.causal && j0 + nk - 1 > i0 + offset) mask_causal<I>(st, nk, nqp, j0, i0, offset);
    if (docq && !one_document(docq, nq, dock + j0, nk)) mask_documents(st, nk, nq, nqp, docq, dock + j0);
    for (int64_t v0 = 0; v0 < nqp; v0 += W) {
      // four running maxima: one chain would wait out max's latency each row
      V mx0 = I::load(m + v0), mx1 = mx0, mx2 = mx0, mx3 = mx0;
      int64_t j = 0;
      for (; j + 4 <= nk; j += 4) {
        mx0 = I::max(mx0, I::load(st + j * nqp + v0));
        mx1 = I::max(mx1, I::load(st + (j + 1) * nqp + v0));
        mx2 = I::max(mx2, I::load(st + (j + 2) * nqp + v0));
        mx3 = I::max(mx3, I::load(st + (j + 3) * nqp + v0));
      }
      for (; j < nk; ++j) mx0 = I::max(mx0, I::load(st + j * nqp + v0));
      const V mx = I::max(I::max(mx0, mx1), I::max(mx2, mx3));
      V sum = I::zero();
      for (int64_t j = 0; j < nk; ++j) {
        V e = I::exp2(I::sub(I::load(st + j * nqp + v0), mx));
        I::store(st + j * nqp + v0, e);
        sum = I::add(sum, e);
      }
      V al = I::exp2(I::sub(I::load(m + v0), mx));
      I::store(l + v0, I::fma(I::load(l + v0), al, sum));
      I::store(m + v0, mx);
      I::store(alpha + v0, al);
    }
    for (int64_t e = 0; e < d; ++e)
      for (int64_t v0 = 0; v0 < nqp; v0 += W) I::store(ot + e * nqp + v0, I::mul(I::load(ot + e * nqp + v0), I::load(alpha + v0)));
    gemm<I>(d, nqp, nk, vbase + j0 * kvstride, 1, kvstride, st, nqp, ot, nqp, true);
  }

  float* out = a.out + ((b * p.seq_q + i0) * p.heads + h) * d;
  float* lse = a.lse + (b * p.heads + h) * p.seq_q + i0;
  for (int64_t i = 0; i < nq; ++i) {
    const bool any = l[i] > 0.0f;
    const float inv = any ? 1.0f / l[i] : 0.0f;
    for (int64_t e = 0; e < d; ++e) out[i * qstride + e] = ot[e * nqp + i] * inv;
    lse[i] = any ? (m[i] + std::log2(l[i])) * kLn2 : -INFINITY;
  }
}

// Where the backward's prologue leaves q and dO per query block: blk =
// (b * heads + h) * qblocks + qb. Transposed copies for the score products,
// row copies only when head_dim is not a multiple of the vector width (else
// the products read the caller's rows directly).
template <class I>
struct BackwardLayout {
  int64_t d, dp, qblocks;
  bool rows_packed;
  explicit BackwardLayout(const AttentionProblem& p)
      : d(p.head_dim),
        dp(round_up(p.head_dim, I::W)),
        qblocks((p.seq_q + I::BWD_BLOCK_Q - 1) / I::BWD_BLOCK_Q),
        rows_packed(p.head_dim % I::W != 0) {}
  int64_t blocks(const AttentionProblem& p) const { return p.batch * p.heads * qblocks; }
  int64_t transposed_floats() const { return d * I::BWD_BLOCK_Q; }
  int64_t rows_floats() const { return rows_packed ? I::BWD_BLOCK_Q * dp : 0; }
  int64_t block_floats() const { return 2 * transposed_floats() + 2 * rows_floats() + 2 * I::BWD_BLOCK_Q; }
  float* qt(float* packed, int64_t blk) const { return packed + blk * block_floats(); }
  float* dot(float* packed, int64_t blk) const { return qt(packed, blk) + transposed_floats(); }
  float* qrows(float* packed, int64_t blk) const { return dot(packed, blk) + transposed_floats(); }
  float* dorows(float* packed, int64_t blk) const { return qrows(packed, blk) + rows_floats(); }
  float* lse2(float* packed, int64_t blk) const { return dorows(packed, blk) + rows_floats(); }
  float* delta(float* packed, int64_t blk) const { return lse2(packed, blk) + I::BWD_BLOCK_Q; }
};

template <class I>
size_t backward_packed_floats(const AttentionProblem& p) {
  BackwardLayout<I> L(p);
  return static_cast<size_t>(L.blocks(p) * L.block_floats());
}

// Prologue of the backward for query block qb of head h in batch b: packs q
// (times scale * log2(e)) and dO transposed, the log-sum-exp in log2 units
// (+inf where a query attends no key, or past seq_q, so its P is 0), and
// D_i = dO_i . O_i.
template <class I>
void backward_pack(const BackwardArgs& a, int64_t b, int64_t h, int64_t qb, float* packed) {
  const AttentionProblem& p = a.p;
  BackwardLayout<I> L(p);
  const int64_t blk = (b * p.heads + h) * L.qblocks + qb, d = p.head_dim;
  const int64_t i0 = qb * I::BWD_BLOCK_Q, nq = std::min<int64_t>(I::BWD_BLOCK_Q, p.seq_q - i0), nqp = round_up(nq, I::W);
  const ptrdiff_t qstride = p.heads * d;
  const int64_t row0 = ((b * p.seq_q + i0) * p.heads + h) * d;
  pack_transposed(a.q + row0, qstride, nq, d, p.scale * kLog2e, L.qt(packed, blk), nqp);
  pack_transposed(a.dout + row0, qstride, nq, d, 1.0f, L.dot(packed, blk), nqp);
  if (L.rows_packed) {
    pack_rows(a.q + row0, qstride, nq, d, L.dp, L.qrows(packed, blk));
    pack_rows(a.dout + row0, qstride, nq, d, L.dp, L.dorows(packed, blk));
  }
  const float* lse = a.lse + (b * p.heads + h) * p.seq_q + i0;
  float* lse2 = L.lse2(packed, blk);
  float* delta = L.delta(packed, blk);
  for (int64_t i = 0; i < nqp; ++i) {
    const bool real = i < nq && std::isfinite(lse[i]);
    lse2[i] = real ? lse[i] * kLog2e : INFINITY;
    float s = 0.0f;
    if (i < nq)
      for (int64_t e = 0; e < d; ++e) s += a.dout[row0 + i * qstride + e] * a.out[row0 + i * qstride + e];
    delta[i] = s;
  }
}

template <class I>
size_t backward_scratch_floats(const AttentionProblem& p) {
  const int64_t dp = round_up(p.head_dim, I::W);
  return static_cast<size_t>(3 * I::BWD_BLOCK_K * dp + 2 * I::BWD_BLOCK_K * I::BWD_BLOCK_Q);
}

// Backward of key block kb of kv head kvh in batch b, over every query head of
// the kv head's group: writes dk and dv of those keys and adds the unscaled
// dq contributions into dq_acc [batch][heads][seq_q][dp]. Reads q and dO as
// backward_pack left them in `packed`.
template <class I>
void backward_item(const BackwardArgs& a, const float* packed_in, int64_t b, int64_t kvh, int64_t kb, float* dq_acc,
                   float* scratch) {
  using V = typename I::V;
  constexpr int W = I::W;
  const AttentionProblem& p = a.p;
  BackwardLayout<I> L(p);
  float* packed = const_cast<float*>(packed_in);
  const int64_t d = p.head_dim, dp = L.dp, group = p.heads / p.kv_heads;
  const int64_t offset = p.seq_k - p.seq_q;
  const int64_t j0 = kb * I::BWD_BLOCK_K, nk = std::min<int64_t>(I::BWD_BLOCK_K, p.seq_k - j0);
  const ptrdiff_t qstride = p.heads * d, kvstride = p.kv_heads * d;
  float* krows = scratch;                 // [nk][dp]
  float* dk = krows + I::BWD_BLOCK_K * dp;    // [nk][dp] sum over queries of dS^T q
  float* dv = dk + I::BWD_BLOCK_K * dp;       // [nk][dp] sum over queries of P^T dO
  float* st = dv + I::BWD_BLOCK_K * dp;       // [nk][nqp] scores, then P
  float* dpt = st + I::BWD_BLOCK_K * I::BWD_BLOCK_Q;  // [nk][nqp] dP, then dS

  const float* kblock = a.k + ((b * p.seq_k + j0) * p.kv_heads + kvh) * d;
  const float* vblock = a.v + ((b * p.seq_k + j0) * p.kv_heads + kvh) * d;
  pack_rows(kblock, kvstride, nk, d, dp, krows);
  std::fill(dk, dk + 2 * I::BWD_BLOCK_K * dp, 0.0f);

  // Queries [qstart, qend) may see these keys: from the first that sees key
  // j0 under causal masking, and with documents from the first query of this
  // block's first document to the last of its last one.
  int64_t qstart = p.causal ? std::clamp<int64_t>(j0 - offset, 0, p.seq_q) : 0;
  int64_t qend = p.seq_q;
  const int32_t* dock = a.doc_k ? a.doc_k + b * p.seq_k + j0 : nullptr;  // [nk] this block's ids
  const int32_t* docq = a.doc_q ? a.doc_q + b * p.seq_q : nullptr;       // [seq_q] the batch row's ids
  if (dock) {
    qstart = std::max(qstart, first_at_least(docq, p.seq_q, dock[0]));
    qend = first_above(docq, p.seq_q, dock[nk - 1]);
  }
  const int64_t qblock_end = !dock ? L.qblocks : qstart < qend ? (qend + I::BWD_BLOCK_Q - 1) / I::BWD_BLOCK_Q : 0;
  for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
    for (int64_t qb = qstart / I::BWD_BLOCK_Q; qb < qblock_end; ++qb) {
      const int64_t i0 = qb * I::BWD_BLOCK_Q, nq = std::min<int64_t>(I::BWD_BLOCK_Q, p.seq_q - i0), nqp = round_up(nq, W);
      const int64_t blk = (b * p.heads + h) * L.qblocks + qb;
      const int64_t row0 = ((b * p.seq_q + i0) * p.heads + h) * d;
      const float* qrows = L.rows_packed ? L.qrows(packed, blk) : a.q + row0;
      const float* dorows = L.rows_packed ? L.dorows(packed, blk) : a.dout + row0;
      const ptrdiff_t rows_ld = L.rows_packed ? dp : qstride;
      const float* lse2 = L.lse2(packed, blk);
      const float* delta = L.delta(packed, blk);
      // Under causal masking no query of this block sees the keys past i0 + nq - 1 + offset: their P and dS would be
      // exactly 0 and add nothing to dk, dv or dq, so the products stop at the last key the block sees.
      const int64_t nkv = p.causal ? std::clamp<int64_t>(i0 + nq + offset - j0, 0, nk) : nk;
      if (nkv == 0) continue;
      gemm<I>(nkv, nqp, d, kblock, kvstride, 1, L.qt(packed, blk), nqp, st, nqp, false);
      if (p.causal && j0 + nkv - 1 > i0 + offset) mask_causal<I>(st, nkv, nqp, j0, i0, offset);
      if (dock && !one_document(docq + i0, nq, dock, nkv)) mask_documents(st, nkv, nq, nqp, docq + i0, dock);
      gemm<I>(nkv, nqp, d, vblock, kvstride, 1, L.dot(packed, blk), nqp, dpt, nqp, false);
      for (int64_t j = 0; j < nkv; ++j) {
        for (int64_t v0 = 0; v0 < nqp; v0 += W) {
          V pr = I::exp2(I::sub(I::load(st + j * nqp + v0), I::load(lse2 + v0)));
          I::store(st + j * nqp + v0, pr);
          I::store(dpt + j * nqp + v0, I::mul(pr, I::sub(I::load(dpt + j * nqp + v0), I::load(delta + v0))));
        }
      }
      gemm<I>(nkv, dp, nq, st, nqp, 1, dorows, rows_ld, dv, dp, true);
      gemm<I>(nkv, dp, nq, dpt, nqp, 1, qrows, rows_ld, dk, dp, true);
      float* dq = dq_acc + ((b * p.heads + h) * p.seq_q + i0) * dp;
      gemm<I>(nq, dp, nkv, dpt, 1, nqp, krows, dp, dq, dp, true);
    }
  }

  float* dkout = a.dk + ((b * p.seq_k + j0) * p.kv_heads + kvh) * d;
  float* dvout = a.dv + ((b * p.seq_k + j0) * p.kv_heads + kvh) * d;
  for (int64_t j = 0; j < nk; ++j) {
    for (int64_t e = 0; e < d; ++e) {
      dkout[j * kvstride + e] = dk[j * dp + e] * p.scale;
      dvout[j * kvstride + e] = dv[j * dp + e];
    }
  }
}

// GELU, tanh approximation: gelu(x) = 0.5 x (1 + tanh(u)) with
// u = sqrt(2/pi) (x + 0.044715 x^3), the formula of ONNX Gelu
// approximate="tanh" and of @ulysses/kernels' float64 reference. Since
// 0.5 (1 + tanh(u)) = sigmoid(2u), gelu(x) = x s with s = sigmoid(2u), and
//   d gelu / dx = s + x 2 s (1 - s) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
// With z = 2u log2(e) and e = 2^-|z| (in (0, 1], never overflows):
//   s = 1 / (1 + e) for z >= 0, e / (1 + e) for z < 0;  s (1 - s) = e / (1 + e)^2.
// Beyond |x| = kGeluClamp, e is exactly 0 (|z| > 126: exp2 flushes it), so x is
// clamped there for u and the derivative's x term: no overflow or inf * 0 for
// any input; gelu(+inf) = +inf, gelu(-inf) = -0 (x is clamped below only, so
// +inf passes through), gradient dy at +inf and 0 at -inf, NaN propagates.
constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
constexpr float kGeluZ = 2.302208198144325f;  // 2 sqrt(2/pi) log2(e)
constexpr float kGeluClamp = 32.0f;

template <class I>
struct GeluParts {
  typename I::V xc;  // x clamped to [-kGeluClamp, kGeluClamp] (NaN kept)
  typename I::V x2;  // xc^2
  typename I::V s;   // sigmoid(2u)
  typename I::V sd;  // s (1 - s)
};

template <class I>
inline GeluParts<I> gelu_parts(typename I::V x) {
  using V = typename I::V;
  const V one = I::set1(1.0f);
  // min/max return their second operand for NaN, which keeps a NaN x.
  const V xc = I::min(I::set1(kGeluClamp), I::max(I::set1(-kGeluClamp), x));
  const V x2 = I::mul(xc, xc);
  const V z = I::mul(I::mul(xc, I::set1(kGeluZ)), I::fma(x2, I::set1(kGeluCubic), one));
  const V e = I::exp2(I::neg_abs(z));  // 0 for NaN z
  const V r = I::div(one, I::add(one, e));
  const V er = I::mul(e, r);
  return {xc, x2, I::select_nonneg(z, r, er), I::mul(er, r)};
}

template <class I>
inline typename I::V gelu_forward_vec(typename I::V x) {
  return I::mul(I::max(I::set1(-kGeluClamp), x), gelu_parts<I>(x).s);
}

template <class I>
inline typename I::V gelu_backward_vec(typename I::V x, typename I::V dy) {
  const GeluParts<I> g = gelu_parts<I>(x);
  // du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2); d s / dx = 2 s (1 - s) du/dx.
  const typename I::V du = I::fma(g.x2, I::set1(3.0f * kGeluCubic), I::set1(1.0f));
  const typename I::V term = I::mul(I::mul(g.xc, I::set1(2.0f * kGeluSqrt2OverPi)), I::mul(du, g.sd));
  return I::mul(dy, I::add(g.s, term));
}

// The last n % W floats go through the same vector code on a zero-padded
// copy, so every element gets the same arithmetic wherever it sits.
template <class I>
void gelu_forward(const float* x, float* y, int64_t n) {
  constexpr int64_t W = I::W;
  int64_t i = 0;
  for (; i + W <= n; i += W) I::store(y + i, gelu_forward_vec<I>(I::load(x + i)));
  if (i < n) {
    float xb[W] = {};
    std::copy(x + i, x + n, xb);
    I::store(xb, gelu_forward_vec<I>(I::load(xb)));
    std::copy(xb, xb + (n - i), y + i);
  }
}

template <class I>
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  constexpr int64_t W = I::W;
  int64_t i = 0;
  for (; i + W <= n; i += W) I::store(dx + i, gelu_backward_vec<I>(I::load(x + i), I::load(dy + i)));
  if (i < n) {
    float xb[W] = {}, db[W] = {};
    std::copy(x + i, x + n, xb);
    std::copy(dy + i, dy + n, db);
    I::store(xb, gelu_backward_vec<I>(I::load(xb), I::load(db)));
    std::copy(xb, xb + (n - i), dx + i);
  }
}

// target[i] += term[i] for i in [0, n): one float32 addition per element,
// correctly rounded, so the same bits as JavaScript's `t[i] += d[i]` on
// Float32Arrays (a float64 sum of two floats rounded to float32 is the float32
// sum). term may be target itself.
template <class I>
void add_into(float* target, const float* term, int64_t n) {
  constexpr int64_t W = I::W;
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    const typename I::V a0 = I::add(I::load(target + i), I::load(term + i));
    const typename I::V a1 = I::add(I::load(target + i + W), I::load(term + i + W));
    const typename I::V a2 = I::add(I::load(target + i + 2 * W), I::load(term + i + 2 * W));
    const typename I::V a3 = I::add(I::load(target + i + 3 * W), I::load(term + i + 3 * W));
    I::store(target + i, a0);
    I::store(target + i + W, a1);
    I::store(target + i + 2 * W, a2);
    I::store(target + i + 3 * W, a3);
  }
  for (; i < n; ++i) target[i] += term[i];
}

// Rows of x and dy per pass of the weight gradient's gemm: the gemm keeps a
// panel of dy (these rows x its tile's columns) in cache for every row tile of
// the result.
constexpr int64_t WEIGHT_GRADIENT_ROWS = 256;

// Past this many rows of the result per column of a pass's dy panel (a tall,
// narrow product: the tied LM head's [vocab][hidden] gradient of a loss tile),
// the gemm runs RowsOuter when the panel fits WEIGHT_GRADIENT_PANEL_FLOATS
// (1 MiB, an L2's size), so x and into stream once instead of once per column
// panel.
constexpr int64_t WEIGHT_GRADIENT_TALL = 16;
constexpr int64_t WEIGHT_GRADIENT_PANEL_FLOATS = 1 << 18;

// into[i][o] += sum over r of x[r][i] dy[r][o] for o in [o0, o1): the weight
// gradient of y = x w (x [rows][in], dy [rows][out], w and into [in][out])
// added in place. Whole vectors of columns run in the gemm, WEIGHT_GRADIENT_ROWS
// rows at a time; the columns past the last whole vector run scalar.
template <class I>
void weight_gradient(const float* x, const float* dy, float* into, int64_t rows, int64_t in, int64_t out, int64_t o0,
                     int64_t o1) {
  const int64_t vector_end = o0 + (o1 - o0) / I::W * I::W;
  if (vector_end > o0) {
    for (int64_t r0 = 0; r0 < rows; r0 += WEIGHT_GRADIENT_ROWS) {
      const int64_t k = std::min(WEIGHT_GRADIENT_ROWS, rows - r0);
      const int64_t columns = vector_end - o0;
      const bool tall = in >= WEIGHT_GRADIENT_TALL * columns && k * columns <= WEIGHT_GRADIENT_PANEL_FLOATS;
      gemm<I>(in, columns, k, x + r0 * in, 1, in, dy + r0 * out + o0, out, into + o0, out, true,
              tall ? TileOrder::RowsOuter : TileOrder::ColumnsOuter);
    }
  }
  for (int64_t i = 0; i < in; ++i) {
    for (int64_t o = vector_end; o < o1; ++o) {
      float sum = 0.0f;
      for (int64_t r = 0; r < rows; ++r) sum += x[r * in + i] * dy[r * out + o];
      into[i * out + o] += sum;
    }
  }
}

// One pass of the deep product's gemm: MATMUL_DEPTH rows of w, copied into
// panels of MATMUL_PANEL columns (each 64 KiB, contiguous) so that w streams
// from memory once, row by row, and each panel stays in cache while every row
// of x meets it (w's own rows lie a whole row of out apart, too far apart for
// the prefetchers).
constexpr int64_t MATMUL_DEPTH = 256;
constexpr int64_t MATMUL_PANEL = 64;

// y[r][o] = sum over i of x[r][i] w[i][o] for o in [o0, o1): the product y = x w
// (x [rows][in], w [in][out], y [rows][out]), for a deep product such as the
// tied LM head's dh = dLogits E (in = the vocabulary). Whole vectors of columns
// run in the gemm MATMUL_DEPTH of `in` at a time, each pass added to the last;
// the columns past the last whole vector run scalar.
template <class I>
void matmul(const float* x, const float* w, float* y, int64_t rows, int64_t in, int64_t out, int64_t o0, int64_t o1) {
  const int64_t vector_end = o0 + (o1 - o0) / I::W * I::W;
  const int64_t columns = vector_end - o0;
  if (columns > 0) {
    if (in == 0)
      for (int64_t r = 0; r < rows; ++r) std::fill(y + r * out + o0, y + r * out + vector_end, 0.0f);
    // reused by this thread's later calls: a fresh buffer a call would be faulted in anew each time
    thread_local std::vector<float> packed;
    packed.resize(static_cast<size_t>(MATMUL_DEPTH * columns));
    for (int64_t k0 = 0; k0 < in; k0 += MATMUL_DEPTH) {
      const int64_t k = std::min(MATMUL_DEPTH, in - k0);
      // panel p holds columns [p0, p0 + width) of these k rows, rows `width` floats apart
      for (int64_t i = 0; i < k; ++i) {
        const float* row = w + (k0 + i) * out + o0;
        for (int64_t p0 = 0; p0 < columns; p0 += MATMUL_PANEL) {
          const int64_t width = std::min(MATMUL_PANEL, columns - p0);
          std::copy(row + p0, row + p0 + width, packed.data() + p0 * k + i * width);
        }
      }
      for (int64_t p0 = 0; p0 < columns; p0 += MATMUL_PANEL) {
        const int64_t width = std::min(MATMUL_PANEL, columns - p0);
        gemm<I>(rows, width, k, x + k0, in, 1, packed.data() + p0 * k, width, y + o0 + p0, out, k0 > 0);
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = vector_end; o < o1; ++o) {
      float sum = 0.0f;
      for (int64_t i = 0; i < in; ++i) sum += x[r * in + i] * w[i * out + o];
      y[r * out + o] = sum;
    }
  }
}

// Rotary embedding ("rotate half"), as the ONNX graph of @ulysses/kernels
// computes it from its cos and sin tables [table_rows][d] (d even, half =
// d / 2): for each of x's rows [tokens][heads][d], with table row
// token % table_rows,
//   forward   y[i] = x[i] cos[i] - x[i+half] sin[i],
//             y[i+half] = x[i+half] cos[i+half] + x[i] sin[i+half];
//   backward  (its transpose) dx[i] = dy[i] cos[i] + dy[i+half] sin[i+half],
//             dx[i+half] = dy[i+half] cos[i+half] - dy[i] sin[i].
// Each pair is read before it is written, so y may be x. Token t uses table
// row (first_row + t) % table_rows.
template <class I>
void rope(const float* x, const float* cos, const float* sin, float* y, int64_t tokens, int64_t heads, int64_t d,
          int64_t table_rows, int64_t first_row, bool backward) {
  const int64_t half = d / 2;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t row = (first_row + t) % table_rows;
    const float* c = cos + row * d;
    const float* s = sin + row * d;
    for (int64_t h = 0; h < heads; ++h) {
      const float* xr = x + (t * heads + h) * d;
      float* yr = y + (t * heads + h) * d;
      if (!backward) {
        for (int64_t i = 0; i < half; ++i) {
          const float a = xr[i], b = xr[i + half];
          yr[i] = a * c[i] - b * s[i];
          yr[i + half] = b * c[i + half] + a * s[i + half];
        }
      } else {
        for (int64_t i = 0; i < half; ++i) {
          const float a = xr[i], b = xr[i + half];
          yr[i] = a * c[i] + b * s[i + half];
          yr[i + half] = b * c[i + half] - a * s[i];
        }
      }
    }
  }
}

// Sum of the lanes of v, in lane order.
template <class I>
inline float lane_sum(typename I::V v) {
  float lanes[I::W];
  I::store(lanes, v);
  float s = 0.0f;
  for (int i = 0; i < I::W; ++i) s += lanes[i];
  return s;
}

// sum over i < n of f(i) for a vector f (whole vectors) and a scalar g (the tail).
template <class I, class F, class G>
inline float row_sum(int64_t n, F f, G g) {
  typename I::V acc = I::zero();
  int64_t i = 0;
  for (; i + I::W <= n; i += I::W) acc = I::add(acc, f(i));
  float s = lane_sum<I>(acc);
  for (; i < n; ++i) s += g(i);
  return s;
}

// LayerNorm over the last axis of x [rows][h], two passes per row (the mean,
// then the variance about it), as the float64 reference of @ulysses/kernels:
// y = (x - mean) rstd gamma + beta, rstd = 1 / sqrt(var + eps).
template <class I>
void layer_norm_forward(const float* x, const float* gamma, const float* beta, float eps, float* y, float* mean,
                        float* rstd, int64_t rows, int64_t h) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * h;
    float* yr = y + r * h;
    const float m = row_sum<I>(h, [&](int64_t i) { return I::load(xr + i); }, [&](int64_t i) { return xr[i]; }) / h;
    const typename I::V mv = I::set1(m);
    const float var = row_sum<I>(
                          h,
                          [&](int64_t i) {
                            const typename I::V c = I::sub(I::load(xr + i), mv);
                            return I::mul(c, c);
                          },
                          [&](int64_t i) { return (xr[i] - m) * (xr[i] - m); }) /
                      h;
    const float s = 1.0f / std::sqrt(var + eps);
    for (int64_t i = 0; i < h; ++i) yr[i] = (xr[i] - m) * s * gamma[i] + beta[i];
    mean[r] = m;
    rstd[r] = s;
  }
}

// Its backward: with xhat = (x - mean) rstd and g = dy gamma,
// dx = rstd (g - mean(g) - xhat mean(g xhat)); dGamma += dy xhat and
// dBeta += dy over the rows, added into float64 sums.
template <class I>
void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                         float* dx, double* dgamma, double* dbeta, int64_t rows, int64_t h) {
  using V = typename I::V;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * h;
    const float* dyr = dy + r * h;
    float* dxr = dx + r * h;
    const float m = mean[r], s = rstd[r];
    const V mv = I::set1(m), sv = I::set1(s);
    const float mean_g = row_sum<I>(
                             h, [&](int64_t i) { return I::mul(I::load(dyr + i), I::load(gamma + i)); },
                             [&](int64_t i) { return dyr[i] * gamma[i]; }) /
                         h;
    const float mean_gx = row_sum<I>(
                              h,
                              [&](int64_t i) {
                                const V xhat = I::mul(I::sub(I::load(xr + i), mv), sv);
                                return I::mul(I::mul(I::load(dyr + i), I::load(gamma + i)), xhat);
                              },
                              [&](int64_t i) { return dyr[i] * gamma[i] * ((xr[i] - m) * s); }) /
                          h;
    for (int64_t i = 0; i < h; ++i) {
      const float xhat = (xr[i] - m) * s;
      dxr[i] = s * (dyr[i] * gamma[i] - mean_g - xhat * mean_gx);
      dgamma[i] += static_cast<double>(dyr[i] * xhat);
      dbeta[i] += static_cast<double>(dyr[i]);
    }
  }
}

// The largest lane of v.
template <class I>
inline float lane_max(typename I::V v) {
  float lanes[I::W];
  I::store(lanes, v);
  float m = lanes[0];
  for (int i = 1; i < I::W; ++i) m = std::max(m, lanes[i]);
  return m;
}

// Floats per partial sum of cross_entropy's exponentials: each such run is
// summed in float lanes, the runs' sums in double.
constexpr int64_t CROSS_ENTROPY_RUN = 4096;

// Cross-entropy of each row x of logits [rows][vocab] against its label, in
// place: row_loss[r] = logsumexp(x) - x[label] and argmax[r] = the first index
// of x's largest value; with `has_grad`, x becomes its gradient
// grad_scale (softmax(x) - onehot(label)). A row labelled `ignore` gets loss 0,
// argmax -1 and (has_grad) a zero gradient. exp(t) is exp2(t log2 e).
template <class I>
void cross_entropy(float* logits, const int32_t* labels, float* row_loss, int32_t* argmax, int64_t rows, int64_t vocab,
                   int32_t ignore, bool has_grad, float grad_scale) {
  using V = typename I::V;
  constexpr int64_t W = I::W;
  constexpr float kLog2e = 1.4426950408889634f;
  const V log2e = I::set1(kLog2e);
  for (int64_t r = 0; r < rows; ++r) {
    float* x = logits + r * vocab;
    const int32_t label = labels[r];
    if (label == ignore) {
      row_loss[r] = 0.0f;
      argmax[r] = -1;
      if (has_grad) std::fill(x, x + vocab, 0.0f);
      continue;
    }
    V mv = I::set1(-INFINITY);
    int64_t i = 0;
    for (; i + W <= vocab; i += W) mv = I::max(mv, I::load(x + i));
    float m = lane_max<I>(mv);
    for (; i < vocab; ++i) m = std::max(m, x[i]);
    int64_t best = 0;
    while (best < vocab && !(x[best] == m)) ++best;
    const V shift = I::set1(m);
    double total = 0.0;
    i = 0;
    for (int64_t run = 0; run < vocab; run += CROSS_ENTROPY_RUN) {
      const int64_t end = std::min(vocab, run + CROSS_ENTROPY_RUN);
      V acc = I::zero();
      for (; i + W <= end; i += W) acc = I::add(acc, I::exp2(I::mul(I::sub(I::load(x + i), shift), log2e)));
      total += lane_sum<I>(acc);
    }
    for (; i < vocab; ++i) total += std::exp2((x[i] - m) * kLog2e);
    const float lse = m + static_cast<float>(std::log(total));
    row_loss[r] = lse - x[label];
    argmax[r] = static_cast<int32_t>(best < vocab ? best : 0);
    if (!has_grad) continue;
    const V at = I::set1(lse), scale = I::set1(grad_scale);
    i = 0;
    for (; i + W <= vocab; i += W) I::store(x + i, I::mul(scale, I::exp2(I::mul(I::sub(I::load(x + i), at), log2e))));
    for (; i < vocab; ++i) x[i] = grad_scale * std::exp2((x[i] - lse) * kLog2e);
    x[label] -= grad_scale;
  }
}

template <class I>
KernelTable make_table(const char* name) {
  KernelTable t;
  t.name = name;
  t.block_q = I::BLOCK_Q;
  t.block_k = I::BLOCK_K;
  t.bwd_block_q = I::BWD_BLOCK_Q;
  t.bwd_block_k = I::BWD_BLOCK_K;
  t.width = I::W;
  t.forward_scratch_floats = &forward_scratch_floats<I>;
  t.forward_item = &forward_item<I>;
  t.backward_packed_floats = &backward_packed_floats<I>;
  t.backward_pack = &backward_pack<I>;
  t.backward_scratch_floats = &backward_scratch_floats<I>;
  t.backward_item = &backward_item<I>;
  t.gelu_forward = &gelu_forward<I>;
  t.gelu_backward = &gelu_backward<I>;
  t.weight_gradient = &weight_gradient<I>;
  t.matmul = &matmul<I>;
  t.add_into = &add_into<I>;
  t.rope = &rope<I>;
  t.layer_norm_forward = &layer_norm_forward<I>;
  t.layer_norm_backward = &layer_norm_backward<I>;
  t.cross_entropy = &cross_entropy<I>;
  return t;
}

}  // namespace impl
}  // namespace
}  // namespace ulysses
