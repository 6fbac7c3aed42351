// VC-RNN inference loop for batch 1 (eval semantics), loaded by baselines/ops/library.py.
//
// The update decisions are computed from the scheduler's m_t with the same IEEE operations as
// the PyTorch code (elementwise products and differences rounded to the dtype one at a time;
// built with -ffp-contract=off), and both sigmoids of the decision chain are ATen's own
// at::sigmoid_out on tensors laid out as in the dense forward at batch 1 (m: one element; the
// soft mask: D contiguous elements), so each value takes the same (vectorised or scalar) branch
// of ATen's kernel and rounds identically. Given the same m_t, the mask and the soft mask e are
// bit for bit the dense path's; outputs agree to rounding (dot products sum in another order).
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sigmoid.h>
#include <torch/library.h>
#include <cmath>
#include <vector>

#include "common.h"  // dot, sigmoid, torch_lerp

// One sequence. hh [D, 3, D] and ih [D, 3, V+1] are unit-major GRU rows (gates r, z, n; input
// rows end in the bias); sched_h [D]; sched_x [T] = w_x . x_t + b; xs [T, V+1] = [x_t, 1];
// index [D] = 1..D. masked: V = D and the GRU reads e * x. before: the reset-before GRU.
// Writes outputs [T, D], the update mask [T, D] and m [T].
template <typename scalar_t>
static void run(const scalar_t* hh, const scalar_t* ih, const scalar_t* sched_h,
                const scalar_t* sched_x, const scalar_t* xs, const scalar_t* index,
                scalar_t* out, scalar_t* mask, scalar_t* m_out, int64_t T, int64_t D, int64_t V1,
                double sharpness, double eps, bool masked, bool before) {
  // Python scalars meet tensors of the dtype: torch casts them to it (1 - eps in double first).
  const scalar_t sharp = static_cast<scalar_t>(sharpness);
  const scalar_t lo = static_cast<scalar_t>(eps), hi = static_cast<scalar_t>(1.0 - eps);
  const scalar_t Ds = static_cast<scalar_t>(D);
  const auto opts = at::TensorOptions().dtype(c10::CppTypeToScalarType<scalar_t>::value);
  at::Tensor pre = at::empty({1}, opts), m_t = at::empty({1}, opts);
  at::Tensor arg = at::empty({D}, opts), soft = at::empty({D}, opts);
  scalar_t* pre_p = pre.data_ptr<scalar_t>();
  const scalar_t* m_p = m_t.data_ptr<scalar_t>();
  scalar_t* arg_p = arg.data_ptr<scalar_t>();
  const scalar_t* soft_p = soft.data_ptr<scalar_t>();
  std::vector<scalar_t> h(D, scalar_t(0)), e(D), hbar(D), xbar(masked ? D : 0), rh(before ? D : 0);
  std::vector<scalar_t> xr(D), xz(D), xn(D), z(before ? D : 0);
  for (int64_t t = 0; t < T; ++t) {
    const scalar_t* x = xs + t * V1;
    pre_p[0] = sched_x[t] + dot(sched_h, h.data(), D);  // scheduler
    at::sigmoid_out(m_t, pre);
    const scalar_t m = m_p[0];
    m_out[t] = m;
    const scalar_t mD = m * Ds;
    for (int64_t i = 0; i < D; ++i) arg_p[i] = sharp * (mD - index[i]);
    at::sigmoid_out(soft, arg);  // the soft mask
    int64_t k = 0;  // the prefix holding every updated unit
    scalar_t* mrow = mask + t * D;
    for (int64_t i = 0; i < D; ++i) {  // Thr_eps, u = e > 0
      const scalar_t v = soft_p[i];
      e[i] = v > hi ? scalar_t(1) : (v < lo ? scalar_t(0) : v);
      const bool u = e[i] > 0;
      mrow[i] = u ? scalar_t(1) : scalar_t(0);
      if (u) k = i + 1;
    }
    for (int64_t i = 0; i < k; ++i) hbar[i] = e[i] * h[i];  // 0 beyond k: columns [:k] only
    for (int64_t i = 0; i < k; ++i) {  // the input terms W_i x-bar + b of the prefix rows
      const scalar_t* wi = ih + i * 3 * V1;
      if (masked) {  // x-bar = e * x is 0 beyond k too
        if (i == 0)
          for (int64_t j = 0; j < k; ++j) xbar[j] = e[j] * x[j];
        xr[i] = dot(wi, xbar.data(), k) + wi[V1 - 1];
        xz[i] = dot(wi + V1, xbar.data(), k) + wi[2 * V1 - 1];
        xn[i] = dot(wi + 2 * V1, xbar.data(), k) + wi[3 * V1 - 1];
      } else {
        xr[i] = dot(wi, x, V1);
        xz[i] = dot(wi + V1, x, V1);
        xn[i] = dot(wi + 2 * V1, x, V1);
      }
    }
    scalar_t* hn = out + t * D;
    if (before) {  // r and z of the prefix first: every candidate reads r * h-bar
      for (int64_t i = 0; i < k; ++i) {
        const scalar_t* wr = hh + i * 3 * D;
        rh[i] = sigmoid(xr[i] + dot(wr, hbar.data(), k)) * hbar[i];
        z[i] = sigmoid(xz[i] + dot(wr + D, hbar.data(), k));
      }
      for (int64_t i = 0; i < k; ++i) {
        const scalar_t n = std::tanh(xn[i] + dot(hh + i * 3 * D + 2 * D, rh.data(), k));
        hn[i] = torch_lerp(h[i], torch_lerp(n, hbar[i], z[i]), e[i]);
      }
    } else {
      for (int64_t i = 0; i < k; ++i) {
        const scalar_t* wr = hh + i * 3 * D;
        const scalar_t r = sigmoid(xr[i] + dot(wr, hbar.data(), k));
        const scalar_t zi = sigmoid(xz[i] + dot(wr + D, hbar.data(), k));
        const scalar_t n = std::tanh(xn[i] + r * dot(wr + 2 * D, hbar.data(), k));
        // e = 0 or 1: h or the candidate
        hn[i] = torch_lerp(h[i], torch_lerp(n, hbar[i], zi), e[i]);
      }
    }
    for (int64_t i = k; i < D; ++i) hn[i] = h[i];  // skipped units: an exact copy
    std::copy(hn, hn + D, h.begin());
  }
}

