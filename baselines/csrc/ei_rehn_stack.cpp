// EI-REHN's highway layers of one training step, forward and backward, loaded by
// baselines/_kernels.py (``ei_rehn_stack_kernel``) for baselines/_ei_rehn_stack.py.
//
// Exactly ``_Stack.forward`` and ``_Stack.backward`` of baselines/_ei_rehn_stack.py (the equations
// are in its docstring; the Python code is the reference), without a Python call per layer: the
// matmuls are ATen's (``at::mm_out``, ``at::addmm_out`` into preallocated buffers; the weight
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
#include <torch/extension.h>
#include <cmath>
#include <vector>

namespace {

// The forward of layers 0..R-1. Saved for the backward, per layer r: H[r] = h^r (its input),
// SGZ[r + 1] = [s; g; z] (its output, SGZ[0] = init: layer 0's u), GBAR[r], HW[r] = h W0^T,
// AW[r] = acc - w (-w at r = 0) and DIAG[r].
template <typename T>
void forward_layers(at::Tensor& out, const at::Tensor& d, const at::Tensor& bx,
                    const at::Tensor& weight0, const at::Tensor& bias, const at::Tensor& proj,
                    const at::Tensor& mix_bias, const at::Tensor& hyper_weight,
                    const at::Tensor& hyper_bias, at::Tensor& H, at::Tensor& SGZ,
                    at::Tensor& GBAR, at::Tensor& HW, at::Tensor& AW, at::Tensor& DIAG) {
  const int64_t B = d.size(0), R = d.size(1), D = d.size(2), Dz = hyper_weight.size(0);
  const int64_t D2 = 2 * D, D4 = 4 * D, U = D2 + Dz;
  const auto w0_t = weight0.t(), proj_t = proj.t(), hyper_t = hyper_weight.t();
  at::Tensor z = at::empty({B, Dz}, out.options()), wm = at::empty({B, D4}, out.options());
  at::Tensor A = at::empty({2, B, D}, out.options());  // the pre-activations a_s, a_g, then s, g
  at::Tensor As = A.select(0, 0), Ag = A.select(0, 1);
  std::vector<T> acc(B * D2);
  const T* dp = d.data_ptr<T>();
  const T* mbp = mix_bias.data_ptr<T>();
  const T* wmp = wm.data_ptr<T>();
  const T* zp = z.data_ptr<T>();
  T* asp = As.data_ptr<T>();
  T* agp = Ag.data_ptr<T>();
  for (int64_t r = 0; r < R; ++r) {
    at::Tensor sgz = SGZ.select(0, r + 1), h = H.select(0, r), hw = HW.select(0, r);
    at::Tensor gbar = GBAR.select(0, r);
    at::addmm_out(z, hyper_bias, SGZ.select(0, r), hyper_t);
    at::tanh_(z);  // eq. 18
    at::mm_out(wm, z, proj_t);  // [w; gbar's pre-activation - bbar], eqs. 19-21
    at::mm_out(hw, h, w0_t);
    const T* hp = h.data_ptr<T>();
    const T* hwp = hw.data_ptr<T>();
    T* gp = gbar.data_ptr<T>();
    T* awp = AW.select(0, r).data_ptr<T>();
    T* dgp = DIAG.select(0, r).data_ptr<T>();
    for (int64_t b = 0; b < B; ++b) {
      const T* wrow = wmp + b * D4 + D2;
      T* grow = gp + b * D2;
#pragma omp simd
      for (int64_t c = 0; c < D2; ++c) grow[c] = wrow[c] + mbp[c];
    }
    at::sigmoid_(gbar);
    // a = base + gbar * hw + diag * [h; h], diag = w + gbar * (acc - w) (eqs. 17, 22)
    const T* base = r == 0 ? bx.data_ptr<T>() : bias.data_ptr<T>();
    const int64_t base_row = r == 0 ? D2 : 0;
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
            awp[i] = aw;
            dgp[i] = diag;
            arow[j] = brow[c] + gb * hwp[i] + diag * hrow[j];
          }
        } else {
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) {
            const int64_t c = c0 + j, i = o + c;
            const T w = wrow[c], gb = gp[i], aw = accrow[c] - w;
            const T diag = w + gb * aw;
            accrow[c] = accrow[c] + w;
            awp[i] = aw;
            dgp[i] = diag;
            arow[j] = brow[c] + gb * hwp[i] + diag * hrow[j];
          }
        }
      }
    }
    at::tanh_(As);  // s, eq. 22
    at::sigmoid_(Ag);  // g
    T* o = sgz.data_ptr<T>();
    T* hn = r + 1 < R ? H.select(0, r + 1).data_ptr<T>() : out.data_ptr<T>();
    for (int64_t b = 0; b < B; ++b) {
      const T* srow = asp + b * D;
      const T* grow = agp + b * D;
      const T* drow = dp + (b * R + r) * D;
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
// ACC: r > 0 (this layer's acc depends on earlier layers' w).
template <typename T>
struct Rows {
  const T *da, *gbar, *h, *hw, *aw, *diag;
  T *dhw, *dacc, *dw, *dm, *dadiag;
};

template <typename T, bool NEXT, bool ACC>
inline void branch_backward(const Rows<T>& p, int64_t D) {
#pragma omp simd
  for (int64_t j = 0; j < D; ++j) {
    const T da = p.da[j], gb = p.gbar[j];
    p.dhw[j] = da * gb;
    const T ddiag = da * p.h[j];
    const T dgbar = da * p.hw[j] + ddiag * p.aw[j];
    p.dw[j] = (NEXT ? p.dacc[j] + ddiag : ddiag) - ddiag * gb;
    if (ACC) p.dacc[j] = NEXT ? p.dacc[j] + ddiag * gb : ddiag * gb;
    p.dm[j] = dgbar * (T(1) - gb) * gb;  // eqs. 19-21
    p.dadiag[j] = da * p.diag[j];
  }
}

template <typename T>
std::vector<at::Tensor> backward_layers(const at::Tensor& grad_h, const at::Tensor& d,
                                        const at::Tensor& weight0, const at::Tensor& proj,
                                        const at::Tensor& hyper_weight, const at::Tensor& H,
                                        const at::Tensor& SGZ, const at::Tensor& GBAR,
                                        const at::Tensor& HW, const at::Tensor& AW,
                                        const at::Tensor& DIAG) {
  const int64_t B = d.size(0), R = d.size(1), D = d.size(2), Dz = hyper_weight.size(0);
  const int64_t D2 = 2 * D, D4 = 4 * D, U = D2 + Dz;
  const auto opts = grad_h.options();
  at::Tensor DA = at::empty({R, B, D2}, opts), DHW = at::empty({R, B, D2}, opts);
  at::Tensor DPW = at::empty({R, B, D4}, opts), DZ = at::empty({R, B, Dz}, opts);
  at::Tensor dd = at::empty({B, R, D}, opts), du = at::empty({B, U}, opts);
  at::Tensor dh = grad_h.clone(), dh_next = at::empty({B, D}, opts);
  at::Tensor base = at::empty({B, D}, opts), dzz = at::empty({B, Dz}, opts);
  std::vector<T> dacc(B * D2), dadiag(D2);
  const T* dp = d.data_ptr<T>();
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
    const T* awp = AW.select(0, r).data_ptr<T>();
    const T* dgp = DIAG.select(0, r).data_ptr<T>();
    const T* dhp = dh.data_ptr<T>();
    T* dap = DA.select(0, r).data_ptr<T>();
    T* dhwp = DHW.select(0, r).data_ptr<T>();
    T* dpwp = DPW.select(0, r).data_ptr<T>();
    for (int64_t b = 0; b < B; ++b) {
      const T* dhrow = dhp + b * D;
      const T* hrow = hp + b * D;
      const T* srow = o + b * U;
      const T* grow = srow + D;
      const T* drow = dp + (b * R + r) * D;
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
        const Rows<T> rows{darow + c0, gp + o2 + c0, hrow, hwp + o2 + c0, awp + o2 + c0,
                           dgp + o2 + c0, dhwp + o2 + c0, daccrow + c0, dpwrow + c0,
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
    at::addmm_out(dh_next, base, DHW.select(0, r), weight0);  // dh = base + (da gbar) W0
    if (next)
      at::addmm_out(dzz, du.narrow(1, D2, Dz), dpw, proj);
    else
      at::mm_out(dzz, dpw, proj);
    T* dzp = DZ.select(0, r).data_ptr<T>();
    for (int64_t b = 0; b < B; ++b) {  // eq. 18
      const T* zrow = o + b * U + D2;
      const T* dzzrow = dzzp + b * Dz;
      T* dzrow = dzp + b * Dz;
#pragma omp simd
      for (int64_t k = 0; k < Dz; ++k) dzrow[k] = dzzrow[k] * (T(1) - zrow[k] * zrow[k]);
    }
    at::mm_out(du, DZ.select(0, r), hyper_weight);
    std::swap(dh, dh_next);
  }
  const int64_t N = R * B;
  at::Tensor dpw_all = DPW.view({N, D4}), dz_all = DZ.view({N, Dz});
  return {
      dh,
      dd,
      DA.select(0, 0),
      at::mm(DHW.view({N, D2}).t(), H.view({N, D})),
      R > 1 ? DA.narrow(0, 1, R - 1).reshape({(R - 1) * B, D2}).sum(0) : at::Tensor(),
      at::mm(dpw_all.t(), SGZ.narrow(0, 1, R).reshape({N, U}).narrow(1, D2, Dz)),
      dpw_all.narrow(1, D2, D2).sum(0),
      at::mm(dz_all.t(), SGZ.narrow(0, 0, R).reshape({N, U})),
      dz_all.sum(0),
      du.sum(0),
  };
}

void check(const at::Tensor& t, const at::Tensor& ref, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == ref.scalar_type() && t.is_contiguous(),
              "ei_rehn_stack: ", name, " must be a contiguous CPU tensor of h's dtype");
}

}  // namespace

