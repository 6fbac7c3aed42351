// Delta GRU's whole-sequence inference (eval semantics), the op condrnn::delta_gru_infer_sequence,
// loaded by baselines/ops/delta_gru_infer.py for DeltaGRU.fast_forward (baselines/delta_gru.py).
//
// Per step t and sequence b, the equations of ``DeltaGRU.step`` (the method's docstring):
//     dx = x_t - x^;  keep = |dx| >= theta_x;  dx = keep ? dx : 0;  x^ = keep ? x_t : x^
//     dh = h_{t-1} - h^;  keep = |dh| >= theta_h;  dh = keep ? dh : 0;  h^ = keep ? h_{t-1} : h^
//     acc_x += dx W_i^T;  acc_h += dh W_h^T          (acc_x_0 = M_0 = b, acc_h_0 = [0; 0; M_nh,0])
//     [r; z] = sigmoid(acc_x[rz] + acc_h[rz]);  n = tanh(acc_x[n] + r * acc_h[n])
//     h_t = lerp(n, h_{t-1}, z)
// where only the non-zero deltas are multiplied: the rows of the transposed weights W_i^T [V, 3D]
// and W_h^T [D, 3D] (packed once by the caller; row j is column j of W) of the columns the
// sequence reads at that step, each a contiguous row (csrc/sparse_rows.h's ``add_rows``). Each
// sequence of a batch reads its own rows (its own deltas), whole, so the cost follows each
// sequence's sparsity, not the union of the batch's (at B 32 this measured faster than column
// panels or row blocks shared by the batch, whose partial rows stream worse). The thresholds
// compare in the inputs' dtype, as torch compares a tensor with a Python float: the same deltas,
// decisions and reads as the PyTorch path given the same h. The gates are ATen's vectorised
// sigmoid and tanh on a [B, 3D] buffer, the rest plain loops; lerp rounds as torch's. Built with
// -ffp-contract=off (the products accumulate with explicit fused multiply-adds): equal to the
// PyTorch path (``DeltaGRU.forward`` in eval) to float rounding, the memories summed in another
// order; a state delta within rounding of theta_h could be cut differently.
//
// Returns hs [B, T, D] (h_t), reads [B, T, V + D] (1 where step t multiplies that column: a
// non-zero dx, then dh), x^_T [B, V], h^_T [B, D], acc_x_T [B, 3D], acc_h_T [B, 3D] and each
// sequence's sum of |dh| over the steps and units [B] (the regulariser's).
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>
#include "common.h"       // torch_lerp
#include "sparse_rows.h"  // add_rows
#include <cmath>
#include <vector>

namespace {

template <typename T>
std::vector<at::Tensor> run(const at::Tensor& x, const at::Tensor& wi_t, const at::Tensor& wh_t,
                            const at::Tensor& x_hat0, const at::Tensor& h0,
                            const at::Tensor& h_hat0, const at::Tensor& acc_x0,
                            const at::Tensor& acc_h0, double theta_x, double theta_h) {
  const int64_t B = x.size(0), S = x.size(1), V = x.size(2), D = h0.size(1), G = 3 * D;
  const int64_t C = V + D;
  const auto opts = x.options();
  at::Tensor hs = at::empty({B, S, D}, opts), reads = at::empty({B, S, C}, opts);
  at::Tensor x_hat = x_hat0.clone(), h_hat = h_hat0.clone();
  at::Tensor acc_x = acc_x0.clone(), acc_h = acc_h0.clone();
  at::Tensor abs_dh = at::zeros({B}, opts);
  at::Tensor A = at::empty({B, G}, opts);  // the gates' pre-activations, then r, z, n
  at::Tensor a_rz = A.narrow(1, 0, 2 * D), a_n = A.narrow(1, 2 * D, D);
  std::vector<int64_t> idx(B * C);  // per sequence: the columns read (inputs, then units)
  std::vector<T> val(B * C);        // and their deltas
  std::vector<int64_t> nx(B), nh(B);
  const T thx = static_cast<T>(theta_x), thh = static_cast<T>(theta_h);
  const T* xp = x.data_ptr<T>();
  const T* wi = wi_t.data_ptr<T>();
  const T* wh = wh_t.data_ptr<T>();
  T *xhp = x_hat.data_ptr<T>(), *hhp = h_hat.data_ptr<T>();
  T *axp = acc_x.data_ptr<T>(), *ahp = acc_h.data_ptr<T>();
  T *hsp = hs.data_ptr<T>(), *rp = reads.data_ptr<T>(), *sp = abs_dh.data_ptr<T>();
  T* ap = A.data_ptr<T>();
  for (int64_t t = 0; t < S; ++t) {
    for (int64_t b = 0; b < B; ++b) {  // the thresholded deltas: the columns read
      const T* xt = xp + (b * S + t) * V;
      const T* h = t == 0 ? h0.data_ptr<T>() + b * D : hsp + (b * S + t - 1) * D;
      T* xh = xhp + b * V;
      T* hh = hhp + b * D;
      T* rd = rp + (b * S + t) * C;
      int64_t* ib = idx.data() + b * C;
      T* vb = val.data() + b * C;
      int64_t k = 0;
      for (int64_t v = 0; v < V; ++v) {
        const T d = xt[v] - xh[v];
        const bool keep = std::abs(d) >= thx;
        if (keep) xh[v] = xt[v];
        const bool read = keep && d != T(0);
        rd[v] = read ? T(1) : T(0);
        if (read) {
          ib[k] = v;
          vb[k++] = d;
        }
      }
      nx[b] = k;
      T s = sp[b];
      for (int64_t j = 0; j < D; ++j) {
        const T d = h[j] - hh[j];
        const bool keep = std::abs(d) >= thh;
        if (keep) hh[j] = h[j];
        const bool read = keep && d != T(0);
        rd[V + j] = read ? T(1) : T(0);
        if (read) {
          s += std::abs(d);
          ib[k] = j;
          vb[k++] = d;
        }
      }
      sp[b] = s;
      nh[b] = k - nx[b];
    }
    for (int64_t b = 0; b < B; ++b) {  // the products: only the rows of the columns read
      const int64_t* ib = idx.data() + b * C;
      const T* vb = val.data() + b * C;
      add_rows(axp + b * G, wi, G, ib, vb, nx[b], G);
      add_rows(ahp + b * G, wh, G, ib + nx[b], vb + nx[b], nh[b], G);
    }
    for (int64_t b = 0; b < B; ++b) {
      const T* ax = axp + b * G;
      const T* ah = ahp + b * G;
#pragma omp simd
      for (int64_t i = 0; i < 2 * D; ++i) ap[b * G + i] = ax[i] + ah[i];
    }
    a_rz.sigmoid_();  // r, z
    for (int64_t b = 0; b < B; ++b) {
      const T* ax = axp + b * G + 2 * D;
      const T* ah = ahp + b * G + 2 * D;
      const T* r = ap + b * G;
      T* n = ap + b * G + 2 * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) n[j] = ax[j] + r[j] * ah[j];  // reset after the product
    }
    a_n.tanh_();  // n
    for (int64_t b = 0; b < B; ++b) {
      const T* g = ap + b * G;
      const T* h = t == 0 ? h0.data_ptr<T>() + b * D : hsp + (b * S + t - 1) * D;
      T* hn = hsp + (b * S + t) * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) hn[j] = torch_lerp(g[2 * D + j], h[j], g[D + j]);
    }
  }
  return {hs, reads, x_hat, h_hat, acc_x, acc_h, abs_dh};
}

