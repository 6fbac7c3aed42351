// Skip RNN's (Skip-GRU, baselines/skip_rnn.py) inference over a whole sequence, eval semantics,
// loaded by baselines/ops/skip_rnn_infer.py: the fused kernel of ``SkipRNN.fast_forward``.
//
// Step t of each sequence b, from (h_{t-1}, P, C) (the gate of ``SkipRNN._step``):
//     P   = sigmoid(w_p . h_{t-1} + b_p)   only where step t - 1 updated (h~_{t-1} = h_{t-1}
//                                          there); else P is held
//     u~  = C + min(P, 1 - C)              TF's Minimum: ``P <= 1 - C ? P : 1 - C``
//     u   = round(u~)                      half to even (std::nearbyint, as torch.round)
//     C   = u > 0 ? 0 : u~                 ``(1 - u) u~`` for u in {0, 1}
//     h_t = GRU(x_t, h_{t-1}) where u = 1, else an exact copy of h_{t-1}
// The decisions are per sequence: a step gathers the sequences that update (their inputs and
// states, n rows) and runs the GRU for them alone, the products [n, V] [V, 3D] and [n, D] [D, 3D]
// (gemm.h's ``mm_into``; W_hh^T in column panels, ``panel_mm``, at n = 1 the kernel's own sums
// of scaled rows): a weight row is read once a step for all of them, and the products' cost
// follows the number of updating sequences, not the batch. A step no sequence updates copies
// the states and reads no weight; the w_p projection is computed for the sequences that
// updated at the step before only. Where every sequence updates, the products read the inputs
// and the states in place (no gather).
//
// The gate's arithmetic is the dense loop's, operation for operation in the tensors' dtype
// (built with -ffp-contract=off): given the same p, u~, u, P and C are bit for bit the dense
// loop's. p's dot product is summed in another order than ``F.linear``'s, so p agrees to
// rounding and a u~ within rounding of 0.5 could round the other way; the GRU's products too
// (outputs to rounding). The GRU forms: reset after the matmul, ``n = tanh(x_n + r (W_n h))``,
// ``h~ = lerp(n, h, z)`` (``gru_step_lean``), or before it, ``n = tanh(x_n + W_n (r h))``,
// ``h~ = (1 - z) n + z h`` (``gru_step_before``); the input terms are ``(x W_i^T) + b``, then
// ``+ W_h h``, as the dense loop adds them.
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <torch/library.h>

#include "vec.h"  // at::vec at this CPU's widest vectors

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common.h"  // dot, sigmoid, torch_lerp
#include "gemm.h"  // mm_into: the products
#include "panel.h"  // matrix, panel_mm: products with column-panel weights

namespace {

using at::vec::Vectorized;

// x [B, S, V]; h0 [B, D]; wi [V, 3D] = W_ih^T (gates r, z, n); wh: W_hh^T [D, 3D], gate by gate
// ([D, D] each), as column panels of w; bias [3D]; w_p [D]; b_p. Writes the states hs [B, S, D],
// the decisions u [B, S], and the final P [B] (P_{S-1}) and C [B] (C_S).
template <typename T>
void run(const T* x, const T* h0, const T* wi, const T* wh, const T* bias, const T* wp, T bp,
         T* out, T* U, T* P, T* C, int64_t B, int64_t S, int64_t V, int64_t D, int64_t w,
         bool before) {
  const int64_t G = 3 * D;
  std::vector<T> xg(B * V), hg(B * D), a(B * G), hp(B * G), rh(before ? B * D : 0);
  std::vector<int64_t> idx(B), prev(B);
  int64_t np = 0;  // the sequences that updated at the step before: prev[:np]
  for (int64_t b = 0; b < B; ++b) P[b] = T(1), C[b] = T(0);  // P_0 = 1, C_0 = 0
  for (int64_t t = 0; t < S; ++t) {
    // h_{t-1} of sequence b: its output of the step before, or h_0
    auto state = [&](int64_t b) { return t ? out + (b * S + t - 1) * D : h0 + b * D; };
    for (int64_t q = 0; q < np; ++q) {  // p_{t-1} where step t - 1 updated
      const int64_t b = prev[q];
      P[b] = sigmoid(dot(wp, state(b), D) + bp);
    }
    int64_t n = 0;
    for (int64_t b = 0; b < B; ++b) {  // the gate
      const T c = C[b], om = T(1) - c;
      const T ut = c + (P[b] <= om ? P[b] : om);
      const T u = std::nearbyint(ut);
      C[b] = u > 0 ? T(0) : ut;
      U[b * S + t] = u;
      if (u > 0) idx[n++] = b;
    }
    if (n > 0) {  // the GRU of the n updating sequences
      const T* X;
      const T* H;
      int64_t ldx, ldh;
      if (n == B) {  // in place
        X = x + t * V, ldx = S * V;
        H = state(0), ldh = t ? S * D : D;
      } else {  // gathered
        for (int64_t q = 0; q < n; ++q) {
          std::memcpy(xg.data() + q * V, x + (idx[q] * S + t) * V, V * sizeof(T));
          std::memcpy(hg.data() + q * D, state(idx[q]), D * sizeof(T));
        }
        X = xg.data(), ldx = V;
        H = hg.data(), ldh = D;
      }
      mm_into(matrix(a.data(), n, G, G), matrix(X, n, V, ldx), matrix(wi, V, G, G), false);
      for (int64_t g = 0; g < (before ? 2 : 3); ++g)  // W_h h (of r and z only, before)
        panel_mm(hp.data() + g * D, G, H, ldh, n, wh + g * D * D, D, D, w);
      for (int64_t q = 0; q < n; ++q) {  // r, z
        T* ar = a.data() + q * G;
        const T* hr = hp.data() + q * G;
#pragma omp simd
        for (int64_t j = 0; j < 2 * D; ++j) ar[j] = (ar[j] + bias[j]) + hr[j];
        sigmoid_vec(ar, 2 * D);
      }
      if (before) {  // r h, then its product with W_n
        for (int64_t q = 0; q < n; ++q) {
          const T* r = a.data() + q * G;
          const T* h = H + q * ldh;
          T* s = rh.data() + q * D;
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) s[j] = r[j] * h[j];
        }
        panel_mm(hp.data() + 2 * D, G, rh.data(), D, n, wh + 2 * D * D, D, D, w);
      }
      for (int64_t q = 0; q < n; ++q) {  // n, then h~ into the sequence's output
        T* ar = a.data() + q * G;
        const T* hn = hp.data() + q * G + 2 * D;
        const T* bn = bias + 2 * D;
        T* c = ar + 2 * D;
        if (before) {
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) c[j] = (c[j] + bn[j]) + hn[j];
        } else {
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) c[j] = (c[j] + bn[j]) + ar[j] * hn[j];
        }
        tanh_vec(c, D);
        const T* z = ar + D;
        const T* h = H + q * ldh;
        T* o = out + (idx[q] * S + t) * D;
        if (before) {
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) o[j] = (T(1) - z[j]) * c[j] + z[j] * h[j];
        } else {
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) o[j] = torch_lerp(c[j], h[j], z[j]);
        }
      }
    }
    for (int64_t b = 0, q = 0; b < B; ++b) {  // the others: exact copies
      if (q < n && idx[q] == b) {
        ++q;
        continue;
      }
      std::memcpy(out + (b * S + t) * D, state(b), D * sizeof(T));
    }
    std::copy(idx.begin(), idx.begin() + n, prev.begin());
    np = n;
  }
}

