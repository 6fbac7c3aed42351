// EI-REHN's training step, forward and backward, loaded by baselines/ops/ei_rehn_stack.py
// (``ei_rehn_stack_kernel``): ``forward``/``backward`` are a step's highway layers
// (``stack_layers``); ``step_forward``/``step_backward`` the whole step (the local rate, the
// elastic gate and its depth trace, then the same layers; ``fused_step``), which EI-REHN's
// training runs. The gate is ``_gate``/``_ElasticGate`` of baselines/_elastic.py
// (the reference; see ``elastic_gate_forward`` in elastic_gate.h).
//
// The layers:
// Exactly ``_Stack.forward`` and ``_Stack.backward`` of baselines/ops/ei_rehn_stack.py (the
// equations are in its docstring; the Python code is the reference), without a Python call per
// layer: the
// matmuls are gemm.h's (ATen's; into preallocated buffers; the
// weight
// gradients one matmul per weight over the stacked rows of every layer), tanh and sigmoid are
// ATen's vectorised ``at::tanh_out`` / ``at::sigmoid_out`` on whole [B, .] buffers (the same
// values as torch's), and every other elementwise part of a layer is a plain fused loop over its
// B x D units. Built with -ffp-contract=off, so each product and sum rounds on its own, in the
// order of the Python code's ``addcmul``s; ``dh``'s diagonal terms are added in the loop rather
// than by the Python code's [W0; I; I] matmul, and the matmuls' blocking may differ: equal to the
// Python path to float rounding, not bit for bit.
//
// Layout: u = [s; g; z] rows of width U = 2D + Dz; the branches s and g side by side (s first)
// in rows of width 2D, [w; gbar] rows of width 4D.
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "elastic_gate.h"  // elastic_gate_forward, elastic_gate_backward
#include "gemm.h"  // mm_into, addmm_into, mm_new: the matmuls

