"""RHN: Recurrent Highway Network with a coupled carry gate, depth L per time step.

Paper: Zilly, Srivastava, Koutnik & Schmidhuber, "Recurrent Highway Networks", ICML 2017,
https://arxiv.org/abs/1607.03474; equations as restated in S-EI (Park & Yoo,
https://arxiv.org/abs/1708.04116) eqs. 6-8 and docs/methods.md 2.10. Starting from ``h^0 =
h_{t-1}``, for r = 1..L::

    s^r   = tanh(W_H x_t 1[r=1] + R_H^r h^{r-1} + b_H^r)
    tau^r = sigmoid(W_T x_t 1[r=1] + R_T^r h^{r-1} + b_T^r)
    h^r   = tau^r * s^r + (1 - tau^r) * h^{r-1}          (coupled carry c^r = 1 - tau^r)

and ``h_t = h^L``. Parameters ``2DV + 2LD^2 + 2LD``; MACs per step ``2DV + 2L D^2``.

Differences from the paper:
- [INFERRED] docs/methods.md 2.10 / docs/methods.md P2.6: coupled carry gate (2D gate rows, as the
  reference RHNCell and every S-EI parameter count); S-EI eq. 8 prints a separate carry gate.
- Initialisation. Here: weights U(+-1/sqrt(D)) (PyTorch's default scale; ``init_bound`` sets
  another bound), transform-gate biases b_T = -2.0 (``transform_bias``), candidate biases
  b_H = 0. The reference, jzilly/RecurrentHighwayNetworks @ 9ab03a3: weights U(+-0.04),
  b_T = -2.0 for PTB (``rhn_train.py`` ``init_bias``; -4.0 for enwik8 and text8) and b_H drawn
  from U(+-0.04) as well (``rhn.py`` gives them no initializer, so the scope's uniform one
  applies; ``theano_rhn.py`` sets ``init_other_bias = 'uniform'``). ``init_bound=0.04`` matches
  the weights and b_T; to match b_H too, redraw ``cell.bias[:, :D]`` from U(+-0.04) after
  construction. The default is not changed, since that would move recorded numbers.
- No variational dropout inside the cell.
- Default depth L = 5, the depth S-EI's Table 1 counts imply ([INFERRED]).
- Mask u = 1 and depth n = L for every unit (docs/methods.md 1.1): Skip % = depth-skip % = 0.
"""

from __future__ import annotations

from baselines._highway import FixedDepthHighway
from harness.components.registry import register_method


@register_method("rhn")
class RHN(FixedDepthHighway):
    """Depth-L coupled RHN; every step runs all L layers."""

    shared = False
