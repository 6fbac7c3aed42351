// A masked recurrent cell over a whole sequence, forward and backward, loaded by
// baselines/_kernels.py (``masked_cell_kernel``) for baselines/_masked_cell.py, which Phased LSTM
// (LSTM cell), Random Updates (reset-after GRU) and the Clockwork RNN (tanh cell) train with.
// Each step is a cell candidate from the step's input terms xp_t (W_i x_t + b, computed before)
// and h_{t-1}, then the per-unit update ``h_t = lerp(h_{t-1}, h~_t, m_t)`` (and, for the LSTM,
// ``c_t = lerp(c_{t-1}, c~_t, m_t)``) with a mask or gate m [B, T, D] computed before:
//     tanh: h~ = tanh(xp + W h)
//     gru:  [r; z] = sigmoid(xp_rz + W_rz h); n = tanh(xp_n + r * (W_n h)); h~ = lerp(n, h, z)
//     lstm: [i; f; g; o] = [s; s; tanh; s](xp + W h); c~ = f c + i g; h~ = o tanh(c~)
// the equations of the methods' per-step PyTorch code (the reference), whose backward
// ``backward`` writes out: the gradient of xp, h_0, c_0, W and m. The matmuls are ATen's (one
// addmm per step each way, the weight's gradient one matmul over all steps), tanh and sigmoid
// ATen's vectorised ones on whole [B, .] buffers, every other elementwise part a plain loop over
// the B x D units; lerp rounds as torch's scalar lerp (an exact copy where m is 0 or 1). Built
// with -ffp-contract=off: equal to the PyTorch path to float rounding (its lerp and addcmul may
// fuse a multiply-add), not bit for bit.
//
// Layout: the input terms xp and their gradient are time-major [T, B, GD] (a step's rows are
// contiguous; ``_masked_cell.input_terms`` computes them so), the mask m, the states hs and m's
// gradient batch-major [B, T, D], as the methods hold them (a step's rows of hs are a strided
// matrix, which the matmuls read in place). What only the backward reads is time-major:
// A [T, B, GD], the gate activations; X [T, B, D], the GRU's W_n h or the LSTM's tanh(c~);
// C [T + 1, B, D], the LSTM's cell states.
#include <torch/extension.h>
#include <cmath>
#include <vector>

namespace {

enum Cell : int64_t { TANH = 0, GRU = 1, LSTM = 2 };

// torch's lerp: a + w (b - a) for |w| < 0.5, else b - (b - a)(1 - w).
template <typename T>
inline T lerp(T a, T b, T w) {
  return std::abs(w) < T(0.5) ? a + w * (b - a) : b - (b - a) * (T(1) - w);
}

template <typename T, int64_t cell>
std::vector<at::Tensor> forward(const at::Tensor& xp, const at::Tensor& h0, const at::Tensor& c0,
                                const at::Tensor& weight, const at::Tensor& m) {
  const int64_t S = xp.size(0), B = xp.size(1), GD = xp.size(2), D = h0.size(1);
  const auto opts = xp.options();
  at::Tensor hs = at::empty({B, S, D}, opts), A = at::empty({S, B, GD}, opts);
  at::Tensor X = cell == TANH ? at::Tensor() : at::empty({S, B, D}, opts);
  at::Tensor C = cell == LSTM ? at::empty({S + 1, B, D}, opts) : at::Tensor();
  at::Tensor hp = cell == GRU ? at::empty({B, GD}, opts) : at::Tensor();
  if (cell == LSTM) C.select(0, 0).copy_(c0);
  const auto wt = weight.t();
  const T* xpp = xp.data_ptr<T>();
  const T* mp = m.data_ptr<T>();
  for (int64_t t = 0; t < S; ++t) {
    at::Tensor a = A.select(0, t), h = t == 0 ? h0 : hs.select(1, t - 1);
    const T* hrow0 = h.data_ptr<T>();
    const int64_t hstride = t == 0 ? D : S * D;  // h_{t-1}'s rows
    T* hn0 = hs.data_ptr<T>() + t * D;
    T* ap = a.data_ptr<T>();
    if (cell == GRU) {
      at::mm_out(hp, h, wt);
      const T* hpp = hp.data_ptr<T>();
      for (int64_t b = 0; b < B; ++b) {
        const T* x = xpp + (t * B + b) * GD;
#pragma omp simd
        for (int64_t c = 0; c < 2 * D; ++c) ap[b * GD + c] = x[c] + hpp[b * GD + c];
      }
      a.narrow(1, 0, 2 * D).sigmoid_();
      T* xn = X.select(0, t).data_ptr<T>();
      for (int64_t b = 0; b < B; ++b) {
        const T* x = xpp + (t * B + b) * GD + 2 * D;
        const T* r = ap + b * GD;
        const T* hnp = hpp + b * GD + 2 * D;
        T* n = ap + b * GD + 2 * D;
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) {
          xn[b * D + j] = hnp[j];
          n[j] = x[j] + r[j] * hnp[j];
        }
      }
      a.narrow(1, 2 * D, D).tanh_();
    } else {
      at::addmm_out(a, xp.select(0, t), h, wt);
      if (cell == TANH) {
        at::tanh_(a);
      } else {
        a.narrow(1, 0, 2 * D).sigmoid_();
        a.narrow(1, 2 * D, D).tanh_();
        a.narrow(1, 3 * D, D).sigmoid_();
        const T* cp = C.select(0, t).data_ptr<T>();
        T* cn = C.select(0, t + 1).data_ptr<T>();
        T* tc = X.select(0, t).data_ptr<T>();
        for (int64_t b = 0; b < B; ++b) {
          const T* g = ap + b * GD;
          const T* w = mp + (b * S + t) * D;
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) {
            const int64_t i = b * D + j;
            const T fc = g[D + j] * cp[i], ig = g[j] * g[2 * D + j];
            const T ct = fc + ig;  // eq. 8 of Phased LSTM
            tc[i] = ct;
            cn[i] = lerp(cp[i], ct, w[j]);
          }
        }
        X.select(0, t).tanh_();
      }
    }
    const T* xs = cell == LSTM ? X.select(0, t).data_ptr<T>() : nullptr;
    for (int64_t b = 0; b < B; ++b) {
      const T* g = ap + b * GD;
      const T* hrow = hrow0 + b * hstride;
      const T* w = mp + (b * S + t) * D;
      T* hn = hn0 + b * S * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        T cand;
        if (cell == TANH)
          cand = g[j];
        else if (cell == GRU)
          cand = lerp(g[2 * D + j], hrow[j], g[D + j]);
        else
          cand = g[3 * D + j] * xs[b * D + j];
        hn[j] = lerp(hrow[j], cand, w[j]);
      }
    }
  }
  return {hs, A, X, C};
}

