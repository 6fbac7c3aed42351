// Skip RNN's training sequence (Skip-GRU, baselines/skip_rnn.py), forward and backward, loaded by
// baselines/ops/skip_gru.py (``skip_gru_kernel``). Step t of ``SkipRNN._step`` from the state
// (h_{t-1}, h~_{t-1}, u_{t-1}, P_{t-2}, C_{t-1}):
//     p   = sigmoid(w_p . h~_{t-1} + b_p)            p_{t-1}, from the step before's candidate
//     P   = lerp(P_{t-2}, p, u_{t-1})                 P_{t-1}
//     u~  = C_{t-1} + min(P, 1 - C_{t-1})             TF's Minimum: the gradient to P at a tie
//     u   = round(u~)                                 half to even; straight-through: du/du~ = 1
//     h~  = GRU(x_t, h_{t-1})                         every step, also where u = 0 (the STE
//                                                     gradient of u reads h~ - h_{t-1})
//     h_t = lerp(h_{t-1}, h~, u);  C_t = (1 - u) u~;  mask_t = u for every unit
// with the GRU reset after the matmul (``gru_step_lean``: n = tanh(x_n + r (W_n h)),
// h~ = lerp(n, h, z)) or before it (``gru_step_before``: n = tanh(x_n + W_n (r h)),
// h~ = (1 - z) n + z h). ``backward`` writes out the gradient of that graph, the one autograd
// takes through the per-step PyTorch code (the reference): of the input terms xp, the initial
// state (h, h~, u, P, C), W_hh, w_p and b_p, from the gradients of the outputs h_t, the mask
// (u's STE gradient, summed over the units) and the final state's h~_T, P_{T-1} and C_T.
// The matmuls are gemm.h's (ATen's; one per step each way, and
// W_hh's gradient one matmul over all steps),
// tanh and sigmoid of the GRU ATen's vectorised ones on whole [B, .] buffers, every other
// elementwise part a plain loop over the B x D units or the B sequences; lerp rounds as torch's
// scalar lerp (an exact copy where u is 0 or 1). Built with -ffp-contract=off: equal to the
// PyTorch path to float rounding (p's dot product is summed in another order than F.linear's),
// not bit for bit.
//
// Layout: xp and its gradient time-major [T, B, 3D]; the outputs hs and mask batch-major
// [B, T, D], as the method holds them. What only the backward reads is time-major: H [T + 1, B, D]
// the states h_0 .. h_T, N [T + 1, B, D] the candidates h~_0 .. h~_T, A [T, B, 3D] the gate
// activations r, z, n, X [T, B, D] the GRU's W_n h (after) or r h (before), and Z [T, B, 5] the
// per-sequence scalars p, P, C_{t-1}, u~, u of every step.
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>
#include "common.h"  // torch_lerp, sigmoid, dot
#include "gemm.h"  // mm_into, addmm_into, mm_new: the matmuls
#include <cmath>
#include <vector>

