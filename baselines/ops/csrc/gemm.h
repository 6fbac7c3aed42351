// A register-blocked AVX-512 float32 matmul for the kernels' per-step products (``gemm512``),
// who computes the products (``matmul_mode``, which the tests set through the library's C
// function ``condrnn_set_matmul``, csrc/ops.cpp), and ``mm_into``, a matmul on tensors (views)
// that takes gemm512 where it can and ATen's mm elsewhere.
//
// Why (benchmarks/test_gemm.py: one core, float32, the kernels' shapes, timed in C++; this AMD
// EPYC with AVX-512, 2026-12-05): gemm512 runs the products of the paper presets' training steps
// at 33-57 GMAC/s, MKL's sgemm (the BLAS of torch's x86 wheels) at 26-51 and ATen's mm at 18-50:
// they take 1.1-2.4x as long (the smaller the product, the more), 1.2-1.3x on the weight
// gradient's long products (k = T B). oneDNN's matmul as torch ships it (timed from Python
// against torch.mm alike) is 0.5-1.5x ATen's mm there. libxsmm (a Debian package; PyPI's
// "libxsmm" is an empty placeholder) ties with gemm512 per step (0.88-1.02x) and takes up to
// 2.7x as long on the longest products. (On the machine issue 64 was measured on: 120-130
// GMAC/s against MKL's Zen (AVX2) code at 45-55.) It sums over k in its own order (one fused
// multiply-add a k, chunks of 256): equal to ATen's products to float rounding, not bit for bit.
// float64, a CPU without AVX-512, or ``matmul_mode() != OWN``: ATen.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>

#include <algorithm>
#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#define HAVE_GEMM512 1
#endif

extern "C" {
// The Fortran BLAS torch is linked with (MKL in the x86 wheels); weak: absent, ATen's mm serves.
void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*,
            const float*, const int*, const float*, const int*, const float*, float*,
            const int*) __attribute__((weak));
void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*,
            const double*, const int*, const double*, const int*, const double*, double*,
            const int*) __attribute__((weak));
}

// Who computes the matmuls: gemm512 (float32 with AVX-512; else as BLAS), the BLAS (where a
// kernel calls it, and torch exports it; else ATen's mm), ATen's mm. One setting for the whole
// library (an inline function's static: one instance however many sources include this).
enum Matmul : int64_t { OWN = 0, BLAS = 1, ATEN = 2 };

inline Matmul& matmul_mode() {
  static Matmul mode = OWN;
  return mode;
}

// Sets the mode; returns who computes float32 products from now on (OWN only with AVX-512, BLAS
// only where torch exports sgemm_ and dgemm_). The C function ``condrnn_set_matmul``
// (csrc/ops.cpp).
inline int64_t set_matmul(int64_t mode) {
  TORCH_CHECK(mode >= OWN && mode <= ATEN, "matmul: 0 (gemm512), 1 (BLAS) or 2 (ATen)");
  matmul_mode() = static_cast<Matmul>(mode);
#ifdef HAVE_GEMM512
  const int64_t runs = mode;
#else
  const int64_t runs = mode == OWN ? BLAS : mode;
#endif
  return runs == BLAS && (sgemm_ == nullptr || dgemm_ == nullptr) ? ATEN : runs;
}

#ifdef HAVE_GEMM512
// C [R, 16 NV] (+)= sum_k A(r, k) B[k, :], A(r, k) = A[r ars + k acs], B's rows ldb apart, C's
// ldc: R x NV accumulators in registers (at most 6 x 4 of the 32), one broadcast of A and NV
// loads of B per k; the last vector of a row is masked by ``tail`` (N not a multiple of 16).
template <int R, int NV>
inline void micro512(int64_t K, const float* A, int64_t ars, int64_t acs, const float* B,
                     int64_t ldb, float* C, int64_t ldc, __mmask16 tail, bool accumulate) {
  __m512 c[R][NV];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) c[r][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const float* b = B + k * ldb;
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      bv[v] = v + 1 < NV ? _mm512_loadu_ps(b + 16 * v) : _mm512_maskz_loadu_ps(tail, b + 16 * v);
    const float* a = A + k * acs;
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r * ars]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) c[r][v] = _mm512_fmadd_ps(ar, bv[v], c[r][v]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    float* cr = C + r * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __mmask16 mk = v + 1 < NV ? __mmask16(0xFFFF) : tail;
      __m512 x = c[r][v];
      if (accumulate) x = _mm512_add_ps(_mm512_maskz_loadu_ps(mk, cr + 16 * v), x);
      _mm512_mask_storeu_ps(cr + 16 * v, mk, x);
    }
  }
}

