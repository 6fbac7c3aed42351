"""The built-in reference predictors: class prior, logistic regression, mean, last value, n-grams.

Each predicts what a model's read-out would: logits ``[..., K]`` (log-probabilities) for
classification and language models, values shaped like the targets for regression. Everything is
computed on the CPU in float64 and is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from harness.components.config import MAX_PENALTY, check_knobs, knob
from harness.components.task import Batch, Split, TaskKind
from harness.references import Reference, register_reference

CHUNK = 4096  # sequences whose features are taken at once (bounds the memory of a long split)


class _Prior(Reference):
    """A prediction that ignores the input: the distribution of the training targets."""

    def fit(self, task, train: Split, seed: int) -> None:
        counts = torch.bincount(train.y.reshape(-1).long(), minlength=task.output_size)
        c = counts.double().clamp(min=1.0)  # a value never counted counts once: no probability 0
        self.logits = (c / c.sum()).log().float()  # [K] log relative frequencies

    def predict(self, batch: Batch) -> Tensor:
        return self.logits.expand(*batch.y.shape, len(self.logits))

    def num_params(self) -> int:
        return len(self.logits)


@register_reference("majority")
class Majority(_Prior):
    """The class prior of the training labels (a class absent from them counts once)."""

    kinds = (TaskKind.CLASSIFICATION,)
    description = (
        "the class prior of the training labels: predicts the majority class (ties: the lower "
        "index), so its accuracy is that class's share of the test labels; its NLL is the "
        "prior's cross-entropy"
    )


def summary_features(x: Tensor, lengths: Tensor | None) -> Tensor:
    """``[N, 5 V]`` float64 per-channel statistics of ``x`` ``[N, T, V]`` over the true steps.

    Grouped by statistic: every channel's mean, then population std, min, max and mean absolute
    first difference (0 for a sequence of one step). ``lengths``: ``[N]`` (None: all T).
    """
    x = x.double()
    n, t, _ = x.shape
    if lengths is None:
        lengths = torch.full((n,), t, dtype=torch.long)
    valid = (torch.arange(t)[None] < lengths[:, None].long())[..., None]  # [N, T, 1]
    steps = valid.sum(1).clamp(min=1)  # [N, 1]
    mean = (x * valid).sum(1) / steps
    std = (((x - mean[:, None]) ** 2) * valid).sum(1).div(steps).sqrt()
    low = x.masked_fill(~valid, float("inf")).amin(1)
    high = x.masked_fill(~valid, float("-inf")).amax(1)
    moves = valid[:, 1:] & valid[:, :-1]
    diff = ((x[:, 1:] - x[:, :-1]).abs() * moves).sum(1) / moves.sum(1).clamp(min=1)
    return torch.cat([mean, std, low, high, diff], 1)


@dataclass(frozen=True)
class LogRegConfig:
    """Knobs of ``ref:logreg``."""

    l2: float = knob(1e-3, ge=0, le=MAX_PENALTY)  # l2 / 2 · ||W||² (not the biases) + mean CE
    max_iter: int = knob(500, ge=1, le=100_000)  # L-BFGS iterations at most

    def __post_init__(self) -> None:
        check_knobs(self, "method", "ref:logreg")


@register_reference("logreg")
class LogReg(Reference):
    """Multinomial logistic regression on per-sequence summary statistics of each channel.

    The features ignore the order of the steps beyond one step apart: a task it nearly solves
    does not need a recurrent model to be solved at this setting.
    """

    kinds = (TaskKind.CLASSIFICATION,)
    config_cls = LogRegConfig
    description = (
        "multinomial logistic regression on per-sequence statistics of each input channel "
        "(mean, std, min, max, mean absolute first difference over the true steps), "
        "standardised on the training split, L2-penalised (l2), fitted by full-batch L-BFGS"
    )

    @classmethod
    def serves(cls, task) -> str | None:
        """``Reference.serves``."""
        why = super().serves(task)
        if why is None and (task.token_input or task.readout != "last"):
            why = "for real-valued inputs and one label per sequence"
        return why

    def fit(self, task, train: Split, seed: int) -> None:
        """``Reference.fit``."""
        torch.manual_seed(seed)
        feats = torch.cat([summary_features(b.x, b.lengths) for b in train.batches(CHUNK)])
        self.center = feats.mean(0)
        scale = feats.std(0, unbiased=False)
        self.scale = torch.where(scale > 1e-12, scale, torch.ones_like(scale))
        z = (feats - self.center) / self.scale
        y = train.y.reshape(-1).long()
        k = task.output_size
        self.weight = torch.zeros(z.shape[1], k, dtype=torch.float64, requires_grad=True)
        self.bias = torch.zeros(k, dtype=torch.float64, requires_grad=True)
        opt = torch.optim.LBFGS(
            [self.weight, self.bias],
            lr=1.0,
            max_iter=self.cfg.max_iter,
            tolerance_grad=1e-9,
            tolerance_change=1e-12,
            history_size=20,
            line_search_fn="strong_wolfe",
        )

        def closure() -> Tensor:
            opt.zero_grad()
            loss = F.cross_entropy(z @ self.weight + self.bias, y)
            loss = loss + 0.5 * self.cfg.l2 * self.weight.pow(2).sum()
            loss.backward()
            return loss

        opt.step(closure)
        self.weight, self.bias = self.weight.detach(), self.bias.detach()

    def predict(self, batch: Batch) -> Tensor:
        """``Reference.predict``."""
        z = (summary_features(batch.x, batch.lengths) - self.center) / self.scale
        return (z @ self.weight + self.bias).float()

    def num_params(self) -> int:
        """``Reference.num_params``."""
        return self.weight.numel() + self.bias.numel()


@register_reference("mean")
class Mean(Reference):
    """The mean of the training targets, per output: a constant predictor."""

    kinds = (TaskKind.REGRESSION,)
    description = (
        "the mean of the training targets, per output: a constant predictor, the plateau a "
        "model that has learnt nothing from its inputs sits at; its MSE is the test targets' "
        "variance plus the squared shift of their mean"
    )

    def fit(self, task, train: Split, seed: int) -> None:
        """``Reference.fit``."""
        y = train.y.double()
        mean = y.reshape(-1, y.shape[-1] if y.dim() > 1 else 1).mean(0)
        self.mean = mean if y.dim() > 1 else mean.reshape(())

    def predict(self, batch: Batch) -> Tensor:
        """``Reference.predict``."""
        return self.mean.float().expand(batch.y.shape)

    def num_params(self) -> int:
        """``Reference.num_params``."""
        return self.mean.numel()


@register_reference("last")
class Last(Reference):
    """The last value seen: each step's target predicted as that step's input (persistence)."""

    kinds = (TaskKind.REGRESSION,)
    description = (
        "the last value seen: predicts each step's target as that step's input (persistence), "
        "for a regression task whose targets are its next inputs (a target at every step, as "
        "wide as the inputs)"
    )

    @classmethod
    def serves(cls, task) -> str | None:
        """``Reference.serves``."""
        why = super().serves(task)
        if why is None and (
            task.token_input or task.readout != "every" or task.input_size != task.output_size
        ):
            why = "for tasks whose targets are their next inputs"
        return why

    def fit(self, task, train: Split, seed: int) -> None:
        """Nothing to fit."""

    def predict(self, batch: Batch) -> Tensor:
        """``Reference.predict``."""
        return batch.x.float().reshape(batch.y.shape)


@register_reference("unigram")
class Unigram(_Prior):
    """Unigram model: each token's relative frequency among the training targets."""

    kinds = (TaskKind.LM,)
    description = (
        "unigram model: each token's relative frequency among the training targets, whatever "
        "came before (a type never seen in training counts once)"
    )


