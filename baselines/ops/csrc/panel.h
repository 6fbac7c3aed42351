// Products with a right-hand matrix stored as column panels (``baselines.ops.inference
// .column_panels``), shared by the inference kernels of Clockwork RNN and Skip RNN; on views of
// the kernels' own buffers, through ATen's mm (gemm.h), or at one row by vec_panel.
#pragma once
#include "vec.h"  // first: at::vec at this CPU's width

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>

#include <algorithm>

#include "gemm.h"  // mm_into

// A [rows, cols] matrix at p whose rows are ld apart, as a tensor (no copy, no dispatch).
template <typename T>
at::Tensor matrix(const T* p, int64_t rows, int64_t cols, int64_t ld) {
  return at::from_blob(const_cast<T*>(p), {rows, cols}, {ld, 1},
                       at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value));
}

// out [N] = a [K] p, p a [K, N] row-major matrix: sums of p's rows scaled by a's entries, a
// block of 4 vectors of columns at a time held in registers over all K rows (two rows at once,
// in two sets of accumulators added at the end), each row's piece read contiguously. At one row
// this is what ATen's mm computes (in another summation order: equal to rounding) without its
// call, dispatch and packing, which cost more than the product at the sizes of one step of one
// sequence (Clockwork's modules: [1, 1089] [1089, 64], 70 k MACs).
template <typename T>
void vec_panel(T* out, const T* a, const T* p, int64_t K, int64_t N) {
  using Vec = at::vec::Vectorized<T>;
  constexpr int64_t L = Vec::size();
  int64_t c0 = 0;
  for (; c0 + 4 * L <= N; c0 += 4 * L) {
    Vec s0(T(0)), s1(T(0)), s2(T(0)), s3(T(0)), t0(T(0)), t1(T(0)), t2(T(0)), t3(T(0));
    int64_t r = 0;
    for (; r + 2 <= K; r += 2) {
      const T* p0 = p + r * N + c0;
      const T* p1 = p0 + N;
      const Vec a0(a[r]), a1(a[r + 1]);
      s0 = at::vec::fmadd(a0, Vec::loadu(p0), s0);
      s1 = at::vec::fmadd(a0, Vec::loadu(p0 + L), s1);
      s2 = at::vec::fmadd(a0, Vec::loadu(p0 + 2 * L), s2);
      s3 = at::vec::fmadd(a0, Vec::loadu(p0 + 3 * L), s3);
      t0 = at::vec::fmadd(a1, Vec::loadu(p1), t0);
      t1 = at::vec::fmadd(a1, Vec::loadu(p1 + L), t1);
      t2 = at::vec::fmadd(a1, Vec::loadu(p1 + 2 * L), t2);
      t3 = at::vec::fmadd(a1, Vec::loadu(p1 + 3 * L), t3);
    }
    if (r < K) {
      const T* p0 = p + r * N + c0;
      const Vec a0(a[r]);
      s0 = at::vec::fmadd(a0, Vec::loadu(p0), s0);
      s1 = at::vec::fmadd(a0, Vec::loadu(p0 + L), s1);
      s2 = at::vec::fmadd(a0, Vec::loadu(p0 + 2 * L), s2);
      s3 = at::vec::fmadd(a0, Vec::loadu(p0 + 3 * L), s3);
    }
    (s0 + t0).store(out + c0);
    (s1 + t1).store(out + c0 + L);
    (s2 + t2).store(out + c0 + 2 * L);
    (s3 + t3).store(out + c0 + 3 * L);
  }
  for (; c0 < N; c0 += L) {  // the last columns, a vector (or fewer) at a time
    const int64_t n = std::min(L, N - c0);
    Vec s(T(0));
    for (int64_t r = 0; r < K; ++r)
      s = at::vec::fmadd(Vec(a[r]), Vec::loadu(p + r * N + c0, n), s);
    s.store(out + c0, n);
  }
}

// out [n, N] (rows ldo apart) = a [n, K] (rows lda apart) times a [K, N] matrix stored as column
// panels: panel c holds its columns c w .. c w + w - 1 (the last fewer), [K, w] row-major at
// p + c w K. Each product reads its panel contiguously, where the rows of a row-major [K, N]
// (N = 3D) are 12 KB apart at D = 1024 and a product of a few rows streams them at half the
// speed or less (a page a row).
template <typename T>
void panel_mm(T* out, int64_t ldo, const T* a, int64_t lda, int64_t n, const T* p, int64_t K,
              int64_t N, int64_t w) {
  if (n == 1 && w <= 256) {  // one row, narrow panels (float32's): vec_panel
    for (int64_t c0 = 0; c0 < N; c0 += w)
      vec_panel(out + c0, a, p + c0 * K, K, std::min(w, N - c0));
    return;
  }
  const at::Tensor left = matrix(a, n, K, lda);
  for (int64_t c0 = 0; c0 < N; c0 += w) {
    const int64_t cols = std::min(w, N - c0);
    mm_into(matrix(out + c0, n, cols, ldo), left, matrix(p + c0 * K, K, cols, cols), false);
  }
}
