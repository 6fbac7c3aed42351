// SREHN's training forward over a whole sequence, forward and backward, loaded by
// baselines/ops/srehn.py (``srehn_kernel``), which SREHN's training runs (baselines/srehn.py). Each
// step
// is SREHN's ``_step`` at the fixed depth R = r_max (``adaptive=False``, the sequence forward's
// path, the reference):
//     alpha_t = sigmoid(p_a + h W_a,h^T)                                   eq. 14
//     d^r     = the elastic gate of every layer (baselines/_elastic.py ``_gate``), its depth trace
//               n = #{r : d^r > 0} and mask 1[n > 0]                       eq. 11
//     [s; tau] = [tanh; sigmoid]((r = 1 ? p_x : b) + h^{r-1} W^T)          (W x + b with layer 1)
//     h^r = lerp(h^{r-1}, s, d^r * tau)                                    eqs. 10, 9
// for r = 1..R, from the step's input terms p_t = [W_a,x x_t + b_a; W x_t + b] (computed for every
// step before, ``SREHN._input_terms``). The layers past the batch's depth are run too, as on the
// per-step path (exact copies of h: d = 0), so the two run the same layers.
//
// The backward writes out what autograd computes for those ops (``_ElasticGate.backward`` for the
// gate, torch's derivatives of addmm, tanh, sigmoid, mul and lerp): the gradients of p, h_0, W_a,h,
// alpha, beta, W and b, from those of every h_t and of d^1 (the compute penalty reads it). The
// matmuls are gemm.h's ``mm_into`` (ATen's mm; one per layer
// and step each way, its input terms or bias added in the loop that follows; the weight
// gradients one matmul over every layer of every step), tanh,
// sigmoid and the gate's expm1, log and exp ATen's vectorised ones on whole buffers; every other
// elementwise part a plain loop over the B x D units. Built with -ffp-contract=off, so each product
// and sum rounds on its own (torch's vectorised lerp fuses a multiply-add, addmm may add its input
// in another order, and the sums of the weight gradients run in another order): equal to the
// per-step path to float rounding, not bit for bit.
//
// Layout: p and its gradient [B, T, 3D], and the outputs hs, d^1, n, mask [B, T, D], batch-major
// as the method holds them (a step's rows strided). What only the backward reads: AT [T, B, D]
// (alpha_t), DG, MG, EG [T, B, R, D] (the gate's d, m = 1 - e^{-u} and e^q, as in ``_gate``),
// HIN [R, T, B, D] (every layer's input h^{r-1}; HIN[0] = h_{t-1}) and SA [R, T, 2, B, D] (s, tau).
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>
#include "common.h"  // torch_lerp
#include "gemm.h"  // mm_into, mm_new: the matmuls
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "elastic_gate.h"  // elastic_gate_forward, elastic_gate_backward

