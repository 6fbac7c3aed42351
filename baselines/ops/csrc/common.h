// Helpers shared by the kernels loaded by baselines/ops/library.py (the batch-1 inference kernels
// and the training kernels). Built with -ffp-contract=off: every product and sum rounds on its
// own, as PyTorch's elementwise ops do.
#pragma once
#include <cmath>
#include <cstdint>

// Dot product of n contiguous values (a vectorised reduction).
template <typename T>
static inline T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; ++j) s += a[j] * b[j];
  return s;
}

template <typename T>
static inline T sigmoid(T v) {
  return T(1) / (T(1) + std::exp(-v));
}

// torch's lerp: a + w (b - a) for |w| < 0.5, else b - (b - a)(1 - w) (an exact copy of a where
// w is 0, of b where w is 1).
// Not named lerp: C++20's std::lerp (rounded otherwise, branchy, not vectorised) is ::lerp too
// (libstdc++'s math.h), and a float overload beats this template.
template <typename T>
static inline T torch_lerp(T a, T b, T w) {
  return std::abs(w) < T(0.5) ? a + w * (b - a) : b - (b - a) * (T(1) - w);
}
