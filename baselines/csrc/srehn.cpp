// SREHN's training forward over a whole sequence, forward and backward, loaded by
// baselines/_srehn.py (``srehn_kernel``), which SREHN's training runs (baselines/srehn.py). Each step
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
// matmuls are ATen's (one addmm per layer and step each way; the weight gradients one matmul over
// every layer of every step), tanh, sigmoid and the gate's expm1, log and exp ATen's vectorised
// ones on whole buffers; every other elementwise part a plain loop over the B x D units. Built with
// -ffp-contract=off, so each product and sum rounds on its own (torch's vectorised lerp fuses a
// multiply-add, and the sums of the weight gradients run in another order): equal to the per-step
// path to float rounding, not bit for bit.
//
// Layout: p and its gradient [B, T, 3D], and the outputs hs, d^1, n, mask [B, T, D], batch-major
// as the method holds them (a step's rows strided). What only the backward reads: AT [T, B, D]
// (alpha_t), DG, MG, EG [T, B, R, D] (the gate's d, m = 1 - e^{-u} and e^q, as in ``_gate``),
// HIN [R, T, B, D] (every layer's input h^{r-1}; HIN[0] = h_{t-1}) and SA [R, T, B, 2D] (s, tau).
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace {

// torch's lerp: a + w (b - a) for |w| < 0.5, else b - (b - a)(1 - w).
template <typename T>
inline T lerp(T a, T b, T w) {
  return std::abs(w) < T(0.5) ? a + w * (b - a) : b - (b - a) * (T(1) - w);
}

// The elastic gate of every layer r = 0..Rm-1 (layer number rr = r + 1) from the local rate
// ``at`` [B, D] (``_gate`` of baselines/_elastic.py, as csrc/ei_rehn_stack.cpp computes it):
//   u = alpha r + alpha_t rr;  m = -expm1(-(u > 0 ? u : 1));
//   q = (alpha + alpha_t) rr + (u > 0 ? log(m) : -inf);  e = exp(min(q, 0));  d = relu(beta - e)
// with the same roundings (no contraction, the products and sums in the Python code's order) and
// expm1, log and exp ATen's own vectorised ones on whole [B, Rm, D] buffers. Into DG (d; u until
// the last pass), MG (m) and EG (e), then the depth trace n = #{r : d^r > 0} and mask = 1[n > 0]
// (float), into rows b * stride of np and maskp.
template <typename T>
void gate_forward(const T* alpha, const T* beta, const T* at, at::Tensor DG, at::Tensor MG,
                  at::Tensor EG, T* np, T* maskp, int64_t stride) {
  const int64_t B = DG.size(0), Rm = DG.size(1), D = DG.size(2);
  T* up = DG.data_ptr<T>();
  T* mp = MG.data_ptr<T>();
  T* ep = EG.data_ptr<T>();
  for (int64_t b = 0; b < B; ++b) {
    const T* arow = at + b * D;
    for (int64_t r = 0; r < Rm; ++r) {
      const T rr = T(r + 1), r1 = T(r);
      T* urow = up + (b * Rm + r) * D;
      T* mrow = mp + (b * Rm + r) * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const T u = alpha[j] * r1 + arow[j] * rr;
        urow[j] = u;
        mrow[j] = -(u > T(0) ? u : T(1));
      }
    }
  }
  at::expm1_(MG);
  const int64_t N = B * Rm * D;
#pragma omp simd
  for (int64_t i = 0; i < N; ++i) mp[i] = -mp[i];  // m = 1 - e^{-u}
  at::log_out(EG, MG);
  const T inf = std::numeric_limits<T>::infinity();
  for (int64_t b = 0; b < B; ++b) {
    const T* arow = at + b * D;
    for (int64_t r = 0; r < Rm; ++r) {
      const T rr = T(r + 1);
      const T* urow = up + (b * Rm + r) * D;
      T* erow = ep + (b * Rm + r) * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const T q = (alpha[j] + arow[j]) * rr + (urow[j] > T(0) ? erow[j] : -inf);
        erow[j] = q > T(0) ? T(0) : q;  // q.clamp(max=0)
      }
    }
  }
  at::exp_(EG);
  for (int64_t b = 0; b < B; ++b) {
    T* nrow = np + b * stride;
    std::fill(nrow, nrow + D, T(0));
    for (int64_t r = 0; r < Rm; ++r) {
      T* drow = up + (b * Rm + r) * D;
      const T* erow = ep + (b * Rm + r) * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const T v = beta[j] - erow[j];
        const T d = v < T(0) ? T(0) : v;  // relu, eq. 11
        drow[j] = d;
        nrow[j] += d > T(0) ? T(1) : T(0);
      }
    }
    T* mrow = maskp + b * stride;
    for (int64_t j = 0; j < D; ++j) mrow[j] = nrow[j] > T(0) ? T(1) : T(0);
  }
}

