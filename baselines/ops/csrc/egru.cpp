// EGRU's layer over a whole sequence, forward and backward, loaded by baselines/ops/egru.py
// (``egru_kernel``), which EGRU's training runs (baselines/egru.py ``forward``). Each step, from
// the step's input terms wx_t = x_t W + b (computed before, for all steps in one matmul), the
// previous events y_{t-1} and internal state c_{t-1}:
//     rh = y_{t-1} R + b'                          [z; r; g] gate order, reset after the product
//     z = sigmoid(wx_z + rh_z); r = sigmoid(wx_r + rh_r); g = tanh(wx_g + r * rh_g)
//     c~ = lerp(g, c_{t-1}, z); o = H(c~ - theta) (H(0) = 0); y_t = o c~; c_t = c~ - o theta
// the equations of the method's per-step PyTorch code (the reference), whose backward
// ``backward`` writes out with H's pseudo-derivative ``dampening * max(0, 1 - support |v|)``
// (v = c~ - theta): the gradients of wx, c_0, y_0, R, b' and theta, given those of the events'
// values y, the events o themselves (the event rate and regulariser read them) and c_T. The
// matmuls are gemm.h's (ATen's; one per step forward, one mm per
// step backward, R's gradient one mm
// over all steps), tanh and sigmoid ATen's vectorised ones on whole [B, .] buffers, every other
// elementwise part a plain loop over the B x D units; lerp rounds as torch's scalar lerp. Built
// with -ffp-contract=off: equal to the PyTorch path to float rounding (its addcmul and lerp may
// fuse a multiply-add, its gradient sums run in another order), not bit for bit.
//
// Layout: wx and its gradient are time-major [S, B, 3D]; the outputs ys and os batch-major
// [B, S, D], as the method holds them. What only the backward reads is time-major: Y [S + 1, B, D]
// the events (Y[0] = y_0; a step's rows contiguous for the matmuls), C [S + 1, B, D] the internal
// states after the reset, A [S, B, 3D] the gate activations z, r, g, HG [S, B, D] the reset
// gate's operand rh_g, CT [S, B, D] c~.
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
std::vector<at::Tensor> forward(const at::Tensor& wx, const at::Tensor& c0, const at::Tensor& y0,
                                const at::Tensor& R, const at::Tensor& rbias,
                                const at::Tensor& thr) {
  const int64_t S = wx.size(0), B = wx.size(1), G = wx.size(2), D = c0.size(1);
  const auto opts = wx.options();
  at::Tensor Y = at::empty({S + 1, B, D}, opts), C = at::empty({S + 1, B, D}, opts);
  at::Tensor A = at::empty({S, B, G}, opts), HG = at::empty({S, B, D}, opts);
  at::Tensor CT = at::empty({S, B, D}, opts), os = at::empty({B, S, D}, opts);
  at::Tensor rh = at::empty({B, G}, opts);
  Y.select(0, 0).copy_(y0);
  C.select(0, 0).copy_(c0);
  const T* wxp = wx.data_ptr<T>();
  const T* th = thr.data_ptr<T>();
  const T* rhp = rh.data_ptr<T>();
  T* op = os.data_ptr<T>();
  // Raw pointers where no ATen op reads the step's buffer: a view costs a dispatch.
  T *yp = Y.data_ptr<T>(), *cp0 = C.data_ptr<T>(), *hgp = HG.data_ptr<T>();
  T* ctp = CT.data_ptr<T>();
  for (int64_t t = 0; t < S; ++t) {
    addmm_into(rh, rbias, Y.select(0, t), R);  // y_{t-1} R + b'
    at::Tensor a = A.select(0, t);
    T* ap = a.data_ptr<T>();
    for (int64_t b = 0; b < B; ++b) {
      const T* x = wxp + (t * B + b) * G;
#pragma omp simd
      for (int64_t k = 0; k < 2 * D; ++k) ap[b * G + k] = x[k] + rhp[b * G + k];
    }
    a.narrow(1, 0, 2 * D).sigmoid_();  // z, r
    T* hg = hgp + t * B * D;
    for (int64_t b = 0; b < B; ++b) {
      const T* x = wxp + (t * B + b) * G + 2 * D;
      const T* r = ap + b * G + D;
      const T* h = rhp + b * G + 2 * D;
      T* n = ap + b * G + 2 * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        hg[b * D + j] = h[j];
        n[j] = x[j] + r[j] * h[j];  // reset after the product
      }
    }
    a.narrow(1, 2 * D, D).tanh_();  // g
    const T* cp = cp0 + t * B * D;
    T* cn = cp0 + (t + 1) * B * D;
    T* yn = yp + (t + 1) * B * D;
    T* ct = ctp + t * B * D;
    for (int64_t b = 0; b < B; ++b) {
      const T* g = ap + b * G;
      T* o = op + (b * S + t) * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const int64_t i = b * D + j;
        const T c = torch_lerp(g[2 * D + j], cp[i], g[j]);  // z c + (1 - z) g
        const T e = c - th[j] > T(0) ? T(1) : T(0);  // H(c~ - theta), H(0) = 0
        ct[i] = c;
        o[j] = e;
        yn[i] = e * c;
        cn[i] = c - e * th[j];  // subtractive reset
      }
    }
  }
  at::Tensor ys = Y.narrow(0, 1, S).transpose(0, 1).contiguous();
  return {ys, os, C.select(0, S).clone(), Y, C, A, HG, CT};
}