namespace {

// The forward of layers 0..R-1 from h^0 = H[0] [1, B, D]. Saved for the backward, per layer r:
// SGZ[r + 1] = [s; g; z] (its output, SGZ[0] = init: layer 0's u), GBAR[r], HW[r] = h W0^T and
// W[r] = w. Not saved, to halve what the backward reads back from memory besides the matmuls'
// inputs: the layers' inputs h^r (r > 0), acc - w and diag, which ``backward_layers`` recomputes
// from H[0], SGZ, W and GBAR with the same operations in the same order (the same bits).
// The gate d^r_{b,j} is dp[b * dstride + r * D + j] (r < R), layer 1's input term and bias
// bx[b * bx_stride + c].
template <typename T>
void forward_layers(at::Tensor& out, const T* dp, int64_t dstride, int64_t R, const T* bxp,
                    int64_t bx_stride, const at::Tensor& weight0, const at::Tensor& bias,
                    const at::Tensor& proj, const at::Tensor& mix_bias,
                    const at::Tensor& hyper_weight, const at::Tensor& hyper_bias,
                    const at::Tensor& H, at::Tensor& SGZ, at::Tensor& GBAR, at::Tensor& HW,
                    at::Tensor& W) {
  const int64_t B = out.size(0), D = out.size(1), Dz = hyper_weight.size(0);
  const int64_t D2 = 2 * D, D4 = 4 * D, U = D2 + Dz;
  const auto w0_t = weight0.t().contiguous(), proj_t = proj.t().contiguous();
  const auto hyper_t = hyper_weight.t().contiguous();
  at::Tensor z = at::empty({B, Dz}, out.options()), wm = at::empty({B, D4}, out.options());
  at::Tensor A = at::empty({2, B, D}, out.options());  // the pre-activations a_s, a_g, then s, g
  at::Tensor As = A.select(0, 0), Ag = A.select(0, 1);
  std::vector<T> acc(B * D2);
  at::Tensor hbuf = R > 1 ? at::empty({2, B, D}, out.options()) : at::Tensor();  // h^r, r > 0
  const T* mbp = mix_bias.data_ptr<T>();
  const T* wmp = wm.data_ptr<T>();
  const T* zp = z.data_ptr<T>();
  T* asp = As.data_ptr<T>();
  T* agp = Ag.data_ptr<T>();
  for (int64_t r = 0; r < R; ++r) {
    at::Tensor sgz = SGZ.select(0, r + 1), hw = HW.select(0, r);
    at::Tensor h = r == 0 ? H.select(0, 0) : hbuf.select(0, (r - 1) % 2);
    at::Tensor gbar = GBAR.select(0, r);
    addmm_into(z, hyper_bias, SGZ.select(0, r), hyper_t);
    at::tanh_(z);  // eq. 18
    mm_into(wm, z, proj_t, false);  // [w; gbar's pre-activation - bbar], eqs. 19-21
    mm_into(hw, h, w0_t, false);
    const T* hp = h.data_ptr<T>();
    const T* hwp = hw.data_ptr<T>();
    T* gp = gbar.data_ptr<T>();
    T* wsp = W.select(0, r).data_ptr<T>();
    for (int64_t b = 0; b < B; ++b) {
      const T* wrow = wmp + b * D4 + D2;
      T* grow = gp + b * D2;
#pragma omp simd
      for (int64_t c = 0; c < D2; ++c) grow[c] = wrow[c] + mbp[c];
    }
    at::sigmoid_(gbar);
    // a = base + gbar * hw + diag * [h; h], diag = w + gbar * (acc - w) (eqs. 17, 22)
    const T* base = r == 0 ? bxp : bias.data_ptr<T>();
    const int64_t base_row = r == 0 ? bx_stride : 0;
    for (int64_t b = 0; b < B; ++b) {
      const T* wrow = wmp + b * D4;
      const T* hrow = hp + b * D;
      const T* brow = base + b * base_row;
      T* accrow = acc.data() + b * D2;
      const int64_t o = b * D2;
      for (int64_t half = 0; half < 2; ++half) {
        const int64_t c0 = half * D;
        T* arow = (half == 0 ? asp : agp) + b * D;
        if (r == 0) {
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) {
            const int64_t c = c0 + j, i = o + c;
            const T w = wrow[c], gb = gp[i], aw = -w;
            const T diag = w + gb * aw;
            accrow[c] = w;
            wsp[i] = w;
            arow[j] = brow[c] + gb * hwp[i] + diag * hrow[j];
          }
        } else {
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) {
            const int64_t c = c0 + j, i = o + c;
            const T w = wrow[c], gb = gp[i], aw = accrow[c] - w;
            const T diag = w + gb * aw;
            accrow[c] = accrow[c] + w;
            wsp[i] = w;
            arow[j] = brow[c] + gb * hwp[i] + diag * hrow[j];
          }
        }
      }
    }
    at::tanh_(As);  // s, eq. 22
    at::sigmoid_(Ag);  // g
    T* o = sgz.data_ptr<T>();
    T* hn = r + 1 < R ? hbuf.select(0, r % 2).data_ptr<T>() : out.data_ptr<T>();
    for (int64_t b = 0; b < B; ++b) {
      const T* srow = asp + b * D;
      const T* grow = agp + b * D;
      const T* drow = dp + b * dstride + r * D;
      const T* hrow = hp + b * D;
      const T* zrow = zp + b * Dz;
      T* orow = o + b * U;
      T* hnrow = hn + b * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const T gate = drow[j] * grow[j];  // eq. 10
        hnrow[j] = hrow[j] + gate * (srow[j] - hrow[j]);  // eq. 9
        orow[j] = srow[j];
        orow[D + j] = grow[j];
      }
      for (int64_t k = 0; k < Dz; ++k) orow[D2 + k] = zrow[k];
    }
  }
}

// One branch (s or g) of a row of layer r's backward, from da: dhw, dpw = [dw; dm], da * diag,
// and dacc (eq. 17) updated in place. NEXT: layer r + 1 ran (dacc holds what it sent back);
// ACC: r > 0 (this layer's acc depends on earlier layers' w). acc - w and diag as the forward
// computed them (``forward_layers``), from w, acc (r > 0) and gbar.
template <typename T>
struct Rows {
  const T *da, *gbar, *h, *hw, *w, *acc;
  T *dhw, *dacc, *dw, *dm, *dadiag;
};