namespace {

// The forward of every step. The matmuls read fixed [B, .] buffers (hcur, the current h; a)
// and the loops write what the backward reads into its place by pointer: a tensor view per
// layer and step costs more than the layer's elementwise work at the paper sizes. The input
// terms and biases are added in the loops rather than by addmm (which copies them into its
// output first): the same sums, rounded once.
template <typename T>
void forward(const at::Tensor& p, const at::Tensor& h0, const at::Tensor& rate_h,
             const at::Tensor& alpha, const at::Tensor& beta, const at::Tensor& weight,
             const at::Tensor& bias, at::Tensor& hs, at::Tensor& d1, at::Tensor& n,
             at::Tensor& mask, at::Tensor& AT, at::Tensor& DG, at::Tensor& MG, at::Tensor& EG,
             at::Tensor& HIN, at::Tensor& SA) {
  const int64_t B = p.size(0), S = p.size(1), D = h0.size(1), Rm = DG.size(2);
  const int64_t D2 = 2 * D, BD = B * D, P3 = 3 * D;
  const auto rate_t = rate_h.t().contiguous(), w_t = weight.t().contiguous();
  const auto opts = h0.options();
  at::Tensor hcur = h0.clone(), a = at::empty({B, D2}, opts), ar = at::empty({B, D}, opts);
  at::Tensor sb = at::empty({B, D}, opts), tb = at::empty({B, D}, opts);
  const T* ap = alpha.data_ptr<T>();
  const T* bp = beta.data_ptr<T>();
  const T* pp = p.data_ptr<T>();
  const T* biasp = bias.data_ptr<T>();
  const T* arp = ar.data_ptr<T>();
  const T* aap = a.data_ptr<T>();
  T* hcp = hcur.data_ptr<T>();
  T* sp = sb.data_ptr<T>();
  T* tp = tb.data_ptr<T>();
  T* hsp = hs.data_ptr<T>();
  T* d1p = d1.data_ptr<T>();
  T* atp0 = AT.data_ptr<T>();
  T* hinp = HIN.data_ptr<T>();
  T* sap = SA.data_ptr<T>();
  std::copy(hcp, hcp + BD, hinp);  // HIN[0][0] = h_0
  for (int64_t t = 0; t < S; ++t) {
    const T* pt = pp + t * P3;  // row b at b * S * 3D
    mm_into(ar, hcur, rate_t, false);
    T* atp = atp0 + t * BD;
    for (int64_t b = 0; b < B; ++b) {
      const T* prow = pt + b * S * P3;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) atp[b * D + j] = prow[j] + arp[b * D + j];
    }
    at::Tensor at_ = AT.select(0, t), dg = DG.select(0, t);
    at::sigmoid_(at_);  // eq. 14
    at::Tensor mg = MG.select(0, t), eg = EG.select(0, t);
    elastic_gate_forward<T>(ap, bp, atp, dg, mg, eg, n.data_ptr<T>() + t * D,
                            mask.data_ptr<T>() + t * D, S * D);
    const T* dgp = dg.data_ptr<T>();
    for (int64_t b = 0; b < B; ++b)
      std::copy(dgp + b * Rm * D, dgp + b * Rm * D + D, d1p + (b * S + t) * D);
    for (int64_t r = 0; r < Rm; ++r) {
      mm_into(a, hcur, w_t, false);
      // s and tau, with layer 1's input terms or the bias, into buffers of their own: ATen's
      // tanh and sigmoid are several times slower on the strided halves of a
      const T* base = r == 0 ? pt + D : biasp;
      const int64_t base_row = r == 0 ? S * P3 : 0;
      for (int64_t b = 0; b < B; ++b) {
        const T* brow = base + b * base_row;
        const T* arow = aap + b * D2;
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) {
          sp[b * D + j] = brow[j] + arow[j];
          tp[b * D + j] = brow[D + j] + arow[D + j];
        }
      }
      sb.tanh_();  // s
      tb.sigmoid_();  // tau
      // h^r = lerp(h^{r-1}, s, d^r tau) into hcur and where the backward reads it: the next
      // layer's input, or h_t (and the next step's input)
      const bool last = r + 1 == Rm;
      T* ssave = sap + (r * S + t) * 2 * BD;  // SA[r][t] = [s; tau]
      T* next = last ? (t + 1 < S ? hinp + (t + 1) * BD : nullptr)
                     : hinp + ((r + 1) * S + t) * BD;
      for (int64_t b = 0; b < B; ++b) {
        const T* drow = dgp + (b * Rm + r) * D;
        T* hrow = hcp + b * D;
        T* srow = ssave + b * D;
        T* trow = ssave + BD + b * D;
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) {
          const T s = sp[b * D + j], tau = tp[b * D + j];
          srow[j] = s;
          trow[j] = tau;
          hrow[j] = torch_lerp(hrow[j], s, drow[j] * tau);  // eqs. 10, 9
        }
        if (next != nullptr) std::copy(hrow, hrow + D, next + b * D);
        if (last) std::copy(hrow, hrow + D, hsp + (b * S + t) * D);
      }
    }
  }
}