template <typename T>
std::vector<at::Tensor> backward(const at::Tensor& gys, const at::Tensor& gos,
                                 const at::Tensor& gc, const at::Tensor& R,
                                 const at::Tensor& thr, const at::Tensor& Y, const at::Tensor& C,
                                 const at::Tensor& A, const at::Tensor& HG, const at::Tensor& CT,
                                 double dampening, double support) {
  const int64_t S = A.size(0), B = A.size(1), G = A.size(2), D = G / 3;
  const auto opts = A.options();
  at::Tensor DWX = at::empty({S, B, G}, opts);  // the gradient of wx
  at::Tensor DRH = at::empty({S, B, G}, opts);  // of rh (differs from wx's in the g part)
  at::Tensor dy = at::zeros({B, D}, opts), dc = gc.clone();
  at::Tensor dthr = at::zeros({B, D}, opts);  // theta's, per sequence, summed over B at the end
  const T damp = T(dampening), supp = T(support);  // rounded to T, as torch does a Python float
  const T* gyp = gys.data_ptr<T>();
  const T* gop = gos.data_ptr<T>();
  const T* th = thr.data_ptr<T>();
  const T* dyp = dy.data_ptr<T>();
  T* dcp = dc.data_ptr<T>();
  T* dtp = dthr.data_ptr<T>();
  const at::Tensor Rt = R.t().contiguous();
  for (int64_t t = S - 1; t >= 0; --t) {  // raw pointers: a view costs a dispatch
    const T* ap = A.data_ptr<T>() + t * B * G;
    const T* hg = HG.data_ptr<T>() + t * B * D;
    const T* ctp = CT.data_ptr<T>() + t * B * D;
    const T* cp = C.data_ptr<T>() + t * B * D;
    T* dwx = DWX.data_ptr<T>() + t * B * G;
    T* drh = DRH.data_ptr<T>() + t * B * G;
    for (int64_t b = 0; b < B; ++b) {
      const T* g = ap + b * G;
      const T* gy = gyp + (b * S + t) * D;
      const T* go = gop + (b * S + t) * D;
      T* dw = dwx + b * G;
      T* dr = drh + b * G;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const int64_t i = b * D + j;
        const T c = ctp[i], v = c - th[j], e = v > T(0) ? T(1) : T(0);
        const T dyt = gy[j] + dyp[i], dct = dcp[i];  // y_t's and c_t's gradients
        // o's: from y = o c~, c = c~ - o theta and the events output; then H's surrogate
        const T pseudo = std::max(T(1) - supp * std::abs(v), T(0)) * damp;
        const T dv = (dyt * c - dct * th[j] + go[j]) * pseudo;
        const T dctil = dyt * e + dct + dv;
        dtp[i] = dtp[i] - dct * e - dv;
        const T z = g[j], r = g[D + j], n = g[2 * D + j], cprev = cp[i];
        const T dn = dctil * (T(1) - z) * (T(1) - n * n);  // through lerp, then tanh
        const T dz = dctil * (cprev - n) * (T(1) - z) * z;
        const T drr = dn * hg[i] * (T(1) - r) * r;
        dw[j] = dr[j] = dz;
        dw[D + j] = dr[D + j] = drr;
        dw[2 * D + j] = dn;
        dr[2 * D + j] = dn * r;
        dcp[i] = dctil * z;  // c_{t-1}'s, through lerp
      }
    }
    mm_into(dy, DRH.select(0, t), Rt, false);  // y_{t-1}'s through the recurrent product
  }
  const at::Tensor drh = DRH.view({S * B, G});
  at::Tensor dR = mm_new(Y.narrow(0, 0, S).reshape({S * B, D}).t(), drh);  // sum_t y_{t-1}^T drh_t
  return {DWX, dc, dy, dR, drh.sum(0), dthr.sum(0)};
}

