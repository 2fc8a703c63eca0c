"""The home screen over a real repository: its recent races (when, status, winner, cost, time), a
durable run that needs recovery one key from the wizard, the offline sample first in line, and the
token-spending sample held back until its agents are installed and logged in."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest
from textual.widgets import DataTable, OptionList

from outpost_tui.ui.app import OutpostApp
from outpost_tui.ui.screens.recovery import RecoveryScreen
from tests.conftest import make_repo
from tests.engine.test_durable import CLI, RUN_ID, crash, gone, start, wait_for
from tests.engine.test_durable import race_file as durable_race_file
from tests.ui.support import until
from tests.ui.test_operator_fixes import fake, race_file

pytestmark = pytest.mark.anyio


async def test_recent_races_a_run_to_recover_and_the_samples(tmp_path, monkeypatch):
    repo = make_repo(tmp_path / "repo")
    (tmp_path / "one").mkdir()
    finished = race_file(
        tmp_path / "one",
        repo,
        [
            (
                "good",
                fake(
                    "--write",
                    "fix.txt",
                    "--content",
                    "good",
                    "--commit",
                    "--usage",
                    "1",
                    "2",
                    "3",
                    "4",
                    "--cost",
                    "0.5",
                ),
            )
        ],
    )
    done = subprocess.run(
        [*CLI, "run", str(finished), "--headless", "--json"], capture_output=True, text=True, timeout=120
    )
    race_id = json.loads(done.stdout)["id"]

    (tmp_path / "two").mkdir()
    ready, pidfile = tmp_path / "ready", tmp_path / "a.pid"
    durable = durable_race_file(
        tmp_path / "two",
        repo,
        [("a", ["--ready", str(ready), "--pidfile", str(pidfile), "--hang-on-attempt", "1"])],
    )
    process = start(durable)
    try:
        wait_for(lambda: ready.exists() and pidfile.exists(), "the agent to start", process, timeout=60)
        crash(process)
        monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no claude, no codex here
        app = OutpostApp(testing=True, repository=repo)
        async with app.run_test(size=(120, 40)) as pilot:
            home = app.screen
            samples = home.query_one("#samples", OptionList)
            assert samples.get_option_at_index(samples.highlighted).id == "race"
            recent = home.query_one("#recent", DataTable)
            await until(pilot, lambda: recent.row_count >= 2, "the recent races")
            first = [str(cell) for cell in recent.get_row_at(0)]
            assert first[1] == RUN_ID and first[2] == "needs recovery: r"
            row = [str(cell) for cell in recent.get_row(f"race:{race_id}")]
            assert row[2] == "winner" and row[3] == "good" and row[4] == "$0.5000"

            index = samples.get_option_index("claude-vs-codex")
            await until(pilot, lambda: samples.get_option_at_index(index).disabled, "the agents check")
            prompt = str(samples.get_option_at_index(index).prompt)
            assert "not ready" in prompt and "`claude` not found on PATH" in prompt and "doctor" in prompt

            await pilot.press("r")  # one key from the wizard, on the run that needs it
            assert isinstance(app.screen, RecoveryScreen) and app.screen.run_id == RUN_ID
    finally:
        agent = int(pidfile.read_text().split()[0]) if pidfile.exists() else None
        if agent is not None and not gone(agent):
            os.killpg(os.getpgid(agent), signal.SIGKILL)
