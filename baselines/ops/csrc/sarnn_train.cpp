// SA-RNN's training step over a whole sequence, forward and backward, loaded by
// baselines/ops/sarnn_train.py (``sarnn_train_kernel``) for baselines/sa_rnn.py. (csrc/sarnn.cpp is
// the other kernel, batch-1 inference.) Each step, from the step's input terms xp_t =
// [W_i x_t + b, W_u x_t + b_u] (computed before, ``SARNN._input_proj``) and h = h_{t-1}:
//     v = w_u * h + (W_u x + b_u); q = (a v + 1) / 2; u = 1[clip(q, 0, 1) > 0.5]   eqs. 5, 6, 8
//     after:  [r; z] = sigmoid(xp_rz + W_rz h); n = tanh(xp_n + r * (W_n h)); h~ = lerp(n, h, z)
//     before: [r; z] = sigmoid(xp_rz + W_rz h); n = tanh(xp_n + W_n (r * h)); h~ = (1-z) n + z h
//     h_t = lerp(h, h~, u)                                                          eq. 7
// the equations of the per-step PyTorch code (``SARNN._step``, the reference), whose backward
// ``backward`` writes out: the gradients of xp, h_0, the recurrent weight and w_u, given those of
// every h_t and of the mask u (the budget reads u). u's gradient is the straight-through one:
// the hard sigmoid's, a / 2 where 0 <= q <= 1 (torch's clamp passes its bounds), 0 where clipped.
// The matmuls are gemm.h's (ATen's; one per step each way, two
// for the reset-before form), tanh and sigmoid
// ATen's vectorised ones on whole [B, .] buffers, every other elementwise part a plain loop over
// the B x D units; lerp rounds as torch's scalar lerp (an exact copy where u is 0). Built with
// -ffp-contract=off: equal to the PyTorch path to float rounding, not bit for bit.
//
// Layout: xp and its gradient [B, T, 4D], the states hs and the mask U [B, T, D], batch-major as
// the method holds them (a step's rows are strided matrices, read in place). What only the
// backward reads is time-major: A [T, B, 3D], the gate activations r, z, n; X [T, B, D], the n
// gate's recurrent input (after: W_n h; before: r * h); P [T, B, D], 1 where the clip passes the
// gradient, else 0.
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

// The candidate h~ from the gates g = (r, z, n) of one unit row and h_{t-1}.
template <typename T, bool before>
inline T candidate(const T* g, int64_t D, int64_t j, T h) {
  const T z = g[D + j], n = g[2 * D + j];
  return before ? (T(1) - z) * n + z * h : torch_lerp(n, h, z);
}

template <typename T, bool before>
std::vector<at::Tensor> forward(const at::Tensor& xp, const at::Tensor& h0,
                                const at::Tensor& weight, const at::Tensor& w_u, double slope) {
  const int64_t B = xp.size(0), S = xp.size(1), D = h0.size(1), XD = 4 * D, GD = 3 * D;
  const auto opts = xp.options();
  at::Tensor hs = at::empty({B, S, D}, opts), U = at::empty({B, S, D}, opts);
  at::Tensor A = at::empty({S, B, GD}, opts), X = at::empty({S, B, D}, opts);
  at::Tensor P = at::empty({S, B, D}, opts);
  at::Tensor hp = at::empty({B, before ? 2 * D : GD}, opts);  // W h (before: W_rz h)
  at::Tensor hn = before ? at::empty({B, D}, opts) : at::Tensor();  // before: W_n (r * h)
  const auto wt = (before ? weight.narrow(0, 0, 2 * D).t() : weight.t()).contiguous();
  const auto wnt = weight.narrow(0, 2 * D, D).t().contiguous();
  const T* xpp = xp.data_ptr<T>();
  const T* wup = w_u.data_ptr<T>();
  const T a = T(slope);
  T* up = U.data_ptr<T>();
  for (int64_t t = 0; t < S; ++t) {
    at::Tensor g = A.select(0, t), h = t == 0 ? h0 : hs.select(1, t - 1);
    const T* hrow0 = h.data_ptr<T>();
    const int64_t hstride = t == 0 ? D : S * D;  // h_{t-1}'s rows
    T* ap = g.data_ptr<T>();
    T* xs = X.select(0, t).data_ptr<T>();
    mm_into(hp, h, wt, false);
    const T* hpp = hp.data_ptr<T>();
    const int64_t HG = hp.size(1);
    for (int64_t b = 0; b < B; ++b) {
      const T* x = xpp + (b * S + t) * XD;
#pragma omp simd
      for (int64_t c = 0; c < 2 * D; ++c) ap[b * GD + c] = x[c] + hpp[b * HG + c];
    }
    g.narrow(1, 0, 2 * D).sigmoid_();
    if (before) {  // r * h, then its matmul
      for (int64_t b = 0; b < B; ++b) {
        const T* hrow = hrow0 + b * hstride;
        const T* r = ap + b * GD;
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) xs[b * D + j] = r[j] * hrow[j];
      }
      mm_into(hn, X.select(0, t), wnt, false);
    }
    const T* hnp = before ? hn.data_ptr<T>() : hpp + 2 * D;  // the n gate's recurrent term
    const int64_t hns = before ? D : GD;
    for (int64_t b = 0; b < B; ++b) {
      const T* x = xpp + (b * S + t) * XD + 2 * D;
      const T* r = ap + b * GD;
      const T* w = hnp + b * hns;
      T* n = ap + b * GD + 2 * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        if (before) {
          n[j] = x[j] + w[j];
        } else {
          xs[b * D + j] = w[j];
          n[j] = x[j] + r[j] * w[j];
        }
      }
    }
    g.narrow(1, 2 * D, D).tanh_();
    T* pp = P.select(0, t).data_ptr<T>();
    for (int64_t b = 0; b < B; ++b) {
      const T* gb = ap + b * GD;
      const T* hrow = hrow0 + b * hstride;
      const T* cx = xpp + (b * S + t) * XD + 3 * D;  // W_u x + b_u
      T* hnew = hs.data_ptr<T>() + (b * S + t) * D;
      T* u = up + (b * S + t) * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const T hprev = hrow[j];
        const T v = cx[j] + wup[j] * hprev;  // addcmul
        const T q = (a * v + T(1)) / T(2);  // hard_sigmoid before its clip
        const T uj = q > T(0.5) ? T(1) : T(0);  // clip(q, 0, 1) > 0.5, NaN gives 0
        u[j] = uj;
        pp[b * D + j] = q >= T(0) && q <= T(1) ? T(1) : T(0);
        hnew[j] = torch_lerp(hprev, candidate<T, before>(gb, D, j, hprev), uj);
      }
    }
  }
  return {hs, U, A, X, P};
}

