"""A reference predictor of the example package: ``ref:example-median``.

The median of the training targets, per output: the constant that minimises the mean absolute
error on the training split (as the mean, ``ref:mean``, minimises the MSE). Registered with
``register_reference`` when this module is imported (the entry point of the group
``condrnn_harness.references``); ``harness run --methods 'ref:*'`` runs it beside the built-in
references.
"""

from __future__ import annotations

from torch import Tensor

from harness.components.task import Batch, Split, TaskKind
from harness.references import Reference, register_reference


@register_reference("example-median")
class ExampleMedian(Reference):
    """The median of the training targets, per output: a constant predictor."""

    kinds = (TaskKind.REGRESSION,)
    description = (
        "the median of the training targets, per output: the constant with the least mean "
        "absolute error on the training split"
    )

    def fit(self, task, train: Split, seed: int) -> None:
        """Fit on the training split only (``Reference.fit``)."""
        y = train.y.double()
        self.median = y.reshape(-1, y.shape[-1]).median(0).values  # [outputs]

    def predict(self, batch: Batch) -> Tensor:
        """The prediction for one batch, shaped as a model's (``Reference.predict``)."""
        return self.median.float().expand(batch.y.shape)

    def num_params(self) -> int:
        """How many numbers the fit produced."""
        return self.median.numel()
