// SA-RNN inference loop for batch 1 (eval semantics), loaded by baselines/_kernels.py.
#include <torch/extension.h>
#include <cmath>
#include <algorithm>
#include <limits>
#include <vector>

// SA-RNN inference for one sequence (batch 1), eval semantics.
// hh [D, 3, D] and ih [D, 3, V+1] are unit-major GRU rows (gates r, z, n; input rows end in the
// bias); w_u [D]; coord [T, D] = W_i x_t + b_u; xs [T, V+1] = [x_t, 1]; h0 [D].
// Returns outputs [T, D] and the update mask [T, D] (same dtype).
template <typename scalar_t>
static void run(const scalar_t* hh, const scalar_t* ih, const scalar_t* wu, const scalar_t* coord,
                const scalar_t* xs, const scalar_t* h0, scalar_t* out, scalar_t* mask,
                int64_t T, int64_t D, int64_t V1, scalar_t slope) {
  std::vector<scalar_t> h(h0, h0 + D), hn(D);
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
    for (int64_t q = 0; q < k; ++q) {  // eq. 7: updated units get the GRU candidate
      const int64_t i = idx[q];
      scalar_t hp[3], xp[3];
      for (int g = 0; g < 3; ++g) {
        const scalar_t* wr = hh + (i * 3 + g) * D;
        const scalar_t* wi = ih + (i * 3 + g) * V1;
        scalar_t a = 0, b = 0;
        const scalar_t* hv = h.data();
#pragma omp simd reduction(+ : a)
        for (int64_t j = 0; j < D; ++j) a += wr[j] * hv[j];
#pragma omp simd reduction(+ : b)
        for (int64_t j = 0; j < V1; ++j) b += wi[j] * x[j];
        hp[g] = a;
        xp[g] = b;
      }
      scalar_t r = scalar_t(1) / (scalar_t(1) + std::exp(-(xp[0] + hp[0])));
      scalar_t z = scalar_t(1) / (scalar_t(1) + std::exp(-(xp[1] + hp[1])));
      scalar_t n = std::tanh(xp[2] + r * hp[2]);
      hn[i] = n + z * (h[i] - n);  // (1 - z) n + z h
    }
    h.swap(hn);
    std::copy(h.begin(), h.end(), out + t * D);
  }
}

std::vector<at::Tensor> sarnn_sequence(at::Tensor hh, at::Tensor ih, at::Tensor wu,
                                       at::Tensor coord, at::Tensor xs, at::Tensor h0,
                                       double slope) {
  hh = hh.contiguous(); ih = ih.contiguous(); wu = wu.contiguous();
  coord = coord.contiguous(); xs = xs.contiguous(); h0 = h0.contiguous();
  const int64_t T = coord.size(0), D = coord.size(1), V1 = xs.size(1);
  auto out = at::empty({T, D}, coord.options());
  auto mask = at::empty({T, D}, coord.options());
  AT_DISPATCH_FLOATING_TYPES(coord.scalar_type(), "sarnn_sequence", [&] {
    run<scalar_t>(hh.data_ptr<scalar_t>(), ih.data_ptr<scalar_t>(), wu.data_ptr<scalar_t>(),
                  coord.data_ptr<scalar_t>(), xs.data_ptr<scalar_t>(), h0.data_ptr<scalar_t>(),
                  out.data_ptr<scalar_t>(), mask.data_ptr<scalar_t>(), T, D, V1,
                  static_cast<scalar_t>(slope));
  });
  return {out, mask};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("sarnn_sequence", &sarnn_sequence, "SA-RNN inference loop for one sequence");
}
