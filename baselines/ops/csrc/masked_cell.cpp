// A masked recurrent cell over a whole sequence, forward and backward, loaded by
// baselines/ops/masked_cell.py (``masked_cell_kernel``), which Phased LSTM (LSTM cell), Random
// Updates (reset-after GRU) and the Clockwork RNN (tanh cell) train with. Each step is a cell
// candidate from the step's input terms xp_t (W_i x_t + b, computed before) and h_{t-1}, then the
// per-unit update ``h_t = lerp(h_{t-1}, h~_t, m_t)`` (and, for the LSTM,
// ``c_t = lerp(c_{t-1}, c~_t, m_t)``) with a mask or gate m [B, T, D] computed before:
//     tanh: h~ = tanh(xp + W h)
//     gru:  [r; z] = sigmoid(xp_rz + W_rz h); n = tanh(xp_n + r * (W_n h)); h~ = lerp(n, h, z)
//     lstm: [i; f; g; o] = [s; s; tanh; s](xp + W h); c~ = f c + i g; h~ = o tanh(c~)
// the equations of the methods' per-step PyTorch code (the reference), whose backward
// ``backward`` writes out: the gradient of xp, h_0, c_0, W and m.
//
// A step at the paper sizes is a few microseconds of arithmetic, so nothing in the loop but the
// matmuls goes through ATen's dispatcher or makes a tensor. The matmuls (one per step each way,
// the weight's gradient one call over all steps) are ATen's, on views of the kernel's buffers
// (csrc/gemm.h says why no GEMM of the project's own): equal to the PyTorch path's products to
// float rounding (a BLAS may sum over k in another order). Tanh and
// sigmoid are ATen's vectorised functions (``at::vec``, SLEEF; AVX512 or AVX2 where the CPU has
// them, else ATen's portable vectors) over a step's contiguous buffers, every other elementwise
// part a plain loop over the B x D units; lerp rounds as torch's scalar lerp (an exact copy where
// m is 0 or 1). Built with -ffp-contract=off: equal to the PyTorch path to float rounding (its
// lerp and addcmul may fuse a multiply-add, its activations may take another vector width), not
// bit for bit.
//
// Layout: the input terms xp and their gradient are time-major [T, B, GD] (a step's rows are
// contiguous; ``library.input_terms`` computes them so), the mask m, the states hs and m's
// gradient batch-major [B, T, D], as the methods hold them. What only the backward reads is
// time-major: H [T, B, D], the states h_{t-1} each step starts from; A [T, B, GD], the gate
// activations; X [T, B, D], the GRU's W_n h or the LSTM's tanh(c~); C [T + 1, B, D], the LSTM's
// cell states.
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>
#include "common.h"  // torch_lerp
#include "gemm.h"  // mm_into
#include "vec.h"  // at::vec at this CPU's widest vectors

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace {

using at::vec::Vectorized;

enum Cell : int64_t { TANH = 0, GRU = 1, LSTM = 2 };

// The sequence's buffers (the states, the gates and their gradients: hundreds of MB at the adding
// task's sizes) come from a pool that keeps the memory of freed ones for the next call of the
// same size, the next training step: fresh, each would be mapped and faulted in page by page
// (about 40 % of a step at B 256, T 500, D 128), where torch's fused cell allocates a step's
// small tensors from the heap. At most ``kHeld`` bytes are kept.
class Pool {
 public:
  static constexpr size_t kHeld = size_t(1) << 30;
  void* get(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(bytes);
      if (it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        held_ -= bytes;
        return p;
      }
    }
    void* p = nullptr;
    if (posix_memalign(&p, 64, bytes) != 0) throw std::bad_alloc();
    return p;
  }
  void put(void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (held_ + bytes > kHeld) {
      std::free(p);
      return;
    }
    free_.emplace(bytes, p);
    held_ += bytes;
  }
  int64_t held() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(held_);
  }

 private:
  std::mutex mu_;
  std::unordered_multimap<size_t, void*> free_;
  size_t held_ = 0;
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: a tensor may outlive the statics at exit
  return *p;
}

// at::empty(sizes, opts) on the pool's memory.
at::Tensor pooled(at::IntArrayRef sizes, const at::TensorOptions& opts) {
  size_t n = 1;
  for (auto s : sizes) n *= static_cast<size_t>(s);
  const size_t bytes = std::max<size_t>(n * c10::elementSize(opts.dtype().toScalarType()), 64);
  return at::from_blob(pool().get(bytes), sizes, [bytes](void* p) { pool().put(p, bytes); },
                       opts);
}