std::vector<at::Tensor> skip_rnn_infer_sequence(at::Tensor x, at::Tensor h0, at::Tensor wi,
                                                at::Tensor wh, at::Tensor bias, at::Tensor w_p,
                                                at::Tensor b_p, int64_t panel, bool before) {
  x = x.contiguous(); h0 = h0.contiguous(); wi = wi.contiguous(); wh = wh.contiguous();
  bias = bias.contiguous(); w_p = w_p.contiguous(); b_p = b_p.contiguous();
  TORCH_CHECK(x.dim() == 3 && h0.dim() == 2, "skip_rnn_infer_sequence: x [B, T, V], h0 [B, D]");
  const int64_t B = x.size(0), S = x.size(1), V = x.size(2), D = h0.size(1);
  TORCH_CHECK(panel >= 1, "skip_rnn_infer_sequence: panel >= 1");
  TORCH_CHECK(h0.size(0) == B && wi.numel() == V * 3 * D && wh.numel() == D * 3 * D &&
                  bias.numel() == 3 * D && w_p.numel() == D && b_p.numel() == 1,
              "skip_rnn_infer_sequence: inconsistent shapes");
  for (const auto& t : {h0, wi, wh, bias, w_p, b_p})
    TORCH_CHECK(t.scalar_type() == x.scalar_type(), "skip_rnn_infer_sequence: one dtype");
  auto out = at::empty({B, S, D}, x.options());
  auto u = at::empty({B, S}, x.options());
  auto up = at::empty({B}, x.options());
  auto cum = at::empty({B}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "skip_rnn_infer_sequence", [&] {
    run<scalar_t>(x.data_ptr<scalar_t>(), h0.data_ptr<scalar_t>(), wi.data_ptr<scalar_t>(),
                  wh.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>(), w_p.data_ptr<scalar_t>(),
                  b_p.data_ptr<scalar_t>()[0], out.data_ptr<scalar_t>(), u.data_ptr<scalar_t>(),
                  up.data_ptr<scalar_t>(), cum.data_ptr<scalar_t>(), B, S, V, D, panel,
                  before);
  });
  return {out, u, up, cum};
}

}  // namespace

// The op (csrc/ops.cpp): Skip RNN's inference over the whole sequence, {hs, u, P, C}.
TORCH_LIBRARY_FRAGMENT(condrnn, m) {
  m.def("skip_rnn_infer_sequence(Tensor x, Tensor h0, Tensor wi, Tensor wh, Tensor bias,"
        " Tensor w_p, Tensor b_p, int panel, bool before) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(condrnn, CPU, m) {
  m.impl("skip_rnn_infer_sequence", TORCH_FN(skip_rnn_infer_sequence));
}