namespace {

enum Form : int64_t { AFTER = 0, BEFORE = 1 };
enum Slot : int64_t { SP = 0, SUP = 1, SCUM = 2, SUT = 3, SU = 4, NZ = 5 };  // Z's columns

template <typename T, int64_t form>
std::vector<at::Tensor> forward(const at::Tensor& xp, const at::Tensor& h0, const at::Tensor& n0,
                                const at::Tensor& u0, const at::Tensor& up0, const at::Tensor& c0,
                                const at::Tensor& weight, const at::Tensor& w_p,
                                const at::Tensor& b_p) {
  const int64_t S = xp.size(0), B = xp.size(1), GD = xp.size(2), D = h0.size(1);
  const auto opts = xp.options();
  at::Tensor H = at::empty({S + 1, B, D}, opts), N = at::empty({S + 1, B, D}, opts);
  at::Tensor A = at::empty({S, B, GD}, opts), X = at::empty({S, B, D}, opts);
  at::Tensor Z = at::empty({S, B, NZ}, opts), mask = at::empty({B, S, D}, opts);
  at::Tensor up = up0.clone(), cum = c0.clone();  // P and C as the steps go
  at::Tensor hp = at::empty({B, form == AFTER ? GD : 2 * D}, opts);
  at::Tensor hn = form == BEFORE ? at::empty({B, D}, opts) : at::Tensor();
  H.select(0, 0).copy_(h0);
  N.select(0, 0).copy_(n0);
  const auto wt = weight.t().contiguous();
  const auto w_rz = weight.narrow(0, 0, 2 * D).t().contiguous();
  const auto w_n = weight.narrow(0, 2 * D, D).t().contiguous();
  const T* xpp = xp.data_ptr<T>();
  const T* wpp = w_p.data_ptr<T>();
  const T bp = b_p.data_ptr<T>()[0];
  const T* u0p = u0.data_ptr<T>();
  T* upp = up.data_ptr<T>();
  T* cp = cum.data_ptr<T>();
  T* mp = mask.data_ptr<T>();
  for (int64_t t = 0; t < S; ++t) {
    at::Tensor h = H.select(0, t), a = A.select(0, t), x_t = X.select(0, t);
    const T* hrow0 = h.data_ptr<T>();
    const T* nprev = N.select(0, t).data_ptr<T>();
    T* z = Z.select(0, t).data_ptr<T>();
    const T* uprev = t == 0 ? u0p : Z.select(0, t - 1).data_ptr<T>() + SU;
    const int64_t ustride = t == 0 ? 1 : NZ;
    for (int64_t b = 0; b < B; ++b) {  // the gate: scalars per sequence
      const T p = sigmoid(dot(wpp, nprev + b * D, D) + bp);
      const T P = torch_lerp(upp[b], p, uprev[b * ustride]);
      const T C = cp[b], om = T(1) - C;
      const T ut = C + (P <= om ? P : om);
      const T u = std::nearbyint(ut);
      T* zb = z + b * NZ;
      zb[SP] = p, zb[SUP] = P, zb[SCUM] = C, zb[SUT] = ut, zb[SU] = u;
      upp[b] = P;
      cp[b] = (T(1) - u) * ut;
    }
    // the candidate h~_t of every sequence
    const T* hpp = hp.data_ptr<T>();
    const int64_t hw = hp.size(1);
    T* ap = a.data_ptr<T>();
    T* xs = x_t.data_ptr<T>();
    mm_into(hp, h, form == AFTER ? wt : w_rz, false);
    for (int64_t b = 0; b < B; ++b) {
      const T* x = xpp + (t * B + b) * GD;
#pragma omp simd
      for (int64_t c = 0; c < 2 * D; ++c) ap[b * GD + c] = x[c] + hpp[b * hw + c];
    }
    a.narrow(1, 0, 2 * D).sigmoid_();
    if (form == BEFORE) {  // r h, then its matmul
      for (int64_t b = 0; b < B; ++b) {
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) xs[b * D + j] = ap[b * GD + j] * hrow0[b * D + j];
      }
      mm_into(hn, x_t, w_n, false);
    }
    const T* hnp = form == BEFORE ? hn.data_ptr<T>() : hpp + 2 * D;
    const int64_t hns = form == BEFORE ? D : GD;
    for (int64_t b = 0; b < B; ++b) {
      const T* x = xpp + (t * B + b) * GD + 2 * D;
      const T* r = ap + b * GD;
      const T* w = hnp + b * hns;
      T* n = ap + b * GD + 2 * D;
      if (form == AFTER) {
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) {
          xs[b * D + j] = w[j];
          n[j] = x[j] + r[j] * w[j];
        }
      } else {
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) n[j] = x[j] + w[j];
      }
    }
    a.narrow(1, 2 * D, D).tanh_();
    T* hn0 = H.select(0, t + 1).data_ptr<T>();
    T* nn0 = N.select(0, t + 1).data_ptr<T>();
    for (int64_t b = 0; b < B; ++b) {
      const T* g = ap + b * GD;
      const T* hrow = hrow0 + b * D;
      const T u = z[b * NZ + SU];
      T* hnew = hn0 + b * D;
      T* cand = nn0 + b * D;
      T* mrow = mp + (b * S + t) * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const T n = g[2 * D + j], zg = g[D + j];
        const T c = form == AFTER ? torch_lerp(n, hrow[j], zg) : (T(1) - zg) * n + zg * hrow[j];
        cand[j] = c;
        hnew[j] = torch_lerp(hrow[j], c, u);
        mrow[j] = u;
      }
    }
  }
  at::Tensor hs = H.narrow(0, 1, S).transpose(0, 1).contiguous();
  return {hs, mask, N.select(0, S).clone(), up, cum, H, N, A, X, Z};
}

