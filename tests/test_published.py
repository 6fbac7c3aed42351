"""The seed papers' numbers: tasks/paper_results.toml as read by harness.reporting.published."""

from __future__ import annotations

import pytest

from harness.components import config
from harness.components.registry import METHODS, TASKS
from harness.errors import HarnessError
from harness.persistence.records import flat_config
from harness.reporting.published import default_path, load_tables, tables_for

ROWS = {
    "S-SA Table 1": 7,
    "S-SA Table 2": 7,
    "S-SA Table 3": 7,
    "S-SA Table 4": 9,
    "S-EI Table 1": 12,
    "S-EI 4.1 ablation": 8,
    "S-EI Table 2": 12,
    "S-EI Table 3": 8,
    "S-SA PTB": 1,
    "S-HSG Table 1": 8,
}


def row(table_key, label, **config):
    (table,) = [t for t in load_tables() if t.key == table_key]
    (found,) = [r for r in table.rows if r.label == label and config.items() <= r.config.items()]
    return found


def test_the_shipped_file_is_task_package_data():
    assert default_path().name == "paper_results.toml"
    assert default_path().parent.name == "tasks"


def test_table_and_row_counts():
    tables = load_tables()
    assert {t.key: len(t.rows) for t in tables} == ROWS
    assert list(ROWS) == [t.key for t in tables]  # file order
    assert sum(len(t.rows) for t in tables) == 79


def test_each_paper_names_its_spread_as_it_prints_it():
    """S-SA's parenthesised spreads are what it calls confidence intervals, not stds."""
    (t1,) = [t for t in load_tables() if t.key == "S-SA Table 1"]
    assert t1.spread == "(x)" and t1.spread_text("0.8") == "(0.8)"
    assert "confidence intervals" in t1.spread_name and "standard deviation" in t1.spread_name
    (ei,) = [t for t in load_tables() if t.key == "S-EI Table 1"]
    assert ei.spread_text("0.07") == "± 0.07" and "5 runs" in ei.spread_name
    assert all(t.spread_name for t in load_tables() if any(r.std for r in t.rows))


def test_printed_values_are_scaled_to_harness_units():
    gru = row("S-SA Table 1", "GRU")
    assert gru.values == {"geo_mean": 0, "skip_pct": 0, "accuracy": 84.7, "flops": 25.7 * 1e4}
    assert gru.std == {"accuracy": 0.8} and gru.config == {}  # D = 50 is the table's setting
    assert row("S-SA Table 2", "CW-RNN").values["flops"] == 3.65 * 1e4
    sa = row("S-SA Table 4", "SA-RNN (λ = 1e-4)")
    assert sa.values == {"solved": 1, "skip_pct": 90.0, "flops": 15.3 * 1e6}
    assert sa.std == {"skip_pct": 3.9} and sa.config == {"lam": 1e-4}
    assert row("S-SA Table 4", "Random Updates", p_skip=0.9).values["solved"] == 0
    assert type(sa.values["solved"]) is int  # stored true / false, used as a number
    ei = row("S-EI Table 1", "EI-REHN", hidden_size=20)
    assert ei.values == {"params": 2862, "mse": 0.47 * 1e-3} and ei.std == {"mse": 0.01 * 1e-3}
    assert row("S-EI Table 1", "RHN", hidden_size=10).config == {"hidden_size": 10, "depth": 5}
    har = row("S-EI Table 2", "EI-REHN", hidden_size=48)
    assert har.config == {"hidden_size": 48, "num_layers": 1}
    assert har.values == {"params": 16950, "accuracy": 92.48}
    assert row("S-EI Table 3", "EI-REHN (depth 4)").values == {
        "params": 25.3 * 1e6,
        "perplexity": 66.2,
    }
    assert row("S-HSG Table 1", "RHN + HSG (depth 40)").values == {"perplexity": 61.7}


def test_rows_name_registered_methods_tasks_and_config_fields():
    for table in load_tables():
        assert table.task in TASKS, table.key
        assert table.columns and all(set(r.values) == set(table.columns) for r in table.rows)
        for r in table.rows:
            assert r.method in METHODS, (table.key, r.label)
            run = config.resolve(r.method, table.task, 0, "smoke").to_dict()
            assert r.config.keys() <= flat_config({"config": run}).keys(), (table.key, r.label)


def test_tables_for_a_task():
    assert [t.key for t in tables_for("ptb")] == ["S-EI Table 3", "S-SA PTB", "S-HSG Table 1"]
    assert [t.key for t in tables_for("synthetic")] == ["S-EI Table 1", "S-EI 4.1 ablation"]
    assert tables_for("no-such-task") == []


GOOD = """
[papers.P]
cite = "A paper"
spread = { form = "± x", name = "the std over 3 runs" }

[[table]]
key = "P Table 9"
task = "mine"
title = "P Table 9 (mine)"
source = { paper = "P", where = "Table 9" }
columns = ["mse", "flops"]
scale = { mse = 1e-3 }
note = "made up"

[[table.row]]
method = "m"
label = "M"
config = { hidden_size = 4 }
values = { mse = 2.5, flops = 100 }
std = { mse = 0.5 }
"""