template <typename T, int64_t cell>
std::vector<at::Tensor> backward(const at::Tensor& grad_hs, const at::Tensor& grad_c,
                                 const at::Tensor& weight, const at::Tensor& m,
                                 const at::Tensor& h0, const at::Tensor& hs, const at::Tensor& A,
                                 const at::Tensor& X, const at::Tensor& C) {
  const int64_t S = A.size(0), B = A.size(1), GD = A.size(2), D = h0.size(1);
  const auto opts = A.options();
  at::Tensor DX = at::empty({S, B, GD}, opts);  // the gradient of the pre-activations, xp's
  at::Tensor DH = cell == GRU ? at::empty({B, GD}, opts) : at::Tensor();  // W h's (n differs)
  at::Tensor dweight = at::zeros({GD, D}, opts);
  at::Tensor dm = at::empty({B, S, D}, opts);
  at::Tensor dh = at::zeros({B, D}, opts), base = at::empty({B, D}, opts);
  at::Tensor dc = cell == LSTM ? grad_c.clone() : at::Tensor();
  const T* gp = grad_hs.data_ptr<T>();
  const T* mp = m.data_ptr<T>();
  T* dmp = dm.data_ptr<T>();
  T* basep = base.data_ptr<T>();
  T* dcp = cell == LSTM ? dc.data_ptr<T>() : nullptr;
  for (int64_t t = S - 1; t >= 0; --t) {
    const T* ap = A.select(0, t).data_ptr<T>();
    at::Tensor h = t == 0 ? h0 : hs.select(1, t - 1);
    at::Tensor dht_w = cell == GRU ? DH : DX.select(0, t);
    const T* hp = h.data_ptr<T>();
    const int64_t hstride = t == 0 ? D : S * D;  // h_{t-1}'s rows
    const T* xs = cell == TANH ? nullptr : X.select(0, t).data_ptr<T>();
    const T* cp = cell == LSTM ? C.select(0, t).data_ptr<T>() : nullptr;
    const T* dhp = dh.data_ptr<T>();
    T* dxp = DX.data_ptr<T>() + t * B * GD;
    T* dhw = dht_w.data_ptr<T>();
    for (int64_t b = 0; b < B; ++b) {
      const T* g = ap + b * GD;
      const T* w = mp + (b * S + t) * D;
      const T* go = gp + (b * S + t) * D;
      T* dmr = dmp + (b * S + t) * D;
      const T* hprow = hp + b * hstride;
      T* da = dxp + b * GD;
      T* dw = dhw + b * GD;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const int64_t i = b * D + j;
        const T hprev = hprow[j], u = w[j], dht = go[j] + dhp[i];
        T cand;
        if (cell == TANH)
          cand = g[j];
        else if (cell == GRU)
          cand = lerp(g[2 * D + j], hprev, g[D + j]);
        else
          cand = g[3 * D + j] * xs[i];
        const T dcand = dht * u;  // lerp's backward: (1 - w), w, end - self
        T dprev = dht * (T(1) - u), dmj = dht * (cand - hprev);
        if (cell == TANH) {
          da[j] = dcand * (T(1) - cand * cand);
        } else if (cell == GRU) {
          const T r = g[j], z = g[D + j], n = g[2 * D + j];
          const T dn = dcand * (T(1) - z), dz = dcand * (hprev - n);
          dprev = dprev + dcand * z;
          const T dnpre = dn * (T(1) - n * n);
          const T dr = dnpre * xs[i];
          da[j] = dw[j] = dr * (T(1) - r) * r;
          da[D + j] = dw[D + j] = dz * (T(1) - z) * z;
          da[2 * D + j] = dnpre;
          dw[2 * D + j] = dnpre * r;
        } else {
          const T ig = g[j], fg = g[D + j], gg = g[2 * D + j], og = g[3 * D + j], tc = xs[i];
          const T cprev = cp[i], dct = dcp[i];
          const T fc = fg * cprev, igg = ig * gg;
          const T ct = fc + igg;  // c~, as the forward computed it
          dmj = dmj + dct * (ct - cprev);
          const T dctil = dct * u + dcand * og * (T(1) - tc * tc);
          const T dig = dctil * gg, dfg = dctil * cprev, dgg = dctil * ig, dog = dcand * tc;
          dcp[i] = dct * (T(1) - u) + dctil * fg;
          da[j] = dig * (T(1) - ig) * ig;
          da[D + j] = dfg * (T(1) - fg) * fg;
          da[2 * D + j] = dgg * (T(1) - gg * gg);
          da[3 * D + j] = dog * (T(1) - og) * og;
        }
        dmr[j] = dmj;
        basep[i] = dprev;
      }
    }
    dweight.addmm_(dht_w.t(), h);  // dW += dA^T h_{t-1}
    at::addmm_out(dh, base, dht_w, weight);  // dh_{t-1} = direct + dA W
  }
  return {DX, dh, dc, dweight, dm};
}

