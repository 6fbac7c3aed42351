// EGRU's whole-sequence inference (eval semantics), the op condrnn::egru_infer_sequence, loaded
// by baselines/ops/egru_infer.py for EGRU.fast_forward (baselines/egru.py).
//
// Per step t and sequence b, from the input terms wx_t = x_t W + b (every input column is read,
// as in the code; one matmul for the whole sequence, before the call), the previous events
// y_{t-1} and internal state c_{t-1}, the equations of the method's step:
//     rh = b' + y_{t-1} R                          [z; r; g] gate order, reset after the product
//     [z; r] = sigmoid(wx_t[zr] + rh[zr]);  g = tanh(wx_t[g] + r * rh[g])
//     c~ = lerp(g, c_{t-1}, z);  v = c~ - theta;  o = v > 0
//     y_t = o ? c~ : 0;  c_t = o ? v : c~               (the event and the subtractive reset)
// where the recurrent product multiplies only the rows of R [D, 3D] (row-major: row j is what
// unit j's event multiplies, a contiguous row) of the units that fired at t - 1 in that sequence
// (csrc/sparse_rows.h's ``add_rows``): nothing but the bias where no unit fired. Each sequence of
// a batch reads its own rows (its own events), whole, so the cost follows each sequence's event
// rate, not the union of the batch's. The gates are ATen's
// vectorised sigmoid and tanh on a [B, 3D] buffer, the rest plain loops; lerp rounds as torch's.
// Built with -ffp-contract=off (the products accumulate with explicit fused multiply-adds): equal
// to the PyTorch path (``EGRU.forward`` in eval) to float rounding, the recurrent sums run in
// another order; a c~ within rounding of its threshold could fire differently.
//
// Returns the events ys [B, T, D] (y_t) and the internal state c_T [B, D].
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>
#include "common.h"       // torch_lerp
#include "sparse_rows.h"  // add_rows
#include <algorithm>
#include <vector>

namespace {

template <typename T>
std::vector<at::Tensor> run(const at::Tensor& wx, const at::Tensor& R, const at::Tensor& rbias,
                            const at::Tensor& thr, const at::Tensor& c0, const at::Tensor& y0) {
  const int64_t B = wx.size(0), S = wx.size(1), G = wx.size(2), D = G / 3;
  const auto opts = wx.options();
  at::Tensor ys = at::empty({B, S, D}, opts), c = c0.clone();
  at::Tensor rh = at::empty({B, G}, opts);
  at::Tensor A = at::empty({B, G}, opts);  // the gates' pre-activations, then z, r, g
  at::Tensor a_zr = A.narrow(1, 0, 2 * D), a_g = A.narrow(1, 2 * D, D);
  std::vector<int64_t> idx(B * D), nk(B);  // per sequence: the units that fired at t - 1
  std::vector<T> val(B * D);               // and their events
  const T* wxp = wx.data_ptr<T>();
  const T* rk = R.data_ptr<T>();
  const T* bp = rbias.data_ptr<T>();
  const T* th = thr.data_ptr<T>();
  T *ysp = ys.data_ptr<T>(), *cp = c.data_ptr<T>(), *rhp = rh.data_ptr<T>();
  T* ap = A.data_ptr<T>();
  for (int64_t t = 0; t < S; ++t) {
    for (int64_t b = 0; b < B; ++b) {  // the events of t - 1: the rows read
      const T* y = t == 0 ? y0.data_ptr<T>() + b * D : ysp + (b * S + t - 1) * D;
      int64_t* ib = idx.data() + b * D;
      T* vb = val.data() + b * D;
      int64_t k = 0;
      for (int64_t j = 0; j < D; ++j) {
        if (y[j] != T(0)) {
          ib[k] = j;
          vb[k++] = y[j];
        }
      }
      nk[b] = k;
      std::copy(bp, bp + G, rhp + b * G);  // rh = b' + ...
    }
    for (int64_t b = 0; b < B; ++b)  // ... y_{t-1} R: only the rows of the units that fired
      add_rows(rhp + b * G, rk, G, idx.data() + b * D, val.data() + b * D, nk[b], G);
    for (int64_t b = 0; b < B; ++b) {
      const T* x = wxp + (b * S + t) * G;
      const T* h = rhp + b * G;
#pragma omp simd
      for (int64_t i = 0; i < 2 * D; ++i) ap[b * G + i] = x[i] + h[i];
    }
    a_zr.sigmoid_();  // z, r
    for (int64_t b = 0; b < B; ++b) {
      const T* x = wxp + (b * S + t) * G + 2 * D;
      const T* h = rhp + b * G + 2 * D;
      const T* r = ap + b * G + D;
      T* g = ap + b * G + 2 * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) g[j] = x[j] + r[j] * h[j];  // reset after the product
    }
    a_g.tanh_();  // g
    for (int64_t b = 0; b < B; ++b) {
      const T* a = ap + b * G;
      T* cb = cp + b * D;
      T* y = ysp + (b * S + t) * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const T ct = torch_lerp(a[2 * D + j], cb[j], a[j]);  // z c + (1 - z) g
        const T v = ct - th[j];
        const bool o = v > T(0);  // H(c~ - theta), H(0) = 0
        y[j] = o ? ct : T(0);
        cb[j] = o ? v : ct;  // subtractive reset
      }
    }
  }
  return {ys, c};
}

std::vector<at::Tensor> sequence(const at::Tensor& wx, const at::Tensor& R,
                                 const at::Tensor& rbias, const at::Tensor& thr,
                                 const at::Tensor& c0, const at::Tensor& y0) {
  TORCH_CHECK(wx.dim() == 3 && wx.size(2) % 3 == 0, "egru_infer_sequence: wx [B, T, 3D]");
  const int64_t B = wx.size(0), D = wx.size(2) / 3;
  TORCH_CHECK(R.dim() == 2 && R.size(0) == D && R.size(1) == 3 * D && rbias.dim() == 1 &&
                  rbias.size(0) == 3 * D && thr.dim() == 1 && thr.size(0) == D &&
                  c0.dim() == 2 && c0.size(0) == B && c0.size(1) == D &&
                  y0.sizes() == c0.sizes(),
              "egru_infer_sequence: inconsistent shapes");
  const auto dtype = wx.scalar_type();
  for (const at::Tensor* t : {&R, &rbias, &thr, &c0, &y0})
    TORCH_CHECK(t->scalar_type() == dtype, "egru_infer_sequence: one dtype");
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(dtype, "egru_infer_sequence", [&] {
    out = run<scalar_t>(wx.contiguous(), R.contiguous(), rbias.contiguous(), thr.contiguous(),
                        c0.contiguous(), y0.contiguous());
  });
  return out;
}

}  // namespace

// The op (csrc/ops.cpp): EGRU's inference over a whole sequence: the events ys and c_T.
// Inference only: no backward.
TORCH_LIBRARY_FRAGMENT(condrnn, m) {
  m.def("egru_infer_sequence(Tensor wx, Tensor R, Tensor rbias, Tensor thr, Tensor c0,"
        " Tensor y0) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(condrnn, CPU, m) { m.impl("egru_infer_sequence", TORCH_FN(sequence)); }
