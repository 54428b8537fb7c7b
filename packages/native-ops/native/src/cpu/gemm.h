// The one matrix-product kernel of the CPU attention: C[M][N] (+)= A[M][K] B[K][N]
// with A read by broadcast (any row and column stride, so transposed operands
// cost nothing) and B holding N contiguous floats per row. Register tiles of
// MR rows x NV vectors keep C in registers for the whole K loop; each ISA's
// traits name two tile shapes, and gemm() picks the one that divides N.
// Included only from kernels-impl.h, inside its anonymous namespace.
#pragma once

namespace impl {

// One register tile: C[MR][NV*W] (+)= A[MR][K] B[K][NV*W].
template <class I, int MR, int NV>
void tile(int64_t K, const float* A, ptrdiff_t ar, ptrdiff_t ac, const float* B, ptrdiff_t ldb, float* C,
          ptrdiff_t ldc, bool accumulate) {
  using V = typename I::V;
  constexpr int W = I::W;
  V c[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) c[r][v] = accumulate ? I::load(C + r * ldc + v * W) : I::zero();
  for (int64_t k = 0; k < K; ++k) {
    V b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) b[v] = I::load(B + k * ldb + v * W);
    const float* a = A + k * ac;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      V ar_k = I::set1(a[r * ar]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) c[r][v] = I::fma(ar_k, b[v], c[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) I::store(C + r * ldc + v * W, c[r][v]);
}

using TileFn = void (*)(int64_t, const float*, ptrdiff_t, ptrdiff_t, const float*, ptrdiff_t, float*, ptrdiff_t, bool);

template <class I, int NV, int... R>
constexpr std::array<TileFn, sizeof...(R)> tile_row(std::integer_sequence<int, R...>) {
  return {&tile<I, R + 1, NV>...};
}

// table[nv - 1][mr - 1] = tile<I, mr, nv>.
template <class I, int MR, int... NVs>
constexpr std::array<std::array<TileFn, MR>, sizeof...(NVs)> tile_table(std::integer_sequence<int, NVs...>) {
  return {tile_row<I, NVs + 1>(std::make_integer_sequence<int, MR>())...};
}

// The order of the register tiles over C: a column panel of B at a time down
// all of A's rows (ColumnsOuter, the attention's shapes), or a band of C's rows
// at a time across all of B (RowsOuter: for a tall, narrow product whose whole B
// stays in cache, so A and C stream from memory once, C's rows contiguously).
// Each element of C sees the same operations in the same order either way.
enum class TileOrder { ColumnsOuter, RowsOuter };

template <class I, int MR, int NV>
void gemm_shape(int64_t M, int64_t N, int64_t K, const float* A, ptrdiff_t ar, ptrdiff_t ac, const float* B, ptrdiff_t ldb,
          float* C, ptrdiff_t ldc, bool accumulate, TileOrder order) {
  static constexpr auto table = tile_table<I, MR>(std::make_integer_sequence<int, NV>());
  const int64_t nvec = N / I::W;
  const auto run = [&](int64_t m0, int64_t v0) {
    const int mr = static_cast<int>(std::min<int64_t>(MR, M - m0));
    const int nv = static_cast<int>(std::min<int64_t>(NV, nvec - v0));
    table[nv - 1][mr - 1](K, A + m0 * ar, ar, ac, B + v0 * I::W, ldb, C + m0 * ldc + v0 * I::W, ldc, accumulate);
  };
  if (order == TileOrder::RowsOuter) {
    for (int64_t m0 = 0; m0 < M; m0 += MR)
      for (int64_t v0 = 0; v0 < nvec; v0 += NV) run(m0, v0);
  } else {
    for (int64_t v0 = 0; v0 < nvec; v0 += NV)
      for (int64_t m0 = 0; m0 < M; m0 += MR) run(m0, v0);
  }
}

// C[M][N] (+)= A[M][K] B[K][N]; N must be a multiple of I::W. Element (m, k)
// of A is A[m * ar + k * ac].
template <class I>
void gemm(int64_t M, int64_t N, int64_t K, const float* A, ptrdiff_t ar, ptrdiff_t ac, const float* B, ptrdiff_t ldb,
          float* C, ptrdiff_t ldc, bool accumulate, TileOrder order = TileOrder::ColumnsOuter) {
  if ((N / I::W) % I::NV_WIDE == 0)
    gemm_shape<I, I::MR_WIDE, I::NV_WIDE>(M, N, K, A, ar, ac, B, ldb, C, ldc, accumulate, order);
  else
    gemm_shape<I, I::MR, I::NV>(M, N, K, A, ar, ac, B, ldb, C, ldc, accumulate, order);
}

}  // namespace impl
