"""Running `python -m outpost_tui.cli` as a real subprocess, and small race files for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import FAKE_AGENT

CLI = [sys.executable, "-m", "outpost_tui.cli"]


def run_cli(
    *args: str | Path,
    cwd: Path | None = None,
    env: dict | None = None,
    timeout: float = 120,
    stdout=subprocess.PIPE,
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *map(str, args)],
        cwd=cwd,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def run_with_closed_stdout(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run with stdout a pipe nobody reads any more, as in `outpost-tui ... | head` once head left:
    every write to it fails with EPIPE."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return run_cli(*args, stdout=writer, timeout=timeout)
    finally:
        os.close(writer)


def fake_candidate(key: str, *flags: str) -> str:
    argv = json.dumps([sys.executable, str(FAKE_AGENT), *flags])
    return f'\n[[candidates]]\nkey = "{key}"\nagent = "command"\nbrief = "b"\ncommand = {argv}\n'


def write_race(path: Path, repo: Path, candidates: str, extra: str = "", sections: str = "") -> Path:
    path.write_text(
        textwrap.dedent(f"""\
        [race]
        name = "cli test"
        repository = "{repo}"
        {extra}
        """)
        + sections
        + candidates
    )
    return path


def one_line_error(done: subprocess.CompletedProcess) -> str:
    """The single stderr line of a refused command (asserting there is exactly one, no traceback)."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]