// h_t after the layers of one step and what the backward reads:
// {h, H [R, B, D], SGZ [R + 1, B, 2D + Dz], GBAR, HW, AW, DIAG [R, B, 2D]}.
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
  at::Tensor out = at::empty({B, D}, opts), H = at::empty({R, B, D}, opts);
  at::Tensor SGZ = at::empty({R + 1, B, U}, opts), GBAR = at::empty({R, B, 2 * D}, opts);
  at::Tensor HW = at::empty_like(GBAR), AW = at::empty_like(GBAR), DIAG = at::empty_like(GBAR);
  H.select(0, 0).copy_(h);
  SGZ.select(0, 0).copy_(init.view({1, U}).expand({B, U}));
  AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "ei_rehn_stack_forward", [&] {
    forward_layers<scalar_t>(out, d, bx, weight0, bias, proj, mix_bias, hyper_weight, hyper_bias,
                             H, SGZ, GBAR, HW, AW, DIAG);
  });
  return {out, H, SGZ, GBAR, HW, AW, DIAG};
}

// The 10 gradients of ``_Stack.backward``, in its order (bias's undefined, None, where R = 1).
std::vector<at::Tensor> ei_rehn_stack_backward(at::Tensor grad_h, at::Tensor d,
                                               at::Tensor weight0, at::Tensor proj,
                                               at::Tensor hyper_weight, at::Tensor H,
                                               at::Tensor SGZ, at::Tensor GBAR, at::Tensor HW,
                                               at::Tensor AW, at::Tensor DIAG) {
  for (const at::Tensor* t : {&d, &weight0, &proj, &hyper_weight, &H, &SGZ, &GBAR, &HW, &AW,
                              &DIAG})
    check(*t, grad_h, "every input");
  TORCH_CHECK(grad_h.sizes() == H.select(0, 0).sizes(), "ei_rehn_stack_backward: grad_h shape");
  std::vector<at::Tensor> grads;
  AT_DISPATCH_FLOATING_TYPES(grad_h.scalar_type(), "ei_rehn_stack_backward", [&] {
    grads = backward_layers<scalar_t>(grad_h, d, weight0, proj, hyper_weight, H, SGZ, GBAR, HW,
                                      AW, DIAG);
  });
  return grads;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &ei_rehn_stack_forward, "EI-REHN's layers of one training step");
  m.def("backward", &ei_rehn_stack_backward, "their 10 gradients (_Stack.backward)");
}
