"""README's first command in a real terminal (a pseudo-terminal): `sample race DIR --run` opens the
app on the sample race, already started; without a terminal it stays headless (test_sample.py)."""

from __future__ import annotations

from pathlib import Path

from tests.cli.support import CLI, AppInATerminal


def test_in_a_terminal_the_sample_opens_in_the_app_started(tmp_path: Path):
    app = AppInATerminal(
        [*CLI, "sample", "race", str(tmp_path / "demo"), "--run"], tmp_path, {"OUTPOST_DEMO_PACE": "0"}
    )
    try:
        # the race runs in the app and ends with its result one key away (v Results)
        app.wait_for(lambda seen: b"fixer" in seen and b"Results" in seen, "the race", 90)
        assert b"Running it now" not in app.seen  # not the headless path
        assert app.quit() == 0  # ctrl+q once the race is over; 0: the race had a winner
    finally:
        app.close()
    assert (tmp_path / "demo" / "race.toml").is_file()
