// CUDA attention kernels: the same algorithm as the CPU kernels (online
// softmax over key tiles staged in shared memory; the backward recomputes the
// probabilities from the log-sum-exp). One thread owns one query row (forward,
// dq) or one key row (dk, dv), with its accumulators in registers; the
// backward runs two passes (keys, then queries) instead of atomics, so it is
// deterministic. Plain FP32 CUDA cores: simple rather than peak-speed (no
// tensor cores). Document masking: the ids never decrease along a batch row,
// so each thread's visible keys (or queries) are one range found by binary
// search, and a block loops only over the union of its threads' ranges. See
// attention-cuda.h for the contract.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/attention-cuda.h"

namespace ulysses {
namespace {

constexpr int kTile = 64;  // queries (or keys) per block, one per thread
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Rows of the other side staged in shared memory per step (two [stage][DMAX]
// float tiles: at most 32 KiB).
template <int DMAX>
constexpr int stage_rows() { return DMAX <= 128 ? 32 : 16; }

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string("FlashAttention CUDA: ") + what + ": " + cudaGetErrorString(err));
}

struct Dims {
  int64_t b, sq, sk, h, hk, d, offset;
  bool causal;
  float c;  // scale * log2(e)
  // Document ids [b][sq] and [b][sk] in device memory, or both nullptr.
  const int32_t* doc_q;
  const int32_t* doc_k;
};

Dims dims_of(const AttentionProblem& p, const int32_t* doc_q, const int32_t* doc_k) {
  return Dims{p.batch, p.seq_q, p.seq_k, p.heads, p.kv_heads, p.head_dim, p.seq_k - p.seq_q, p.causal, p.scale * kLog2e, doc_q, doc_k};
}

// Index of the first id in row [0, n) that is >= id (above: > id); the ids
// never decrease.
__device__ int64_t first_id_index(const int32_t* __restrict__ row, int64_t n, int32_t id, bool above) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (row[mid] < id || (above && row[mid] == id)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// The range [*begin, *end) of the other side's rows (other[0, n), ids never
// decreasing) in documents first_id .. last_id, intersected with what the
// range already holds.
__device__ void clip_to_documents(const int32_t* __restrict__ other, int64_t n, int32_t first_id, int32_t last_id, int64_t* begin,
                                  int64_t* end) {
  *begin = max(*begin, first_id_index(other, n, first_id, false));
  *end = min(*end, first_id_index(other, n, last_id, true));
}

// Keys and values j0 .. j0 + kStage of kv head kvh into shared memory (zeros
// past seq_k), between barriers.
template <int DMAX, int kStage>
__device__ void stage_kv(const Dims& s, const float* __restrict__ k, const float* __restrict__ v, int64_t b, int64_t kvh,
                         int64_t j0, float (*ks)[DMAX], float (*vs)[DMAX]) {
  __syncthreads();
  for (int64_t x = threadIdx.x; x < kStage * s.d; x += blockDim.x) {
    const int64_t j = x / s.d, e = x % s.d;
    const bool in = j0 + j < s.sk;
    ks[j][e] = in ? k[((b * s.sk + j0 + j) * s.hk + kvh) * s.d + e] : 0.0f;
    vs[j][e] = in ? v[((b * s.sk + j0 + j) * s.hk + kvh) * s.d + e] : 0.0f;
  }
  __syncthreads();
}

// grid: (query tiles, heads, batch); block: kTile threads.
template <int DMAX, int kStage = stage_rows<DMAX>()>
__global__ void forward_kernel(Dims s, const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                               float* __restrict__ out, float* __restrict__ lse) {
  __shared__ float ks[kStage][DMAX];
  __shared__ float vs[kStage][DMAX];
  const int64_t b = blockIdx.z, h = blockIdx.y, i = int64_t(blockIdx.x) * kTile + threadIdx.x;
  const int64_t kvh = h / (s.h / s.hk);
  const bool active = i < s.sq;
  float qr[DMAX], o[DMAX];
  for (int e = 0; e < DMAX; ++e) {
    qr[e] = (active && e < s.d) ? q[((b * s.sq + i) * s.h + h) * s.d + e] * s.c : 0.0f;
    o[e] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int64_t first_i = int64_t(blockIdx.x) * kTile, last_i = min(int64_t(blockIdx.x + 1) * kTile, s.sq) - 1;
  // The block's keys [kbegin, kend) and this thread's [my_begin, my_end).
  int64_t kbegin = 0, kend = s.causal ? max(int64_t(0), min(s.sk, last_i + s.offset + 1)) : s.sk;
  int64_t my_begin = 0, my_end = s.causal ? max(int64_t(0), min(s.sk, i + s.offset + 1)) : s.sk;
  if (s.doc_q) {
    const int32_t* dq = s.doc_q + b * s.sq;
    const int32_t* dk = s.doc_k + b * s.sk;
    clip_to_documents(dk, s.sk, dq[first_i], dq[last_i], &kbegin, &kend);
    if (active) clip_to_documents(dk, s.sk, dq[i], dq[i], &my_begin, &my_end);
  }
  for (int64_t j0 = kbegin; j0 < kend; j0 += kStage) {
    stage_kv<DMAX, kStage>(s, k, v, b, kvh, j0, ks, vs);
    if (!active) continue;
    float sc[kStage];
    float mx = m;
    for (int j = 0; j < kStage; ++j) {
      float dot = 0.0f;
      for (int e = 0; e < DMAX; ++e) dot += qr[e] * ks[j][e];
      sc[j] = (j0 + j >= my_begin && j0 + j < my_end) ? dot : -INFINITY;
      mx = fmaxf(mx, sc[j]);
    }
    if (mx == -INFINITY) continue;
    const float alpha = exp2f(m - mx);
    l *= alpha;
    for (int e = 0; e < DMAX; ++e) o[e] *= alpha;
    for (int j = 0; j < kStage; ++j) {
      const float p = exp2f(sc[j] - mx);
      l += p;
      for (int e = 0; e < DMAX; ++e) o[e] += p * vs[j][e];
    }
    m = mx;
  }
  if (!active) return;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int e = 0; e < s.d; ++e) out[((b * s.sq + i) * s.h + h) * s.d + e] = o[e] * inv;
  lse[(b * s.h + h) * s.sq + i] = l > 0.0f ? (m + log2f(l)) * kLn2 : -INFINITY;
}

// D_i = dO_i . O_i and the log-sum-exp in log2 units (+inf: no keys).
__global__ void prepare_kernel(Dims s, const float* __restrict__ out, const float* __restrict__ dout,
                               const float* __restrict__ lse, float* __restrict__ delta, float* __restrict__ lse2) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // r = (b * h + hh) * sq + i
  if (r >= s.b * s.h * s.sq) return;
  const int64_t i = r % s.sq, bh = r / s.sq, hh = bh % s.h, b = bh / s.h;
  const float* o = out + ((b * s.sq + i) * s.h + hh) * s.d;
  const float* g = dout + ((b * s.sq + i) * s.h + hh) * s.d;
  float acc = 0.0f;
  for (int e = 0; e < s.d; ++e) acc += o[e] * g[e];
  delta[r] = acc;
  lse2[r] = isfinite(lse[r]) ? lse[r] * kLog2e : INFINITY;
}

// dk, dv: grid (key tiles, kv heads, batch); each thread owns one key and
// loops over every query of its kv head's group.
template <int DMAX, int kStage = stage_rows<DMAX>()>
__global__ void dkdv_kernel(Dims s, const float* __restrict__ q, const float* __restrict__ k,
                            const float* __restrict__ v, const float* __restrict__ dout, const float* __restrict__ delta,
                            const float* __restrict__ lse2, float* __restrict__ dk, float* __restrict__ dv) {
  __shared__ float qs[kStage][DMAX];
  __shared__ float gs[kStage][DMAX];
  __shared__ float ls[kStage], ds[kStage];
  const int64_t b = blockIdx.z, kvh = blockIdx.y, j = int64_t(blockIdx.x) * kTile + threadIdx.x;
  const int64_t group = s.h / s.hk;
  const bool active = j < s.sk;
  float kr[DMAX], vr[DMAX], dka[DMAX], dva[DMAX];
  for (int e = 0; e < DMAX; ++e) {
    const bool in = active && e < s.d;
    kr[e] = in ? k[((b * s.sk + j) * s.hk + kvh) * s.d + e] : 0.0f;
    vr[e] = in ? v[((b * s.sk + j) * s.hk + kvh) * s.d + e] : 0.0f;
    dka[e] = dva[e] = 0.0f;
  }
  const int64_t first_j = int64_t(blockIdx.x) * kTile, last_j = min(int64_t(blockIdx.x + 1) * kTile, s.sk) - 1;
  // The block's queries [qstart, qend) and this thread's [my_begin, my_end).
  int64_t qstart = s.causal ? max(int64_t(0), min(s.sq, first_j - s.offset)) : 0, qend = s.sq;
  int64_t my_begin = 0, my_end = s.sq;
  if (s.doc_q) {
    const int32_t* dq = s.doc_q + b * s.sq;
    const int32_t* dk = s.doc_k + b * s.sk;
    clip_to_documents(dq, s.sq, dk[first_j], dk[last_j], &qstart, &qend);
    if (active) clip_to_documents(dq, s.sq, dk[j], dk[j], &my_begin, &my_end);
  }
  for (int64_t hh = kvh * group; hh < (kvh + 1) * group; ++hh) {
    for (int64_t i0 = qstart; i0 < qend; i0 += kStage) {
      __syncthreads();
      for (int64_t x = threadIdx.x; x < kStage * s.d; x += blockDim.x) {
        const int64_t r = x / s.d, e = x % s.d;
        const bool in = i0 + r < s.sq;
        qs[r][e] = in ? q[((b * s.sq + i0 + r) * s.h + hh) * s.d + e] * s.c : 0.0f;
        gs[r][e] = in ? dout[((b * s.sq + i0 + r) * s.h + hh) * s.d + e] : 0.0f;
      }
      for (int64_t r = threadIdx.x; r < kStage; r += blockDim.x) {
        const bool in = i0 + r < s.sq;
        ls[r] = in ? lse2[(b * s.h + hh) * s.sq + i0 + r] : INFINITY;
        ds[r] = in ? delta[(b * s.h + hh) * s.sq + i0 + r] : 0.0f;
      }
      __syncthreads();
      if (!active) continue;
      for (int r = 0; r < kStage; ++r) {
        const int64_t i = i0 + r;
        if ((s.causal && j > i + s.offset) || i < my_begin || i >= my_end) continue;
        float sc = 0.0f, dp = 0.0f;
        for (int e = 0; e < DMAX; ++e) {
          sc += qs[r][e] * kr[e];
          dp += gs[r][e] * vr[e];
        }
        const float p = exp2f(sc - ls[r]);
        const float dsc = p * (dp - ds[r]);
        for (int e = 0; e < DMAX; ++e) {
          dva[e] += p * gs[r][e];
          dka[e] += dsc * qs[r][e];
        }
      }
    }
  }
  if (!active) return;
  // qs holds q * scale * log2(e): divide the log2(e) back out (dk = scale * sum dS q).
  for (int e = 0; e < s.d; ++e) {
    dk[((b * s.sk + j) * s.hk + kvh) * s.d + e] = dka[e] / kLog2e;
    dv[((b * s.sk + j) * s.hk + kvh) * s.d + e] = dva[e];
  }
}

// dq: grid (query tiles, heads, batch); each thread owns one query.
template <int DMAX, int kStage = stage_rows<DMAX>()>
__global__ void dq_kernel(Dims s, float scale, const float* __restrict__ q, const float* __restrict__ k,
                          const float* __restrict__ v, const float* __restrict__ dout, const float* __restrict__ delta,
                          const float* __restrict__ lse2, float* __restrict__ dq) {
  __shared__ float ks[kStage][DMAX];
  __shared__ float vs[kStage][DMAX];
  const int64_t b = blockIdx.z, h = blockIdx.y, i = int64_t(blockIdx.x) * kTile + threadIdx.x;
  const int64_t kvh = h / (s.h / s.hk);
  const bool active = i < s.sq;
  float qr[DMAX], g[DMAX], acc[DMAX];
  for (int e = 0; e < DMAX; ++e) {
    const bool in = active && e < s.d;
    qr[e] = in ? q[((b * s.sq + i) * s.h + h) * s.d + e] * s.c : 0.0f;
    g[e] = in ? dout[((b * s.sq + i) * s.h + h) * s.d + e] : 0.0f;
    acc[e] = 0.0f;
  }
  const float l2 = active ? lse2[(b * s.h + h) * s.sq + i] : INFINITY;
  const float dl = active ? delta[(b * s.h + h) * s.sq + i] : 0.0f;
  const int64_t first_i = int64_t(blockIdx.x) * kTile, last_i = min(int64_t(blockIdx.x + 1) * kTile, s.sq) - 1;
  int64_t kbegin = 0, kend = s.causal ? max(int64_t(0), min(s.sk, last_i + s.offset + 1)) : s.sk;
  int64_t my_begin = 0, my_end = s.sk;
  if (s.doc_q) {
    const int32_t* dq = s.doc_q + b * s.sq;
    const int32_t* dk = s.doc_k + b * s.sk;
    clip_to_documents(dk, s.sk, dq[first_i], dq[last_i], &kbegin, &kend);
    if (active) clip_to_documents(dk, s.sk, dq[i], dq[i], &my_begin, &my_end);
  }
  for (int64_t j0 = kbegin; j0 < kend; j0 += kStage) {
    stage_kv<DMAX, kStage>(s, k, v, b, kvh, j0, ks, vs);
    if (!active) continue;
    for (int j = 0; j < kStage; ++j) {
      if (j0 + j >= s.sk || (s.causal && j0 + j > i + s.offset) || j0 + j < my_begin || j0 + j >= my_end) continue;
      float sc = 0.0f, dp = 0.0f;
      for (int e = 0; e < DMAX; ++e) {
        sc += qr[e] * ks[j][e];
        dp += g[e] * vs[j][e];
      }
      const float dsc = exp2f(sc - l2) * (dp - dl);
      for (int e = 0; e < DMAX; ++e) acc[e] += dsc * ks[j][e];
    }
  }
  if (!active) return;
  for (int e = 0; e < s.d; ++e) dq[((b * s.sq + i) * s.h + h) * s.d + e] = acc[e] * scale;
}

unsigned tiles(int64_t n) { return static_cast<unsigned>((n + kTile - 1) / kTile); }

template <int DMAX>
void forward_with(const ForwardArgs& a, cudaStream_t stream) {
  const Dims s = dims_of(a.p, a.doc_q, a.doc_k);
  dim3 grid(tiles(s.sq), static_cast<unsigned>(s.h), static_cast<unsigned>(s.b));
  forward_kernel<DMAX><<<grid, kTile, 0, stream>>>(s, a.q, a.k, a.v, a.out, a.lse);
  check(cudaGetLastError(), "forward kernel launch");
}

template <int DMAX>
void backward_with(const BackwardArgs& a, cudaStream_t stream) {
  const Dims s = dims_of(a.p, a.doc_q, a.doc_k);
  const int64_t rows = s.b * s.h * s.sq;
  float* scratch = nullptr;
  check(cudaMallocAsync(&scratch, sizeof(float) * 2 * (rows > 0 ? rows : 1), stream), "cudaMallocAsync");
  float* delta = scratch;
  float* lse2 = scratch + rows;
  if (rows > 0) prepare_kernel<<<static_cast<unsigned>((rows + 255) / 256), 256, 0, stream>>>(s, a.out, a.dout, a.lse, delta, lse2);
  dim3 kgrid(tiles(s.sk), static_cast<unsigned>(s.hk), static_cast<unsigned>(s.b));
  if (s.sk > 0) dkdv_kernel<DMAX><<<kgrid, kTile, 0, stream>>>(s, a.q, a.k, a.v, a.dout, delta, lse2, a.dk, a.dv);
  dim3 qgrid(tiles(s.sq), static_cast<unsigned>(s.h), static_cast<unsigned>(s.b));
  if (s.sq > 0) dq_kernel<DMAX><<<qgrid, kTile, 0, stream>>>(s, a.p.scale, a.q, a.k, a.v, a.dout, delta, lse2, a.dq);
  const cudaError_t launched = cudaGetLastError();
  check(cudaFreeAsync(scratch, stream), "cudaFreeAsync");
  check(launched, "backward kernel launch");
}

void check_supported(const AttentionProblem& p) {
  if (p.head_dim > 256) throw std::runtime_error("FlashAttention CUDA: head_dim " + std::to_string(p.head_dim) + " > 256 is not supported");
}

}  // namespace

void attention_forward_cuda(const ForwardArgs& a, void* stream_ptr) {
  check_supported(a.p);
  if (a.p.batch == 0 || a.p.heads == 0 || a.p.seq_q == 0) return;
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  if (a.p.head_dim <= 64) forward_with<64>(a, stream);
  else if (a.p.head_dim <= 128) forward_with<128>(a, stream);
  else forward_with<256>(a, stream);
}

void attention_backward_cuda(const BackwardArgs& a, void* stream_ptr) {
  check_supported(a.p);
  if (a.p.batch == 0 || a.p.heads == 0) return;
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  if (a.p.head_dim <= 64) backward_with<64>(a, stream);
  else if (a.p.head_dim <= 128) backward_with<128>(a, stream);
  else backward_with<256>(a, stream);
}

}  // namespace ulysses
