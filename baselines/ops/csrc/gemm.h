// The kernels' matrix products: ATen's (``at::mm_out``, ``addmm_``), i.e. the GEMM torch ships
// (MKL's or oneDNN's on x86), on tensors or on views of the kernels' own buffers.
//
// Why no GEMM of the project's own (issue 64, measured 2026-12-05/06 on one core of an AMD EPYC
// with AVX-512): the register-blocked AVX-512 GEMM the kernels had ran the paper presets'
// per-step products 1.1-2.4x as fast as ATen's mm, but no faster than libxsmm (0.88-1.02x, a
// Debian package; PyPI's "libxsmm" is an empty placeholder), and a whole training step (forward
// and backward) with ATen's products in its place took 1.00-1.10x as long at the adding and
// synthetic presets' sizes (SREHN and EI-REHN at synthetic's 1.15-1.17x). Under the rule
// (keep it only if it beats the best library by more than 10 % at the shapes that dominate the
// timing report) it went: one code path, no hand-written SIMD to keep for every future CPU.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>

// out (+)= a b on 2-D tensors (views, any strides): ``mm_out``, or ``addmm_`` to accumulate.
inline void mm_into(at::Tensor out, const at::Tensor& a, const at::Tensor& b, bool accumulate) {
  if (accumulate)
    out.addmm_(a, b);
  else
    at::mm_out(out, a, b);
}

// out = base + a b (base broadcast to out, as ``at::addmm_out``'s; out may be base itself).
inline void addmm_into(at::Tensor out, const at::Tensor& base, const at::Tensor& a,
                       const at::Tensor& b) {
  if (!out.is_same(base)) out.copy_(base);
  mm_into(out, a, b, true);
}

// a b as a new tensor (``mm_into``).
inline at::Tensor mm_new(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor out = at::empty({a.size(0), b.size(1)}, a.options());
  mm_into(out, a, b, false);
  return out;
}