template <typename T>
at::Tensor view(const T* p, int64_t rows, int64_t cols, int64_t ld, bool trans) {
  auto t = at::from_blob(const_cast<T*>(p), {trans ? cols : rows, trans ? rows : cols},
                         {ld, 1}, at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value));
  return trans ? t.t() : t;
}

// Row-major C [M, N] = op(A) [M, K] B [K, N] (+ C where accumulate); lda, ldb, ldc are the
// row strides as stored: ATen's product on views of the same memory (csrc/gemm.h). M, N, K >= 1.
template <typename T>
void mm(bool ta, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
        int64_t ldb, bool accumulate, T* C, int64_t ldc) {
  mm_into(view(C, M, N, ldc, false), view(A, M, K, lda, ta), view(B, K, N, ldb, false),
          accumulate);
}

template <typename T, int64_t cell>
std::vector<at::Tensor> forward(const at::Tensor& xp, const at::Tensor& h0, const at::Tensor& c0,
                                const at::Tensor& weight, const at::Tensor& m) {
  const int64_t S = xp.size(0), B = xp.size(1), GD = xp.size(2), D = h0.size(1);
  const auto opts = xp.options();
  at::Tensor hs = pooled({B, S, D}, opts), H = pooled({S, B, D}, opts);
  at::Tensor A = pooled({S, B, GD}, opts);
  at::Tensor X = cell == TANH ? at::empty({0}, opts) : pooled({S, B, D}, opts);
  at::Tensor C = cell == LSTM ? pooled({S + 1, B, D}, opts) : at::empty({0}, opts);
  at::Tensor hp = cell == GRU ? at::empty({B, GD}, opts) : at::Tensor();
  const T* xpp = xp.data_ptr<T>();
  const T* mp = m.data_ptr<T>();
  T* hsp = hs.data_ptr<T>();
  T* Hp = H.data_ptr<T>();
  T* Ap = A.data_ptr<T>();
  T* Xp = cell == TANH ? nullptr : X.data_ptr<T>();
  T* Cp = cell == LSTM ? C.data_ptr<T>() : nullptr;
  T* hpp = cell == GRU ? hp.data_ptr<T>() : nullptr;
  const at::Tensor wt = weight.t().contiguous();  // W^T [D, GD]: h W^T reads its rows
  const T* wtp = wt.data_ptr<T>();
  std::memcpy(Hp, h0.data_ptr<T>(), B * D * sizeof(T));
  if (cell == LSTM) std::memcpy(Cp, c0.data_ptr<T>(), B * D * sizeof(T));
  for (int64_t t = 0; t < S; ++t) {
    const T* h = Hp + t * B * D;  // h_{t-1}, [B, D]
    const T* x = xpp + t * B * GD;
    T* a = Ap + t * B * GD;
    if (cell == GRU) {
      mm<T>(false, B, GD, D, h, D, wtp, GD, false, hpp, GD);  // W h
      T* xn = Xp + t * B * D;
      for (int64_t b = 0; b < B; ++b) {
        const T* xr = x + b * GD;
        const T* hr = hpp + b * GD;
        T* ar = a + b * GD;
#pragma omp simd
        for (int64_t c = 0; c < 2 * D; ++c) ar[c] = xr[c] + hr[c];
        sigmoid_vec(ar, 2 * D);
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) {
          xn[b * D + j] = hr[2 * D + j];
          ar[2 * D + j] = xr[2 * D + j] + ar[j] * hr[2 * D + j];
        }
        tanh_vec(ar + 2 * D, D);
      }
    } else {
      std::memcpy(a, x, B * GD * sizeof(T));
      mm<T>(false, B, GD, D, h, D, wtp, GD, true, a, GD);  // xp + W h
      if (cell == TANH) {
        tanh_vec(a, B * GD);
      } else {
        const T* cp = Cp + t * B * D;
        T* cn = Cp + (t + 1) * B * D;
        T* tc = Xp + t * B * D;
        for (int64_t b = 0; b < B; ++b) {
          T* g = a + b * GD;
          sigmoid_vec(g, 2 * D);
          tanh_vec(g + 2 * D, D);
          sigmoid_vec(g + 3 * D, D);
          const T* w = mp + (b * S + t) * D;
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) {
            const int64_t i = b * D + j;
            const T fc = g[D + j] * cp[i], ig = g[j] * g[2 * D + j];
            const T ct = fc + ig;  // eq. 8 of Phased LSTM
            tc[i] = ct;
            cn[i] = torch_lerp(cp[i], ct, w[j]);
          }
        }
        tanh_vec(tc, B * D);
      }
    }
    const T* xs = cell == LSTM ? Xp + t * B * D : nullptr;
    T* hn = t + 1 < S ? Hp + (t + 1) * B * D : nullptr;
    for (int64_t b = 0; b < B; ++b) {
      const T* g = a + b * GD;
      const T* hrow = h + b * D;
      const T* w = mp + (b * S + t) * D;
      T* out = hsp + (b * S + t) * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        T cand;
        if (cell == TANH)
          cand = g[j];
        else if (cell == GRU)
          cand = torch_lerp(g[2 * D + j], hrow[j], g[D + j]);
        else
          cand = g[3 * D + j] * xs[b * D + j];
        out[j] = torch_lerp(hrow[j], cand, w[j]);
      }
      if (hn != nullptr) std::memcpy(hn + b * D, out, D * sizeof(T));
    }
  }
  at::Tensor cT = cell == LSTM ? C.select(0, S).clone() : at::empty({0}, opts);
  return {hs, cT, H, A, X, C};
}

