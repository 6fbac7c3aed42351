"""The measure the example task records besides its MSE: the mean absolute error.

Registered with ``register_metric`` when this module is imported (the entry point ``mae`` of
the group ``condrnn_harness.metrics``, or the task's module importing it): the tables, figures
and drift gate read its title, unit and direction from the registry.
"""

from harness.components.metrics import Metric, register_metric

MAE = register_metric(Metric("mae", "MAE", higher=False, range=(0.0, None)))
