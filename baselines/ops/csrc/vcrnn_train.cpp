// VC-RNN's training sequence, forward and backward, loaded by baselines/ops/vcrnn_train.py
// (``vcrnn_train_kernel``) for baselines/vc_rnn.py's training forward. Each step is the method's
// per-step PyTorch code (``VCRNN._step``, the reference):
//     m = sigmoid(p0 + w_h . h)                          p0 = w_x . x_t + b, computed before
//     soft = sigmoid(lam (m D - i)),  e = Thr_eps(soft)  1 above 1 - eps, 0 below eps, else soft
//     hb = e * h;  xp = p_t (W_i x_t + b_i, computed before) or, input masked (V = D),
//                  W_i (e * x_t) + b_i (one addmm a step)
//     after:  [r; z] = sigmoid(xp_rz + W_rz hb); n = tanh(xp_n + r * (W_n hb)); c = lerp(n, hb, z)
//     before: [r; z] = sigmoid(xp_rz + W_rz hb); n = tanh(xp_n + W_n (r * hb));
//             c = (1 - z) n + z hb
//     h_t = lerp(h, c, e)
// and ``backward`` its exact gradient, the one autograd takes through those ops: Thr_eps passes
// the gradient where eps <= soft <= 1 - eps (where 0 < e < 1: torch.where's), 0 elsewhere. The
// matmuls are gemm.h's (ATen's; per step the scheduler's dot
// product is a plain loop; the weights'
// gradients are summed one addmm a step), the sigmoids and tanh ATen's vectorised ones on whole
// [B, .] buffers, every other elementwise part a loop over the B x D units; lerp rounds as
// torch's (e = 0 leaves an exact copy). Built with -ffp-contract=off: equal to the PyTorch path
// to float rounding, not bit for bit.
//
// Layout: the input terms P [T, B, G] are time-major (column 0 the scheduler's p0, columns 1..3D
// xp when the input is not masked, G = 1 + 3D; G = 1 when it is, and x comes time-major
// [T, B, V]); the outputs hs [B, T, D], m [B, T] and the soft mask e [B, T, D] batch-major, as
// the method holds them. What only the backward reads is time-major: HB [T, B, D] (e * h_{t-1}),
// A [T, B, 3D] (r, z, n), X [T, B, D] (after: W_n hb; before: r * hb), EX [T, B, V] (e * x_t).
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>
#include <cmath>
#include <vector>

#include "common.h"
#include "gemm.h"  // mm_into, addmm_into, mm_new: the matmuls

