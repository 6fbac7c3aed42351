// The elastic gate of S-EI (eq. 11) and its backward, shared by the training kernels of EI-REHN
// (csrc/ei_rehn_stack.cpp) and SREHN (csrc/srehn.cpp): ``_gate`` and ``_ElasticGate.backward`` of
// baselines/_elastic.py, with the same roundings.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/expm1.h>
#include <ATen/ops/log.h>
#include <algorithm>
#include <cstdint>
#include <limits>

// The elastic gate of every layer r = 0..Rm-1 (layer number rr = r + 1) from the local rate
// ``at = alpha_t`` [B, D]: ``_gate`` of baselines/_elastic.py (eq. 11 without overflow),
//     u = alpha (rr - 1) + alpha_t rr;  m = -expm1(-(u > 0 ? u : 1));
//     q = (alpha + alpha_t) rr + (u > 0 ? log(m) : -inf);  e = exp(min(q, 0));  d = relu(beta - e)
// with the same roundings (no contraction, the products and sums in the Python code's order) and
// expm1, log and exp ATen's own vectorised ones on whole [B, Rm, D] buffers (scalar libm calls
// were several times slower). Into DG (d; u until the last pass), MG (m) and EG (e), then the
// depth trace: n = #{r : d^r > 0} and mask = 1[n > 0] (float), written to rows b * stride of np
// and maskp; returns the batch's depth max_b max_j n.
template <typename T>
int64_t elastic_gate_forward(const T* alpha, const T* beta, const T* at, at::Tensor& DG,
                             at::Tensor& MG, at::Tensor& EG, T* np, T* maskp, int64_t stride) {
  const int64_t B = DG.size(0), Rm = DG.size(1), D = DG.size(2);
  T* up = DG.data_ptr<T>();
  T* mp = MG.data_ptr<T>();
  T* ep = EG.data_ptr<T>();
  for (int64_t b = 0; b < B; ++b) {
    const T* arow = at + b * D;
    for (int64_t r = 0; r < Rm; ++r) {
      const T rr = T(r + 1), r1 = T(r);
      T* urow = up + (b * Rm + r) * D;
      T* mrow = mp + (b * Rm + r) * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const T u = alpha[j] * r1 + arow[j] * rr;
        urow[j] = u;
        mrow[j] = -(u > T(0) ? u : T(1));
      }
    }
  }
  at::expm1_(MG);
  const int64_t N = B * Rm * D;
#pragma omp simd
  for (int64_t i = 0; i < N; ++i) mp[i] = -mp[i];  // m = 1 - e^{-u}
  at::log_out(EG, MG);
  const T inf = std::numeric_limits<T>::infinity();
  for (int64_t b = 0; b < B; ++b) {
    const T* arow = at + b * D;
    for (int64_t r = 0; r < Rm; ++r) {
      const T rr = T(r + 1);
      const T* urow = up + (b * Rm + r) * D;
      T* erow = ep + (b * Rm + r) * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const T q = (alpha[j] + arow[j]) * rr + (urow[j] > T(0) ? erow[j] : -inf);
        erow[j] = q > T(0) ? T(0) : q;  // q.clamp(max=0)
      }
    }
  }
  at::exp_(EG);
  int64_t layers = 0;
  for (int64_t b = 0; b < B; ++b) {
    T* nrow = np + b * stride;
    std::fill(nrow, nrow + D, T(0));
    for (int64_t r = 0; r < Rm; ++r) {
      T* drow = up + (b * Rm + r) * D;
      const T* erow = ep + (b * Rm + r) * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const T v = beta[j] - erow[j];
        const T d = v < T(0) ? T(0) : v;  // relu, eq. 11
        drow[j] = d;
        nrow[j] += d > T(0) ? T(1) : T(0);
      }
    }
    T R = 0;
    T* mrow = maskp + b * stride;
    for (int64_t j = 0; j < D; ++j) {
      mrow[j] = nrow[j] > T(0) ? T(1) : T(0);
      R = std::max(R, nrow[j]);
    }
    layers = std::max(layers, static_cast<int64_t>(R));
  }
  return layers;
}

// ``_ElasticGate.backward`` for the layers r < L from gp [B, L, D], the gradient of their gate,
// and the forward's d, m, e (dp, mp, ep [B, Rm, D]): where d > 0, dq = -(e g), du = dq / m,
// dalpha += dq + du (rr - 1), dbeta += g, dalpha_t += du rr; where d = 0 nothing (0, not 0 * inf).
// dalpha and dbeta accumulate (over the steps, where the caller keeps them); dat is this step's.
template <typename T>
void elastic_gate_backward(const T* gp, int64_t L, const T* dp, const T* mp, const T* ep,
                           int64_t B, int64_t Rm, int64_t D, T* dalpha, T* dbeta, T* dat) {
  std::fill(dat, dat + B * D, T(0));
  for (int64_t b = 0; b < B; ++b) {
    T* atrow = dat + b * D;
    for (int64_t r = 0; r < L; ++r) {
      const T rr = T(r + 1), r1 = T(r);
      const int64_t o = (b * Rm + r) * D;
      const T* grow = gp + (b * L + r) * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const T g = dp[o + j] > T(0) ? grow[j] : T(0);
        const T dq = -(ep[o + j] * g);
        const T du = dq / mp[o + j];
        dalpha[j] += dq + du * r1;
        dbeta[j] += g;
        atrow[j] += du * rr;
      }
    }
  }
}