template <int R>
inline void panel512(int nv, int64_t K, const float* A, int64_t ars, int64_t acs, const float* B,
                     int64_t ldb, float* C, int64_t ldc, __mmask16 tail, bool accumulate) {
  if (nv == 4) micro512<R, 4>(K, A, ars, acs, B, ldb, C, ldc, tail, accumulate);
  else if (nv == 3) micro512<R, 3>(K, A, ars, acs, B, ldb, C, ldc, tail, accumulate);
  else if (nv == 2) micro512<R, 2>(K, A, ars, acs, B, ldb, C, ldc, tail, accumulate);
  else micro512<R, 1>(K, A, ars, acs, B, ldb, C, ldc, tail, accumulate);
}

// Row-major C [M, N] (+)= A [M, K] B [K, N], A(i, k) = A[i ars + k acs] (so either orientation),
// B's rows ldb apart: panels of 6 rows x 64 columns over chunks of 256 k (a chunk of B stays in
// the L2 cache while every row block passes over it). K >= 1.
// Kept out of its callers' long loop bodies, where the accumulators would compete for registers.
__attribute__((noinline)) inline void gemm512(int64_t M, int64_t N, int64_t K, const float* A,
                                               int64_t ars, int64_t acs, const float* B,
                                               int64_t ldb, bool accumulate, float* C,
                                               int64_t ldc) {
  constexpr int64_t KC = 256, MR = 6;
  for (int64_t k0 = 0; k0 < K; k0 += KC) {
    const int64_t kc = std::min(KC, K - k0);
    const bool acc = accumulate || k0 > 0;
    for (int64_t j0 = 0; j0 < N; j0 += 64) {
      const int64_t n = std::min<int64_t>(64, N - j0);
      const int nv = static_cast<int>((n + 15) / 16), rem = static_cast<int>(n - 16 * (nv - 1));
      const __mmask16 tail = static_cast<__mmask16>((1u << rem) - 1);
      const float* b = B + k0 * ldb + j0;
      for (int64_t i0 = 0; i0 < M; i0 += MR) {
        const float* a = A + i0 * ars + k0 * acs;
        float* c = C + i0 * ldc + j0;
        switch (std::min(MR, M - i0)) {
          case 6: panel512<6>(nv, kc, a, ars, acs, b, ldb, c, ldc, tail, acc); break;
          case 5: panel512<5>(nv, kc, a, ars, acs, b, ldb, c, ldc, tail, acc); break;
          case 4: panel512<4>(nv, kc, a, ars, acs, b, ldb, c, ldc, tail, acc); break;
          case 3: panel512<3>(nv, kc, a, ars, acs, b, ldb, c, ldc, tail, acc); break;
          case 2: panel512<2>(nv, kc, a, ars, acs, b, ldb, c, ldc, tail, acc); break;
          default: panel512<1>(nv, kc, a, ars, acs, b, ldb, c, ldc, tail, acc); break;
        }
      }
    }
  }
}
#endif

// out (+)= a b on 2-D tensors (views, any strides of a): gemm512 in float32 where the rows of b
// and of out are contiguous and the mode is OWN, else ATen (``mm_out`` / ``addmm_``).
inline void mm_into(at::Tensor out, const at::Tensor& a, const at::Tensor& b, bool accumulate) {
#ifdef HAVE_GEMM512
  if (matmul_mode() == OWN && out.scalar_type() == at::kFloat && a.scalar_type() == at::kFloat &&
      b.scalar_type() == at::kFloat && out.stride(1) == 1 && b.stride(1) == 1 && a.size(1) > 0 &&
      out.numel() > 0) {
    gemm512(out.size(0), out.size(1), a.size(1), a.data_ptr<float>(), a.stride(0), a.stride(1),
            b.data_ptr<float>(), b.stride(0), accumulate, out.data_ptr<float>(), out.stride(0));
    return;
  }
#endif
  if (accumulate)
    out.addmm_(a, b);
  else
    at::mm_out(out, a, b);
}

// out = base + a b (base broadcast to out, as ``at::addmm_out``'s; out may be base itself).
inline void addmm_into(at::Tensor out, const at::Tensor& base, const at::Tensor& a,
                       const at::Tensor& b) {
  if (!out.is_same(base)) out.copy_(base);
  mm_into(out, a, b, true);
}

// a b as a new tensor (``mm_into``).
inline at::Tensor mm_new(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor out = at::empty({a.size(0), b.size(1)}, a.options());
  mm_into(out, a, b, false);
  return out;
}