template <typename T, int64_t cell>
std::vector<at::Tensor> backward(const at::Tensor& grad_hs, const at::Tensor& grad_c,
                                 const at::Tensor& weight, const at::Tensor& m,
                                 const at::Tensor& H, const at::Tensor& A, const at::Tensor& X,
                                 const at::Tensor& C) {
  const int64_t S = A.size(0), B = A.size(1), GD = A.size(2), D = H.size(2);
  const auto opts = A.options();
  at::Tensor DX = pooled({S, B, GD}, opts);  // the gradient of the pre-activations, xp's
  at::Tensor DH = cell == GRU ? pooled({S, B, GD}, opts) : DX;  // W h's (n's part differs)
  at::Tensor dweight = at::empty({GD, D}, opts);
  at::Tensor dm = pooled({B, S, D}, opts);
  at::Tensor dh = at::zeros({B, D}, opts);  // the gradient of h_t arriving from step t + 1
  at::Tensor dc = cell == LSTM ? grad_c.clone() : at::empty({0}, opts);
  const T* gp = grad_hs.data_ptr<T>();
  const T* mp = m.data_ptr<T>();
  const T* wp = weight.data_ptr<T>();
  const T* Hp = H.data_ptr<T>();
  const T* Ap = A.data_ptr<T>();
  const T* Xp = cell == TANH ? nullptr : X.data_ptr<T>();
  const T* Cp = cell == LSTM ? C.data_ptr<T>() : nullptr;
  T* dxp0 = DX.data_ptr<T>();
  T* dhw0 = DH.data_ptr<T>();
  T* dmp = dm.data_ptr<T>();
  T* dhp = dh.data_ptr<T>();
  T* dcp = cell == LSTM ? dc.data_ptr<T>() : nullptr;
  for (int64_t t = S - 1; t >= 0; --t) {
    const T* ap = Ap + t * B * GD;
    const T* hp = Hp + t * B * D;
    const T* xs = cell == TANH ? nullptr : Xp + t * B * D;
    const T* cp = cell == LSTM ? Cp + t * B * D : nullptr;
    T* dxp = dxp0 + t * B * GD;
    T* dhw = dhw0 + t * B * GD;
    for (int64_t b = 0; b < B; ++b) {
      const T* g = ap + b * GD;
      const T* w = mp + (b * S + t) * D;
      const T* go = gp + (b * S + t) * D;
      T* dmr = dmp + (b * S + t) * D;
      const T* hprow = hp + b * D;
      T* da = dxp + b * GD;
      T* dw = dhw + b * GD;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const int64_t i = b * D + j;
        const T hprev = hprow[j], u = w[j], dht = go[j] + dhp[i];
        T cand;
        if (cell == TANH)
          cand = g[j];
        else if (cell == GRU)
          cand = torch_lerp(g[2 * D + j], hprev, g[D + j]);
        else
          cand = g[3 * D + j] * xs[i];
        const T dcand = dht * u;  // lerp's backward: (1 - w), w, end - self
        T dprev = dht * (T(1) - u), dmj = dht * (cand - hprev);
        if (cell == TANH) {
          da[j] = dcand * (T(1) - cand * cand);
        } else if (cell == GRU) {
          const T r = g[j], z = g[D + j], n = g[2 * D + j];
          const T dn = dcand * (T(1) - z), dz = dcand * (hprev - n);
          dprev = dprev + dcand * z;
          const T dnpre = dn * (T(1) - n * n);
          const T dr = dnpre * xs[i];
          da[j] = dw[j] = dr * (T(1) - r) * r;
          da[D + j] = dw[D + j] = dz * (T(1) - z) * z;
          da[2 * D + j] = dnpre;
          dw[2 * D + j] = dnpre * r;
        } else {
          const T ig = g[j], fg = g[D + j], gg = g[2 * D + j], og = g[3 * D + j], tc = xs[i];
          const T cprev = cp[i], dct = dcp[i];
          const T fc = fg * cprev, igg = ig * gg;
          const T ct = fc + igg;  // c~, as the forward computed it
          dmj = dmj + dct * (ct - cprev);
          const T dctil = dct * u + dcand * og * (T(1) - tc * tc);
          const T dig = dctil * gg, dfg = dctil * cprev, dgg = dctil * ig, dog = dcand * tc;
          dcp[i] = dct * (T(1) - u) + dctil * fg;
          da[j] = dig * (T(1) - ig) * ig;
          da[D + j] = dfg * (T(1) - fg) * fg;
          da[2 * D + j] = dgg * (T(1) - gg * gg);
          da[3 * D + j] = dog * (T(1) - og) * og;
        }
        dmr[j] = dmj;
        dhp[i] = dprev;  // the direct part of dh_{t-1}; the matmul adds dA W
      }
    }
    mm<T>(false, B, D, GD, dhw, GD, wp, D, true, dhp, D);  // dh_{t-1} += dA W
  }
  mm<T>(true, GD, D, S * B, dhw0, GD, Hp, D, false, dweight.data_ptr<T>(), D);  // sum dA^T h
  return {DX, dh, dc, dweight, dm};
}