// dampening and support: the backward's (H's pseudo-derivative), in the forward's schema so
// that the backward registered with it (baselines/ops/egru.py) finds them among its inputs.
std::vector<at::Tensor> sequence_forward(const at::Tensor& wx, const at::Tensor& c0,
                                         const at::Tensor& y0, const at::Tensor& R,
                                         const at::Tensor& rbias, const at::Tensor& thr,
                                         double /*dampening*/, double /*support*/) {
  TORCH_CHECK(wx.dim() == 3 && wx.is_contiguous() && thr.is_contiguous(), "contiguous wx, thr");
  TORCH_CHECK(wx.size(2) == 3 * c0.size(1) && wx.size(1) == c0.size(0), "wx [T, B, 3D], c0 [B, D]");
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(wx.scalar_type(), "egru_forward",
                             [&] { out = forward<scalar_t>(wx, c0, y0, R, rbias, thr); });
  return out;
}

std::vector<at::Tensor> sequence_backward(const at::Tensor& gys, const at::Tensor& gos,
                                          const at::Tensor& gc, const at::Tensor& R,
                                          const at::Tensor& thr, const at::Tensor& Y,
                                          const at::Tensor& C, const at::Tensor& A,
                                          const at::Tensor& HG, const at::Tensor& CT,
                                          double dampening, double support) {
  TORCH_CHECK(gys.is_contiguous() && gos.is_contiguous() && gc.is_contiguous(),
              "contiguous gradients");
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(gys.scalar_type(), "egru_backward", [&] {
    out = backward<scalar_t>(gys, gos, gc, R, thr, Y, C, A, HG, CT, dampening, support);
  });
  return out;
}

}  // namespace

// The ops (csrc/ops.cpp): an EGRU layer, whole sequence: ys, os, c_T, saved (the forward takes
// the pseudo-derivative's dampening and support for its backward only); its gradients: wx, c0,
// y0, R, b', theta.
TORCH_LIBRARY_FRAGMENT(condrnn, m) {
  m.def("egru_forward(Tensor wx, Tensor c0, Tensor y0, Tensor R, Tensor rbias, Tensor thr,"
        " float dampening, float support) -> Tensor[]");
  m.def("egru_backward(Tensor gys, Tensor gos, Tensor gc, Tensor R, Tensor thr, Tensor Y,"
        " Tensor C, Tensor A, Tensor HG, Tensor CT, float dampening, float support)"
        " -> Tensor[]");
}

TORCH_LIBRARY_IMPL(condrnn, CPU, m) {
  m.impl("egru_forward", TORCH_FN(sequence_forward));
  m.impl("egru_backward", TORCH_FN(sequence_backward));
}
