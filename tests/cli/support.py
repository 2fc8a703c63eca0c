"""Running `python -m outpost_tui.cli` as a real subprocess (in a pseudo-terminal too), and small race
files for it."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
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


class AppInATerminal:
    """The command line run in a real pseudo-terminal (120x40), as an operator runs the app:
    `seen` is what it has drawn so far."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        self.leader, follower = pty.openpty()
        self.process = subprocess.Popen(
            argv,
            stdin=follower,
            stdout=follower,
            stderr=follower,
            env={
                **os.environ,
                "TERM": "xterm-256color",
                "COLUMNS": "120",
                "LINES": "40",
                "OUTPOST_TUI_CONFIG_DIR": str(cwd / "config"),
                **(env or {}),
            },
            cwd=cwd,
            start_new_session=True,
        )
        os.close(follower)
        self.seen = b""

    def drain(self, timeout: float) -> None:
        # the app blocks on a full terminal: keep reading whatever it draws
        ready, _, _ = select.select([self.leader], [], [], timeout)
        if ready:
            with contextlib.suppress(OSError):
                self.seen += os.read(self.leader, 65536)

    def wait_for(self, shown: Callable[[bytes], bool], what: str, timeout: float) -> None:
        """Until `shown(seen)`, the app still open."""
        deadline = time.monotonic() + timeout
        while not shown(self.seen):
            assert time.monotonic() < deadline, f"the app never showed {what}: {self.seen[-2000:]!r}"
            self.drain(0.5)
            assert self.process.poll() is None, f"it ended instead of opening the app: {self.seen[-2000:]!r}"

    def quit(self) -> int:
        """ctrl+q, then its exit code once it has ended (reading what it draws meanwhile)."""
        os.write(self.leader, b"\x11")
        deadline = time.monotonic() + 30
        while self.process.poll() is None:
            assert time.monotonic() < deadline, "the app did not quit"
            self.drain(0.2)
        self.drain(0.2)
        return self.process.returncode

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        os.close(self.leader)
