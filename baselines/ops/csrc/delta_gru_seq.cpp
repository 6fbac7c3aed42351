// Delta GRU's training sequence, forward and backward, loaded by baselines/ops/delta_gru_seq.py
// (``delta_gru_seq_kernel``) for baselines/delta_gru.py. Two parts of ``DeltaGRU.forward``:
//
// ``memorised_steps``: the input side's scan (``DeltaGRU._memorised_steps``): for every step t
// and feature v the step whose input is the memorised x^_t[v] (-1: the initial reference), with
// the same IEEE operations (subtract, absolute value, ``>=`` the threshold in the inputs' dtype),
// so the same steps exactly. No gradient: the method gathers x^ from it differentiably.
//
// ``forward``/``backward``: the recurrence over all T steps, from the projected input deltas
// p_t = W_i dx_t [B, T, 3D] (computed before, sequence-wide), the memory M_0 [B, 3D], h_0, h^_0
// and the state side of the memories acc_h_0 = W_h h^_0 [B, 3D] (n part: M_nh,0): the input side
// of the memories accumulated (the method's cumulative sum), then ``DeltaGRU._state_step``:
//     acc_x += p_t  (acc_x_0 = M_0, so acc_x_t = b + W_i x^_t)
//     d = h_{t-1} - h^;  keep = |d| >= theta_h;  dh_t = keep ? d : 0;  h^ = keep ? h_{t-1} : h^
//     acc_h += dh_t W_h^T
//     [r; z] = sigmoid(acc_x_t[rz] + acc_h[rz]);  n = tanh(acc_x_t[n] + r * acc_h[n])
//     h_t = lerp(n, h_{t-1}, z)
// returning hs [B, T, D], the thresholded deltas dhs [B, T, D] (the method's reads and
// regulariser), acc_x_T, h^_T and acc_h_T; ``backward`` writes out the gradient of p, M_0,
// h_0, h^_0, acc_h_0 and W_h from those of hs, dhs, acc_x_T, h^_T and acc_h_T: plain autograd
// through the thresholded deltas, zero through a cut one (``torch.where``'s backward). The
// matmuls are gemm.h's (ATen's; one per step each way; W_h's
// gradient one matmul over all steps),
// sigmoid and tanh ATen's vectorised ones on whole [B, .] buffers, the rest plain loops over the
// B x D units; lerp rounds as torch's scalar lerp. Built with -ffp-contract=off: equal to the
// PyTorch path to float rounding (the memories and the gradients are summed in another order),
// not bit for bit.
//
// Layout: p and its gradient, hs, dhs batch-major [B, T, .], as the method holds them (a
// step's rows are a strided matrix, which the matmuls read in place). What only the backward
// reads is time-major: A [T, B, 3D], the gates r, z, n; N [T, B, D], acc_h[n] after the step's
// addmm (the W_hn h^ that r multiplies); K [T, B, D], the keep decisions (1 or 0).
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>
#include "common.h"  // torch_lerp
#include "gemm.h"  // mm_into, addmm_into, mm_new: the matmuls
#include <cmath>
#include <vector>

namespace {

template <typename T>
at::Tensor memorised_steps(const at::Tensor& x, const at::Tensor& x_hat0, double theta_x) {
  const int64_t B = x.size(0), S = x.size(1), V = x.size(2);
  at::Tensor src = at::empty({B, S, V}, x.options().dtype(at::kLong));
  const T th = static_cast<T>(theta_x);  // the comparison in the inputs' dtype, as torch's
  const T* xp = x.data_ptr<T>();
  const T* r0 = x_hat0.data_ptr<T>();
  int64_t* sp = src.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t v = 0; v < V; ++v) {
      T ref = r0[b * V + v];
      int64_t from = -1;
      for (int64_t t = 0; t < S; ++t) {
        const T x_t = xp[(b * S + t) * V + v];
        if (std::abs(x_t - ref) >= th) {
          ref = x_t;
          from = t;
        }
        sp[(b * S + t) * V + v] = from;
      }
    }
  }
  return src;
}

