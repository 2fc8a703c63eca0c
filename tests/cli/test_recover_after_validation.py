"""A durable race whose coordinator is SIGKILLed right after a candidate's validation, at the one
checkpoint that records it: replayed, the validated candidate wins (or is validated again and
wins), never lost, never another winner, and calling the run again gives the same winner.

The coordinator is the real command line in a process of its own; the kill is its own, from a
wrapper around `DurableRun.save` (the one way a checkpoint is written) that kills the process with
SIGKILL just before, or just after, the first checkpoint in which the candidate is validated. No
timing decides where it dies: it is exactly there, every time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from outpost_tui.engine.git import GRADING_SUFFIX
from tests.conftest import git, make_repo
from tests.engine.test_durable import RUN_ID, cli, inspect, race_file

LOOPS = 5

COORDINATOR = textwrap.dedent("""\
    import os, signal, sys

    from outpost_tui import cli
    from outpost_tui.engine.core import events
    from outpost_tui.engine.core.statuses import Phase
    from outpost_tui.engine.durable import run as durable

    key, when = os.environ["KILL_WHEN_VALIDATED"].split(":")
    save = durable.DurableRun.save

    async def save_then_die(self, **extra):
        validated = any(
            a.key == key and a.phase is Phase.VALIDATED for a in self.race.attempts.values()
        )
        if validated and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        await save(self, **extra)
        if validated and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)

    publish = events.EventBus.publish

    def publish_then_die(self, event):
        publish(self, event)
        # the validation's outcome is known and told, its grading checkout not yet closed
        if when == "finished" and isinstance(event, events.ValidationFinished) and event.key == key:
            os.kill(os.getpid(), signal.SIGKILL)

    durable.DurableRun.save = save_then_die
    events.EventBus.publish = publish_then_die
    sys.exit(cli.main())
    """)


def crashed_run(tmp_path: Path, repo: Path, when: str) -> Path:
    """Run the race until the coordinator dies at `when` the winner's validation is checkpointed."""
    path = race_file(
        tmp_path,
        repo,
        [
            ("a", ["--write", "fix.txt", "--content", "good", "--commit"]),
            ("b", ["--write", "fix.txt", "--content", "bad", "--commit"]),
        ],
    )
    driver = tmp_path / "coordinator.py"
    driver.write_text(COORDINATOR)
    done = subprocess.run(
        [sys.executable, str(driver), "run", str(path), "--headless", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KILL_WHEN_VALIDATED": f"a:{when}"},
    )
    # killed where it was meant to be, not finished some other way
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stderr)
    return path


@pytest.mark.parametrize("when", ["finished", "before", "after"])
def test_killed_at_the_checkpoint_after_validation_replays_to_the_same_winner(tmp_path: Path, when: str):
    for loop in range(LOOPS):
        where = tmp_path / str(loop)
        repo = make_repo(where / "repo")
        path = crashed_run(where, repo, when)

        view = inspect(repo)
        assert view["status"] == "owned" and view["coordinator"]["alive"] is False
        phases = {(a["key"], a["attempt"]): a["phase"] for a in view["attempts"]}
        # before: the checkpoint never heard of the validation; after: it did, and nothing since
        assert phases[("a", 1)] == ("validated" if when == "after" else "running"), (loop, phases)

        released = cli("recover", RUN_ID, "--repo", str(repo), "--release", "--revision", view["revision"])
        assert released.returncode == 0, released.stderr
        replay = cli("recover", RUN_ID, "--repo", str(repo), "--replay", "--json")
        assert replay.returncode == 0, (loop, replay.stderr)
        result = json.loads(replay.stdout)

        assert result["status"] == "winner", (loop, result["status"])
        winner = result["winner"]
        assert winner["key"] == "a", (loop, winner)
        if when == "after":
            # validated before the crash: its outcome stands, it is not run again
            assert winner["attempt"] == 1 and result["usage"]["attempts"] == 2, (loop, result["usage"])
            assert not [p for p in result["previous_attempts"] if p["key"] == "a"]
        else:
            # the validation was never saved: the attempt is kept as interrupted and run again
            assert winner["attempt"] == 2, (loop, winner)
            assert [(p["attempt"], p["status"]) for p in result["previous_attempts"] if p["key"] == "a"] == [
                (1, "cancelled")
            ]
        assert git(repo, "show", f"{winner['branch']}:fix.txt") == "good"
        assert all(
            c["status"] != "winner"
            for c in [*result["candidates"], *result["previous_attempts"]]
            if c["key"] != "a"
        )

        # nothing of the crashed validation is left: no grading checkout on disk or known to git
        assert not list((repo / ".outpost" / "workspaces").glob(f"*{GRADING_SUFFIX}")), loop
        assert GRADING_SUFFIX not in git(repo, "worktree", "list", "--porcelain"), loop

        again = cli("run", str(path), "--headless", "--json")
        assert again.returncode == 0, (loop, again.stderr)
        assert json.loads(again.stdout)["winner"] == winner, loop
        assert inspect(repo)["owner"] is None