// The gradients of p, h0, rate_h, alpha, beta, weight and bias (bias's has no elements, shape
// [0], where R = 1: the per-step path's layer 1 takes its bias with p) from those of hs and d^1
// (each may be undefined: none). As the forward, the matmuls work on fixed buffers (gh, gm, da,
// dpre) and the
// loops read and write the saved tensors by pointer.
template <typename T>
std::vector<at::Tensor> backward(const at::Tensor& grad_hs, const at::Tensor& grad_d1,
                                 const at::Tensor& rate_h, const at::Tensor& weight,
                                 const at::Tensor& AT, const at::Tensor& DG, const at::Tensor& MG,
                                 const at::Tensor& EG, const at::Tensor& HIN,
                                 const at::Tensor& SA) {
  const int64_t S = AT.size(0), B = AT.size(1), D = AT.size(2), Rm = DG.size(2);
  const int64_t D2 = 2 * D, BD = B * D, G1 = B * Rm * D;
  const auto opts = AT.options();
  at::Tensor dp = at::empty({B, S, 3 * D}, opts), DA = at::empty({Rm, S, B, D2}, opts);
  at::Tensor DPRE = at::empty({S, B, D}, opts), G = at::empty({B, Rm, D}, opts);
  at::Tensor dalpha = at::zeros({D}, opts), dbeta = at::zeros({D}, opts);
  at::Tensor dat = at::empty({B, D}, opts), base = at::empty({B, D}, opts);
  at::Tensor gh = at::zeros({B, D}, opts), gm = at::empty({B, D}, opts);  // dL/dh^r; da W
  at::Tensor da = at::empty({B, D2}, opts), dpre = at::empty({B, D}, opts);
  const bool has_h = grad_hs.defined(), has_d1 = grad_d1.defined();
  const T* ghs = has_h ? grad_hs.data_ptr<T>() : nullptr;
  const T* gd1 = has_d1 ? grad_d1.data_ptr<T>() : nullptr;
  const T* hinp = HIN.data_ptr<T>();
  const T* sap = SA.data_ptr<T>();
  const T* dg0 = DG.data_ptr<T>();
  const T* mg0 = MG.data_ptr<T>();
  const T* eg0 = EG.data_ptr<T>();
  const T* at0 = AT.data_ptr<T>();
  const T* gmp = gm.data_ptr<T>();
  T* dpp = dp.data_ptr<T>();
  T* gp = G.data_ptr<T>();
  T* basep = base.data_ptr<T>();
  T* g = gh.data_ptr<T>();
  T* dap = da.data_ptr<T>();
  T* DAp = DA.data_ptr<T>();
  T* prep = dpre.data_ptr<T>();
  T* PREp = DPRE.data_ptr<T>();
  T* datp = dat.data_ptr<T>();
  for (int64_t t = S - 1; t >= 0; --t) {
    if (has_h) {  // h_t's own gradient plus what step t + 1 sent back
      for (int64_t b = 0; b < B; ++b) {
        const T* grow = ghs + (b * S + t) * D;
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) g[b * D + j] += grow[j];
      }
    }
    const T* dgp = dg0 + t * G1;
    for (int64_t r = Rm - 1; r >= 0; --r) {
      const T* hp = hinp + (r * S + t) * BD;
      const T* sp = sap + (r * S + t) * 2 * BD;  // s; tau B D further
      T* dsave = DAp + (r * S + t) * B * D2;
      for (int64_t b = 0; b < B; ++b) {
        const T* hrow = hp + b * D;
        const T* srow = sp + b * D;
        const T* trow = sp + BD + b * D;
        const T* drow = dgp + (b * Rm + r) * D;
        const T* grow = g + b * D;
        T* darow = dap + b * D2;
        T* Grow = gp + (b * Rm + r) * D;
        T* baserow = basep + b * D;
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) {
          const T s = srow[j], tau = trow[j], d = drow[j], gj = grow[j];
          const T gate = d * tau;
          const T gw = gj * (s - hrow[j]);  // lerp's weight
          baserow[j] = gj * (T(1) - gate);  // lerp's start
          Grow[j] = gw * tau;  // d^r
          darow[j] = (gj * gate) * (T(1) - s * s);  // lerp's end, tanh
          darow[D + j] = (gw * d) * (T(1) - tau) * tau;  // sigmoid
        }
        std::copy(darow, darow + D2, dsave + b * D2);
      }
      mm_into(gm, da, weight, false);  // da W
#pragma omp simd
      for (int64_t i = 0; i < BD; ++i) g[i] = basep[i] + gmp[i];
    }
    if (has_d1) {
      for (int64_t b = 0; b < B; ++b) {
        const T* grow = gd1 + (b * S + t) * D;
        T* Grow = gp + b * Rm * D;
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) Grow[j] += grow[j];
      }
    }
    elastic_gate_backward<T>(gp, Rm, dgp, mg0 + t * G1, eg0 + t * G1, B, Rm, D,
                             dalpha.data_ptr<T>(), dbeta.data_ptr<T>(), datp);
    // eq. 14's sigmoid backward as ATen's, grad (1 - y) y; p's gradient for this step
    const T* atp = at0 + t * BD;
    const T* da0 = DAp + t * B * D2;  // layer 1's
    for (int64_t b = 0; b < B; ++b) {
      T* dprow = dpp + (b * S + t) * 3 * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const T y = atp[b * D + j];
        const T v = datp[b * D + j] * (T(1) - y) * y;
        prep[b * D + j] = v;
        dprow[j] = v;
      }
      std::copy(da0 + b * D2, da0 + (b + 1) * D2, dprow + D);
    }
    std::copy(prep, prep + BD, PREp + t * BD);
    mm_into(gh, dpre, rate_h, true);  // dh_{t-1} += dpre W_a,h
  }
  const int64_t N = Rm * S * B;
  return {
      dp,
      gh,
      mm_new(DPRE.view({S * B, D}).t(), HIN.select(0, 0).view({S * B, D})),
      dalpha,
      dbeta,
      mm_new(DA.view({N, D2}).t(), HIN.view({N, D})),
      Rm > 1 ? DA.narrow(0, 1, Rm - 1).reshape({(Rm - 1) * S * B, D2}).sum(0)
             : at::empty({0}, DA.options()),
  };
}

void check(const at::Tensor& t, const at::Tensor& ref, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == ref.scalar_type() && t.is_contiguous(),
              "srehn: ", name, " must be a contiguous CPU tensor of p's dtype");
}

}  // namespace