template <typename T, bool NEXT, bool ACC>
inline void branch_backward(const Rows<T>& p, int64_t D) {
#pragma omp simd
  for (int64_t j = 0; j < D; ++j) {
    const T da = p.da[j], gb = p.gbar[j], w = p.w[j];
    const T aw = ACC ? p.acc[j] - w : -w;
    const T diag = w + gb * aw;
    p.dhw[j] = da * gb;
    const T ddiag = da * p.h[j];
    const T dgbar = da * p.hw[j] + ddiag * aw;
    p.dw[j] = (NEXT ? p.dacc[j] + ddiag : ddiag) - ddiag * gb;
    if (ACC) p.dacc[j] = NEXT ? p.dacc[j] + ddiag * gb : ddiag * gb;
    p.dm[j] = dgbar * (T(1) - gb) * gb;  // eqs. 19-21
    p.dadiag[j] = da * diag;
  }
}

// The gradients of the R layers (d as in ``forward_layers``), dd [B, R, D] among them. First the
// layers' inputs h^r and acc^r = sum_{k<r} w^k, recomputed as the forward computed them (the same
// operations, the same order: the same bits), into a buffer of this thread's that stays in cache
// (kept from call to call: no allocation, no page faults).
template <typename T>
std::vector<at::Tensor> backward_layers(const at::Tensor& grad_h, const T* dp, int64_t dstride,
                                        int64_t R, const at::Tensor& weight0,
                                        const at::Tensor& proj, const at::Tensor& hyper_weight,
                                        const at::Tensor& H0, const at::Tensor& SGZ,
                                        const at::Tensor& GBAR, const at::Tensor& HW,
                                        const at::Tensor& W) {
  const int64_t B = grad_h.size(0), D = grad_h.size(1), Dz = hyper_weight.size(0);
  const int64_t D2 = 2 * D, D4 = 4 * D, U = D2 + Dz;
  const auto opts = grad_h.options();
  static thread_local std::vector<T> scratch;  // H, then acc^r at (r - 1) B 2D, r > 0
  scratch.resize(std::max<size_t>(scratch.size(), R * B * D + (R - 1) * B * D2));
  at::Tensor H = at::from_blob(scratch.data(), {R, B, D}, opts);
  T* const ACC = scratch.data() + R * B * D;
  H.select(0, 0).copy_(H0.select(0, 0));
  {
    T* hp = H.data_ptr<T>();
    const T* wp = W.data_ptr<T>();
    for (int64_t r = 0; r + 1 < R; ++r) {
      const T* o = SGZ.select(0, r + 1).data_ptr<T>();
      const T* hrow0 = hp + r * B * D;
      T* hnrow0 = hp + (r + 1) * B * D;
      for (int64_t b = 0; b < B; ++b) {
        const T* srow = o + b * U;
        const T* grow = srow + D;
        const T* drow = dp + b * dstride + r * D;
        const T* hrow = hrow0 + b * D;
        T* hnrow = hnrow0 + b * D;
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) {
          const T gate = drow[j] * grow[j];  // as forward_layers
          hnrow[j] = hrow[j] + gate * (srow[j] - hrow[j]);
        }
      }
      const int64_t N2 = B * D2;
      const T* wr = wp + r * N2;
      T* acc = ACC + r * N2;
      if (r == 0) {
        std::copy(wr, wr + N2, acc);
      } else {
        const T* prev = acc - N2;
#pragma omp simd
        for (int64_t i = 0; i < N2; ++i) acc[i] = prev[i] + wr[i];
      }
    }
  }
  at::Tensor DA = at::empty({R, B, D2}, opts), DHW = at::empty({R, B, D2}, opts);
  at::Tensor DPW = at::empty({R, B, D4}, opts), DZ = at::empty({R, B, Dz}, opts);
  at::Tensor dd = at::empty({B, R, D}, opts), du = at::empty({B, U}, opts);
  at::Tensor dh = grad_h.clone(), dh_next = at::empty({B, D}, opts);
  at::Tensor base = at::empty({B, D}, opts), dzz = at::empty({B, Dz}, opts);
  std::vector<T> dacc(B * D2), dadiag(D2);
  T* ddp = dd.data_ptr<T>();
  T* dup = du.data_ptr<T>();
  T* basep = base.data_ptr<T>();
  const T* dzzp = dzz.data_ptr<T>();
  for (int64_t r = R - 1; r >= 0; --r) {
    const bool next = r + 1 < R;  // layer r + 1 ran: it sent back du and dacc
    const T* hp = H.select(0, r).data_ptr<T>();
    const T* o = SGZ.select(0, r + 1).data_ptr<T>();
    const T* gp = GBAR.select(0, r).data_ptr<T>();
    const T* hwp = HW.select(0, r).data_ptr<T>();
    const T* wsp = W.select(0, r).data_ptr<T>();
    const T* accp = r > 0 ? ACC + (r - 1) * B * D2 : nullptr;
    const T* dhp = dh.data_ptr<T>();
    T* dap = DA.select(0, r).data_ptr<T>();
    T* dhwp = DHW.select(0, r).data_ptr<T>();
    T* dpwp = DPW.select(0, r).data_ptr<T>();
    for (int64_t b = 0; b < B; ++b) {
      const T* dhrow = dhp + b * D;
      const T* hrow = hp + b * D;
      const T* srow = o + b * U;
      const T* grow = srow + D;
      const T* drow = dp + b * dstride + r * D;
      const T* dsn = dup + b * U;  // ds_next, dg_next: what layer r + 1 sent back through u
      const T* dgn = dsn + D;
      T* ddrow = ddp + (b * R + r) * D;
      T* darow = dap + b * D2;
      T* baserow = basep + b * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const T dhj = dhrow[j], s = srow[j], g = grow[j], dr = drow[j];
        const T gate = dr * g, dgate = dhj * (s - hrow[j]);  // eq. 9
        const T ds = next ? dsn[j] + dhj * gate : dhj * gate;
        const T dg = next ? dgn[j] + dgate * dr : dgate * dr;
        ddrow[j] = dgate * g;  // eq. 10
        darow[j] = ds * (T(1) - s * s);  // eq. 22
        darow[D + j] = dg * (T(1) - g) * g;
        baserow[j] = dhj - dhj * gate;
      }
      const int64_t o2 = b * D2;
      T* daccrow = dacc.data() + o2;
      T* dpwrow = dpwp + b * D4;
      for (int64_t half = 0; half < 2; ++half) {
        const int64_t c0 = half * D;
        const Rows<T> rows{darow + c0,    gp + o2 + c0,    hrow,
                           hwp + o2 + c0, wsp + o2 + c0,   accp ? accp + o2 + c0 : nullptr,
                           dhwp + o2 + c0, daccrow + c0,   dpwrow + c0,
                           dpwrow + D2 + c0, dadiag.data() + c0};
        if (next && r > 0)
          branch_backward<T, true, true>(rows, D);
        else if (next)
          branch_backward<T, true, false>(rows, D);
        else if (r > 0)
          branch_backward<T, false, true>(rows, D);
        else
          branch_backward<T, false, false>(rows, D);
      }
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) baserow[j] = baserow[j] + dadiag[j] + dadiag[D + j];
    }
    at::Tensor dpw = DPW.select(0, r);
    addmm_into(dh_next, base, DHW.select(0, r), weight0);  // dh = base + (da gbar) W0
    if (next)
      addmm_into(dzz, du.narrow(1, D2, Dz), dpw, proj);
    else
      mm_into(dzz, dpw, proj, false);
    T* dzp = DZ.select(0, r).data_ptr<T>();
    for (int64_t b = 0; b < B; ++b) {  // eq. 18
      const T* zrow = o + b * U + D2;
      const T* dzzrow = dzzp + b * Dz;
      T* dzrow = dzp + b * Dz;
#pragma omp simd
      for (int64_t k = 0; k < Dz; ++k) dzrow[k] = dzzrow[k] * (T(1) - zrow[k] * zrow[k]);
    }
    mm_into(du, DZ.select(0, r), hyper_weight, false);
    std::swap(dh, dh_next);
  }
  const int64_t N = R * B;
  at::Tensor dpw_all = DPW.view({N, D4}), dz_all = DZ.view({N, Dz});
  return {
      dh,
      dd,
      DA.select(0, 0),
      mm_new(DHW.view({N, D2}).t(), H.view({N, D})),
      R > 1 ? DA.narrow(0, 1, R - 1).reshape({(R - 1) * B, D2}).sum(0)
            : at::zeros({D2}, DA.options()),
      mm_new(dpw_all.t(), SGZ.narrow(0, 1, R).reshape({N, U}).narrow(1, D2, Dz)),
      dpw_all.narrow(1, D2, D2).sum(0),
      mm_new(dz_all.t(), SGZ.narrow(0, 0, R).reshape({N, U})),
      dz_all.sum(0),
      du.sum(0),
  };
}

