// Helpers shared by the batch-1 inference kernels (sarnn.cpp, vcrnn.cpp), loaded by
// baselines/_kernels.py. Built with -ffp-contract=off: every product and sum rounds on its own,
// as PyTorch's elementwise ops do.
#pragma once
#include <cmath>
#include <cstdint>

// Dot product of n contiguous values (a vectorised reduction).
template <typename scalar_t>
static inline scalar_t dot(const scalar_t* a, const scalar_t* b, int64_t n) {
  scalar_t s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; ++j) s += a[j] * b[j];
  return s;
}

static inline double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }
static inline float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }
