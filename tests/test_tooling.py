"""The tools are declared once: every dependency pinned exactly and in one place, and pre-commit runs
CI's own lint script, so a commit that passes its hooks passes CI's lint step."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_STEPS = {"ruff", "format", "mypy", "imports"}


def _requirements() -> list[tuple[str, str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [("dependencies", r) for r in project["dependencies"]]
    for extra, requirements in project["optional-dependencies"].items():
        declared += [(extra, r) for r in requirements]
    return declared


def test_every_dependency_is_pinned_exactly_and_once():
    seen: dict[str, str] = {}
    for where, requirement in _requirements():
        if requirement.startswith("outpost-tui["):
            continue  # an extra that includes another: its pins stay in that one
        name, _, version = requirement.partition("==")
        assert version and re.fullmatch(r"[\w.]+", version), f"{where}: {requirement} is not pinned"
        key = name.lower().replace("_", "-")
        assert key not in seen, f"{name} pinned in {seen[key]} and again in {where}"
        seen[key] = where


def test_pre_commit_hooks_are_the_lint_scripts_steps():
    config = (ROOT / ".pre-commit-config.yaml").read_text()
    entries = re.findall(r"^\s+entry:\s*(.+)$", config, re.MULTILINE)
    assert len(entries) == len(LINT_STEPS), entries
    steps = set()
    for entry in entries:
        script, *names = entry.split()
        assert script == ".ci/lint", f"hook runs {entry!r}, not .ci/lint"
        steps.update(names)
    assert steps == LINT_STEPS


def test_the_lint_script_refuses_an_unknown_step_in_one_line():
    done = subprocess.run(
        [str(ROOT / ".ci" / "lint"), "speling"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        ".ci/lint: unknown step 'speling' (known: ruff format mypy imports)"
    ]