template <typename T>
std::vector<at::Tensor> forward(const at::Tensor& proj, const at::Tensor& m0,
                                const at::Tensor& h0, const at::Tensor& h_hat0,
                                const at::Tensor& acc_h0, const at::Tensor& weight,
                                double theta_h) {
  const int64_t B = proj.size(0), S = proj.size(1), G = proj.size(2), D = h0.size(1);
  const auto opts = proj.options();
  at::Tensor hs = at::empty({B, S, D}, opts), dhs = at::empty({B, S, D}, opts);
  at::Tensor A = at::empty({S, B, G}, opts), N = at::empty({S, B, D}, opts);
  at::Tensor K = at::empty({S, B, D}, opts);
  at::Tensor h_hat = h_hat0.clone(), acc = acc_h0.clone(), acc_x = m0.clone();
  const auto wt = weight.t().contiguous();
  const T th = static_cast<T>(theta_h);
  const T* pp = proj.data_ptr<T>();
  T* axp = acc_x.data_ptr<T>();
  T* hhp = h_hat.data_ptr<T>();
  T* accp = acc.data_ptr<T>();
  for (int64_t t = 0; t < S; ++t) {
    const T* hrow0 = t == 0 ? h0.data_ptr<T>() : hs.data_ptr<T>() + (t - 1) * D;
    const int64_t hstride = t == 0 ? D : S * D;  // h_{t-1}'s rows
    T* kp = K.data_ptr<T>() + t * B * D;
    for (int64_t b = 0; b < B; ++b) {  // the thresholded state deltas and the new h^
      const T* h = hrow0 + b * hstride;
      T* dh = dhs.data_ptr<T>() + (b * S + t) * D;
      T* hh = hhp + b * D;
      T* k = kp + b * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const T d = h[j] - hh[j];
        const bool keep = std::abs(d) >= th;
        dh[j] = keep ? d : T(0);
        hh[j] = keep ? h[j] : hh[j];
        k[j] = keep ? T(1) : T(0);
      }
    }
    mm_into(acc, dhs.select(1, t), wt, true);  // acc_h += dh W_h^T
    at::Tensor a = A.select(0, t);
    T* ap = a.data_ptr<T>();
    for (int64_t b = 0; b < B; ++b) {
      const T* p = pp + (b * S + t) * G;
      T* x = axp + b * G;
      const T* c = accp + b * G;
#pragma omp simd
      for (int64_t i = 0; i < 2 * D; ++i) {
        x[i] = x[i] + p[i];  // the input side of the memories, acc_x_t
        ap[b * G + i] = x[i] + c[i];
      }
    }
    a.narrow(1, 0, 2 * D).sigmoid_();
    T* np = N.data_ptr<T>() + t * B * D;
    for (int64_t b = 0; b < B; ++b) {
      const T* p = pp + (b * S + t) * G + 2 * D;
      T* x = axp + b * G + 2 * D;
      const T* c = accp + b * G + 2 * D;
      const T* r = ap + b * G;
      T* n = ap + b * G + 2 * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        x[j] = x[j] + p[j];
        np[b * D + j] = c[j];
        n[j] = x[j] + r[j] * c[j];
      }
    }
    a.narrow(1, 2 * D, D).tanh_();
    T* hn0 = hs.data_ptr<T>() + t * D;
    for (int64_t b = 0; b < B; ++b) {
      const T* g = ap + b * G;
      const T* h = hrow0 + b * hstride;
      T* hn = hn0 + b * S * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) hn[j] = torch_lerp(g[2 * D + j], h[j], g[D + j]);
    }
  }
  return {hs, dhs, acc_x, h_hat, acc, A, N, K};
}