def test_a_users_own_file(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(GOOD, encoding="utf-8")
    (table,) = tables_for("mine", path)
    assert (table.key, table.title, table.columns, table.note) == (
        "P Table 9",
        "P Table 9 (mine)",
        ("mse", "flops"),
        "made up",
    )
    (r,) = table.rows
    assert (r.method, r.label, r.config) == ("m", "M", {"hidden_size": 4})
    assert r.values == {"mse": 2.5e-3, "flops": 100} and r.std == {"mse": 0.5e-3}
    assert (table.spread, table.spread_name) == ("± x", "the std over 3 runs")
    assert tables_for("adding", path) == []


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.replace('key = "P Table 9"\n', ""), "table 1: missing entry 'key'"),
        (lambda s: s.replace("values =", "vaules ="), "row 1: missing entry 'values'"),
        (lambda s: s.replace('label = "M"', 'label = "M"\ncolour = 1'), "unknown entry 'colour'"),
        (lambda s: s.replace("flops = 100 }", "flop = 100 }"), "'flop' is not one of"),
        (lambda s: s.replace(", flops = 100", ""), "no value for column flops"),
        (lambda s: s.replace("flops = 100", 'flops = "1O0"'), "'1O0' is not a finite number"),
        (lambda s: s.replace("scale = { mse = 1e-3", "scale = { mse = 2e-3"), "not a power of ten"),
        (lambda s: s.replace('note = "made up"', "setting = { seeds = [5] }"), "setting.seeds"),
        (lambda s: s.replace('paper = "P"', 'paper = "Q"'), "paper 'Q' is not under [papers]"),
        (lambda s: s.replace("scale = { mse", "scale = { params"), "'params' is not one of"),
        (lambda s: s.replace("columns = [", "columns = 3 #"), "columns must be a list"),
        (lambda s: s.replace("std = {", "std = ["), "malformed published results"),  # TOML
        (lambda s: s + s[s.index("[[table]]") :], "table key 'P Table 9' twice"),
        (lambda s: s.replace("spread =", "# spread ="), "rows print spreads, but [papers.P] names"),
        (lambda s: s.replace('form = "± x"', 'form = "±"'), "[papers.P].spread: form (with x"),
        (lambda s: s.replace('form = "± x", ', ""), "[papers.P].spread: missing entry 'form'"),
    ],
)
def test_a_malformed_file_is_one_line_naming_it(tmp_path, edit, message):
    path = tmp_path / "bad.toml"
    path.write_text(edit(GOOD), encoding="utf-8")
    with pytest.raises(HarnessError) as err:
        load_tables(path)
    text = str(err.value)
    assert message in text and str(path) in text and "\n" not in text


def test_a_missing_file(tmp_path):
    with pytest.raises(HarnessError, match="cannot read the published results .*nope.toml"):
        tables_for("mine", tmp_path / "nope.toml")


def test_numbers_keep_the_form_the_paper_prints():
    ei = row("S-EI Table 1", "EI-REHN", hidden_size=15)
    assert ei.values["mse"] == pytest.approx(0.5e-3) and ei.printed["mse"] == "0.50"
    assert row("S-EI Table 2", "LSTM", hidden_size=32).printed_std == {"accuracy": "0.40"}
    assert row("S-SA Table 1", "GRU").printed == {
        "geo_mean": "0",
        "skip_pct": "0",
        "accuracy": "84.7",
        "flops": "25.7",
    }
    assert row("S-SA Table 4", "GRU").printed["solved"] == "Yes"
    assert row("S-SA Table 4", "GRU").printed["skip_pct"] == "0.0"
    # Every number literal of the shipped file is read back as written: one that a TOML number
    # would print otherwise ("0.50" as 0.5) must be a string there.
    import re

    text = default_path().read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.startswith(("values = ", "std = ")):
            for tok in re.findall(r"= (-?[0-9][0-9.e+-]*)", line):
                number = float(tok) if any(c in tok for c in ".e") else int(tok)
                assert str(number) == tok, line


def test_table_settings_are_config_keys_of_the_task():
    scales = {t.key: t.scale for t in load_tables()}
    assert scales["S-SA Table 1"] == {"flops": 4} and scales["S-EI Table 1"] == {"mse": -3}
    for table in load_tables():
        assert "seeds" in table.setting, table.key
        keys = set()  # a setting keys the rows of the methods that have it (EI-REHN's dz)
        for method in {r.method for r in table.rows}:
            run = config.resolve(method, table.task, 0, "smoke").to_dict()
            keys |= flat_config({"config": run}).keys()
        assert table.setting.keys() - {"seeds"} <= keys, table.key
    (t4,) = [t for t in load_tables() if t.key == "S-SA Table 4"]
    assert t4.setting["task.seq_len"] == 500 and t4.setting["hidden_size"] == 128
    # S-EI Table 3: D_h = 1200, tied embeddings, and D_z = 600 for EI-REHN (docs/papers.md)
    (t3,) = [t for t in load_tables() if t.key == "S-EI Table 3"]
    assert t3.setting["hidden_size"] == 1200 and t3.setting["tie_embeddings"] is True
    assert t3.setting["dz"] == 600
    # S-SA Table 1: all of the balanced 4,600 series
    (t1,) = [t for t in load_tables() if t.key == "S-SA Table 1"]
    assert t1.setting["task.max_series"] == 0