// eq. 14's sigmoid backward as ATen's, grad (1 - y) y, from dalpha_t into p's first D columns.
template <typename T>
void rate_backward(const at::Tensor& dat, const at::Tensor& AT, at::Tensor& dp) {
  const int64_t B = AT.size(0), D = AT.size(1);
  const T* ap = AT.data_ptr<T>();
  const T* gp = dat.data_ptr<T>();
  T* pp = dp.data_ptr<T>();
  for (int64_t b = 0; b < B; ++b) {
#pragma omp simd
    for (int64_t j = 0; j < D; ++j) {
      const T y = ap[b * D + j];
      pp[b * 3 * D + j] = gp[b * D + j] * (T(1) - y) * y;
    }
  }
}

void check(const at::Tensor& t, const at::Tensor& ref, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == ref.scalar_type() && t.is_contiguous(),
              "ei_rehn_stack: ", name, " must be a contiguous CPU tensor of h's dtype");
}

}  // namespace

// h_t after the layers of one step and what the backward reads:
// {h, H [1, B, D] (h^0), SGZ [R + 1, B, 2D + Dz], GBAR, HW, W [R, B, 2D]}.
std::vector<at::Tensor> ei_rehn_stack_forward(at::Tensor h, at::Tensor d, at::Tensor bx,
                                              at::Tensor weight0, at::Tensor bias,
                                              at::Tensor proj, at::Tensor mix_bias,
                                              at::Tensor hyper_weight, at::Tensor hyper_bias,
                                              at::Tensor init) {
  const std::vector<std::pair<const at::Tensor*, const char*>> args = {
      {&h, "h"}, {&d, "d"}, {&bx, "bx"}, {&weight0, "weight0"}, {&bias, "bias"},
      {&proj, "proj"}, {&mix_bias, "mix_bias"}, {&hyper_weight, "hyper_weight"},
      {&hyper_bias, "hyper_bias"}, {&init, "init"}};
  for (const auto& [t, name] : args) check(*t, h, name);
  TORCH_CHECK(d.dim() == 3 && d.size(1) > 0, "ei_rehn_stack: d must be [B, R >= 1, D]");
  const int64_t B = d.size(0), R = d.size(1), D = d.size(2), Dz = hyper_weight.size(0);
  const int64_t U = 2 * D + Dz;
  TORCH_CHECK(h.sizes() == at::IntArrayRef({B, D}) && bx.sizes() == at::IntArrayRef({B, 2 * D}) &&
                  weight0.sizes() == at::IntArrayRef({2 * D, D}) && bias.numel() == 2 * D &&
                  proj.sizes() == at::IntArrayRef({4 * D, Dz}) && mix_bias.numel() == 2 * D &&
                  hyper_weight.sizes() == at::IntArrayRef({Dz, U}) &&
                  hyper_bias.numel() == Dz && init.numel() == U,
              "ei_rehn_stack_forward: inconsistent shapes");
  const auto opts = h.options();
  at::Tensor out = at::empty({B, D}, opts), H = at::empty({1, B, D}, opts);
  at::Tensor SGZ = at::empty({R + 1, B, U}, opts), GBAR = at::empty({R, B, 2 * D}, opts);
  at::Tensor HW = at::empty_like(GBAR), W = at::empty_like(GBAR);
  H.select(0, 0).copy_(h);
  SGZ.select(0, 0).copy_(init.view({1, U}).expand({B, U}));
  AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "ei_rehn_stack_forward", [&] {
    forward_layers<scalar_t>(out, d.data_ptr<scalar_t>(), R * D, R, bx.data_ptr<scalar_t>(),
                             2 * D, weight0, bias, proj, mix_bias, hyper_weight, hyper_bias, H,
                             SGZ, GBAR, HW, W);
  });
  return {out, H, SGZ, GBAR, HW, W};
}