namespace {

template <typename T>
std::vector<at::Tensor> forward(const at::Tensor& P, const at::Tensor& xt, const at::Tensor& h0,
                                const at::Tensor& whh, const at::Tensor& wh,
                                const at::Tensor& wih, const at::Tensor& bias, double lam_d,
                                double eps, bool before) {
  const int64_t S = P.size(0), B = P.size(1), G = P.size(2), D = h0.size(1), D3 = 3 * D;
  const bool masked = xt.numel() > 0;
  const auto opts = P.options();
  at::Tensor hs = at::empty({B, S, D}, opts), M = at::empty({B, S}, opts);
  at::Tensor E = at::empty({B, S, D}, opts), HB = at::empty({S, B, D}, opts);
  at::Tensor A = at::empty({S, B, D3}, opts), X = at::empty({S, B, D}, opts);
  at::Tensor EX = masked ? at::empty({S, B, D}, opts) : at::empty({0}, opts);
  at::Tensor XP = masked ? at::empty({B, D3}, opts) : at::Tensor();  // the step's W_i (e x) + b
  at::Tensor HP = at::empty({B, before ? 2 * D : D3}, opts);  // W hb (before: W_rz hb)
  at::Tensor QN = before ? at::empty({B, D}, opts) : at::Tensor();  // W_n (r hb)
  at::Tensor mt = at::empty({B}, opts), soft = at::empty({B, D}, opts);
  // the per-step path's scalars: lam and D in the tensor's dtype, the thresholds compared in it
  const T lam = T(lam_d), hi = T(1.0 - eps), lo = T(eps), DT = T(D);
  const at::Tensor w_t = (before ? whh.narrow(0, 0, 2 * D).t() : whh.t()).contiguous();
  const at::Tensor wn_t = before ? whh.narrow(0, 2 * D, D).t().contiguous() : at::Tensor();
  const at::Tensor wih_t = masked ? wih.t().contiguous() : at::Tensor();
  const T* pp = P.data_ptr<T>();
  const T* whp = wh.data_ptr<T>();
  T *mp = mt.data_ptr<T>(), *sp = soft.data_ptr<T>(), *Mp = M.data_ptr<T>();
  T* Ep = E.data_ptr<T>();
  for (int64_t t = 0; t < S; ++t) {
    const at::Tensor h = t == 0 ? h0 : hs.select(1, t - 1);
    const T* hrow0 = h.data_ptr<T>();
    const int64_t hstride = t == 0 ? D : S * D;  // h_{t-1}'s rows
    for (int64_t b = 0; b < B; ++b) mp[b] = pp[(t * B + b) * G] + dot(hrow0 + b * hstride, whp, D);
    mt.sigmoid_();  // the scheduler
    for (int64_t b = 0; b < B; ++b) {
      const T md = mp[b] * DT;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) sp[b * D + j] = lam * (md - T(j + 1));
    }
    soft.sigmoid_();
    T* hbp = HB.data_ptr<T>() + t * B * D;
    for (int64_t b = 0; b < B; ++b) {
      const T* hrow = hrow0 + b * hstride;
      T* e = Ep + (b * S + t) * D;
      Mp[b * S + t] = mp[b];
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const T v = sp[b * D + j];
        e[j] = v > hi ? T(1) : (v < lo ? T(0) : v);  // Thr_eps
        hbp[b * D + j] = e[j] * hrow[j];
      }
      if (masked) {  // x-bar = e * x (V = D)
        const T* x = xt.data_ptr<T>() + (t * B + b) * D;
        T* ex = EX.data_ptr<T>() + (t * B + b) * D;
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) ex[j] = e[j] * x[j];
      }
    }
    if (masked) addmm_into(XP, bias, EX.select(0, t), wih_t);
    const T* xpp = masked ? XP.data_ptr<T>() : pp + t * B * G + 1;
    const int64_t xs = masked ? D3 : G;  // a row of xp
    const int64_t hps = HP.size(1);
    at::Tensor a = A.select(0, t), xq = X.select(0, t);
    T* ap = a.data_ptr<T>();
    T* xqp = xq.data_ptr<T>();
    mm_into(HP, HB.select(0, t), w_t, false);
    const T* hpp = HP.data_ptr<T>();
    for (int64_t b = 0; b < B; ++b) {
#pragma omp simd
      for (int64_t c = 0; c < 2 * D; ++c) ap[b * D3 + c] = xpp[b * xs + c] + hpp[b * hps + c];
    }
    a.narrow(1, 0, 2 * D).sigmoid_();
    if (before) {
      for (int64_t b = 0; b < B; ++b) {
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) xqp[b * D + j] = ap[b * D3 + j] * hbp[b * D + j];
      }
      mm_into(QN, xq, wn_t, false);  // W_n (r * hb)
    }
    const T* np = before ? QN.data_ptr<T>() : hpp + 2 * D;
    const int64_t ns = before ? D : D3;
    for (int64_t b = 0; b < B; ++b) {
      const T* x = xpp + b * xs + 2 * D;
      const T* r = ap + b * D3;
      const T* hn = np + b * ns;
      T* n = ap + b * D3 + 2 * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        if (!before) xqp[b * D + j] = hn[j];
        n[j] = before ? x[j] + hn[j] : x[j] + r[j] * hn[j];
      }
    }
    a.narrow(1, 2 * D, D).tanh_();
    T* hn0 = hs.data_ptr<T>() + t * D;
    for (int64_t b = 0; b < B; ++b) {
      const T* g = ap + b * D3;
      const T* hrow = hrow0 + b * hstride;
      const T* hb = hbp + b * D;
      const T* e = Ep + (b * S + t) * D;
      T* hn = hn0 + b * S * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const T z = g[D + j], n = g[2 * D + j];
        const T cand = before ? (T(1) - z) * n + z * hb[j] : torch_lerp(n, hb[j], z);
        hn[j] = torch_lerp(hrow[j], cand, e[j]);
      }
    }
  }
  return {hs, M, E, HB, A, X, EX};
}

