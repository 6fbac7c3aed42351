// The operator library ``condrnn`` (``torch.ops.condrnn``): every source of this folder compiled
// into one shared library, in one build, by baselines/_kernels.py, and loaded with
// ``torch.ops.load_library`` once a process.
//
// This file holds the one ``TORCH_LIBRARY`` block of the namespace, with what the whole library
// shares: ``matmul``, who computes the kernels' matmuls (csrc/gemm.h's ``Matmul``; the tests
// switch it). Each kernel's source declares its own ops in a ``TORCH_LIBRARY_FRAGMENT`` (their
// schemas, ``condrnn::<stem>_<function>``) next to their CPU implementations
// (``TORCH_LIBRARY_IMPL(condrnn, CPU, ...)``): a kernel's ops are all in the one file that is
// part of its method's code version (``kernel_sources``), and a new kernel touches no shared file.
//
// Schemas: ``float`` is a C++ double, ``int`` an int64_t; no op writes an input in place (each
// returns new tensors), so none is marked mutating. Where a method has no such tensor (the LSTM's
// cell state, a gradient that is not there) a ``Tensor[]`` holds an undefined tensor, None in
// Python, as ATen's own backward ops return; the inputs take an empty tensor there, or are
// ``Tensor?``. The kernels are CPU-only: an op called on another device raises (the Python
// callers ask ``on_cpu`` first). Ops without a tensor argument (nothing to dispatch on) are
// defined with their one kernel.
#include <torch/library.h>

#include "gemm.h"  // set_matmul

TORCH_LIBRARY(condrnn, m) {
  // the matmuls by gemm512 (0), the BLAS (1) or ATen (2); returns who runs float32's from now on
  m.def("matmul(int mode) -> int", TORCH_FN(set_matmul));
}
