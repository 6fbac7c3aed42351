"""Every config field declares its valid values (``harness.components.config.knob``), and they are
enforced.

Parametrized over the registries: a new method or task is covered without editing this file.
Each section's fields are checked for declared bounds that admit the default; a value just
outside every finite end is refused by ``resolve`` with one line naming the key, the value and
the range; and the values that used to crash inside a run are refused before any run starts.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing

import pytest

from harness.components import config
from harness.components.config import ModelConfig, TrainConfig, bounds_of
from harness.components.registry import METHODS, TASKS
from harness.errors import ConfigError
from harness.references import REFERENCES

METHOD_TASK, TASK_METHOD = "adding", "gru"  # the partner each method / task is resolved with

# (section, owner, config class): the two generic sections, then every method, reference
# predictor (its knobs are its "method" section) and task
SECTIONS = [
    ("train", "", TrainConfig),
    ("model", "", ModelConfig),
    *[("method", name, cls.config_cls) for name, cls in METHODS.items()],
    *[("method", name, cls.config_cls) for name, cls in REFERENCES.items()],
    *[("task", name, cls.config_cls) for name, cls in TASKS.items()],
]


def fields_of(cls: type) -> list[tuple[dataclasses.Field, type]]:
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls)]


def section_id(entry: tuple[str, str, type]) -> str:
    section, owner, _ = entry
    return f"{section}:{owner}" if owner else section


@pytest.mark.parametrize("entry", SECTIONS, ids=section_id)
def test_every_field_declares_bounds_that_admit_its_default(entry):
    section, _, cls = entry
    for f, kind in fields_of(cls):
        where = f"{cls.__name__}.{f.name}"
        b = bounds_of(cls, f.name)
        if kind is bool:
            continue  # its type is its set
        assert b is not None, f"{where} declares no bounds: use harness.components.config.knob"
        assert b.admits(f.default), f"{where}: the default {f.default!r} is out of its bounds"
        if kind is str:
            assert b.choices, f"{where}: a string field needs choices="
        else:
            assert kind in (int, float) and b.choices is None, where
            assert b.ge is not None or b.gt is not None, f"{where} has no lower bound"
        if kind is int:  # counts, sizes, seeds, clocks: each sizes memory, time or an int64
            assert b.le is not None or b.lt is not None, f"{where} has no upper bound"


def outside(b: config.Bounds | None, kind: type) -> list[object]:
    """Values just outside each finite end of ``b`` (or one not among its choices)."""
    if b is None:  # the declaration test reports it
        return []
    if b.choices is not None:
        return ["no-such-choice"]

    def step(x: float) -> float:
        return 1 if kind is int else max(abs(x) * 0.01, 1e-6)

    out: list[object] = []
    if b.ge is not None:
        out.append(b.ge - step(b.ge))
    if b.gt is not None:
        out.append(b.gt)
    if b.le is not None:
        out.append(b.le + step(b.le))
    if b.lt is not None:
        out.append(b.lt)
    return [int(v) if kind is int else float(v) for v in out]


def shown(value: object) -> str:
    """A value as ``check_knob`` writes it in its message."""
    return (
        f"'{value}'"
        if isinstance(value, str)
        else f"{value:g}"
        if isinstance(value, float)
        else str(value)
    )


def case(section: str, owner: str, cls: type, name: str, kind: type, value: object):
    """``resolve`` arguments for one out-of-range value, and the message it must give."""
    method = owner if section == "method" else TASK_METHOD
    task = owner if section == "task" else METHOD_TASK
    key, where = f"{section}.{name}", f" for {owner}" if owner else ""
    expected = f"{key}={shown(value)} is out of range{where}: "
    expected += f"expected {bounds_of(cls, name).describe(kind)}"
    label = f"{section_id((section, owner, cls))}.{name}={value}"
    return pytest.param(method, task, key, value, expected, id=label)


CASES = [
    case(section, owner, cls, f.name, kind, value)
    for section, owner, cls in SECTIONS
    for f, kind in fields_of(cls)
    if kind is not bool
    for value in outside(bounds_of(cls, f.name), kind)
]


@pytest.mark.parametrize(("method", "task", "key", "value", "expected"), CASES)
def test_a_value_just_outside_the_bounds_is_refused(method, task, key, value, expected):
    with pytest.raises(ConfigError) as err:
        config.resolve(method, task, 0, "smoke", {key: str(value)})
    assert str(err.value) == expected


# The values that crashed inside the first run (or filled the memory) before they were bounded.
ISSUE_CASES = [
    ("gru", "adding", "data_seed=-1", "data_seed=-1 is out of range"),
    ("gru", "synthetic", "noise_std=-1", "noise_std=-1 is out of range"),
    ("gru", "adding", "seq_len=10000000000", "seq_len=10000000000 is out of range"),
    ("gru", "adding", "n_train=1000000000000", "n_train=1000000000000 is out of range"),
    ("gru", "freq-discrimination", "regular_ms=1e-9", "max_duration / regular_ms"),
    ("skip-rnn", "adding", "update_bias=1e308", "update_bias=1e+308 is out of range"),
    ("gru", "adding", "num_layers=100000", "num_layers=100000 is out of range"),
    ("rhn", "adding", "depth=100000", "depth=100000 is out of range"),
]


@pytest.mark.parametrize(("method", "task", "item", "expected"), ISSUE_CASES)
def test_values_that_crashed_a_run_are_one_line_before_any_run(
    method, task, item, expected, tmp_path, monkeypatch, capsys
):
    from harness.cli import main

    with pytest.raises(ConfigError, match=re.escape(expected)) as err:
        config.resolve(method, task, 0, "smoke", config.parse_set([item]))
    assert "\n" not in str(err.value)
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--tasks", task, "--methods", method, "--set", item, "--out", "X"]
    rc = main([*argv, "--no-report"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error:"), lines
    assert expected in lines[0] and list(tmp_path.iterdir()) == []


def test_a_bad_value_for_one_task_of_a_sweep_stops_the_whole_sweep(tmp_path, monkeypatch, capsys):
    from harness.cli import main

    monkeypatch.chdir(tmp_path)
    argv = ["run", "--tasks", "adding,synthetic", "--methods", "gru,lstm"]
    rc = main([*argv, "--set", "noise_std=-1", "--out", "X", "--no-report"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error:") and "noise_std=-1" in lines[0], lines
    assert not (tmp_path / "X").exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("method", METHODS.names())
def test_every_preset_resolves_for_every_pair(method):
    """The shipped presets (defaults, task values, per-method overrides) are within bounds."""
    for task in TASKS.names():
        for preset in config.PRESETS:
            config.resolve(method, task, 0, preset)


def test_cross_field_limits_name_the_fields():
    fd = "freq-discrimination"
    with pytest.raises(ConfigError, match=r"high_res_ms = 20 / 0\.0001 = 200,000 steps"):
        config.resolve("gru", fd, 0, "smoke", {"sampling": "high-res", "high_res_ms": "1e-4"})
    with pytest.raises(ConfigError, match=r"\(n_train \+ n_val \+ n_test\) \* max_points ="):
        config.resolve(
            "gru", fd, 0, "smoke", {"sampling": "async", "n_train": "10000000", "max_points": "200"}
        )
    with pytest.raises(ConfigError, match="min_duration=10, max_duration=5"):
        config.resolve("gru", fd, 0, "smoke", {"max_duration": "5"})
    with pytest.raises(ConfigError, match=r"^adding: \(n_train \+ n_val \+ n_test\) \* seq_len"):
        config.resolve("gru", "adding", 0, "smoke", {"n_train": "10000000", "seq_len": "1000"})
    with pytest.raises(ConfigError, match="period_low=30, period_high=20"):
        config.resolve("phased-lstm", "adding", 0, "smoke", {"period_low": "30"})
    with pytest.raises(ConfigError, match="max_tokens .50. must exceed bptt .50."):
        config.resolve("gru", "ptb", 0, "smoke", {"max_tokens": "50", "bptt": "50"})
    with pytest.raises(ConfigError, match=r"base\^\(num_modules-1\) = 2\^99"):
        config.resolve("clockwork-rnn", "adding", 0, "smoke", {"base": "2", "num_modules": "100"})
    # an unused regime's interval does not matter
    config.resolve("gru", fd, 0, "smoke", {"sampling": "async", "regular_ms": "1e-9"})


def test_a_direct_construction_is_checked_too():
    cls = METHODS.get("skip-rnn").config_cls
    with pytest.raises(ConfigError, match=r"^method.update_bias=1e\+308 is out of range"):
        cls(update_bias=1e308)
    with pytest.raises(ConfigError, match=r"^task.n_train=0 is out of range for adding"):
        TASKS.get("adding").config_cls(n_train=0)


def test_integer_bounds_are_written_in_full():
    b = config.Bounds(ge=0, le=config.MAX_SEED)
    assert b.describe(int) == "an integer in [0, 4294967295]"
    assert config.Bounds(gt=0, lt=1).describe(float) == "a number in (0, 1)"
    assert not config.Bounds(ge=0).admits(math.inf) and not config.Bounds(ge=0).admits(True)


# --- the per-method overrides of the task presets ------------------------------------------------


def _with_overrides(monkeypatch, task: str, preset: str, methods: dict) -> None:
    cls = TASKS.get(task)
    patched = dict(cls.presets)
    patched[preset] = dataclasses.replace(patched[preset], methods=methods)
    monkeypatch.setattr(cls, "presets", patched)


def test_shipped_presets_name_registered_methods_and_keys():

    config.check_presets()


@pytest.mark.parametrize(
    ("methods", "expected"),
    [
        (
            {"sa_rnn": {"lam": 2e-4}},
            r"^task 'seizures', preset 'quick': Unknown method 'sa_rnn'\. Did you mean: sa-rnn",
        ),
        (
            {"sa-rnn": {"lamb": 2e-4}},
            r"^task 'seizures', preset 'quick', method 'sa-rnn': unknown key 'lamb'\. "
            r"Did you mean: lam\?",
        ),
        ({"sa-rnn": {"method.depth": 2}}, r"unknown key 'method\.depth'"),
    ],
)
def test_a_preset_naming_an_unknown_method_or_key_is_refused_when_the_registry_loads(
    methods, expected, monkeypatch
):
    from harness.components import plugins, registry

    _with_overrides(monkeypatch, "seizures", "quick", methods)
    with pytest.raises(registry.PresetError, match=expected) as err:
        config.check_presets()
    assert "\n" not in str(err.value)
    monkeypatch.setattr(plugins, "_loaded", False)  # load_plugins runs the check
    with pytest.raises(registry.PresetError, match=expected):
        plugins.load_plugins()
    with pytest.raises(registry.PresetError):  # and again: a failed load is not remembered
        plugins.load_plugins()


def test_an_ambiguous_preset_key_is_refused(monkeypatch):
    from harness.components import registry

    _with_overrides(monkeypatch, "synthetic", "paper", {"srehn": {"r_max": 5}})
    with pytest.raises(
        registry.PresetError, match=r"synthetic', preset 'paper', method 'srehn'.*ambiguous"
    ):
        config.check_presets()