template <typename T>
std::vector<at::Tensor> backward(const at::Tensor& grad_hs, const at::Tensor& grad_dhs,
                                 const at::Tensor& grad_acc_x, const at::Tensor& grad_h_hat,
                                 const at::Tensor& grad_acc, const at::Tensor& weight,
                                 const at::Tensor& h0,
                                 const at::Tensor& hs, const at::Tensor& dhs, const at::Tensor& A,
                                 const at::Tensor& N, const at::Tensor& K) {
  const int64_t S = A.size(0), B = A.size(1), G = A.size(2), D = h0.size(1);
  const auto opts = A.options();
  at::Tensor d_proj = at::empty({B, S, G}, opts);
  at::Tensor gx = grad_acc_x.clone();          // acc_x's gradient after step t: p_t's
  at::Tensor GA = at::empty({B, S, G}, opts);  // acc_h's gradient after each step, for dW
  at::Tensor dh = at::zeros({B, D}, opts);     // h_{t}'s gradient from the later steps
  at::Tensor d_hh = grad_h_hat.clone();        // h^'s, after step t
  at::Tensor gacc = grad_acc.clone();          // acc_h's, after step t
  at::Tensor base = at::empty({B, D}, opts), gdh = at::empty({B, D}, opts);
  const T* gp = grad_hs.data_ptr<T>();
  T* dhp = dh.data_ptr<T>();
  T* dhhp = d_hh.data_ptr<T>();
  T* gaccp = gacc.data_ptr<T>();
  T* basep = base.data_ptr<T>();
  const T* gdhp = gdh.data_ptr<T>();
  T* gxp = gx.data_ptr<T>();
  for (int64_t t = S - 1; t >= 0; --t) {
    const T* ap = A.data_ptr<T>() + t * B * G;
    const T* np = N.data_ptr<T>() + t * B * D;
    const T* kp = K.data_ptr<T>() + t * B * D;
    const T* hrow0 = t == 0 ? h0.data_ptr<T>() : hs.data_ptr<T>() + (t - 1) * D;
    const int64_t hstride = t == 0 ? D : S * D;
    for (int64_t b = 0; b < B; ++b) {  // lerp, tanh, addcmul, sigmoid backwards
      const T* g = ap + b * G;
      const T* hprev = hrow0 + b * hstride;
      const T* go = gp + (b * S + t) * D;
      T* dp = d_proj.data_ptr<T>() + (b * S + t) * G;
      T* gxb = gxp + b * G;
      T* ga = gaccp + b * G;
      T* ga_saved = GA.data_ptr<T>() + (b * S + t) * G;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const int64_t i = b * D + j;
        const T r = g[j], z = g[D + j], n = g[2 * D + j];
        const T dht = go[j] + dhp[i];
        const T dn = dht * (T(1) - z), dz = dht * (hprev[j] - n);  // lerp(n, h, z)'s backward
        basep[i] = dht * z;
        const T dnpre = dn * (T(1) - n * n);
        const T dr = dnpre * np[i];
        const T dar = dr * (T(1) - r) * r, daz = dz * (T(1) - z) * z;
        dp[j] = gxb[j] = gxb[j] + dar;  // the cumulative sum's backward
        dp[D + j] = gxb[D + j] = gxb[D + j] + daz;
        dp[2 * D + j] = gxb[2 * D + j] = gxb[2 * D + j] + dnpre;
        ga[j] = ga_saved[j] = ga[j] + dar;
        ga[D + j] = ga_saved[D + j] = ga[D + j] + daz;
        ga[2 * D + j] = ga_saved[2 * D + j] = ga[2 * D + j] + dnpre * r;
      }
    }
    if (grad_dhs.numel())  // dh_t's: direct (the regulariser's) + gacc W_h
      addmm_into(gdh, grad_dhs.select(1, t), gacc, weight);
    else
      mm_into(gdh, gacc, weight, false);
    for (int64_t b = 0; b < B; ++b) {  // the thresholding's backward
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const int64_t i = b * D + j;
        const bool keep = kp[i] != T(0);
        const T gd = keep ? gdhp[i] : T(0);
        dhp[i] = basep[i] + gd + (keep ? dhhp[i] : T(0));  // h_{t-1}'s
        dhhp[i] = keep ? -gdhp[i] : dhhp[i];               // h^_{t-1}'s
      }
    }
  }
  // dW = sum_t gacc_t^T dh_t, one matmul over all steps
  at::Tensor dweight = mm_new(GA.view({B * S, G}).t(), dhs.view({B * S, D}));
  return {d_proj, gx, dh, d_hh, gacc, dweight};
}

