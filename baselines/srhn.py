"""SRHN: shared-weight Recurrent Highway Network, the first ablation step of S-EI section 4.1.

Paper: Park & Yoo, "Early Improving Recurrent Elastic Highway Network",
https://arxiv.org/abs/1708.04116, section 4.1 (SRHN); docs/methods.md 2.12. An RHN (Zilly et al.
2017, https://arxiv.org/abs/1607.03474) whose L layers share one set of recurrent weights and
biases; the input enters only at r = 1. From ``h^0 = h_{t-1}``, for r = 1..L::

    s^r   = tanh(W_H x_t 1[r=1] + R_H h^{r-1} + b_H)
    tau^r = sigmoid(W_T x_t 1[r=1] + R_T h^{r-1} + b_T)
    h^r   = tau^r * s^r + (1 - tau^r) * h^{r-1}

and ``h_t = h^L``. Parameters ``2DV + 2D^2 + 2D`` (independent of L); MACs as RHN,
``2DV + 2L D^2`` per step.

Differences from the paper:
- Coupled carry gate, as in the RHN baseline (docs/methods.md 2.10 [INFERRED]).
- Transform-gate bias -2.0 (RHN reference value, ``transform_bias``); candidate biases 0 (the
  RHN reference draws them from U(+-0.04), see ``baselines/rhn.py``); weights U(+-1/sqrt(D))
  (``init_bound`` sets another bound). S-EI states none of these.
- Default depth L = 5 (S-EI sweeps L = 1..6; ``depth`` knob).
- Mask u = 1 and depth n = L for every unit (docs/methods.md 1.1).
"""

from __future__ import annotations

from baselines._highway import FixedDepthHighway
from harness.components.registry import register_method


@register_method("srhn")
class SRHN(FixedDepthHighway):
    """Depth-L coupled RHN with one weight set shared by all layers."""

    shared = True
