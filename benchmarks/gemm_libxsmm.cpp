// Times libxsmm's float32 GEMM for benchmarks/test_gemm.py (issue 64): reps products
// C[m, n] = A[m, k] B[k, n], row-major, into a preallocated C, after one warm-up call, as
// ``condrnn_matmul_seconds`` (baselines/ops/csrc/ops.cpp) times gemm512, MKL and ATen.
//
// libxsmm is column-major: the row-major product is computed as C^T = B^T A^T (a column-major
// [n, k] times a column-major [k, m]), as ops.cpp calls sgemm_. The kernel is libxsmm's JIT code
// for the shape (libxsmm_smmdispatch, beta = 0); where it gives none, libxsmm_sgemm (which calls
// the BLAS for shapes over libxsmm's threshold: linked with -lxsmmnoblas there is none, and the
// program says "unavailable" rather than time a stub).
//
// Build: g++ -O3 -march=native gemm_libxsmm.cpp -lxsmm -lxsmmnoblas -lpthread -lrt -ldl -lm
// Usage: gemm_libxsmm m n k reps
// Output, one line: "<seconds> <path> <target arch> <max abs error at 64 sampled entries>",
// path "dispatch" (the JIT kernel) or "sgemm" (libxsmm_sgemm); or "unavailable <why>" (exit 2).
#include <libxsmm.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s m n k reps\n", argv[0]);
    return 1;
  }
  const long m = std::atol(argv[1]), n = std::atol(argv[2]), k = std::atol(argv[3]);
  const long reps = std::atol(argv[4]);
  if (m < 1 || n < 1 || k < 1 || reps < 0) {
    std::fprintf(stderr, "m, n, k >= 1 and reps >= 0\n");
    return 1;
  }
  libxsmm_init();
  // Operands uniform in [-1, 1) from a xorshift generator (cheap: the weight gradient's A has
  // 65 M entries at the adding task's sizes).
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto uniform = [&state]() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<float>(static_cast<int64_t>(state >> 40) - (1 << 23)) / float(1 << 23);
  };
  std::vector<float> a(m * k), b(k * n), c(m * n, 0.0f);
  for (float& x : a) x = uniform();
  for (float& x : b) x = uniform();

  // Column-major C^T [n, m] = B^T [n, k] A^T [k, m]: M = n, N = m, K = k; lda = n, ldb = k.
  const libxsmm_blasint M = n, N = m, K = k, lda = n, ldb = k, ldc = n;
  const float alpha = 1.0f, beta = 0.0f;
  const int flags = LIBXSMM_GEMM_FLAG_NONE, prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
  const libxsmm_smmfunction kernel =
      libxsmm_smmdispatch(M, N, K, &lda, &ldb, &ldc, &alpha, &beta, &flags, &prefetch);
  const float *ap = a.data(), *bp = b.data();
  float* cp = c.data();
  auto run = [&]() {
    if (kernel != nullptr)
      kernel(bp, ap, cp);
    else
      libxsmm_sgemm("N", "N", &M, &N, &K, &alpha, bp, &lda, ap, &ldb, &beta, cp, &ldc);
  };

  run();  // warm-up (and the check that it computed the product: 64 sampled entries)
  double error = 0.0;
  for (int t = 0; t < 64; ++t) {
    const long i = static_cast<long>(state % m), j = static_cast<long>((state >> 32) % n);
    uniform();
    double s = 0.0;
    for (long p = 0; p < k; ++p) s += double(a[i * k + p]) * double(b[p * n + j]);
    error = std::fmax(error, std::fabs(s - double(c[i * n + j])));
  }
  if (!(error <= 1e-3 * std::sqrt(double(k)))) {  // NaN too
    std::printf("unavailable %s computed no product (max error %g): %s\n",
                kernel != nullptr ? "dispatch" : "libxsmm_sgemm", error,
                kernel != nullptr ? "the JIT kernel is wrong" : "no BLAS behind it");
    libxsmm_finalize();
    return 2;
  }

  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < reps; ++i) run();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%.9g %s %s %.3g\n", seconds, kernel != nullptr ? "dispatch" : "sgemm",
              libxsmm_get_target_arch(), error);
  libxsmm_finalize();
  return 0;
}
