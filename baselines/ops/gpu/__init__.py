"""The kernels' CUDA implementations, in Triton: each module holds one family's kernels and their
launchers, registered as the CUDA implementation of the family's ops (``torch.ops.condrnn``,
``baselines.ops.library.cuda_parts``) where CUDA and Triton are there. Imported only then, or by
the tests, which run the launchers on CPU tensors in Triton's interpreter (``TRITON_INTERPRET=1``,
set before triton is first imported) against the per-step PyTorch reference.

A family with no module here runs its PyTorch path on CUDA (the per-step reference, through
cuDNN-free torch ops): docs/methods.md says which family takes which path.
"""