std::vector<at::Tensor> sequence_forward(const at::Tensor& xp, const at::Tensor& h0,
                                         const at::Tensor& c0, const at::Tensor& weight,
                                         const at::Tensor& m, int64_t cell) {
  TORCH_CHECK(xp.dim() == 3 && xp.is_contiguous() && m.is_contiguous(), "contiguous xp, m");
  TORCH_CHECK(m.size(0) == xp.size(1) && m.size(1) == xp.size(0), "xp [T, B, GD], m [B, T, D]");
  TORCH_CHECK(h0.is_contiguous() && weight.is_contiguous(), "contiguous h0, weight");
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(xp.scalar_type(), "masked_cell_forward", [&] {
    if (cell == TANH) out = forward<scalar_t, TANH>(xp, h0, c0, weight, m);
    else if (cell == GRU) out = forward<scalar_t, GRU>(xp, h0, c0, weight, m);
    else out = forward<scalar_t, LSTM>(xp, h0, c0, weight, m);
  });
  return out;
}

std::vector<at::Tensor> sequence_backward(const at::Tensor& grad_hs, const at::Tensor& grad_c,
                                          const at::Tensor& weight, const at::Tensor& m,
                                          const at::Tensor& H, const at::Tensor& A,
                                          const at::Tensor& X, const at::Tensor& C,
                                          int64_t cell) {
  TORCH_CHECK(grad_hs.is_contiguous(), "contiguous grad_hs");
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(grad_hs.scalar_type(), "masked_cell_backward", [&] {
    if (cell == TANH) out = backward<scalar_t, TANH>(grad_hs, grad_c, weight, m, H, A, X, C);
    else if (cell == GRU) out = backward<scalar_t, GRU>(grad_hs, grad_c, weight, m, H, A, X, C);
    else out = backward<scalar_t, LSTM>(grad_hs, grad_c, weight, m, H, A, X, C);
  });
  return out;
}

}  // namespace

// The bytes the buffer pool holds for reuse: a plain C function (no tensor, not an op), which
// baselines/ops/library.py calls through ctypes (``KernelOps.pool_held``).
extern "C" int64_t condrnn_masked_cell_pool_held() { return pool().held(); }

// The ops (csrc/ops.cpp): c0 and grad_c are empty tensors for a cell without a cell state; X, C
// and the gradient of c0 have no elements (shape [0]) where the cell has none.
TORCH_LIBRARY_FRAGMENT(condrnn, m) {
  // masked cell, whole sequence: hs, c_T (the LSTM's), then the saved H, A, X, C
  m.def("masked_cell_forward(Tensor xp, Tensor h0, Tensor c0, Tensor weight, Tensor m, int cell)"
        " -> Tensor[]");
  // its gradients: xp, h0, c0, weight, m
  m.def("masked_cell_backward(Tensor grad_hs, Tensor grad_c, Tensor weight, Tensor m, Tensor H,"
        " Tensor A, Tensor X, Tensor C, int cell) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(condrnn, CPU, m) {
  m.impl("masked_cell_forward", TORCH_FN(sequence_forward));
  m.impl("masked_cell_backward", TORCH_FN(sequence_backward));
}