template <typename T, int64_t form>
std::vector<at::Tensor> backward(const at::Tensor& grad_hs, const at::Tensor& grad_mask,
                                 const at::Tensor& grad_n, const at::Tensor& grad_up,
                                 const at::Tensor& grad_cum, const at::Tensor& u0,
                                 const at::Tensor& up0, const at::Tensor& weight,
                                 const at::Tensor& w_p, const at::Tensor& H, const at::Tensor& N,
                                 const at::Tensor& A, const at::Tensor& X, const at::Tensor& Z) {
  const int64_t S = A.size(0), B = A.size(1), GD = A.size(2), D = H.size(2);
  const auto opts = A.options();
  at::Tensor DX = at::empty({S, B, GD}, opts);  // the gradient of the pre-activations, xp's
  at::Tensor DH = form == AFTER ? at::empty({S, B, GD}, opts) : at::Tensor();  // W h's (n differs)
  at::Tensor ds = form == BEFORE ? at::empty({B, D}, opts) : at::Tensor();  // (r h)'s
  // The adjoints of the state after step t, (h_t, h~_t, u_t, P_{t-1}, C_t), from the steps after
  // it and the final state's gradients; the loop turns them into those of the state before it.
  at::Tensor dh = at::zeros({B, D}, opts), base = at::empty({B, D}, opts);
  at::Tensor dn = grad_n.clone(), dn_prev = at::empty({B, D}, opts);
  at::Tensor du = at::zeros_like(u0), dup = grad_up.clone(), dcum = grad_cum.clone();
  at::Tensor dw_p = at::zeros_like(w_p);
  const T* gp = grad_hs.data_ptr<T>();
  const T* gm = grad_mask.data_ptr<T>();
  const T* wpp = w_p.data_ptr<T>();
  const T* u0p = u0.data_ptr<T>();
  const T* up0p = up0.data_ptr<T>();
  T* basep = base.data_ptr<T>();
  T* dup_ = dup.data_ptr<T>();
  T* dcp = dcum.data_ptr<T>();
  T* dup0 = du.data_ptr<T>();
  T* dwp = dw_p.data_ptr<T>();
  T db = 0;
  for (int64_t t = S - 1; t >= 0; --t) {
    const T* ap = A.select(0, t).data_ptr<T>();
    const T* hp = H.select(0, t).data_ptr<T>();
    const T* cand0 = N.select(0, t + 1).data_ptr<T>();
    const T* nprev0 = N.select(0, t).data_ptr<T>();
    const T* xs = X.select(0, t).data_ptr<T>();
    const T* z = Z.select(0, t).data_ptr<T>();
    const T* zprev = t == 0 ? nullptr : Z.select(0, t - 1).data_ptr<T>();
    const T* dhp = dh.data_ptr<T>();
    const T* dnp = dn.data_ptr<T>();
    T* dnq = dn_prev.data_ptr<T>();
    T* da = DX.data_ptr<T>() + t * B * GD;
    T* dw = form == AFTER ? DH.data_ptr<T>() + t * B * GD : nullptr;
    for (int64_t b = 0; b < B; ++b) {
      const T* g = ap + b * GD;
      const T* hrow = hp + b * D;
      const T* cand = cand0 + b * D;
      const T* go = gp + (b * S + t) * D;
      const T* gmr = gm + (b * S + t) * D;
      const T* zb = z + b * NZ;
      const T u = zb[SU], ut = zb[SUT], C = zb[SCUM], P = zb[SUP], p = zb[SP];
      T* dab = da + b * GD;
      T gh = 0, gmask = 0;
#pragma omp simd reduction(+ : gh, gmask)
      for (int64_t j = 0; j < D; ++j) {
        const int64_t i = b * D + j;
        const T dht = go[j] + dhp[i], hprev = hrow[j];
        gmask += gmr[j];  // the mask is u for every unit
        gh += dht * (cand[j] - hprev);  // h_t = lerp(h_{t-1}, h~, u): u's gradient
        const T dcand = dht * u + dnp[i];
        const T r = g[j], zg = g[D + j], n = g[2 * D + j];
        const T dnn = dcand * (T(1) - zg);
        const T dz = form == AFTER ? dcand * (hprev - n) : dcand * hprev - dcand * n;
        const T dnpre = dnn * (T(1) - n * n);
        dab[D + j] = dz * (T(1) - zg) * zg;
        dab[2 * D + j] = dnpre;
        if (form == AFTER) {
          const T dr = dnpre * xs[i];
          dab[j] = dr * (T(1) - r) * r;
          dw[b * GD + j] = dab[j];
          dw[b * GD + D + j] = dab[D + j];
          dw[b * GD + 2 * D + j] = dnpre * r;
        }
        basep[i] = dht * (T(1) - u) + dcand * zg;  // h_{t-1}'s gradient but through the matmuls
      }
      // C_t = (1 - u) u~; u = round(u~) with the straight-through gradient
      const T dC = dcp[b];
      const T gu = dup0[b] + gmask + gh - dC * ut;
      const T gut = dC * (T(1) - u) + gu;
      // u~ = C_{t-1} + min(P, 1 - C_{t-1}), the gradient to P at a tie
      const bool sel = P <= T(1) - C;
      const T gP = dup_[b] + (sel ? gut : T(0));
      dcp[b] = sel ? gut : gut - gut;
      // P = lerp(P_{t-2}, p, u_{t-1}); p = sigmoid(w_p . h~_{t-1} + b_p)
      const T uprev = t == 0 ? u0p[b] : zprev[b * NZ + SU];
      const T Pp = t == 0 ? up0p[b] : zprev[b * NZ + SUP];
      dup_[b] = gP * (T(1) - uprev);
      dup0[b] = gP * (p - Pp);
      const T dav = gP * uprev * (T(1) - p) * p;
      const T* nprev = nprev0 + b * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        dnq[b * D + j] = dav * wpp[j];
        dwp[j] += dav * nprev[j];
      }
      db += dav;
    }
    if (form == AFTER) {
      addmm_into(dh, base, DH.select(0, t), weight);  // dh_{t-1} = direct + dA W
    } else {  // n's matmul reads r h: its gradient first, then r's
      const auto dx_t = DX.select(0, t);
      mm_into(ds, dx_t.narrow(1, 2 * D, D), weight.narrow(0, 2 * D, D), false);
      const T* dsp = ds.data_ptr<T>();
      for (int64_t b = 0; b < B; ++b) {
        const T* g = ap + b * GD;
        const T* hrow = hp + b * D;
        T* dab = da + b * GD;
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) {
          const T r = g[j], d = dsp[b * D + j];
          dab[j] = d * hrow[j] * (T(1) - r) * r;
          basep[b * D + j] = basep[b * D + j] + d * r;
        }
      }
      addmm_into(dh, base, dx_t.narrow(1, 0, 2 * D), weight.narrow(0, 0, 2 * D));
    }
    std::swap(dn, dn_prev);
  }
  // W_hh's gradient, one matmul over all steps: dA^T h_{t-1} (and, before, dA_n^T (r h))
  const auto hprev = H.narrow(0, 0, S).reshape({S * B, D});
  at::Tensor dweight;
  if (form == AFTER) {
    dweight = mm_new(DH.view({S * B, GD}).t(), hprev);
  } else {
    const auto dx = DX.view({S * B, GD});
    dweight = at::cat({mm_new(dx.narrow(1, 0, 2 * D).t(), hprev),
                       mm_new(dx.narrow(1, 2 * D, D).t(), X.view({S * B, D}))});
  }
  at::Tensor db_p = at::full({1}, db, opts);
  return {DX, dh, dn, du, dup, dcum, dweight, dw_p, db_p};
}