template <typename T>
std::vector<at::Tensor> backward(const at::Tensor& grad_hs, const at::Tensor& grad_m,
                                 const at::Tensor& xt, const at::Tensor& h0, const at::Tensor& hs,
                                 const at::Tensor& M, const at::Tensor& E, const at::Tensor& HB,
                                 const at::Tensor& A, const at::Tensor& X, const at::Tensor& EX,
                                 const at::Tensor& whh, const at::Tensor& wh,
                                 const at::Tensor& wih, double lam_d, int64_t G, bool before) {
  const int64_t S = A.size(0), B = A.size(1), D = h0.size(1), D3 = 3 * D;
  const bool masked = xt.numel() > 0;
  const auto opts = A.options();
  at::Tensor DP = at::empty({S, B, G}, opts);  // P's gradient: column 0 the scheduler's
  // A step's gradients of xp (input masked; else P's columns 1..) and of the recurrent matmuls'
  // outputs; the weights' gradients are summed a step at a time (no [T, B, 3D] buffer to fill)
  at::Tensor DXP = masked ? at::empty({B, D3}, opts) : at::Tensor();
  at::Tensor DHP = at::empty({B, D3}, opts);
  at::Tensor dwhh = at::zeros({D3, D}, opts);
  at::Tensor dwih = masked ? at::zeros({D3, D}, opts) : at::empty({0}, opts);
  at::Tensor dbias = masked ? at::zeros({D3}, opts) : at::empty({0}, opts);
  at::Tensor dxt = masked ? at::empty({S, B, D}, opts) : at::empty({0}, opts);
  at::Tensor DHB = at::empty({B, D}, opts), DE = at::empty({B, D}, opts);
  at::Tensor MMH = at::empty({B, D}, opts);  // dHP W: the matmuls' part of hb's gradient
  at::Tensor DQ = before ? at::empty({B, D}, opts) : at::Tensor();  // W_n^T dn-pre
  at::Tensor DEX = masked ? at::empty({B, D}, opts) : at::Tensor();  // W_i^T dxp
  at::Tensor base = at::empty({B, D}, opts), dh = at::zeros({B, D}, opts);
  at::Tensor dwh = at::zeros({D}, opts);
  const T lam = T(lam_d), DT = T(D);
  const T *gp = grad_hs.data_ptr<T>(), *gmp = grad_m.data_ptr<T>(), *Ep = E.data_ptr<T>();
  const T *Mp = M.data_ptr<T>(), *whp = wh.data_ptr<T>();
  T *dhbp = DHB.data_ptr<T>(), *dep = DE.data_ptr<T>(), *basep = base.data_ptr<T>();
  T *dhp = dh.data_ptr<T>(), *dwhp = dwh.data_ptr<T>(), *mmp = MMH.data_ptr<T>();
  for (int64_t t = S - 1; t >= 0; --t) {
    const at::Tensor h = t == 0 ? h0 : hs.select(1, t - 1);
    const T* hrow0 = h.data_ptr<T>();
    const int64_t hstride = t == 0 ? D : S * D;  // h_{t-1}'s rows
    const T* ap = A.data_ptr<T>() + t * B * D3;
    const T* hbp = HB.data_ptr<T>() + t * B * D;
    const T* xqp = X.data_ptr<T>() + t * B * D;
    // xp's gradient: in P's columns 1.. (stride G), or its own buffer when the input is masked
    T* dxp0 = masked ? DXP.data_ptr<T>() : DP.data_ptr<T>() + t * B * G + 1;
    const int64_t xs = masked ? D3 : G;
    T* dhpp = DHP.data_ptr<T>();
    for (int64_t b = 0; b < B; ++b) {
      const T* g = ap + b * D3;
      const T* go = gp + (b * S + t) * D;
      const T* e = Ep + (b * S + t) * D;
      const T* hrow = hrow0 + b * hstride;
      const T* hb = hbp + b * D;
      const T* hn = xqp + b * D;
      T* dx = dxp0 + b * xs;
      T* dw = dhpp + b * D3;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const int64_t i = b * D + j;
        const T r = g[j], z = g[D + j], n = g[2 * D + j], u = e[j], hprev = hrow[j];
        const T dht = go[j] + dhp[i];
        const T cand = before ? (T(1) - z) * n + z * hb[j] : torch_lerp(n, hb[j], z);
        const T dcand = dht * u;  // lerp's backward: (1 - w), w, end - self
        basep[i] = dht * (T(1) - u);
        dep[i] = dht * (cand - hprev);
        const T dn = dcand * (T(1) - z), dz = dcand * (hb[j] - n);
        dhbp[i] = dcand * z;
        const T dnpre = dn * (T(1) - n * n);
        const T dzpre = dz * (T(1) - z) * z;
        dx[D + j] = dw[D + j] = dzpre;
        dx[2 * D + j] = dnpre;
        if (before) {
          dw[2 * D + j] = dnpre;  // W_n multiplies r * hb: r's part follows W_n^T dn-pre
        } else {
          const T drpre = dnpre * hn[j] * (T(1) - r) * r;
          dx[j] = dw[j] = drpre;
          dw[2 * D + j] = dnpre * r;
        }
      }
    }
    if (before) {
      mm_into(DQ, DHP.narrow(1, 2 * D, D), whh.narrow(0, 2 * D, D), false);  // d(r * hb)
      const T* dqp = DQ.data_ptr<T>();
      for (int64_t b = 0; b < B; ++b) {
        const T* g = ap + b * D3;
        const T* hb = hbp + b * D;
        T* dx = dxp0 + b * xs;
        T* dw = dhpp + b * D3;
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) {
          const int64_t i = b * D + j;
          const T r = g[j], dq = dqp[i];
          dhbp[i] = dhbp[i] + dq * r;
          dx[j] = dw[j] = dq * hb[j] * (T(1) - r) * r;
        }
      }
      mm_into(MMH, DHP.narrow(1, 0, 2 * D), whh.narrow(0, 0, 2 * D), false);
    } else {
      mm_into(MMH, DHP, whh, false);
    }
    const at::Tensor hb_t = HB.select(0, t);
    if (before) {  // dW_rz += dHP_rz^T hb, dW_n += dn-pre^T (r * hb)
      mm_into(dwhh.narrow(0, 0, 2 * D), DHP.narrow(1, 0, 2 * D).t(), hb_t, true);
      mm_into(dwhh.narrow(0, 2 * D, D), DHP.narrow(1, 2 * D, D).t(), X.select(0, t), true);
    } else {
      mm_into(dwhh, DHP.t(), hb_t, true);  // dW += dHP^T hb
    }
    if (masked) {
      mm_into(DEX, DXP, wih, false);  // x-bar's gradient
      mm_into(dwih, DXP.t(), EX.select(0, t), true);  // dW_i += dxp^T (e * x)
      T* db = dbias.data_ptr<T>();
      for (int64_t b = 0; b < B; ++b) {
#pragma omp simd
        for (int64_t c = 0; c < D3; ++c) db[c] += dxp0[b * D3 + c];
      }
    }
    const T* dexp = masked ? DEX.data_ptr<T>() : nullptr;
    const T* xrow0 = masked ? xt.data_ptr<T>() + t * B * D : nullptr;
    T* dxrow0 = masked ? dxt.data_ptr<T>() + t * B * D : nullptr;
    T* dpp = DP.data_ptr<T>() + t * B * G;
    for (int64_t b = 0; b < B; ++b) {
      const T* e = Ep + (b * S + t) * D;
      const T* hrow = hrow0 + b * hstride;
      T sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < D; ++j) {
        const int64_t i = b * D + j;
        const T u = e[j], dhb = dhbp[i] + mmp[i];
        T de = dep[i] + dhb * hrow[j];  // hb = e * h
        if (masked) {  // x-bar = e * x
          de = de + dexp[i] * xrow0[i];
          dxrow0[i] = dexp[i] * u;
        }
        basep[i] = basep[i] + dhb * u;
        // Thr_eps passes the gradient in its band (0 < e < 1, where e = soft); sigmoid's backward
        const T dpre = (u > T(0) && u < T(1)) ? de * (T(1) - u) * u : T(0);
        sum += dpre * lam;
      }
      const T m = Mp[b * S + t];
      const T ds = (sum * DT + gmp[b * S + t]) * (T(1) - m) * m;  // m = sigmoid(s)
      dpp[b * G] = ds;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        dhp[b * D + j] = basep[b * D + j] + ds * whp[j];
        dwhp[j] += ds * hrow[j];
      }
    }
  }
  return {DP, dxt, dh, dwhh, dwh, dwih, dbias};
}

