// The operator library ``condrnn`` (``torch.ops.condrnn``): the sources of this folder (the
// training kernels) and of ``infer/`` (the inference kernels) compiled into two shared libraries,
// one build each, by baselines/ops/library.py, and loaded with ``torch.ops.load_library`` once a
// process each.
//
// This file holds the one ``TORCH_LIBRARY`` block of the namespace (a second copy of a library
// loaded into a process is refused by the dispatcher). A source may also export plain C
// functions, which are no ops (no tensor in or out) and which Python calls through ctypes
// (baselines/ops/library.py ``c_function``; e.g. masked_cell.cpp's pool size).
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
#include <torch/library.h>

TORCH_LIBRARY(condrnn, m) {}
