"""The code version a record names: only this project's own checkout gives a commit."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness import env

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(cwd: Path, *args: str) -> str:
    cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    return subprocess.run(
        [*cmd, *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


def committed_repo(path: Path, pyproject: str | None) -> str:
    """A fresh git repository at ``path`` with one commit; returns its sha."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    (path / "README").write_text("unrelated\n")
    if pyproject is not None:
        (path / "pyproject.toml").write_text(pyproject)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "init")
    return git(path, "rev-parse", "HEAD")


def install_copy(site: Path) -> Path:
    """A copy of the harness package under ``site``, as pip would place it in site-packages."""
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "harness", site / "harness", ignore=skip)
    return site


def test_the_checkout_records_its_commit():
    try:
        head = git(ROOT, "rev-parse", "HEAD")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("the tests do not run from a git checkout")
    sha, dirty = env.checkout_state(ROOT)
    assert sha == head
    assert isinstance(dirty, bool)
    if env.REPO == ROOT:
        assert env.git_state()[0] == head


def test_a_package_inside_an_unrelated_repository_records_no_commit(tmp_path):
    outer = tmp_path / "other-project"
    other_sha = committed_repo(outer, '[project]\nname = "something-else"\n')
    site = install_copy(outer / ".venv" / "lib" / "python3.11" / "site-packages")
    assert git(site, "rev-parse", "HEAD") == other_sha  # what a naive lookup would record
    assert env.checkout_state(site) == (None, None)


def test_a_source_tree_inside_an_unrelated_repository_records_no_commit(tmp_path):
    # an unpacked sdist (this project's pyproject.toml) vendored into some other repository
    outer = tmp_path / "other-project"
    committed_repo(outer, None)
    vendored = install_copy(outer / "third_party" / "condrnn-harness")
    (vendored / "pyproject.toml").write_text(f'[project]\nname = "{env.PROJECT}"\n')
    assert env.checkout_state(vendored) == (None, None)


def test_the_top_level_of_another_project_records_no_commit(tmp_path):
    # site-packages itself under version control, but not this project's checkout
    site = tmp_path / "site-packages"
    committed_repo(site, '[project]\nname = "something-else"\n')
    install_copy(site)
    assert env.checkout_state(site) == (None, None)
    (site / "pyproject.toml").unlink()
    assert env.checkout_state(site) == (None, None)


def test_a_checkout_of_this_project_elsewhere_records_its_commit(tmp_path):
    clone = tmp_path / "clone"
    sha = committed_repo(clone, f'[project]\nname = "{env.PROJECT}"\nversion = "0"\n')
    install_copy(clone)
    assert env.checkout_state(clone) == (sha, False)
    (clone / "README").write_text("changed\n")
    assert env.checkout_state(clone) == (sha, True)


def test_records_and_reports_appended_in_the_checkout_leave_it_clean(tmp_path):
    # a sweep appends to a committed store, a report rewrites a committed file: not code
    clone = tmp_path / "clone"
    for folder in ("results/quick", "reports"):
        (clone / folder).mkdir(parents=True)
    (clone / "results" / "quick" / "runs.jsonl").write_text("{}\n")
    (clone / "reports" / "LEADERBOARD.md").write_text("# old\n")
    sha = committed_repo(clone, f'[project]\nname = "{env.PROJECT}"\nversion = "0"\n')
    install_copy(clone)
    with open(clone / "results" / "quick" / "runs.jsonl", "a") as f:
        f.write("{}\n")
    (clone / "reports" / "LEADERBOARD.md").write_text("# new\n")
    assert env.checkout_state(clone) == (sha, False)
    (clone / "README").write_text("edited\n")  # anything else: dirty
    assert env.checkout_state(clone) == (sha, True)


def test_outside_any_repository_records_no_commit(tmp_path):
    site = install_copy(tmp_path / "site-packages")
    assert env.checkout_state(site) == (None, None)