template <typename T, bool before>
std::vector<at::Tensor> backward(const at::Tensor& grad_hs, const at::Tensor& grad_u,
                                 const at::Tensor& weight, const at::Tensor& w_u, double slope,
                                 const at::Tensor& h0, const at::Tensor& hs, const at::Tensor& U,
                                 const at::Tensor& A, const at::Tensor& X, const at::Tensor& P) {
  const int64_t S = A.size(0), B = A.size(1), GD = A.size(2), D = h0.size(1), XD = 4 * D;
  const auto opts = A.options();
  at::Tensor dxp = at::empty({B, S, XD}, opts);
  at::Tensor DA = at::empty({B, GD}, opts);  // the gradient of the recurrent terms W h
  at::Tensor dweight = at::zeros({GD, D}, opts), dwu = at::zeros({D}, opts);
  at::Tensor dh = at::zeros({B, D}, opts), base = at::empty({B, D}, opts);
  at::Tensor drh = before ? at::empty({B, D}, opts) : at::Tensor();  // before: d(r * h)
  const auto w_rz = weight.narrow(0, 0, 2 * D), w_n = weight.narrow(0, 2 * D, D);
  const T* gp = grad_hs.data_ptr<T>();
  const T* gup = grad_u.data_ptr<T>();
  const T* up = U.data_ptr<T>();
  const T* wup = w_u.data_ptr<T>();
  const T a = T(slope);
  T* dxpp = dxp.data_ptr<T>();
  T* dwp = DA.data_ptr<T>();
  T* basep = base.data_ptr<T>();
  T* dwup = dwu.data_ptr<T>();
  for (int64_t t = S - 1; t >= 0; --t) {
    const T* ap = A.select(0, t).data_ptr<T>();
    const T* xs = X.select(0, t).data_ptr<T>();
    const T* pp = P.select(0, t).data_ptr<T>();
    at::Tensor h = t == 0 ? h0 : hs.select(1, t - 1);
    const T* hp = h.data_ptr<T>();
    const int64_t hstride = t == 0 ? D : S * D;  // h_{t-1}'s rows
    const T* dhp = dh.data_ptr<T>();
    for (int64_t b = 0; b < B; ++b) {
      const T* g = ap + b * GD;
      const int64_t o = (b * S + t) * D;  // this step's row of hs, U and their gradients
      const T* hprow = hp + b * hstride;
      T* dx = dxpp + (b * S + t) * XD;
      T* dw = dwp + b * GD;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const int64_t i = b * D + j;
        const T hprev = hprow[j], u = up[o + j], dht = gp[o + j] + dhp[i];
        const T cand = candidate<T, before>(g, D, j, hprev);
        const T dcand = dht * u;  // lerp's backward: (1 - w), w, end - self
        const T du = gup[o + j] + dht * (cand - hprev);
        const T dv = (pp[i] != T(0) ? du : T(0)) / T(2) * a;  // clamp, / 2, * a
        dx[3 * D + j] = dv;
        dwup[j] += dv * hprev;
        const T r = g[j], z = g[D + j], n = g[2 * D + j];
        const T dn = dcand * (T(1) - z), dz = dcand * (hprev - n);
        const T dnpre = dn * (T(1) - n * n);
        dx[D + j] = dw[D + j] = dz * (T(1) - z) * z;
        dx[2 * D + j] = dnpre;
        if (before) {
          dw[2 * D + j] = dnpre;
        } else {
          dx[j] = dw[j] = dnpre * xs[i] * (T(1) - r) * r;
          dw[2 * D + j] = dnpre * r;
        }
        basep[i] = dht * (T(1) - u) + dcand * z + dv * wup[j];
      }
    }
    if (before) {  // r's gradient goes through W_n (r * h): d(r h) = dn_pre W_n
      const auto dn = DA.narrow(1, 2 * D, D);
      mm_into(dweight.narrow(0, 2 * D, D), dn.t(), X.select(0, t), true);  // dW_n += dn^T (r h)
      mm_into(drh, dn, w_n, false);
      const T* drhp = drh.data_ptr<T>();
      for (int64_t b = 0; b < B; ++b) {
        const T* g = ap + b * GD;
        const T* hprow = hp + b * hstride;
        T* dx = dxpp + (b * S + t) * XD;
        T* dw = dwp + b * GD;
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) {
          const int64_t i = b * D + j;
          const T r = g[j];
          dx[j] = dw[j] = drhp[i] * hprow[j] * (T(1) - r) * r;
          basep[i] = basep[i] + drhp[i] * r;
        }
      }
      const auto drz = DA.narrow(1, 0, 2 * D);
      mm_into(dweight.narrow(0, 0, 2 * D), drz.t(), h, true);  // dW_rz += d[r z]^T h_{t-1}
      addmm_into(dh, base, drz, w_rz);  // dh_{t-1} = direct + d[r z] W_rz
    } else {
      mm_into(dweight, DA.t(), h, true);  // dW += dA^T h_{t-1}
      addmm_into(dh, base, DA, weight);  // dh_{t-1} = direct + dA W
    }
  }
  return {dxp, dh, dweight, dwu};
}