// The 10 gradients of ``_Stack.backward``, in its order (bias's has no elements, shape [0], where
// R = 1).
std::vector<at::Tensor> ei_rehn_stack_backward(at::Tensor grad_h, at::Tensor d,
                                               at::Tensor weight0, at::Tensor proj,
                                               at::Tensor hyper_weight, at::Tensor H,
                                               at::Tensor SGZ, at::Tensor GBAR, at::Tensor HW,
                                               at::Tensor W) {
  for (const at::Tensor* t : {&d, &weight0, &proj, &hyper_weight, &H, &SGZ, &GBAR, &HW, &W})
    check(*t, grad_h, "every input");
  TORCH_CHECK(grad_h.sizes() == H.select(0, 0).sizes(), "ei_rehn_stack_backward: grad_h shape");
  std::vector<at::Tensor> grads;
  AT_DISPATCH_FLOATING_TYPES(grad_h.scalar_type(), "ei_rehn_stack_backward", [&] {
    grads = backward_layers<scalar_t>(grad_h, d.data_ptr<scalar_t>(), d.size(1) * d.size(2),
                                      d.size(1), weight0, proj, hyper_weight, H, SGZ, GBAR, HW,
                                      W);
  });
  return grads;
}

// One training step of EI-REHN's ``_train_forward`` (``fused_step``): the local
// rate alpha_t = sigmoid(p_a + h W_a,h^T) (eq. 14), the gate of every layer and its depth trace,
// then
// the layers 1..L, L = max(max_b R_b, first) (``stack_layers``). p [B, 3D] is the step's input
// terms [W_a,x x + b_a; W_x x + b] (rows of any stride). Returns ({h_t, d^1, n, mask, saved...},
// L); saved = {AT, DG, MG, EG, H, SGZ, GBAR, HW, W} for ``ei_rehn_step_backward`` (H [1, B, D]:
// h^0 = h, as ``forward_layers`` saves).
std::tuple<std::vector<at::Tensor>, c10::SymInt> ei_rehn_step_forward(
    at::Tensor p, at::Tensor h, at::Tensor rate_h, at::Tensor alpha, at::Tensor beta,
    at::Tensor weight0, at::Tensor bias, at::Tensor proj, at::Tensor mix_bias,
    at::Tensor hyper_weight, at::Tensor hyper_bias, at::Tensor init, int64_t r_max, bool first) {
  const std::vector<std::pair<const at::Tensor*, const char*>> args = {
      {&alpha, "alpha"}, {&beta, "beta"}, {&weight0, "weight0"}, {&bias, "bias"},
      {&proj, "proj"}, {&mix_bias, "mix_bias"}, {&hyper_weight, "hyper_weight"},
      {&hyper_bias, "hyper_bias"}, {&init, "init"}};
  check(h, h, "h");
  for (const auto& [t, name] : args) check(*t, h, name);
  const int64_t B = h.size(0), D = h.size(1), Dz = hyper_weight.size(0), U = 2 * D + Dz;
  TORCH_CHECK(p.device().is_cpu() && p.scalar_type() == h.scalar_type() && p.dim() == 2 &&
                  p.size(0) == B && p.size(1) == 3 * D && p.stride(1) == 1,
              "ei_rehn_step: p must be [B, 3D] of h's dtype with contiguous rows");
  TORCH_CHECK(rate_h.device().is_cpu() && rate_h.scalar_type() == h.scalar_type() &&
                  rate_h.sizes() == at::IntArrayRef({D, D}),
              "ei_rehn_step: rate_h must be [D, D] of h's dtype");
  TORCH_CHECK(r_max >= 1 && alpha.numel() == D && beta.numel() == D &&
                  weight0.sizes() == at::IntArrayRef({2 * D, D}) && bias.numel() == 2 * D &&
                  proj.sizes() == at::IntArrayRef({4 * D, Dz}) && mix_bias.numel() == 2 * D &&
                  hyper_weight.sizes() == at::IntArrayRef({Dz, U}) &&
                  hyper_bias.numel() == Dz && init.numel() == U,
              "ei_rehn_step_forward: inconsistent shapes");
  const auto opts = h.options();
  at::Tensor AT = at::addmm(p.narrow(1, 0, D), h, rate_h.t());
  at::sigmoid_(AT);  // eq. 14
  at::Tensor DG = at::empty({B, r_max, D}, opts), MG = at::empty_like(DG), EG = at::empty_like(DG);
  at::Tensor n = at::empty({B, D}, opts), mask = at::empty({B, D}, opts);
  int64_t L = 0;
  AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "ei_rehn_step_gate", [&] {
    L = elastic_gate_forward<scalar_t>(alpha.data_ptr<scalar_t>(), beta.data_ptr<scalar_t>(),
                                       AT.data_ptr<scalar_t>(), DG, MG, EG,
                                       n.data_ptr<scalar_t>(), mask.data_ptr<scalar_t>(), D);
  });
  L = std::max<int64_t>(L, first ? 1 : 0);
  at::Tensor out = L > 0 ? at::empty({B, D}, opts) : h.clone();
  at::Tensor H = at::empty({1, B, D}, opts);
  at::Tensor SGZ = at::empty({L + 1, B, U}, opts), GBAR = at::empty({L, B, 2 * D}, opts);
  at::Tensor HW = at::empty_like(GBAR), W = at::empty_like(GBAR);
  H.select(0, 0).copy_(h);
  SGZ.select(0, 0).copy_(init.view({1, U}).expand({B, U}));  // layer 0's u, also where L = 0
  if (L > 0) {
    AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "ei_rehn_step_layers", [&] {
      forward_layers<scalar_t>(out, DG.data_ptr<scalar_t>(), r_max * D, L,
                               p.data_ptr<scalar_t>() + D, p.stride(0), weight0, bias, proj,
                               mix_bias, hyper_weight, hyper_bias, H, SGZ, GBAR, HW, W);
    });
  }
  at::Tensor d1 = DG.select(1, 0).clone();
  return {{out, d1, n, mask, AT, DG, MG, EG, H, SGZ, GBAR, HW, W}, c10::SymInt(L)};
}