std::vector<at::Tensor> sequence_forward(const at::Tensor& P, const at::Tensor& xt,
                                         const at::Tensor& h0, const at::Tensor& whh,
                                         const at::Tensor& wh, const at::Tensor& wih,
                                         const at::Tensor& bias, double lam, double eps,
                                         bool before) {
  const int64_t D = h0.size(1);
  TORCH_CHECK(P.dim() == 3 && P.is_contiguous() && h0.is_contiguous(), "contiguous P, h0");
  TORCH_CHECK(whh.is_contiguous() && wh.is_contiguous() && wh.numel() == D, "W_h, w_h");
  TORCH_CHECK(xt.numel() ? xt.is_contiguous() && xt.size(2) == D && P.size(2) == 1
                         : P.size(2) == 1 + 3 * D,
              "P [T, B, 1 + 3D], or [T, B, 1] and x [T, B, D] (input masked)");
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(P.scalar_type(), "vcrnn_train_forward", [&] {
    out = forward<scalar_t>(P, xt, h0, whh, wh, wih, bias, lam, eps, before);
  });
  return out;
}

std::vector<at::Tensor> sequence_backward(const at::Tensor& grad_hs, const at::Tensor& grad_m,
                                          const at::Tensor& xt, const at::Tensor& h0,
                                          const at::Tensor& hs, const at::Tensor& M,
                                          const at::Tensor& E, const at::Tensor& HB,
                                          const at::Tensor& A, const at::Tensor& X,
                                          const at::Tensor& EX, const at::Tensor& whh,
                                          const at::Tensor& wh, const at::Tensor& wih,
                                          double lam, int64_t G, bool before) {
  TORCH_CHECK(grad_hs.is_contiguous() && grad_m.is_contiguous(), "contiguous gradients");
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(grad_hs.scalar_type(), "vcrnn_train_backward", [&] {
    out = backward<scalar_t>(grad_hs, grad_m, xt, h0, hs, M, E, HB, A, X, EX, whh, wh, wih, lam,
                             G, before);
  });
  return out;
}

}  // namespace

// The ops (csrc/ops.cpp): VC-RNN's training sequence: hs, m, e, HB, A, X, EX; its gradients:
// P, x, h0, W_h, w_h, W_i, b_i. xt is an empty tensor where the input is not masked, and EX and
// the gradients of x, W_i and b_i have no elements (shape [0]) there.
TORCH_LIBRARY_FRAGMENT(condrnn, m) {
  m.def("vcrnn_train_forward(Tensor P, Tensor xt, Tensor h0, Tensor whh, Tensor wh, Tensor wih,"
        " Tensor bias, float lam, float eps, bool before) -> Tensor[]");
  m.def("vcrnn_train_backward(Tensor grad_hs, Tensor grad_m, Tensor xt, Tensor h0, Tensor hs,"
        " Tensor M, Tensor E, Tensor HB, Tensor A, Tensor X, Tensor EX, Tensor whh, Tensor wh,"
        " Tensor wih, float lam, int G, bool before) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(condrnn, CPU, m) {
  m.impl("vcrnn_train_forward", TORCH_FN(sequence_forward));
  m.impl("vcrnn_train_backward", TORCH_FN(sequence_backward));
}
