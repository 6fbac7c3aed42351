"""The methods' kernels, as PyTorch operators of one namespace: ``torch.ops.condrnn``.

Layout:

- ``csrc/<stem>.cpp``: a kernel family's C++, one source each. At its end it declares its ops
  (``TORCH_LIBRARY_FRAGMENT(condrnn, m)``: ``m.def("<stem>_<function>(...) -> ...")``, the schema)
  and registers their CPU implementations (``TORCH_LIBRARY_IMPL(condrnn, CPU, m)``).
  ``csrc/ops.cpp`` holds the namespace's one ``TORCH_LIBRARY`` block, the conventions every
  schema follows; a source may also export plain C functions (no tensor: a pool's size), which
  Python calls through ctypes; ``common.h``, ``gemm.h`` (the matmuls, ATen's) and
  ``elastic_gate.h`` the pieces several sources share.
- ``library.py``: builds every source into one shared library (one parallel build, cached per
  CPU), loads it once a process, and registers the ops' Python parts once it is loaded; the
  kernels' status, ``Kernel`` (a method's handle on its family's ops), ``on_cpu``.
- ``<stem>.py``, one module per family (the C++ source's name): the method-facing wrapper that
  calls the forward op, the fake implementation of every op of the family (``@fake``: output
  shapes and dtypes from the inputs', no values, so that the meta device, FakeTensor,
  ``torch.compile`` and ``torch.export`` see the op), and the forward op's backward
  (``autograd(op, backward, setup_context)``, ``torch.library.register_autograd``), which calls
  the family's backward op. Backward ops are not differentiable again (no double backward).

The method modules (``baselines/<method>.py``) hold the equations (the per-step PyTorch code,
which stays the reference and the oracle of the tests, and the path wherever an op cannot run),
the cost model, and which op runs which phase. The ops run on CPU tensors (their C++) and on the
meta device (their fake implementations); on any other device the methods take their PyTorch
path (one warning, ``library.on_cpu``).

Adding a kernel (a new family ``foo``):

1. ``csrc/foo.cpp`` (a training kernel; an inference-only one goes in ``csrc/infer/``): the
   kernel, its ``TORCH_LIBRARY_FRAGMENT`` block (``foo_forward``, ``foo_backward``, ...; schemas
   as ``csrc/ops.cpp`` says: no undefined output, nothing mutated) and its
   ``TORCH_LIBRARY_IMPL(condrnn, CPU, ...)`` block. Nothing shared to edit: the build of a part
   takes every source of its folder; its key covers them and every header.
2. ``foo.py``: ``foo_kernel = Kernel("foo", "Foo training")`` (its source then counts in
   the code version of every method whose module uses it, and a sweep builds the training part
   before its first run), the wrapper a method calls, ``@fake("foo_forward")`` and
   ``@fake("foo_backward")``, and ``autograd("foo_forward", backward, setup_context)``.
3. The method: ask ``foo_kernel.for_tensors(...)`` and call the wrapper where it returns ops;
   keep the per-step path for everything else.
4. Tests: ``tests/op_cases/foo.py`` (``cases_foo_forward(dtype)``, ``cases_foo_backward(dtype)``:
   sample inputs; tests/test_ops.py runs ``torch.library.opcheck`` on each, float32 and float64,
   and fails for an op without cases or without a fake implementation), a test of the method
   against its per-step path (values, masks, gradients, float64), and one that it trains on the
   meta device through the op (``kernel_support.train_on_meta``).
5. docs/methods.md: the method's section says what the kernel runs and how it differs from the
   reference, if at all.
"""