// The gradients of ``ei_rehn_step_forward``'s inputs p, h, rate_h, alpha, beta, weight0, bias,
// proj, mix_bias, hyper_weight, hyper_bias, init (the layers' 0 where L = 0, bias's where L = 1:
// every output has its input's shape whatever the layer count, so that nothing about them
// depends on it), from those of h_t and d^1 (none: undefined).
std::vector<at::Tensor> ei_rehn_step_backward(
    at::Tensor grad_h, c10::optional<at::Tensor> grad_d1, at::Tensor rate_h, at::Tensor weight0,
    at::Tensor proj, at::Tensor hyper_weight, at::Tensor AT, at::Tensor DG, at::Tensor MG,
    at::Tensor EG, at::Tensor H, at::Tensor SGZ, at::Tensor GBAR, at::Tensor HW, at::Tensor W) {
  for (const at::Tensor* t : {&weight0, &proj, &hyper_weight, &AT, &DG, &MG, &EG, &H, &SGZ,
                              &GBAR, &HW, &W})
    check(*t, grad_h, "every input");
  const int64_t B = AT.size(0), D = AT.size(1), L = GBAR.size(0);
  TORCH_CHECK(grad_h.sizes() == AT.sizes(), "ei_rehn_step_backward: grad_h shape");
  const bool has_d1 = grad_d1.has_value() && grad_d1->defined();
  at::Tensor gd1 = has_d1 ? grad_d1->contiguous() : at::Tensor();
  TORCH_CHECK(!has_d1 || (gd1.sizes() == AT.sizes() && gd1.scalar_type() == AT.scalar_type()),
              "ei_rehn_step_backward: grad_d1 shape");
  const auto opts = grad_h.options();
  // 0 where no layer ran: the layers' 7 parameters (from index 3: weight0, bias, proj, mix_bias,
  // hyper_weight, hyper_bias, init), each its own tensor
  const int64_t Dz = hyper_weight.size(0), U = hyper_weight.size(1);
  std::vector<at::Tensor> layer_grads(3);
  for (auto shape : std::vector<std::vector<int64_t>>{
           {2 * D, D}, {2 * D}, {4 * D, Dz}, {2 * D}, {Dz, U}, {Dz}, {U}})
    layer_grads.push_back(at::zeros(shape, opts));
  at::Tensor dp = at::empty({B, 3 * D}, opts), dalpha = at::empty({D}, opts);
  at::Tensor dbeta = at::empty({D}, opts), dat = at::empty({B, D}, opts), dh;
  AT_DISPATCH_FLOATING_TYPES(grad_h.scalar_type(), "ei_rehn_step_backward", [&] {
    at::Tensor G;  // the gradient of the gate of the layers that ran, plus d^1's
    if (L > 0) {
      layer_grads = backward_layers<scalar_t>(grad_h, DG.data_ptr<scalar_t>(), DG.size(1) * D, L,
                                              weight0, proj, hyper_weight, H, SGZ, GBAR, HW, W);
      dh = layer_grads[0];
      G = layer_grads[1];
      if (has_d1) G.select(1, 0).add_(gd1);
      dp.narrow(1, D, 2 * D).copy_(layer_grads[2]);
    } else {
      dh = grad_h.clone();
      G = has_d1 ? gd1.view({B, 1, D}) : at::empty({B, 0, D}, opts);
      dp.narrow(1, D, 2 * D).zero_();
    }
    dalpha.zero_(), dbeta.zero_();
    elastic_gate_backward<scalar_t>(G.data_ptr<scalar_t>(), G.size(1), DG.data_ptr<scalar_t>(),
                                    MG.data_ptr<scalar_t>(), EG.data_ptr<scalar_t>(), B, DG.size(1), D,
                                    dalpha.data_ptr<scalar_t>(), dbeta.data_ptr<scalar_t>(),
                                    dat.data_ptr<scalar_t>());
    rate_backward<scalar_t>(dat, AT, dp);
  });
  at::Tensor dpre = dp.narrow(1, 0, D);
  mm_into(dh, dpre, rate_h, true);  // pre = p_a + h rate_h^T
  at::Tensor drate_h = mm_new(dpre.t(), H.select(0, 0));
  return {dp,
          dh,
          drate_h,
          dalpha,
          dbeta,
          layer_grads[3],
          layer_grads[4],
          layer_grads[5],
          layer_grads[6],
          layer_grads[7],
          layer_grads[8],
          layer_grads[9]};
}

