// The column-sparse product of the activity-sparse inference kernels (delta_gru_infer.cpp,
// egru_infer.cpp): acc += v W for a vector v with few non-zero entries, reading only the rows of
// W (row-major, the transpose of the method's matrix, so that column j of the matrix is the
// contiguous row j) whose entry of v is non-zero.
#pragma once
#include <cmath>
#include <cstdint>

// acc[i] += sum_q w[idx[q] * ld + i] * val[q] for i in [0, n): the k rows idx[0..k) of w
// (leading dimension ld), weighted by val, four rows a pass (one load and one store of acc per
// four rows), each product added with a fused multiply-add (one rounding, as a BLAS does; the
// sums run in another order than a dense product's, so they agree to rounding). The inner loop
// is a vectorised pass over contiguous memory.
template <typename T>
static inline void add_rows(T* __restrict acc, const T* __restrict w, int64_t ld,
                            const int64_t* idx, const T* val, int64_t k, int64_t n) {
  int64_t q = 0;
  for (; q + 4 <= k; q += 4) {
    const T* __restrict w0 = w + idx[q] * ld;
    const T* __restrict w1 = w + idx[q + 1] * ld;
    const T* __restrict w2 = w + idx[q + 2] * ld;
    const T* __restrict w3 = w + idx[q + 3] * ld;
    const T v0 = val[q], v1 = val[q + 1], v2 = val[q + 2], v3 = val[q + 3];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      acc[i] = std::fma(w3[i], v3, std::fma(w2[i], v2, std::fma(w1[i], v1,
                                                                std::fma(w0[i], v0, acc[i]))));
  }
  for (; q < k; ++q) {
    const T* __restrict w0 = w + idx[q] * ld;
    const T v0 = val[q];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) acc[i] = std::fma(w0[i], v0, acc[i]);
  }
}

