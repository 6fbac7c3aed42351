"""``harness new method``: a documented template of a new method and its test file.

One template per kind (``KINDS``) in ``templates/``, with the hooks its kind has and ``# eq. N``
placeholders for the user's paper; fresh from it, a method passes ``harness check`` and trains.
"""

from __future__ import annotations

from pathlib import Path
from string import Template

from harness.components.plugins import describe_source
from harness.components.registry import MAX_KEY, METHODS, key_problems
from harness.errors import ConfigError

KINDS = {
    "dense": "a gated cell that updates every unit at every step (the step loop, no skipping)",
    "skip": "a binary update gate per step, Skip RNN-like, with fast_forward and at_skip",
    "depth": "highway micro-steps a controller stops, with a depth output, fast_forward, at_skip",
    "activity": "thresholded input and state deltas, Delta GRU-like: the columns a step reads",
}


def names(name: str) -> tuple[str, str, str]:
    """The registry key, module and class names of ``name`` (ConfigError: not a method key)."""
    key = name.replace("_", "-")
    if key_problems(key) or not key[:1].isalpha():
        raise ConfigError(
            f"'{name}' is not a method name: lower-case letters and digits, words joined by '-' "
            f"or '_', starting with a letter, at most {MAX_KEY} characters (e.g. my-skip)"
        )
    words = key.split("-")
    return key, "_".join(words), "".join(w.capitalize() for w in words)


def render(name: str, kind: str) -> dict[str, str]:
    """The files of a new method: ``{file name: text}`` (the method, then its test file)."""
    if kind not in KINDS:
        raise ConfigError(f"unknown kind '{kind}'; kinds: {', '.join(KINDS)}")
    key, module, cls = names(name)
    folder = Path(__file__).resolve().parent / "templates"
    values = {"key": key, "module": module, "Class": cls, "kind": kind}
    method = Template((folder / f"method_{kind}.py.tmpl").read_text(encoding="utf-8"))
    test = Template((folder / "test_method.py.tmpl").read_text(encoding="utf-8"))
    return {f"{module}.py": method.substitute(values), f"test_{module}.py": test.substitute(values)}


def new_method(name: str, kind: str, out: str | Path) -> list[Path]:
    """Write ``out/<module>.py`` and ``out/test_<module>.py`` for a new method; the paths.

    ConfigError: a bad name or kind, a name taken already, or a file that exists (none written).
    """
    import importlib.util

    files = render(name, kind)
    key, module, _ = names(name)
    if key in METHODS:
        where = describe_source(METHODS.get(key))
        raise ConfigError(f"method '{key}' is registered already ({where}); choose another name")
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    if found is not None:
        raise ConfigError(
            f"a module named '{module}' exists already ({found.origin}); choose another name"
        )
    folder = Path(out)
    paths = [folder / f for f in files]
    try:  # (a path too long for the filesystem fails already here)
        if there := [str(p) for p in paths if p.exists()]:
            verb = "exists" if len(there) == 1 else "exist"
            raise ConfigError(f"{', '.join(there)} {verb} already; nothing was written")
        folder.mkdir(parents=True, exist_ok=True)
        for path, text in zip(paths, files.values(), strict=True):
            with open(path, "x", encoding="utf-8") as f:  # "x": never over a file
                f.write(text)
    except OSError as e:
        raise ConfigError(f"cannot write into {folder}: {e.strerror or e}") from None
    return paths