// The ops (csrc/ops.cpp): EI-REHN's layers of one training step and their 10 gradients
// (_Stack.backward); a whole training step (rate, gate, trace, layers) and its 12 gradients.
TORCH_LIBRARY_FRAGMENT(condrnn, m) {
  m.def("ei_rehn_stack_forward(Tensor h, Tensor d, Tensor bx, Tensor weight0, Tensor bias,"
        " Tensor proj, Tensor mix_bias, Tensor hyper_weight, Tensor hyper_bias, Tensor init)"
        " -> Tensor[]");
  m.def("ei_rehn_stack_backward(Tensor grad_h, Tensor d, Tensor weight0, Tensor proj,"
        " Tensor hyper_weight, Tensor H, Tensor SGZ, Tensor GBAR, Tensor HW, Tensor W)"
        " -> Tensor[]");
  m.def("ei_rehn_stack_step_forward(Tensor p, Tensor h, Tensor rate_h, Tensor alpha,"
        " Tensor beta, Tensor weight0, Tensor bias, Tensor proj, Tensor mix_bias,"
        " Tensor hyper_weight, Tensor hyper_bias, Tensor init, int r_max, bool first)"
        " -> (Tensor[], SymInt)");
  m.def("ei_rehn_stack_step_backward(Tensor grad_h, Tensor? grad_d1, Tensor rate_h,"
        " Tensor weight0, Tensor proj, Tensor hyper_weight, Tensor AT, Tensor DG, Tensor MG,"
        " Tensor EG, Tensor H, Tensor SGZ, Tensor GBAR, Tensor HW, Tensor W) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(condrnn, CPU, m) {
  m.impl("ei_rehn_stack_forward", TORCH_FN(ei_rehn_stack_forward));
  m.impl("ei_rehn_stack_backward", TORCH_FN(ei_rehn_stack_backward));
  m.impl("ei_rehn_stack_step_forward", TORCH_FN(ei_rehn_step_forward));
  m.impl("ei_rehn_stack_step_backward", TORCH_FN(ei_rehn_step_backward));
}
