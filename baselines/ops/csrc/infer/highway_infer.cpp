// Whole-sequence inference of the elastic highway methods (EI-REHN, SREHN), eval semantics, no
// backward, loaded by baselines/ops/highway_infer.py (issue 65). Each step of each sequence:
//     alpha_t = sigmoid(p_a + h W_a,h^T)                                  eq. 14
//     d^r     = the elastic gate of every layer and its depth trace (elastic_gate.h: n, mask)
//     R_b     = max_i n_{b,i}, the sequence's own halting depth (Algorithm 1, decided before any
//               layer runs, as in the methods' ``step``)
// then only the layers r < R_b of that sequence: the sequences that still run layer r are
// gathered into the first rows of the layer buffers (the set only shrinks), so a batch's cost
// follows each sequence's depth, not the batch's deepest; the layers past R_b are exact copies
// in the dense loop (d = 0) and are not run here.
//
// EI-REHN (baselines/ei_rehn.py ``_layers``): layer 1 starts from the learned s^0, g^0, z^0, the
// same for every sequence and step, so its hypernetwork output z^1 and projections P z^1 are
// computed once a call (the dense loop computes them at every step: the same values); from layer
// 2 on the hypernetwork reads s, g and z of the sequence, and every layer reads all of W^0.
// SREHN (baselines/srehn.py, ``_elastic.elastic_layers``): unit i of layer r changes h only where
// d^r_i > 0 (else lerp(h, s, 0) is h exactly), so a layer computes only the rows [s_i; tau_i] of
// those units (weight ``wu`` unit-major: the rows of unit i adjacent), by per-unit dot products,
// or as one matmul where every unit of the layer is needed.
//
// The matmuls are gemm.h's (ATen's mm), tanh and sigmoid of the gate ATen's / libm's, the rest
// plain loops; built with -ffp-contract=off. Equal to the dense loop to float rounding (sums in
// another order), the gate's decisions computed by the same code as the training kernels'.
//
// Layout: p [T, B, 3D] time-major (a step's rows contiguous): [W_a,x x_t + b_a; layer 1's input
// term], that is ``W_x x_t`` for EI-REHN (its bias added in the layer) and ``W x_t + b`` for
// SREHN. Outputs hs, n, mask [B, T, D] and the mean of d^1 over the units, d1 [B, T].
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common.h"        // dot, sigmoid, torch_lerp
#include "elastic_gate.h"  // elastic_gate_forward
#include "gemm.h"          // mm_into

