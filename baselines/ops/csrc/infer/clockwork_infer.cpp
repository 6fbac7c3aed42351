// The Clockwork RNN's (baselines/clockwork_rnn.py) inference over a whole sequence, loaded by
// baselines/ops/clockwork_infer.py: the fused kernel of ``ClockworkRNN.fast_forward``.
//
// The D units form g modules of k; module j (0-based, sorted by period) is active at step t iff
// its period divides t + phase, so the active modules are a prefix 0 .. a_t - 1 (every faster
// period divides a slower one) and the schedule is the same for every sequence (the caller
// gives a_t). Eq. 1 for an active module j reads the state of the modules j' >= j (W_H is block
// upper-triangular) and the input:
//     h_t[jk : (j+1)k] = tanh([h_{t-1}[jk:], x_t, 1] P_j),
//     P_j = [W_H[jk : (j+1)k, jk:]^T; W_I[jk : (j+1)k]^T; b[jk : (j+1)k]]   ((D - jk + V + 1) x k)
// and the inactive modules are exact copies. ``packed`` holds P_0, ..., P_{g-1} one after the
// other, each as column panels (the caller packs them once): a step reads only the nonzero
// blocks of the active modules' rows, contiguously, one product per module and panel
// (``panel_mm``: at batch 1 the kernel's own sums of scaled rows, else ATen's mm) on the batch's
// state rows ``[h | x_t | 1]``, where module j's operand is the row's tail from jk on.
// The products sum in another order than the dense loop's ``addmm`` (and the input terms are in
// the same sum as the recurrent ones here, added after them there): outputs agree to rounding;
// the inactive modules' values are bit for bit the dense loop's (copies).
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <torch/library.h>

#include "vec.h"  // at::vec at this CPU's widest vectors

#include <algorithm>
#include <cstring>
#include <vector>

#include "gemm.h"  // mm_into: the products
#include "panel.h"  // matrix, panel_mm: products with column-panel weights

namespace {

using at::vec::Vectorized;

// packed: P_0 .. P_{g-1}, each as column panels of w; x [B, S, V]; h0 [B, D]; active [S] (a_t,
// active modules). Writes the states hs [B, S, D].
template <typename T>
void run(const T* packed, const T* x, const T* h0, const int64_t* active, T* out, int64_t B,
         int64_t S, int64_t V, int64_t D, int64_t k, int64_t w) {
  const int64_t g = D / k, W = D + V + 1;
  std::vector<int64_t> offset(g + 1, 0);  // P_j at packed + offset[j]
  for (int64_t j = 0; j < g; ++j) offset[j + 1] = offset[j] + (W - j * k) * k;
  std::vector<T> state(B * W), pre(B * D);  // the rows [h | x_t | 1]; the active pre-activations
  for (int64_t b = 0; b < B; ++b) {
    std::memcpy(state.data() + b * W, h0 + b * D, D * sizeof(T));
    state[b * W + D + V] = T(1);
  }
  for (int64_t t = 0; t < S; ++t) {
    const int64_t a = active[t], n = a * k;
    if (a > 0) {
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(state.data() + b * W + D, x + (b * S + t) * V, V * sizeof(T));
      for (int64_t j = 0; j < a; ++j) {  // module j reads the state from jk on
        const int64_t rows = W - j * k;
        panel_mm(pre.data() + j * k, D, state.data() + j * k, W, B, packed + offset[j], rows, k,
                 w);
      }
      for (int64_t b = 0; b < B; ++b)  // eq. 1's tanh into the state; the rest stays
        at::vec::map([](Vectorized<T> v) { return v.tanh(); }, state.data() + b * W,
                     pre.data() + b * D, n);
    }
    for (int64_t b = 0; b < B; ++b)
      std::memcpy(out + (b * S + t) * D, state.data() + b * W, D * sizeof(T));
  }
}

at::Tensor clockwork_infer_sequence(at::Tensor packed, at::Tensor x, at::Tensor h0,
                                    at::Tensor active, int64_t module_size, int64_t panel) {
  packed = packed.contiguous(); x = x.contiguous(); h0 = h0.contiguous();
  active = active.contiguous();
  TORCH_CHECK(x.dim() == 3 && h0.dim() == 2, "clockwork_infer_sequence: x [B, T, V], h0 [B, D]");
  const int64_t B = x.size(0), S = x.size(1), V = x.size(2), D = h0.size(1), k = module_size;
  TORCH_CHECK(k >= 1 && D % k == 0, "clockwork_infer_sequence: D must be a multiple of k");
  TORCH_CHECK(panel >= 1, "clockwork_infer_sequence: panel >= 1");
  const int64_t g = D / k;
  TORCH_CHECK(h0.size(0) == B && active.numel() == S && active.scalar_type() == at::kLong &&
                  packed.numel() == k * (g * (D + V + 1) - k * g * (g - 1) / 2),
              "clockwork_infer_sequence: inconsistent shapes");
  TORCH_CHECK(packed.scalar_type() == x.scalar_type() && h0.scalar_type() == x.scalar_type(),
              "clockwork_infer_sequence: one dtype");
  const int64_t* ap = active.data_ptr<int64_t>();
  for (int64_t t = 0; t < S; ++t)
    TORCH_CHECK(ap[t] >= 0 && ap[t] <= g, "clockwork_infer_sequence: active modules in [0, g]");
  auto out = at::empty({B, S, D}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "clockwork_infer_sequence", [&] {
    run<scalar_t>(packed.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), h0.data_ptr<scalar_t>(),
                  ap, out.data_ptr<scalar_t>(), B, S, V, D, k, panel);
  });
  return out;
}

}  // namespace

// The op (csrc/ops.cpp): the Clockwork RNN's inference over the whole sequence, its states.
TORCH_LIBRARY_FRAGMENT(condrnn, m) {
  m.def("clockwork_infer_sequence(Tensor packed, Tensor x, Tensor h0, Tensor active,"
        " int module_size, int panel) -> Tensor");
}

TORCH_LIBRARY_IMPL(condrnn, CPU, m) {
  m.impl("clockwork_infer_sequence", TORCH_FN(clockwork_infer_sequence));
}
