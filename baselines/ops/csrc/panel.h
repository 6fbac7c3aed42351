// Products with a right-hand matrix stored as column panels (``baselines.ops.inference
// .column_panels``), shared by the inference kernels of Clockwork RNN and Skip RNN; on views of
// the kernels' own buffers, through ATen's mm (gemm.h).
#pragma once
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

// out [n, N] (rows ldo apart) = a [n, K] (rows lda apart) times a [K, N] matrix stored as column
// panels: panel c holds its columns c w .. c w + w - 1 (the last fewer), [K, w] row-major at
// p + c w K. Each product reads its panel contiguously, where the rows of a row-major [K, N]
// (N = 3D) are 12 KB apart at D = 1024 and a product of a few rows streams them at half the
// speed or less (a page a row).
template <typename T>
void panel_mm(T* out, int64_t ldo, const T* a, int64_t lda, int64_t n, const T* p, int64_t K,
              int64_t N, int64_t w) {
  const at::Tensor left = matrix(a, n, K, lda);
  for (int64_t c0 = 0; c0 < N; c0 += w) {
    const int64_t cols = std::min(w, N - c0);
    mm_into(matrix(out + c0, n, cols, ldo), left, matrix(p + c0 * K, K, cols, cols), false);
  }
}