std::vector<at::Tensor> vcrnn_sequence(at::Tensor hh, at::Tensor ih, at::Tensor sched_h,
                                       at::Tensor sched_x, at::Tensor xs, at::Tensor index,
                                       double sharpness, double eps, bool masked, bool before) {
  hh = hh.contiguous(); ih = ih.contiguous(); sched_h = sched_h.contiguous();
  sched_x = sched_x.contiguous(); xs = xs.contiguous(); index = index.contiguous();
  const int64_t T = xs.size(0), V1 = xs.size(1), D = index.size(0);
  TORCH_CHECK(hh.numel() == 3 * D * D && ih.numel() == 3 * D * V1 && sched_h.numel() == D &&
                  sched_x.numel() == T && (!masked || V1 == D + 1),
              "vcrnn_sequence: inconsistent shapes");
  auto out = at::empty({T, D}, xs.options());
  auto mask = at::empty({T, D}, xs.options());
  auto m = at::empty({T}, xs.options());
  AT_DISPATCH_FLOATING_TYPES(xs.scalar_type(), "vcrnn_sequence", [&] {
    run<scalar_t>(hh.data_ptr<scalar_t>(), ih.data_ptr<scalar_t>(), sched_h.data_ptr<scalar_t>(),
                  sched_x.data_ptr<scalar_t>(), xs.data_ptr<scalar_t>(),
                  index.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
                  mask.data_ptr<scalar_t>(), m.data_ptr<scalar_t>(), T, D, V1, sharpness, eps,
                  masked, before);
  });
  return {out, mask, m};
}

// The op (csrc/ops.cpp): VC-RNN's inference loop for one sequence, {outputs, mask, m}.
TORCH_LIBRARY_FRAGMENT(condrnn, m) {
  m.def("vcrnn_sequence(Tensor hh, Tensor ih, Tensor sched_h, Tensor sched_x, Tensor xs,"
        " Tensor index, float sharpness, float eps, bool masked, bool before) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(condrnn, CPU, m) { m.impl("vcrnn_sequence", TORCH_FN(vcrnn_sequence)); }
