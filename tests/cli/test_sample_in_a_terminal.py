"""README's first command in a real terminal (a pseudo-terminal): `sample race DIR --run` opens the
app on the sample race, already started; without a terminal it stays headless (test_sample.py)."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path


def test_in_a_terminal_the_sample_opens_in_the_app_started(tmp_path: Path):
    leader, follower = pty.openpty()
    env = {
        **os.environ,
        "OUTPOST_DEMO_PACE": "0",
        "TERM": "xterm-256color",
        "COLUMNS": "120",
        "LINES": "40",
        "OUTPOST_TUI_CONFIG_DIR": str(tmp_path / "config"),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "outpost_tui.cli", "sample", "race", str(tmp_path / "demo"), "--run"],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
        start_new_session=True,
    )
    os.close(follower)
    seen = b""

    def drain(timeout: float) -> None:
        # the app blocks on a full terminal: keep reading whatever it draws
        nonlocal seen
        ready, _, _ = select.select([leader], [], [], timeout)
        if ready:
            with contextlib.suppress(OSError):
                seen += os.read(leader, 65536)

    try:
        deadline = time.monotonic() + 90
        # the race runs in the app and ends with its result one key away (v Results)
        while b"fixer" not in seen or b"Results" not in seen:
            assert time.monotonic() < deadline, f"the app never showed the race: {seen[-2000:]!r}"
            drain(0.5)
            assert process.poll() is None, f"it ended instead of opening the app: {seen[-2000:]!r}"
        assert b"Running it now" not in seen  # not the headless path
        os.write(leader, b"\x11")  # ctrl+q: the race is over, so the app quits at once
        deadline = time.monotonic() + 30
        while process.poll() is None:
            assert time.monotonic() < deadline, "the app did not quit"
            drain(0.2)
        assert process.returncode == 0  # 0: the race had a winner
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        os.close(leader)
    assert (tmp_path / "demo" / "race.toml").is_file()
