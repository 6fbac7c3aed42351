// SA-RNN inference loop for batch 1 (eval semantics), loaded by baselines/ops/library.py.
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>
#include <cmath>
#include <algorithm>
#include <limits>
#include <vector>

#include "common.h"  // dot, sigmoid

// SA-RNN inference for one sequence (batch 1), eval semantics.
// hh [D, 3, D] and ih [D, 3, V+1] are unit-major GRU rows (gates r, z, n; input rows end in the
// bias); w_u [D]; coord [T, D] = W_i x_t + b_u; xs [T, V+1] = [x_t, 1]; h0 [D].
// before: the reset-before GRU, n = tanh(W_in x + b_n + W_hn (r * h)); every candidate then reads
// r * h of all units, so a step with any update computes the r rows of all units first.
// Returns outputs [T, D] and the update mask [T, D] (same dtype).
template <typename scalar_t>
static void run(const scalar_t* hh, const scalar_t* ih, const scalar_t* wu, const scalar_t* coord,
                const scalar_t* xs, const scalar_t* h0, scalar_t* out, scalar_t* mask,
                int64_t T, int64_t D, int64_t V1, scalar_t slope, bool before) {
  std::vector<scalar_t> h(h0, h0 + D), hn(D), rh(before ? D : 0);
  std::vector<int64_t> idx(D);
  const scalar_t half_eps = std::numeric_limits<scalar_t>::epsilon() / 2;
  for (int64_t t = 0; t < T; ++t) {
    const scalar_t* c = coord + t * D;
    const scalar_t* x = xs + t * V1;
    int64_t k = 0;
    for (int64_t i = 0; i < D; ++i) {  // eqs. 5, 6: u = hard_sigmoid(...) > 0.5
      scalar_t v = wu[i] * h[i];
      v = v + c[i];
      scalar_t s = slope * v;
      bool u = s > half_eps;
      mask[t * D + i] = u ? scalar_t(1) : scalar_t(0);
      hn[i] = h[i];
      if (u) idx[k++] = i;
    }
    if (before && k > 0) {  // r * h of every unit, read by every candidate
      for (int64_t j = 0; j < D; ++j) {
        const scalar_t a = dot(hh + j * 3 * D, h.data(), D);
        const scalar_t b = dot(ih + j * 3 * V1, x, V1);
        rh[j] = sigmoid(b + a) * h[j];
      }
    }
    for (int64_t q = 0; q < k; ++q) {  // eq. 7: updated units get the GRU candidate
      const int64_t i = idx[q];
      const scalar_t* wr = hh + i * 3 * D;
      const scalar_t* wi = ih + i * 3 * V1;
      const scalar_t hz = dot(wr + D, h.data(), D), xz = dot(wi + V1, x, V1);
      const scalar_t xn = dot(wi + 2 * V1, x, V1);
      const scalar_t z = sigmoid(xz + hz);
      scalar_t n;
      if (before) {
        n = std::tanh(xn + dot(wr + 2 * D, rh.data(), D));
      } else {
        const scalar_t r = sigmoid(dot(wi, x, V1) + dot(wr, h.data(), D));
        n = std::tanh(xn + r * dot(wr + 2 * D, h.data(), D));
      }
      hn[i] = n + z * (h[i] - n);  // (1 - z) n + z h
    }
    h.swap(hn);
    std::copy(h.begin(), h.end(), out + t * D);
  }
}

std::vector<at::Tensor> sarnn_sequence(at::Tensor hh, at::Tensor ih, at::Tensor wu,
                                       at::Tensor coord, at::Tensor xs, at::Tensor h0,
                                       double slope, bool before) {
  hh = hh.contiguous(); ih = ih.contiguous(); wu = wu.contiguous();
  coord = coord.contiguous(); xs = xs.contiguous(); h0 = h0.contiguous();
  const int64_t T = coord.size(0), D = coord.size(1), V1 = xs.size(1);
  auto out = at::empty({T, D}, coord.options());
  auto mask = at::empty({T, D}, coord.options());
  AT_DISPATCH_FLOATING_TYPES(coord.scalar_type(), "sarnn_sequence", [&] {
    run<scalar_t>(hh.data_ptr<scalar_t>(), ih.data_ptr<scalar_t>(), wu.data_ptr<scalar_t>(),
                  coord.data_ptr<scalar_t>(), xs.data_ptr<scalar_t>(), h0.data_ptr<scalar_t>(),
                  out.data_ptr<scalar_t>(), mask.data_ptr<scalar_t>(), T, D, V1,
                  static_cast<scalar_t>(slope), before);
  });
  return {out, mask};
}

// The op (csrc/ops.cpp): SA-RNN's inference loop for one sequence, {outputs, mask}.
TORCH_LIBRARY_FRAGMENT(condrnn, m) {
  m.def("sarnn_sequence(Tensor hh, Tensor ih, Tensor wu, Tensor coord, Tensor xs, Tensor h0,"
        " float slope, bool before) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(condrnn, CPU, m) { m.impl("sarnn_sequence", TORCH_FN(sarnn_sequence)); }