namespace {

// The outputs and the gate's buffers shared by both methods.
struct Outs {
  at::Tensor hs, n, mask, d1;
};

Outs make_outs(const at::Tensor& p, int64_t B, int64_t D) {
  const int64_t T = p.size(0);
  auto o = p.options();
  return {at::empty({B, T, D}, o), at::empty({B, T, D}, o), at::empty({B, T, D}, o),
          at::empty({B, T}, o)};
}

// The decisions of step t for every sequence: alpha_t (into AT), the gate d of every layer
// (DG [B, Rm, D]), n and mask of step t (rows of o.n, o.mask), d1's mean, and each sequence's
// depth R[b]. H [B, D] holds h_{t-1}.
template <typename T>
void decide(int64_t t, const at::Tensor& H, const at::Tensor& rate_t, const T* pt,
            const T* alpha, const T* beta, at::Tensor& AT, at::Tensor& DG, at::Tensor& MG,
            at::Tensor& EG, Outs& o, std::vector<int64_t>& R) {
  const int64_t B = H.size(0), D = H.size(1), Rm = DG.size(1), S = o.hs.size(1);
  mm_into(AT, H, rate_t, false);
  T* a = AT.data_ptr<T>();
  for (int64_t b = 0; b < B; ++b) {
    const T* pa = pt + b * 3 * D;
    T* ar = a + b * D;
#pragma omp simd
    for (int64_t j = 0; j < D; ++j) ar[j] = pa[j] + ar[j];
  }
  at::sigmoid_(AT);  // eq. 14
  T* np = o.n.data_ptr<T>() + t * D;
  T* mp = o.mask.data_ptr<T>() + t * D;
  elastic_gate_forward<T>(alpha, beta, a, DG, MG, EG, np, mp, S * D);
  const T* dg = DG.data_ptr<T>();
  T* d1 = o.d1.data_ptr<T>();
  for (int64_t b = 0; b < B; ++b) {
    const T* nrow = np + b * S * D;
    T m = 0;
    for (int64_t j = 0; j < D; ++j) m = std::max(m, nrow[j]);
    R[b] = static_cast<int64_t>(m);
    T s = 0;
    const T* drow = dg + b * Rm * D;
    for (int64_t j = 0; j < D; ++j) s += drow[j];
    d1[b * S + t] = s / T(D);
  }
}

// Gather the sequences with R[b] > r (in order) into idx; false where none.
bool running(const std::vector<int64_t>& R, int64_t r, std::vector<int64_t>& idx) {
  idx.clear();
  for (int64_t b = 0; b < static_cast<int64_t>(R.size()); ++b)
    if (R[b] > r) idx.push_back(b);
  return !idx.empty();
}

// Keep the rows k of buf whose sequence idx[k] still runs layer r (R > r), moved up in order
// (rows only move up: a forward copy is safe); write the others' h back to the state first.
template <typename T>
void compact(std::vector<int64_t>& idx, const std::vector<int64_t>& R, int64_t r, T* hstate,
             T* hc, int64_t D, std::vector<std::pair<T*, int64_t>> bufs) {
  int64_t n = 0;
  for (int64_t k = 0; k < static_cast<int64_t>(idx.size()); ++k) {
    const int64_t b = idx[k];
    if (R[b] > r) {
      if (n != k) {
        std::memcpy(hc + n * D, hc + k * D, D * sizeof(T));
        for (auto& [p, w] : bufs) std::memcpy(p + n * w, p + k * w, w * sizeof(T));
      }
      idx[n++] = b;
    } else {
      std::memcpy(hstate + b * D, hc + k * D, D * sizeof(T));
    }
  }
  idx.resize(n);
}

// ---------------------------------------------------------------------------------------------
// EI-REHN

template <typename T>
void ei_rehn_run(const at::Tensor& p, const at::Tensor& h0, const at::Tensor& rate_t,
                 const at::Tensor& alpha, const at::Tensor& beta, const at::Tensor& w0_t,
                 const at::Tensor& bias, const at::Tensor& proj_t, const at::Tensor& mix_bias,
                 const at::Tensor& hyper_t, const at::Tensor& hyper_b, const at::Tensor& init,
                 int64_t r_max, Outs& o) {
  const int64_t S = p.size(0), B = p.size(1), D = h0.size(1), Dz = proj_t.size(0);
  const int64_t G = 2 * D + Dz;  // [s, g, z]
  auto opt = p.options();
  at::Tensor H = h0.clone();  // the state h_{t-1} of every sequence
  at::Tensor AT = at::empty({B, D}, opt), DG = at::empty({B, r_max, D}, opt);
  at::Tensor MG = at::empty_like(DG), EG = at::empty_like(DG);
  at::Tensor HC = at::empty({B, D}, opt), SGZ = at::empty({B, G}, opt);
  at::Tensor ACC = at::empty({B, 2 * D}, opt), HW = at::empty({B, 2 * D}, opt);
  at::Tensor ZT = at::empty({B, Dz}, opt), WM = at::empty({B, 4 * D}, opt);
  // Layer 1's hypernetwork from [s^0, g^0, z^0]: the same for every sequence and step.
  at::Tensor z1 = at::tanh(mm_new(init.view({1, G}), hyper_t).add_(hyper_b));  // eq. 18
  at::Tensor wm1 = mm_new(z1, proj_t);  // [1, 4D]: w^1, then Pbar z^1
  const T* z1p = z1.data_ptr<T>();
  const T* wm1p = wm1.data_ptr<T>();
  const T *al = alpha.data_ptr<T>(), *be = beta.data_ptr<T>(), *bi = bias.data_ptr<T>();
  const T *mb = mix_bias.data_ptr<T>(), *hb = hyper_b.data_ptr<T>();
  T *h = H.data_ptr<T>(), *hc = HC.data_ptr<T>(), *sgz = SGZ.data_ptr<T>();
  T *acc = ACC.data_ptr<T>(), *hw = HW.data_ptr<T>(), *zt = ZT.data_ptr<T>();
  T* wm = WM.data_ptr<T>();
  T* hs = o.hs.data_ptr<T>();
  std::vector<int64_t> R(B), idx;
  idx.reserve(B);
  for (int64_t t = 0; t < S; ++t) {
    const T* pt = p.data_ptr<T>() + t * B * 3 * D;
    decide<T>(t, H, rate_t, pt, al, be, AT, DG, MG, EG, o, R);
    const T* dg = DG.data_ptr<T>();
    if (running(R, 0, idx)) {
      for (int64_t k = 0; k < static_cast<int64_t>(idx.size()); ++k)
        std::memcpy(hc + k * D, h + idx[k] * D, D * sizeof(T));
      for (int64_t r = 0; !idx.empty(); ++r) {
        const int64_t n = idx.size();
        at::Tensor hcv = HC.narrow(0, 0, n);
        const T* wmr = wm1p;  // layer 1: the constant projections (row stride 0)
        int64_t wstride = 0;
        if (r > 0) {
          at::Tensor ztv = ZT.narrow(0, 0, n);
          mm_into(ztv, SGZ.narrow(0, 0, n), hyper_t, false);
          for (int64_t k = 0; k < n; ++k)
            for (int64_t j = 0; j < Dz; ++j) zt[k * Dz + j] = hb[j] + zt[k * Dz + j];
          ztv.tanh_();  // eq. 18
          for (int64_t k = 0; k < n; ++k)
            std::memcpy(sgz + k * G + 2 * D, zt + k * Dz, Dz * sizeof(T));
          mm_into(WM.narrow(0, 0, n), ztv, proj_t, false);  // eqs. 19-21
          wmr = wm;
          wstride = 4 * D;
        } else {
          for (int64_t k = 0; k < n; ++k) {
            std::memcpy(sgz + k * G + 2 * D, z1p, Dz * sizeof(T));
            std::fill(acc + k * 2 * D, acc + (k + 1) * 2 * D, T(0));
          }
        }
        mm_into(HW.narrow(0, 0, n), hcv, w0_t, false);  // W^0_B h, both branches
        for (int64_t k = 0; k < n; ++k) {
          const int64_t b = idx[k];
          const T* wk = wmr + k * wstride;
          const T* xp = pt + b * 3 * D + D;
          const T* d = dg + (b * r_max + r) * D;
          T* hk = hc + k * D;
          T* ak = acc + k * 2 * D;
          const T* hwk = hw + k * 2 * D;
          T* sg = sgz + k * G;
          for (int64_t i = 0; i < D; ++i) {
            T v[2];
            for (int64_t br = 0; br < 2; ++br) {
              const int64_t j = br * D + i;
              const T w = wk[j];
              const T gbar = sigmoid(wk[2 * D + j] + mb[j]);  // eqs. 19-21
              const T diag = gbar * ak[j] + (T(1) - gbar) * w;  // eqs. 17, 22
              T a = gbar * hwk[j] + diag * hk[i];
              a = a + bi[j];
              if (r == 0) a = a + xp[j];
              v[br] = a;
              ak[j] = ak[j] + w;  // eq. 17
            }
            const T s = std::tanh(v[0]), g = sigmoid(v[1]);  // eq. 22
            sg[i] = s;
            sg[D + i] = g;
            const T gate = d[i] * g;  // eq. 10
            hk[i] = gate * s + (T(1) - gate) * hk[i];  // eq. 9
          }
        }
        compact<T>(idx, R, r + 1, h, hc, D, {{sgz, G}, {acc, 2 * D}});
      }
    }
    for (int64_t b = 0; b < B; ++b) std::memcpy(hs + (b * S + t) * D, h + b * D, D * sizeof(T));
  }
}

std::vector<at::Tensor> ei_rehn_sequence(at::Tensor p, at::Tensor h0, at::Tensor rate_t,
                                         at::Tensor alpha, at::Tensor beta, at::Tensor w0_t,
                                         at::Tensor bias, at::Tensor proj_t, at::Tensor mix_bias,
                                         at::Tensor hyper_t, at::Tensor hyper_b,
                                         at::Tensor init, int64_t r_max) {
  p = p.contiguous(); h0 = h0.contiguous(); alpha = alpha.contiguous();
  beta = beta.contiguous(); bias = bias.contiguous(); mix_bias = mix_bias.contiguous();
  hyper_b = hyper_b.contiguous(); init = init.contiguous();
  const int64_t B = h0.size(0), D = h0.size(1);
  TORCH_CHECK(p.dim() == 3 && p.size(1) == B && p.size(2) == 3 * D, "p: [T, B, 3D]");
  TORCH_CHECK(r_max >= 1, "r_max >= 1");
  Outs o = make_outs(p, B, D);
  AT_DISPATCH_FLOATING_TYPES(p.scalar_type(), "highway_infer_ei_rehn", [&] {
    ei_rehn_run<scalar_t>(p, h0, rate_t, alpha, beta, w0_t, bias, proj_t, mix_bias, hyper_t,
                          hyper_b, init, r_max, o);
  });
  return {o.hs, o.n, o.mask, o.d1};
}

// ---------------------------------------------------------------------------------------------
// SREHN

template <typename T>
void srehn_run(const at::Tensor& p, const at::Tensor& h0, const at::Tensor& rate_t,
               const at::Tensor& alpha, const at::Tensor& beta, const at::Tensor& wu,
               const at::Tensor& bias, int64_t r_max, Outs& o) {
  const int64_t S = p.size(0), B = p.size(1), D = h0.size(1);
  auto opt = p.options();
  at::Tensor H = h0.clone();
  at::Tensor AT = at::empty({B, D}, opt), DG = at::empty({B, r_max, D}, opt);
  at::Tensor MG = at::empty_like(DG), EG = at::empty_like(DG);
  at::Tensor HC = at::empty({B, D}, opt), A = at::empty({B, 2 * D}, opt);
  at::Tensor wu_t = wu.t();  // [D, 2D]: a matmul gives the unit-major pre-activations
  const T *al = alpha.data_ptr<T>(), *be = beta.data_ptr<T>(), *bi = bias.data_ptr<T>();
  const T* wp = wu.data_ptr<T>();
  T *h = H.data_ptr<T>(), *hc = HC.data_ptr<T>(), *a = A.data_ptr<T>();
  T* hs = o.hs.data_ptr<T>();
  std::vector<int64_t> R(B), idx, units;
  std::vector<char> need(D);
  idx.reserve(B);
  units.reserve(D);
  for (int64_t t = 0; t < S; ++t) {
    const T* pt = p.data_ptr<T>() + t * B * 3 * D;
    decide<T>(t, H, rate_t, pt, al, be, AT, DG, MG, EG, o, R);
    const T* dg = DG.data_ptr<T>();
    if (running(R, 0, idx)) {
      for (int64_t k = 0; k < static_cast<int64_t>(idx.size()); ++k)
        std::memcpy(hc + k * D, h + idx[k] * D, D * sizeof(T));
      for (int64_t r = 0; !idx.empty(); ++r) {
        const int64_t n = idx.size();
        // The units some running sequence updates at this layer (d^r > 0).
        std::fill(need.begin(), need.end(), 0);
        for (int64_t k = 0; k < n; ++k) {
          const T* d = dg + (idx[k] * r_max + r) * D;
          for (int64_t i = 0; i < D; ++i) need[i] |= d[i] > T(0);
        }
        units.clear();
        for (int64_t i = 0; i < D; ++i)
          if (need[i]) units.push_back(i);
        const bool all = static_cast<int64_t>(units.size()) == D;
        if (all) {
          mm_into(A.narrow(0, 0, n), HC.narrow(0, 0, n), wu_t, false);
        } else {
          for (int64_t k = 0; k < n; ++k) {  // only the rows of the units this sequence updates
            const T* d = dg + (idx[k] * r_max + r) * D;
            const T* hk = hc + k * D;
            T* ak = a + k * 2 * D;
            for (int64_t i : units) {
              if (!(d[i] > T(0))) continue;
              ak[2 * i] = dot(wp + 2 * i * D, hk, D);
              ak[2 * i + 1] = dot(wp + (2 * i + 1) * D, hk, D);
            }
          }
        }
        for (int64_t k = 0; k < n; ++k) {
          const int64_t b = idx[k];
          const T* d = dg + (b * r_max + r) * D;
          const T* base = r == 0 ? pt + b * 3 * D + D : bi;  // W x_t + b at layer 1, else b
          T* hk = hc + k * D;
          const T* ak = a + k * 2 * D;
          for (int64_t i : units) {
            if (!(d[i] > T(0))) continue;  // lerp(h, s, 0) is h
            const T s = std::tanh(base[i] + ak[2 * i]);
            const T tau = sigmoid(base[D + i] + ak[2 * i + 1]);
            hk[i] = torch_lerp(hk[i], s, d[i] * tau);  // eqs. 10, 9
          }
        }
        compact<T>(idx, R, r + 1, h, hc, D, {});
      }
    }
    for (int64_t b = 0; b < B; ++b) std::memcpy(hs + (b * S + t) * D, h + b * D, D * sizeof(T));
  }
}

std::vector<at::Tensor> srehn_sequence(at::Tensor p, at::Tensor h0, at::Tensor rate_t,
                                       at::Tensor alpha, at::Tensor beta, at::Tensor wu,
                                       at::Tensor bias, int64_t r_max) {
  p = p.contiguous(); h0 = h0.contiguous(); alpha = alpha.contiguous();
  beta = beta.contiguous(); wu = wu.contiguous(); bias = bias.contiguous();
  const int64_t B = h0.size(0), D = h0.size(1);
  TORCH_CHECK(p.dim() == 3 && p.size(1) == B && p.size(2) == 3 * D, "p: [T, B, 3D]");
  TORCH_CHECK(wu.dim() == 2 && wu.size(0) == 2 * D && wu.size(1) == D, "wu: [2D, D]");
  TORCH_CHECK(r_max >= 1, "r_max >= 1");
  Outs o = make_outs(p, B, D);
  AT_DISPATCH_FLOATING_TYPES(p.scalar_type(), "highway_infer_srehn", [&] {
    srehn_run<scalar_t>(p, h0, rate_t, alpha, beta, wu, bias, r_max, o);
  });
  return {o.hs, o.n, o.mask, o.d1};
}

}  // namespace

// The ops (csrc/ops.cpp): each method's whole eval sequence, {hs, n, mask, d1 mean}.
TORCH_LIBRARY_FRAGMENT(condrnn, m) {
  m.def("highway_infer_ei_rehn(Tensor p, Tensor h0, Tensor rate_t, Tensor alpha, Tensor beta,"
        " Tensor w0_t, Tensor bias, Tensor proj_t, Tensor mix_bias, Tensor hyper_t,"
        " Tensor hyper_b, Tensor init, int r_max) -> Tensor[]");
  m.def("highway_infer_srehn(Tensor p, Tensor h0, Tensor rate_t, Tensor alpha, Tensor beta,"
        " Tensor wu, Tensor bias, int r_max) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(condrnn, CPU, m) {
  m.impl("highway_infer_ei_rehn", TORCH_FN(ei_rehn_sequence));
  m.impl("highway_infer_srehn", TORCH_FN(srehn_sequence));
}