// The T steps of SREHN's training forward at depth r_max: {hs, d^1, n, mask [B, T, D]} and what
// the backward reads: {AT, DG, MG, EG, HIN, SA}.
std::vector<at::Tensor> srehn_forward(at::Tensor p, at::Tensor h0, at::Tensor rate_h,
                                      at::Tensor alpha, at::Tensor beta, at::Tensor weight,
                                      at::Tensor bias, int64_t r_max) {
  const std::vector<std::pair<const at::Tensor*, const char*>> args = {
      {&p, "p"},         {&h0, "h0"},        {&rate_h, "rate_h"}, {&alpha, "alpha"},
      {&beta, "beta"},   {&weight, "weight"}, {&bias, "bias"}};
  for (const auto& [t, name] : args) check(*t, p, name);
  TORCH_CHECK(p.dim() == 3 && p.size(1) >= 1 && h0.dim() == 2, "srehn: p must be [B, T >= 1, 3D]");
  const int64_t B = p.size(0), S = p.size(1), D = h0.size(1);
  TORCH_CHECK(r_max >= 1 && h0.size(0) == B && p.size(2) == 3 * D &&
                  rate_h.sizes() == at::IntArrayRef({D, D}) && alpha.numel() == D &&
                  beta.numel() == D && weight.sizes() == at::IntArrayRef({2 * D, D}) &&
                  bias.numel() == 2 * D,
              "srehn_forward: inconsistent shapes");
  const auto opts = p.options();
  at::Tensor hs = at::empty({B, S, D}, opts), d1 = at::empty_like(hs);
  at::Tensor n = at::empty_like(hs), mask = at::empty_like(hs);
  at::Tensor AT = at::empty({S, B, D}, opts), DG = at::empty({S, B, r_max, D}, opts);
  at::Tensor MG = at::empty_like(DG), EG = at::empty_like(DG);
  at::Tensor HIN = at::empty({r_max, S, B, D}, opts), SA = at::empty({r_max, S, 2, B, D}, opts);
  AT_DISPATCH_FLOATING_TYPES(p.scalar_type(), "srehn_forward", [&] {
    forward<scalar_t>(p, h0, rate_h, alpha, beta, weight, bias.view({2 * D}), hs, d1, n, mask,
                      AT, DG, MG, EG, HIN, SA);
  });
  return {hs, d1, n, mask, AT, DG, MG, EG, HIN, SA};
}

// The gradients of ``srehn_forward``'s p, h0, rate_h, alpha, beta, weight, bias.
std::vector<at::Tensor> srehn_backward(c10::optional<at::Tensor> grad_hs,
                                       c10::optional<at::Tensor> grad_d1, at::Tensor rate_h,
                                       at::Tensor weight, at::Tensor AT, at::Tensor DG,
                                       at::Tensor MG, at::Tensor EG, at::Tensor HIN,
                                       at::Tensor SA) {
  for (const at::Tensor* t : {&rate_h, &weight, &DG, &MG, &EG, &HIN, &SA})
    check(*t, AT, "every input");
  const int64_t S = AT.size(0), B = AT.size(1), D = AT.size(2);
  at::Tensor gh, gd;
  for (auto [opt, out] : {std::make_pair(&grad_hs, &gh), std::make_pair(&grad_d1, &gd)}) {
    if (opt->has_value() && (*opt)->defined()) {
      *out = (*opt)->contiguous();
      check(*out, AT, "a gradient");
      TORCH_CHECK(out->sizes() == at::IntArrayRef({B, S, D}), "srehn_backward: gradient shape");
    }
  }
  std::vector<at::Tensor> grads;
  AT_DISPATCH_FLOATING_TYPES(AT.scalar_type(), "srehn_backward", [&] {
    grads = backward<scalar_t>(gh, gd, rate_h, weight, AT, DG, MG, EG, HIN, SA);
  });
  return grads;
}

// The ops (csrc/ops.cpp): SREHN's training forward over a whole sequence; its gradients of p,
// h0, rate_h, alpha, beta, weight, bias (a gradient not there: shape [0]).
TORCH_LIBRARY_FRAGMENT(condrnn, m) {
  m.def("srehn_forward(Tensor p, Tensor h0, Tensor rate_h, Tensor alpha, Tensor beta,"
        " Tensor weight, Tensor bias, int r_max) -> Tensor[]");
  m.def("srehn_backward(Tensor? grad_hs, Tensor? grad_d1, Tensor rate_h, Tensor weight,"
        " Tensor AT, Tensor DG, Tensor MG, Tensor EG, Tensor HIN, Tensor SA) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(condrnn, CPU, m) {
  m.impl("srehn_forward", TORCH_FN(srehn_forward));
  m.impl("srehn_backward", TORCH_FN(srehn_backward));
}