// ``_ElasticGate.backward`` of one step from G [B, Rm, D], the gradient of its gate: where d > 0,
// dq = -(e g), du = dq / m, dalpha += dq + du r, dbeta += g, dalpha_t = sum_r du rr; where d = 0
// nothing (0, not 0 * inf). dalpha and dbeta accumulate over the steps; dat is this step's.
template <typename T>
void gate_backward(const at::Tensor& G, const at::Tensor& DG, const at::Tensor& MG,
                   const at::Tensor& EG, T* dalpha, T* dbeta, T* dat) {
  const int64_t B = DG.size(0), Rm = DG.size(1), D = DG.size(2);
  const T* gp = G.data_ptr<T>();
  const T* dp = DG.data_ptr<T>();
  const T* mp = MG.data_ptr<T>();
  const T* ep = EG.data_ptr<T>();
  std::fill(dat, dat + B * D, T(0));
  for (int64_t b = 0; b < B; ++b) {
    T* atrow = dat + b * D;
    for (int64_t r = 0; r < Rm; ++r) {
      const T rr = T(r + 1), r1 = T(r);
      const int64_t o = (b * Rm + r) * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const T g = dp[o + j] > T(0) ? gp[o + j] : T(0);
        const T dq = -(ep[o + j] * g);
        const T du = dq / mp[o + j];
        dalpha[j] += dq + du * r1;
        dbeta[j] += g;
        atrow[j] += du * rr;
      }
    }
  }
}

template <typename T>
void forward(const at::Tensor& p, const at::Tensor& h0, const at::Tensor& rate_h,
             const at::Tensor& alpha, const at::Tensor& beta, const at::Tensor& weight,
             const at::Tensor& bias, at::Tensor& hs, at::Tensor& d1, at::Tensor& n,
             at::Tensor& mask, at::Tensor& AT, at::Tensor& DG, at::Tensor& MG, at::Tensor& EG,
             at::Tensor& HIN, at::Tensor& SA) {
  const int64_t B = p.size(0), S = p.size(1), D = h0.size(1), Rm = DG.size(2);
  const auto rate_t = rate_h.t(), w_t = weight.t();
  const T* ap = alpha.data_ptr<T>();
  const T* bp = beta.data_ptr<T>();
  T* hsp = hs.data_ptr<T>();
  T* d1p = d1.data_ptr<T>();
  HIN.select(0, 0).select(0, 0).copy_(h0);
  for (int64_t t = 0; t < S; ++t) {
    const at::Tensor pt = p.select(1, t);  // [B, 3D], rows S * 3D apart
    at::Tensor at_ = AT.select(0, t), dg = DG.select(0, t);
    at::addmm_out(at_, pt.narrow(1, 0, D), HIN.select(0, 0).select(0, t), rate_t);
    at::sigmoid_(at_);  // eq. 14
    gate_forward<T>(ap, bp, at_.data_ptr<T>(), dg, MG.select(0, t), EG.select(0, t),
                    n.data_ptr<T>() + t * D, mask.data_ptr<T>() + t * D, S * D);
    const T* dgp = dg.data_ptr<T>();
    for (int64_t b = 0; b < B; ++b)
      std::copy(dgp + b * Rm * D, dgp + b * Rm * D + D, d1p + (b * S + t) * D);
    for (int64_t r = 0; r < Rm; ++r) {
      const at::Tensor h = HIN.select(0, r).select(0, t);
      at::Tensor a = SA.select(0, r).select(0, t);  // [B, 2D]
      at::addmm_out(a, r == 0 ? pt.narrow(1, D, 2 * D) : bias, h, w_t);
      a.narrow(1, 0, D).tanh_();  // s
      a.narrow(1, D, D).sigmoid_();  // tau
      const bool last = r + 1 == Rm;
      T* dst = last ? hsp + t * D : HIN.select(0, r + 1).select(0, t).data_ptr<T>();
      const int64_t dst_row = last ? S * D : D;
      const T* hp = h.data_ptr<T>();
      const T* sp = a.data_ptr<T>();
      for (int64_t b = 0; b < B; ++b) {
        const T* hrow = hp + b * D;
        const T* srow = sp + b * 2 * D;
        const T* drow = dgp + (b * Rm + r) * D;
        T* orow = dst + b * dst_row;
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) {
          orow[j] = lerp(hrow[j], srow[j], drow[j] * srow[D + j]);  // eqs. 10, 9
        }
      }
    }
    if (t + 1 < S) HIN.select(0, 0).select(0, t + 1).copy_(hs.select(1, t));
  }
}