std::vector<at::Tensor> sequence_forward(const at::Tensor& xp, const at::Tensor& h0,
                                         const at::Tensor& n0, const at::Tensor& u0,
                                         const at::Tensor& up0, const at::Tensor& c0,
                                         const at::Tensor& weight, const at::Tensor& w_p,
                                         const at::Tensor& b_p, int64_t form) {
  for (const auto* t : {&xp, &h0, &n0, &u0, &up0, &c0, &weight, &w_p, &b_p})
    TORCH_CHECK(t->is_contiguous() && t->scalar_type() == xp.scalar_type(), "contiguous, one dtype");
  TORCH_CHECK(xp.dim() == 3 && xp.size(2) == 3 * h0.size(1), "xp [T, B, 3D]");
  TORCH_CHECK(h0.size(0) == xp.size(1) && u0.numel() == xp.size(1), "h0 [B, D], u0 [B, 1]");
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(xp.scalar_type(), "skip_gru_forward", [&] {
    if (form == AFTER) out = forward<scalar_t, AFTER>(xp, h0, n0, u0, up0, c0, weight, w_p, b_p);
    else out = forward<scalar_t, BEFORE>(xp, h0, n0, u0, up0, c0, weight, w_p, b_p);
  });
  return out;
}

std::vector<at::Tensor> sequence_backward(const at::Tensor& grad_hs, const at::Tensor& grad_mask,
                                          const at::Tensor& grad_n, const at::Tensor& grad_up,
                                          const at::Tensor& grad_cum, const at::Tensor& u0,
                                          const at::Tensor& up0, const at::Tensor& weight,
                                          const at::Tensor& w_p, const at::Tensor& H,
                                          const at::Tensor& N, const at::Tensor& A,
                                          const at::Tensor& X, const at::Tensor& Z, int64_t form) {
  for (const auto* t : {&grad_hs, &grad_mask, &grad_n, &grad_up, &grad_cum})
    TORCH_CHECK(t->is_contiguous(), "contiguous gradients");
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(grad_hs.scalar_type(), "skip_gru_backward", [&] {
    if (form == AFTER)
      out = backward<scalar_t, AFTER>(grad_hs, grad_mask, grad_n, grad_up, grad_cum, u0, up0,
                                      weight, w_p, H, N, A, X, Z);
    else
      out = backward<scalar_t, BEFORE>(grad_hs, grad_mask, grad_n, grad_up, grad_cum, u0, up0,
                                       weight, w_p, H, N, A, X, Z);
  });
  return out;
}

}  // namespace

// The ops (csrc/ops.cpp): Skip-GRU, whole sequence: hs, mask, h~_T, P, C, saved; its gradients:
// xp, h, h~, u, P, C, W_hh, w_p, b_p.
TORCH_LIBRARY_FRAGMENT(condrnn, m) {
  m.def("skip_gru_forward(Tensor xp, Tensor h0, Tensor n0, Tensor u0, Tensor up0, Tensor c0,"
        " Tensor weight, Tensor w_p, Tensor b_p, int form) -> Tensor[]");
  m.def("skip_gru_backward(Tensor grad_hs, Tensor grad_mask, Tensor grad_n, Tensor grad_up,"
        " Tensor grad_cum, Tensor u0, Tensor up0, Tensor weight, Tensor w_p, Tensor H, Tensor N,"
        " Tensor A, Tensor X, Tensor Z, int form) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(condrnn, CPU, m) {
  m.impl("skip_gru_forward", TORCH_FN(sequence_forward));
  m.impl("skip_gru_backward", TORCH_FN(sequence_backward));
}