@register_reference("bigram")
class Bigram(Reference):
    """Bigram model with add-one (Laplace) smoothing, counted on the training split."""

    kinds = (TaskKind.LM,)
    description = (
        "bigram model with add-one (Laplace) smoothing: p(w | v) = (c(v, w) + 1) / (c(v) + V), "
        "counted over the training split's (input token, next token) pairs, V the vocabulary"
    )

    def fit(self, task, train: Split, seed: int) -> None:
        """``Reference.fit``."""
        self.vocab = task.output_size
        v = self.vocab
        keys = train.x.reshape(-1).long() * v + train.y.reshape(-1).long()
        self.pairs, self.counts = torch.unique(keys, sorted=True, return_counts=True)
        self.context = torch.bincount(train.x.reshape(-1).long(), minlength=v)  # c(v)

    def predict(self, batch: Batch) -> Tensor:
        """``[..., V]`` log p(. | v) of each input token v, built once per distinct token."""
        contexts, where = torch.unique(batch.x.reshape(-1).long(), return_inverse=True)
        v = self.vocab
        lo = torch.searchsorted(self.pairs, contexts * v)
        hi = torch.searchsorted(self.pairs, (contexts + 1) * v)
        spans = hi - lo
        row = torch.repeat_interleave(torch.arange(len(contexts)), spans)
        start = torch.repeat_interleave(lo - (spans.cumsum(0) - spans), spans)
        j = start + torch.arange(int(spans.sum()))
        table = torch.ones(len(contexts), v, dtype=torch.float64)
        table[row, self.pairs[j] % v] += self.counts[j].double()
        log_probs = (table / (self.context[contexts].double() + v)[:, None]).log()
        return log_probs.float()[where].reshape(*batch.y.shape, v)

    def num_params(self) -> int:
        """``Reference.num_params``."""
        return len(self.pairs) + self.vocab