std::vector<at::Tensor> sequence(const at::Tensor& x, const at::Tensor& wi_t,
                                 const at::Tensor& wh_t, const at::Tensor& x_hat0,
                                 const at::Tensor& h0, const at::Tensor& h_hat0,
                                 const at::Tensor& acc_x0, const at::Tensor& acc_h0,
                                 double theta_x, double theta_h) {
  TORCH_CHECK(x.dim() == 3 && h0.dim() == 2, "delta_gru_infer_sequence: x [B, T, V], h0 [B, D]");
  const int64_t B = x.size(0), V = x.size(2), D = h0.size(1);
  TORCH_CHECK(wi_t.dim() == 2 && wi_t.size(0) == V && wi_t.size(1) == 3 * D &&
                  wh_t.dim() == 2 && wh_t.size(0) == D && wh_t.size(1) == 3 * D &&
                  x_hat0.dim() == 2 && x_hat0.size(0) == B && x_hat0.size(1) == V &&
                  h0.size(0) == B && h_hat0.sizes() == h0.sizes() && acc_x0.dim() == 2 &&
                  acc_x0.size(0) == B && acc_x0.size(1) == 3 * D &&
                  acc_h0.sizes() == acc_x0.sizes(),
              "delta_gru_infer_sequence: inconsistent shapes");
  const auto dtype = x.scalar_type();
  for (const at::Tensor* t : {&wi_t, &wh_t, &x_hat0, &h0, &h_hat0, &acc_x0, &acc_h0})
    TORCH_CHECK(t->scalar_type() == dtype, "delta_gru_infer_sequence: one dtype");
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(dtype, "delta_gru_infer_sequence", [&] {
    out = run<scalar_t>(x.contiguous(), wi_t.contiguous(), wh_t.contiguous(),
                        x_hat0.contiguous(), h0.contiguous(), h_hat0.contiguous(),
                        acc_x0.contiguous(), acc_h0.contiguous(), theta_x, theta_h);
  });
  return out;
}

}  // namespace

// The op (csrc/ops.cpp): Delta GRU's inference over a whole sequence: hs, reads, x^_T, h^_T,
// acc_x_T, acc_h_T, sum |dh| per sequence. Inference only: no backward.
TORCH_LIBRARY_FRAGMENT(condrnn, m) {
  m.def("delta_gru_infer_sequence(Tensor x, Tensor wi_t, Tensor wh_t, Tensor x_hat0, Tensor h0,"
        " Tensor h_hat0, Tensor acc_x0, Tensor acc_h0, float theta_x, float theta_h)"
        " -> Tensor[]");
}

TORCH_LIBRARY_IMPL(condrnn, CPU, m) {
  m.impl("delta_gru_infer_sequence", TORCH_FN(sequence));
}