at::Tensor steps(const at::Tensor& x, const at::Tensor& x_hat0, double theta_x) {
  TORCH_CHECK(x.dim() == 3 && x.is_contiguous() && x_hat0.is_contiguous(), "contiguous x, x_hat0");
  at::Tensor out;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "delta_gru_steps",
                             [&] { out = memorised_steps<scalar_t>(x, x_hat0, theta_x); });
  return out;
}

std::vector<at::Tensor> sequence_forward(const at::Tensor& proj, const at::Tensor& m0,
                                         const at::Tensor& h0, const at::Tensor& h_hat0,
                                         const at::Tensor& acc_h0, const at::Tensor& weight,
                                         double theta_h) {
  TORCH_CHECK(proj.dim() == 3 && proj.is_contiguous() && m0.is_contiguous() &&
                  h0.is_contiguous() && h_hat0.is_contiguous() && acc_h0.is_contiguous(),
              "contiguous proj [B, T, 3D], m0, h0, h_hat0, acc_h0");
  TORCH_CHECK(proj.size(2) == 3 * h0.size(1) && acc_h0.size(1) == proj.size(2) &&
                  m0.size(1) == proj.size(2),
              "3D gates");
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(proj.scalar_type(), "delta_gru_forward", [&] {
    out = forward<scalar_t>(proj, m0, h0, h_hat0, acc_h0, weight, theta_h);
  });
  return out;
}

std::vector<at::Tensor> sequence_backward(const at::Tensor& grad_hs, const at::Tensor& grad_dhs,
                                          const at::Tensor& grad_acc_x,
                                          const at::Tensor& grad_h_hat,
                                          const at::Tensor& grad_acc, const at::Tensor& weight,
                                          const at::Tensor& h0, const at::Tensor& hs,
                                          const at::Tensor& dhs, const at::Tensor& A,
                                          const at::Tensor& N, const at::Tensor& K) {
  TORCH_CHECK(grad_hs.is_contiguous() && grad_acc_x.is_contiguous() &&
                  grad_h_hat.is_contiguous() && grad_acc.is_contiguous(),
              "contiguous gradients (grad_dhs: empty where none)");
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(grad_hs.scalar_type(), "delta_gru_backward", [&] {
    out = backward<scalar_t>(grad_hs, grad_dhs, grad_acc_x, grad_h_hat, grad_acc, weight, h0, hs,
                             dhs, A, N, K);
  });
  return out;
}

}  // namespace

// The ops (csrc/ops.cpp): the input side's scan (the step memorised, -1 initial; int64); the
// recurrence: hs, dhs, acc_x, h^, acc_h, A, N, K; its gradients: proj, m0, h0, h^_0, acc_h0,
// weight (grad_dhs an empty tensor where there is none).
TORCH_LIBRARY_FRAGMENT(condrnn, m) {
  m.def("delta_gru_seq_memorised_steps(Tensor x, Tensor x_hat0, float theta_x) -> Tensor");
  m.def("delta_gru_seq_forward(Tensor proj, Tensor m0, Tensor h0, Tensor h_hat0, Tensor acc_h0,"
        " Tensor weight, float theta_h) -> Tensor[]");
  m.def("delta_gru_seq_backward(Tensor grad_hs, Tensor grad_dhs, Tensor grad_acc_x,"
        " Tensor grad_h_hat, Tensor grad_acc, Tensor weight, Tensor h0, Tensor hs, Tensor dhs,"
        " Tensor A, Tensor N, Tensor K) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(condrnn, CPU, m) {
  m.impl("delta_gru_seq_memorised_steps", TORCH_FN(steps));
  m.impl("delta_gru_seq_forward", TORCH_FN(sequence_forward));
  m.impl("delta_gru_seq_backward", TORCH_FN(sequence_backward));
}
