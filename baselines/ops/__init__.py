"""The kernels of the methods, as PyTorch operators of one namespace, ``torch.ops.condrnn``."""
