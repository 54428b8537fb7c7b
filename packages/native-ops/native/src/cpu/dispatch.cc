// Runs the CPU kernels: picks the instruction set once (AVX-512, AVX2 or the
// portable build) and splits the attention work items across threads (the
// GELU kernels run on the calling thread).
//
// Threading: the caller's thread plus threads - 1 std::threads started per
// call, each with its own scratch. The forward hands out its (batch, head,
// query block) items through an atomic counter, heaviest (causal) first: each
// item writes disjoint output, so the result does not depend on the split.
// The backward's items are (batch, kv head, key block); each owns its rows of
// dk and dv, while dq sums over key blocks, so every thread accumulates dq
// into its own buffer and the buffers are added in thread order at the end.
// Its items are dealt round-robin (a fixed split), which keeps dq
// reproducible for a given thread count.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "attention-cpu.h"
#include "kernels-table.h"

namespace ulysses {
namespace {

struct Tables {
  KernelTable avx512, avx2, portable;
  bool has_avx512, has_avx2;
  CpuIsa automatic;
  Tables() {
    has_avx512 = avx512_kernels(&avx512);
    has_avx2 = avx2_kernels(&avx2);
    portable_kernels(&portable);
    automatic = has_avx512 ? CpuIsa::Avx512 : has_avx2 ? CpuIsa::Avx2 : CpuIsa::Portable;
    const char* env = std::getenv("ULYSSES_FUSED_ATTENTION_ISA");
    CpuIsa narrowed;
    if (env && parse_cpu_isa(env, &narrowed) && narrowed != CpuIsa::Auto && find(narrowed)) automatic = narrowed;
  }
  const KernelTable* find(CpuIsa isa) const {
    switch (isa) {
      case CpuIsa::Auto: return find(automatic);
      case CpuIsa::Avx512: return has_avx512 ? &avx512 : nullptr;
      case CpuIsa::Avx2: return has_avx2 ? &avx2 : nullptr;
      case CpuIsa::Portable: return &portable;
    }
    return nullptr;
  }
};

const KernelTable& table(CpuIsa isa) {
  static const Tables tables;
  const KernelTable* t = tables.find(isa);
  if (!t) throw std::runtime_error("the CPU attention kernels for this instruction set are not available on this processor");
  return *t;
}

// Runs fn(slot) for slot in [0, threads) concurrently, slot 0 on this thread;
// rethrows the first exception after every slot has finished.
void run_slots(int threads, const std::function<void(int)>& fn) {
  std::exception_ptr error;
  std::mutex error_mutex;
  auto guarded = [&](int slot) {
    try {
      fn(slot);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  workers.reserve(threads > 1 ? threads - 1 : 0);
  for (int s = 1; s < threads; ++s) workers.emplace_back(guarded, s);
  guarded(0);
  for (auto& w : workers) w.join();
  if (error) std::rethrow_exception(error);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

bool parse_cpu_isa(const char* name, CpuIsa* out) {
  const std::string s = name ? name : "";
  if (s == "auto") *out = CpuIsa::Auto;
  else if (s == "avx512") *out = CpuIsa::Avx512;
  else if (s == "avx2") *out = CpuIsa::Avx2;
  else if (s == "portable") *out = CpuIsa::Portable;
  else return false;
  return true;
}

const char* cpu_isa_name(CpuIsa isa) {
  try {
    return table(isa).name;
  } catch (const std::runtime_error&) {
    return nullptr;
  }
}

void attention_forward_cpu(const ForwardArgs& args, int threads, CpuIsa isa) {
  const KernelTable& t = table(isa);
  const AttentionProblem& p = args.p;
  const int64_t qblocks = ceil_div(p.seq_q, t.block_q);
  const int64_t items = p.batch * p.heads * qblocks;
  if (items == 0) return;
  threads = static_cast<int>(std::clamp<int64_t>(threads, 1, items));
  const size_t scratch_floats = t.forward_scratch_floats(p);
  std::atomic<int64_t> next{0};
  run_slots(threads, [&](int) {
    std::vector<float> scratch(scratch_floats);
    for (int64_t n = next.fetch_add(1); n < items; n = next.fetch_add(1)) {
      // Item order: query blocks from last to first (the causal ones carry
      // the most keys), then heads, then batch.
      const int64_t qb = qblocks - 1 - n / (p.batch * p.heads);
      const int64_t bh = n % (p.batch * p.heads);
      t.forward_item(args, bh / p.heads, bh % p.heads, qb, scratch.data());
    }
  });
}

// The backward splits its work by (batch, kv head) group when there are at least this many groups per thread (enough
// for a free thread to even out unequal cores), else by key block.
constexpr int64_t kGroupsPerThread = 2;

void attention_backward_cpu(const BackwardArgs& args, int threads, CpuIsa isa) {
  const KernelTable& t = table(isa);
  const AttentionProblem& p = args.p;
  const int64_t kblocks = ceil_div(p.seq_k, t.bwd_block_k);
  const int64_t items = p.batch * p.kv_heads * kblocks;
  const int64_t d = p.head_dim, dp = ceil_div(d, t.width) * t.width;
  const int64_t rows = p.batch * p.heads * p.seq_q;  // dq partial rows, [b][h][i]
  if (items == 0) {
    std::fill(args.dq, args.dq + rows * d, 0.0f);
    return;
  }
  threads = static_cast<int>(std::clamp<int64_t>(threads, 1, items));
  const size_t scratch_floats = t.backward_scratch_floats(p);
  const int64_t qblocks = ceil_div(p.seq_q, t.bwd_block_q);
  const int64_t pack_items = p.batch * p.heads * qblocks;
  std::vector<float> packed(t.backward_packed_floats(p));
  run_slots(threads, [&](int slot) {
    for (int64_t n = slot; n < pack_items; n += threads) {
      const int64_t bh = n / qblocks;
      t.backward_pack(args, bh / p.heads, bh % p.heads, n % qblocks, packed.data());
    }
  });
  const int64_t groups = p.batch * p.kv_heads;
  if (threads == 1 || groups >= kGroupsPerThread * threads) {
    // Each (batch, kv head) group is one item, taken in turn by whichever thread is free: a group's key blocks run in
    // order on one thread, which owns that group's dq rows. So dq sums its contributions in key-block order, the same
    // bits for any thread count, needs one accumulator rather than one per thread, and a thread on a slower core (a
    // VM's cores are not always equally fast) takes fewer groups instead of holding up the call.
    // not zero-filled here: each group zeroes its own rows, on its thread
    std::unique_ptr<float[]> acc(new float[static_cast<size_t>(rows * dp)]);
    std::atomic<int64_t> next{0};
    run_slots(threads, [&](int) {
      std::vector<float> scratch(scratch_floats);
      for (int64_t g = next.fetch_add(1); g < groups; g = next.fetch_add(1)) {
        const int64_t b = g / p.kv_heads, kvh = g % p.kv_heads, group = p.heads / p.kv_heads;
        // rows [b][h][i] of the group's query heads h, contiguous
        float* mine = acc.get() + (b * p.heads + kvh * group) * p.seq_q * dp;
        std::fill(mine, mine + group * p.seq_q * dp, 0.0f);
        for (int64_t kb = 0; kb < kblocks; ++kb) t.backward_item(args, packed.data(), b, kvh, kb, acc.get(), scratch.data());
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
          const float* from = acc.get() + (b * p.heads + h) * p.seq_q * dp;
          for (int64_t i = 0; i < p.seq_q; ++i) {
            float* out = args.dq + ((b * p.seq_q + i) * p.heads + h) * d;
            for (int64_t e = 0; e < d; ++e) out[e] = from[i * dp + e] * p.scale;
          }
        }
      }
    });
    return;
  }
  // Fewer groups than that: key blocks are the items, dealt round-robin (causal: the early ones carry the most
  // queries), and each thread adds its dq contributions into its own partial; the partials are summed in thread order.
  std::vector<std::vector<float>> partial(threads);
  run_slots(threads, [&](int slot) {
    partial[slot].assign(static_cast<size_t>(rows * dp), 0.0f);
    std::vector<float> scratch(scratch_floats);
    for (int64_t n = slot; n < items; n += threads) {
      const int64_t kb = n / (p.batch * p.kv_heads);
      const int64_t bk = n % (p.batch * p.kv_heads);
      t.backward_item(args, packed.data(), bk / p.kv_heads, bk % p.kv_heads, kb, partial[slot].data(), scratch.data());
    }
  });
  // dq[b, i, h, :] = scale * sum over slots of partial[slot][b][h][i][:d].
  run_slots(threads, [&](int slot) {
    for (int64_t r = slot; r < rows; r += threads) {
      const int64_t i = r % p.seq_q, bh = r / p.seq_q, h = bh % p.heads, b = bh / p.heads;
      float* out = args.dq + ((b * p.seq_q + i) * p.heads + h) * d;
      for (int64_t e = 0; e < d; ++e) {
        float s = 0.0f;
        for (int k = 0; k < threads; ++k) s += partial[k][r * dp + e];
        out[e] = s * p.scale;
      }
    }
  });
}

void gelu_forward_cpu(const float* x, float* y, int64_t n, CpuIsa isa) {
  if (n > 0) table(isa).gelu_forward(x, y, n);
}

void gelu_backward_cpu(const float* x, const float* dy, float* dx, int64_t n, CpuIsa isa) {
  if (n > 0) table(isa).gelu_backward(x, dy, dx, n);
}

void add_into_cpu(float* target, const float* term, int64_t n, CpuIsa isa) {
  if (n > 0) table(isa).add_into(target, term, n);
}

// Runs fn(o0, o1) on `threads` slots, each owning a range of whole vectors of
// the `out` columns (disjoint outputs, so the result does not depend on the
// thread count).
template <class F>
void column_slots(const KernelTable& t, int64_t out, int threads, F fn) {
  const int64_t vectors = ceil_div(out, t.width);
  threads = static_cast<int>(std::clamp<int64_t>(threads, 1, vectors));
  run_slots(threads, [&](int slot) {
    const int64_t o0 = vectors * slot / threads * t.width;
    const int64_t o1 = std::min(out, vectors * (slot + 1) / threads * t.width);
    if (o0 < o1) fn(o0, o1);
  });
}

void weight_gradient_cpu(const float* x, const float* dy, float* into, int64_t rows, int64_t in, int64_t out, int threads,
                         CpuIsa isa) {
  const KernelTable& t = table(isa);
  if (rows == 0 || in == 0 || out == 0) return;
  column_slots(t, out, threads, [&](int64_t o0, int64_t o1) { t.weight_gradient(x, dy, into, rows, in, out, o0, o1); });
}

void matmul_cpu(const float* x, const float* w, float* y, int64_t rows, int64_t in, int64_t out, int threads, CpuIsa isa) {
  const KernelTable& t = table(isa);
  if (rows == 0 || out == 0) return;
  column_slots(t, out, threads, [&](int64_t o0, int64_t o1) { t.matmul(x, w, y, rows, in, out, o0, o1); });
}

// The row-wise kernels split their rows over threads only past this many
// floats a thread: below it, starting a thread costs more than it saves.
constexpr int64_t kRowwiseFloatsPerThread = 1 << 16;

int rowwise_threads(int threads, int64_t rows, int64_t floats) {
  return static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(threads, floats / kRowwiseFloatsPerThread), 1, std::max<int64_t>(rows, 1)));
}

void rope_cpu(const float* x, const float* cos, const float* sin, float* y, int64_t tokens, int64_t heads, int64_t head_dim,
              int64_t table_rows, bool backward, int threads, CpuIsa isa) {
  const KernelTable& t = table(isa);
  if (tokens == 0 || heads == 0 || head_dim == 0) return;
  const int n = rowwise_threads(threads, tokens, tokens * heads * head_dim);
  const int64_t row = heads * head_dim;
  run_slots(n, [&](int slot) {
    const int64_t t0 = tokens * slot / n, t1 = tokens * (slot + 1) / n;
    // token t0's table row is t0 % table_rows: the slice starts its tables there
    const int64_t r0 = t0 % table_rows;
    if (t1 > t0) t.rope(x + t0 * row, cos, sin, y + t0 * row, t1 - t0, heads, head_dim, table_rows, r0, backward);
  });
}

void layer_norm_forward_cpu(const float* x, const float* gamma, const float* beta, float eps, float* y, float* mean,
                            float* rstd, int64_t rows, int64_t h, int threads, CpuIsa isa) {
  const KernelTable& t = table(isa);
  if (rows == 0) return;
  const int n = rowwise_threads(threads, rows, rows * h);
  run_slots(n, [&](int slot) {
    const int64_t r0 = rows * slot / n, r1 = rows * (slot + 1) / n;
    if (r1 > r0) t.layer_norm_forward(x + r0 * h, gamma, beta, eps, y + r0 * h, mean + r0, rstd + r0, r1 - r0, h);
  });
}

void cross_entropy_cpu(float* logits, const int32_t* labels, float* row_loss, int32_t* argmax, int64_t rows, int64_t vocab,
                       int32_t ignore, bool has_grad, float grad_scale, int threads, CpuIsa isa) {
  const KernelTable& t = table(isa);
  if (rows == 0 || vocab == 0) return;
  const int n = rowwise_threads(threads, rows, rows * vocab);
  run_slots(n, [&](int slot) {
    const int64_t r0 = rows * slot / n, r1 = rows * (slot + 1) / n;
    if (r1 > r0)
      t.cross_entropy(logits + r0 * vocab, labels + r0, row_loss + r0, argmax + r0, r1 - r0, vocab, ignore, has_grad, grad_scale);
  });
}

// dGamma and dBeta are summed per chunk of this many rows (in float64), and
// the chunks' sums added in chunk order: the same bits for any thread count.
constexpr int64_t kLayerNormChunkRows = 256;

void layer_norm_backward_cpu(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                             float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t h, int threads, CpuIsa isa) {
  const KernelTable& t = table(isa);
  const int64_t chunks = ceil_div(rows, kLayerNormChunkRows);
  std::vector<double> sums(static_cast<size_t>(chunks * 2 * h), 0.0);  // chunk c: dGamma [h], dBeta [h]
  const int n = rowwise_threads(threads, chunks, rows * h);
  run_slots(n, [&](int slot) {
    for (int64_t c = chunks * slot / n; c < chunks * (slot + 1) / n; ++c) {
      const int64_t r0 = c * kLayerNormChunkRows, r = std::min(kLayerNormChunkRows, rows - r0);
      double* partial = sums.data() + c * 2 * h;
      t.layer_norm_backward(x + r0 * h, gamma, mean + r0, rstd + r0, dy + r0 * h, dx + r0 * h, partial, partial + h, r, h);
    }
  });
  for (int64_t i = 0; i < h; ++i) {
    double g = 0.0, b = 0.0;
    for (int64_t c = 0; c < chunks; ++c) {
      g += sums[c * 2 * h + i];
      b += sums[c * 2 * h + h + i];
    }
    dgamma[i] = static_cast<float>(g);
    dbeta[i] = static_cast<float>(b);
  }
}

}  // namespace ulysses
