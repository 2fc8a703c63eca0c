"""`--version` and `--help` start at once: building the parser imports no command's engine
dependencies (the Docker SDK, GitPython, Textual, the coordinator, the adapters), and `check` imports
only what validating a race file needs. Timings are in tests/benchmarks/bench_startup.py."""

from __future__ import annotations

import argparse
import re

import pytest

from outpost_tui.cli import build_parser
from outpost_tui.commands import MODULES
from tests.cli.support import run_cli, write_race

# Top-level packages no start-up path may load: docker (the Docker SDK), git (GitPython), textual.
HEAVY = {"docker", "git", "textual"}
# The engine's own heavy parts: the race machinery and the agents' adapters.
ENGINE = (
    "outpost_tui.engine.racing.coordinator",
    "outpost_tui.engine.agents",
    "outpost_tui.engine.sandbox",
    "outpost_tui.ui",
)


def imported(*args: str) -> tuple[set[str], str]:
    """The modules a real `outpost-tui ARGS` process imported (from -X importtime), and its stdout."""
    done = run_cli(*args, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    modules = set()
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+\d+ \|\s*(\S+)", line)
        if match:
            modules.add(match.group(1))
    assert "outpost_tui.cli" in modules or "outpost_tui" in modules, done.stderr[-2000:]
    return modules, done.stdout


def heavy(modules: set[str], prefixes=ENGINE) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith(prefixes))


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_version_and_help_import_no_engine_dependencies(flag):
    modules, _ = imported(flag)
    assert heavy(modules) == []
    assert "anyio" not in modules and "asyncio" not in modules


def test_help_still_lists_every_command_with_its_summary():
    _, text = imported("--help")
    subparsers = next(
        action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)
    )
    summaries = {choice.dest: choice.help for choice in subparsers._choices_actions}
    assert sorted(summaries) == sorted(MODULES)
    flat = " ".join(text.split())
    for name, summary in summaries.items():
        assert summary and f"{name} {' '.join(summary.split())}" in flat, f"{name}: {summary!r}\n{text}"


def test_check_imports_what_validating_a_race_file_needs_and_no_more(tmp_path, repo):
    race = write_race(
        tmp_path / "race.toml",
        repo,
        '\n[[candidates]]\nkey = "a"\nagent = "command"\nbrief = "b"\ncommand = ["true"]\n',
    )
    modules, text = imported("check", str(race))
    assert ": ok" in text
    assert "outpost_tui.engine.racefile" in modules  # it did validate
    assert (
        heavy(
            modules,
            (
                "outpost_tui.engine.racing.coordinator",
                "outpost_tui.engine.sandbox.container",
                "outpost_tui.ui",
            ),
        )
        == []
    )