// The gradients of p, h0, rate_h, alpha, beta, weight and bias (bias's undefined, None, where
// R = 1: the per-step path's layer 1 takes its bias with p) from those of hs and d^1 (each may be
// undefined: none).
template <typename T>
std::vector<at::Tensor> backward(const at::Tensor& grad_hs, const at::Tensor& grad_d1,
                                 const at::Tensor& rate_h, const at::Tensor& weight,
                                 const at::Tensor& AT, const at::Tensor& DG, const at::Tensor& MG,
                                 const at::Tensor& EG, const at::Tensor& HIN,
                                 const at::Tensor& SA) {
  const int64_t S = AT.size(0), B = AT.size(1), D = AT.size(2), Rm = DG.size(2);
  const auto opts = AT.options();
  at::Tensor dp = at::empty({B, S, 3 * D}, opts), DA = at::empty({Rm, S, B, 2 * D}, opts);
  at::Tensor DPRE = at::empty({S, B, D}, opts), G = at::empty({B, Rm, D}, opts);
  at::Tensor dalpha = at::zeros({D}, opts), dbeta = at::zeros({D}, opts);
  at::Tensor dat = at::empty({B, D}, opts), base = at::empty({B, D}, opts);
  at::Tensor gh = at::zeros({B, D}, opts), gnext = at::empty({B, D}, opts);  // dL/dh^r
  const bool has_h = grad_hs.defined(), has_d1 = grad_d1.defined();
  const T* ghs = has_h ? grad_hs.data_ptr<T>() : nullptr;
  const T* gd1 = has_d1 ? grad_d1.data_ptr<T>() : nullptr;
  T* dpp = dp.data_ptr<T>();
  T* gp = G.data_ptr<T>();
  T* basep = base.data_ptr<T>();
  for (int64_t t = S - 1; t >= 0; --t) {
    if (has_h) {  // h_t's own gradient plus what step t + 1 sent back
      T* g = gh.data_ptr<T>();
      for (int64_t b = 0; b < B; ++b) {
        const T* grow = ghs + (b * S + t) * D;
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) g[b * D + j] += grow[j];
      }
    }
    const T* dgp = DG.select(0, t).data_ptr<T>();
    for (int64_t r = Rm - 1; r >= 0; --r) {
      const T* hp = HIN.select(0, r).select(0, t).data_ptr<T>();
      const T* sp = SA.select(0, r).select(0, t).data_ptr<T>();
      const T* g = gh.data_ptr<T>();
      T* dap = DA.select(0, r).select(0, t).data_ptr<T>();
      for (int64_t b = 0; b < B; ++b) {
        const T* hrow = hp + b * D;
        const T* srow = sp + b * 2 * D;
        const T* drow = dgp + (b * Rm + r) * D;
        const T* grow = g + b * D;
        T* darow = dap + b * 2 * D;
        T* Grow = gp + (b * Rm + r) * D;
        T* baserow = basep + b * D;
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) {
          const T s = srow[j], tau = srow[D + j], d = drow[j], gj = grow[j];
          const T gate = d * tau;
          const T gw = gj * (s - hrow[j]);  // lerp's weight
          baserow[j] = gj * (T(1) - gate);  // lerp's start
          Grow[j] = gw * tau;  // d^r
          darow[j] = (gj * gate) * (T(1) - s * s);  // lerp's end, tanh
          darow[D + j] = (gw * d) * (T(1) - tau) * tau;  // sigmoid
        }
      }
      at::addmm_out(gnext, base, DA.select(0, r).select(0, t), weight);  // + da W
      std::swap(gh, gnext);
    }
    if (has_d1) {
      for (int64_t b = 0; b < B; ++b) {
        const T* grow = gd1 + (b * S + t) * D;
        T* Grow = gp + b * Rm * D;
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) Grow[j] += grow[j];
      }
    }
    gate_backward<T>(G, DG.select(0, t), MG.select(0, t), EG.select(0, t),
                     dalpha.data_ptr<T>(), dbeta.data_ptr<T>(), dat.data_ptr<T>());
    // eq. 14's sigmoid backward as ATen's, grad (1 - y) y; p's gradient for this step
    const T* atp = AT.select(0, t).data_ptr<T>();
    const T* datp = dat.data_ptr<T>();
    const T* da0 = DA.select(0, 0).select(0, t).data_ptr<T>();
    T* prep = DPRE.select(0, t).data_ptr<T>();
    for (int64_t b = 0; b < B; ++b) {
      T* dprow = dpp + (b * S + t) * 3 * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const T y = atp[b * D + j];
        const T v = datp[b * D + j] * (T(1) - y) * y;
        prep[b * D + j] = v;
        dprow[j] = v;
      }
      std::copy(da0 + b * 2 * D, da0 + (b + 1) * 2 * D, dprow + D);
    }
    gh.addmm_(DPRE.select(0, t), rate_h);  // dh_{t-1} += dpre W_a,h
  }
  const int64_t N = Rm * S * B;
  return {
      dp,
      gh,
      at::mm(DPRE.view({S * B, D}).t(), HIN.select(0, 0).view({S * B, D})),
      dalpha,
      dbeta,
      at::mm(DA.view({N, 2 * D}).t(), HIN.view({N, D})),
      Rm > 1 ? DA.narrow(0, 1, Rm - 1).reshape({(Rm - 1) * S * B, 2 * D}).sum(0) : at::Tensor(),
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
  at::Tensor HIN = at::empty({r_max, S, B, D}, opts), SA = at::empty({r_max, S, B, 2 * D}, opts);
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

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &srehn_forward, "SREHN's training forward over a whole sequence");
  m.def("backward", &srehn_backward, "its gradients of p, h0, rate_h, alpha, beta, weight, bias");
}
