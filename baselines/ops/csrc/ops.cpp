// The operator library ``condrnn`` (``torch.ops.condrnn``): every source of this folder compiled
// into one shared library, in one build, by baselines/ops/library.py, and loaded with
// ``torch.ops.load_library`` once a process.
//
// This file holds the one ``TORCH_LIBRARY`` block of the namespace (a second copy of the library
// loaded into a process is refused by the dispatcher) and the plain C functions of the library,
// which are no ops (no tensor in or out) and which Python calls through ctypes
// (baselines/ops/library.py ``c_function``): who computes the kernels' matmuls (csrc/gemm.h's
// ``Matmul``; the tests switch it), and the GEMM timing that benchmarks/test_gemm.py compares.
// Each kernel's source declares its own ops in a ``TORCH_LIBRARY_FRAGMENT`` (their schemas,
// ``condrnn::<stem>_<function>``) next to their CPU implementations
// (``TORCH_LIBRARY_IMPL(condrnn, CPU, ...)``): a kernel's ops are all in the one file that is
// part of its method's code version (``kernel_sources``), and a new kernel touches no shared file.
// Their fake (shape) implementations and their backward formulas are Python, in the op family's
// module of baselines/ops.
//
// Schemas: ``float`` is a C++ double, ``int`` an int64_t; no op writes an input in place (each
// returns new tensors), so none is marked mutating. Where a method has no such tensor (the LSTM's
// cell state, a gradient of a parameter no step used) an output has no elements (shape [0]), and
// the Python caller reads None there; an input takes an empty tensor there, or is ``Tensor?``.
// The kernels are CPU-only: an op called on a CUDA tensor raises (the Python callers ask
// ``on_cpu`` first); on the meta device, and under FakeTensor, their fake implementations run.
#include <ATen/ops/empty.h>
#include <ATen/ops/randn.h>
#include <torch/library.h>

#include <chrono>

#include "gemm.h"  // set_matmul, gemm512, mm_into

TORCH_LIBRARY(condrnn, m) {}

// The matmuls by gemm512 (0), the BLAS (1) or ATen (2): who runs float32's from now on; -1 for
// a mode that does not exist.
extern "C" int64_t condrnn_set_matmul(int64_t mode) {
  if (mode < OWN || mode > ATEN) return -1;
  return set_matmul(mode);
}

// Seconds for ``reps`` float32 products C [M, N] = A [M, K] B [K, N] (row-major, C preallocated,
// after one warm-up call) by gemm512 (0), the BLAS's sgemm (1: torch's MKL in the x86 wheels) or
// ATen's ``mm_out`` (2); -1 where that one is not here (no AVX-512, no exported sgemm) or on an
// error. Timed here, so that no Python call's overhead is in it.
extern "C" double condrnn_matmul_seconds(int64_t mode, int64_t M, int64_t N, int64_t K,
                                         int64_t reps) {
  if (mode < OWN || mode > ATEN) return -1.0;
  try {
    const auto opts = at::TensorOptions().dtype(at::kFloat);
    at::Tensor a = at::randn({M, K}, opts), b = at::randn({K, N}, opts);
    at::Tensor c = at::empty({M, N}, opts);
    const float* ap = a.data_ptr<float>();
    const float* bp = b.data_ptr<float>();
    float* cp = c.data_ptr<float>();
    const int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);
    const float one = 1.0f, zero = 0.0f;
    auto run = [&]() -> bool {
      if (mode == OWN) {
#ifdef HAVE_GEMM512
        gemm512(M, N, K, ap, K, 1, bp, N, false, cp, N);
        return true;
#else
        return false;
#endif
      }
      if (mode == BLAS) {
        if (sgemm_ == nullptr) return false;
        // row-major C = A B is column-major C^T = B^T A^T
        sgemm_("N", "N", &n, &m, &k, &one, bp, &n, ap, &k, &zero, cp, &n);
        return true;
      }
      at::mm_out(c, a, b);
      return true;
    };
    if (!run()) return -1.0;
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < reps; ++i) run();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } catch (...) {
    return -1.0;
  }
}