std::vector<at::Tensor> sequence_forward(const at::Tensor& xp, const at::Tensor& h0,
                                         const at::Tensor& c0, const at::Tensor& weight,
                                         const at::Tensor& m, int64_t cell) {
  TORCH_CHECK(xp.dim() == 3 && xp.is_contiguous() && m.is_contiguous(), "contiguous xp, m");
  TORCH_CHECK(m.size(0) == xp.size(1) && m.size(1) == xp.size(0), "xp [T, B, GD], m [B, T, D]");
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(xp.scalar_type(), "masked_cell_forward",
                             [&] {
    if (cell == TANH) out = forward<scalar_t, TANH>(xp, h0, c0, weight, m);
    else if (cell == GRU) out = forward<scalar_t, GRU>(xp, h0, c0, weight, m);
    else out = forward<scalar_t, LSTM>(xp, h0, c0, weight, m);
  });
  return out;
}

std::vector<at::Tensor> sequence_backward(const at::Tensor& grad_hs, const at::Tensor& grad_c,
                                          const at::Tensor& weight, const at::Tensor& m,
                                          const at::Tensor& h0, const at::Tensor& hs,
                                          const at::Tensor& A,
                                          const at::Tensor& X, const at::Tensor& C,
                                          int64_t cell) {
  TORCH_CHECK(grad_hs.is_contiguous(), "contiguous grad_hs");
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(grad_hs.scalar_type(), "masked_cell_backward", [&] {
    if (cell == TANH) out = backward<scalar_t, TANH>(grad_hs, grad_c, weight, m, h0, hs, A, X, C);
    else if (cell == GRU) out = backward<scalar_t, GRU>(grad_hs, grad_c, weight, m, h0, hs, A, X, C);
    else out = backward<scalar_t, LSTM>(grad_hs, grad_c, weight, m, h0, hs, A, X, C);
  });
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, mod) {
  mod.def("forward", &sequence_forward, "masked cell, whole sequence: hs, A, X, C");
  mod.def("backward", &sequence_backward, "its gradients: xp, h0, c0, weight, m");
}