std::vector<at::Tensor> sequence_forward(const at::Tensor& xp, const at::Tensor& h0,
                                         const at::Tensor& weight, const at::Tensor& w_u,
                                         double slope, bool before) {
  TORCH_CHECK(xp.dim() == 3 && xp.is_contiguous() && h0.is_contiguous(), "contiguous xp, h0");
  TORCH_CHECK(xp.size(2) == 4 * h0.size(1) && xp.size(0) == h0.size(0), "xp [B, T, 4D], h0 [B, D]");
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(xp.scalar_type(), "sarnn_train_forward", [&] {
    out = before ? forward<scalar_t, true>(xp, h0, weight, w_u, slope)
                 : forward<scalar_t, false>(xp, h0, weight, w_u, slope);
  });
  return out;
}

std::vector<at::Tensor> sequence_backward(const at::Tensor& grad_hs, const at::Tensor& grad_u,
                                          const at::Tensor& weight, const at::Tensor& w_u,
                                          double slope, const at::Tensor& h0,
                                          const at::Tensor& hs, const at::Tensor& U,
                                          const at::Tensor& A, const at::Tensor& X,
                                          const at::Tensor& P, bool before) {
  TORCH_CHECK(grad_hs.is_contiguous() && grad_u.is_contiguous(), "contiguous gradients");
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(grad_hs.scalar_type(), "sarnn_train_backward", [&] {
    out = before ? backward<scalar_t, true>(grad_hs, grad_u, weight, w_u, slope, h0, hs, U, A, X, P)
                 : backward<scalar_t, false>(grad_hs, grad_u, weight, w_u, slope, h0, hs, U, A, X, P);
  });
  return out;
}

}  // namespace

// The ops (csrc/ops.cpp): SA-RNN, whole sequence: hs, U, A, X, P; its gradients: xp, h0,
// weight, w_u.
TORCH_LIBRARY_FRAGMENT(condrnn, m) {
  m.def("sarnn_train_forward(Tensor xp, Tensor h0, Tensor weight, Tensor w_u, float slope,"
        " bool before) -> Tensor[]");
  m.def("sarnn_train_backward(Tensor grad_hs, Tensor grad_u, Tensor weight, Tensor w_u,"
        " float slope, Tensor h0, Tensor hs, Tensor U, Tensor A, Tensor X, Tensor P,"
        " bool before) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(condrnn, CPU, m) {
  m.impl("sarnn_train_forward", TORCH_FN(sequence_forward));
  m.impl("sarnn_train_backward", TORCH_FN(sequence_backward));
}
