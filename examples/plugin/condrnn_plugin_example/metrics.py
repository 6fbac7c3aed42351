"""This package's measures: the mean absolute error the example task records besides its MSE,
and a measure every run of every task takes, the share of saturated outputs.

Registered with ``register_metric`` when this module is imported (the entry point ``mae`` of
the group ``condrnn_harness.metrics``, or the task's module importing it): the tables, figures
and drift gate read their title, unit and direction from the registry.

``saturated_pct`` carries its computation (``per_sequence``), so the harness's evaluation takes
it on every run, whatever the task and the method: per sequence, the share of the last layer's
outputs ``h_t`` (over the sequence's true length, every unit) with ``|h| > 0.99``, where a tanh
unit is saturated and its gradient nearly zero. A ``detail`` measure: recorded, never a table
column.
"""

from harness.components.metrics import Measured, Metric, register_metric, valid_steps

MAE = register_metric(Metric("mae", "MAE", higher=False, range=(0.0, None)))


def saturated_pct(m: Measured):
    """The share of the last layer's outputs with ``|h| > 0.99``, per sequence, in percent."""
    h = m.out.layers[-1].outputs.detach()  # [B, T, D]
    B, T, D = h.shape
    valid = valid_steps(B, T, m.batch.lengths, h.device).double()
    hot = (h.abs() > 0.99).double().sum(-1)  # [B, T]
    return 100.0 * (hot * valid).sum(1) / (valid.sum(1) * D)


SATURATED = register_metric(
    Metric(
        "saturated_pct",
        "Saturated outputs %",
        unit="%",
        percent=True,
        range=(0.0, 100.0),
        group="detail",
        per_sequence=saturated_pct,
    )
)
