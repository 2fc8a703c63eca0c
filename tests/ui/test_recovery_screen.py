"""The recovery wizard against a real durable run whose coordinator (the headless CLI) was killed, and
against one whose coordinator is still running."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
from textual.widgets import DataTable, Static

from outpost_tui.engine.durable import recovery
from outpost_tui.ui.screens.confirm import ConfirmScreen
from outpost_tui.ui.screens.recovery import RecoveryScreen
from tests.conftest import flags, make_repo
from tests.engine.test_durable import RUN_ID, crash, gone, race_file, start, wait_for
from tests.ui.support import ScreenHost, text, until

pytestmark = pytest.mark.anyio


class Run:
    def __init__(self, repo: Path, path: Path, process: subprocess.Popen, agent_pid: int) -> None:
        self.repo, self.path, self.process, self.agent_pid = repo, path, process, agent_pid


@pytest.fixture
def live(tmp_path):
    """A durable run whose coordinator (the headless CLI) runs, its one agent hanging mid-attempt."""
    repo = make_repo(tmp_path / "repo")
    ready, pidfile = tmp_path / "ready", tmp_path / "a.pid"
    agent = flags(
        ready=ready, pidfile=pidfile, hang_on_attempt=1, write="fix.txt", content="good", commit=True
    )
    path = race_file(tmp_path, repo, [("a", agent)])
    process = start(path)
    wait_for(lambda: ready.exists() and pidfile.exists(), "the agent to start", process, timeout=30)
    run = Run(repo, path, process, int(pidfile.read_text().split()[0]))
    yield run
    if run.process.poll() is None:
        run.process.kill()
    run.process.communicate(timeout=30)
    # A killed coordinator leaves its agent running (the replay would stop it): the test does instead.
    try:
        group = os.getpgid(run.agent_pid)
        if group != os.getpgrp() and not gone(run.agent_pid):
            os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture
def crashed(live):
    """The same run, its coordinator killed: the run stays owned by a process that is gone."""
    crash(live.process)
    return live


def idle(screen: RecoveryScreen) -> bool:
    return not screen.busy


@asynccontextmanager
async def wizard(
    repository: Path, run_id: str | None = None
) -> AsyncIterator[tuple[ScreenHost, RecoveryScreen, Any]]:
    """The wizard on `repository` in a host app; opened on `run_id`, once it has read that run."""
    screen = RecoveryScreen(repository, run_id)
    app = ScreenHost(screen)
    async with app.run_test(size=(120, 40)) as pilot:
        if run_id is not None:
            await until(pilot, lambda: screen.view is not None and idle(screen), "the saved run")
        yield app, screen, pilot


async def replay(pilot, app: ScreenHost, screen: RecoveryScreen, repository: Path) -> None:
    """From the replay step: p asks, y confirms, and the wizard hands the app the run to resume."""
    assert screen.step == "replay"
    await pilot.press("p")
    assert isinstance(app.screen, ConfirmScreen)
    await pilot.press("y")
    await until(pilot, lambda: app.results, "the replay request")
    assert app.screen is not screen
    [spec] = app.results
    assert spec.run_id == RUN_ID and spec.durability.resume == "retry-incomplete"
    assert Path(spec.repository).resolve() == repository.resolve()


async def test_choose_a_crashed_run_release_it_with_confirmation_and_replay(crashed):
    async with wizard(crashed.repo) as (app, screen, pilot):
        runs = screen.query_one("#runs", DataTable)
        await until(pilot, lambda: runs.row_count == 1, "the run list")
        assert screen.step == "choose"
        assert [str(c) for c in runs.get_row_at(0)[:2]] == [RUN_ID, "owned"]

        await pilot.press("enter")
        await until(pilot, lambda: screen.view is not None and idle(screen), "the saved run")
        assert screen.step == "stop"
        assert screen.view.owner is not None and screen.view.coordinator.alive is False
        stop_text = text(screen, "#detail")
        assert f"pid {crashed.process.pid}" in stop_text and "no longer exists" in stop_text
        assert "not running: this step is done" in stop_text
        assert "Stop" in str(screen.query_one("#steps", Static).content)

        await pilot.press("enter")
        assert screen.step == "inspect"
        attempts = screen.query_one("#attempts", DataTable)
        assert attempts.display and attempts.row_count == 1
        assert [str(c) for c in attempts.get_row_at(0)[:2]] == ["a#1", "running"]
        assert screen.view.revision in text(screen, "#detail")

        await pilot.press("enter")
        assert screen.step == "release"
        revision = screen.view.revision
        await pilot.press("enter")
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.question == f"Release run {RUN_ID} at revision {revision}?"
        await pilot.press("n")  # refused: nothing happens
        assert app.screen is screen
        assert recovery.inspect(crashed.repo, RUN_ID).owner is not None

        await pilot.press("l", "y")
        await until(pilot, lambda: screen.step == "replay" and idle(screen), "the release")
        assert recovery.inspect(crashed.repo, RUN_ID).owner is None
        assert "released" in text(screen, "#outcome") and text(screen, "#error") == ""

        await replay(pilot, app, screen, crashed.repo)


async def test_a_stale_revision_shows_the_error_and_offers_to_inspect_again(crashed):
    async with wizard(crashed.repo, RUN_ID) as (app, screen, pilot):
        stale = screen.view.revision
        recovery.release(crashed.repo, RUN_ID, stale)  # someone else released it meanwhile

        await pilot.press("l")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(pilot, lambda: text(screen, "#error") and idle(screen), "the refusal")
        error = text(screen, "#error")
        assert len(error.splitlines()) == 1
        assert f"run {RUN_ID} changed since it was read (revision {stale}" in error
        assert "i: inspect again" in error
        assert screen.step == "release"

        await pilot.press("i")
        await until(pilot, lambda: screen.step == "inspect" and idle(screen), "the new inspection")
        assert screen.view.revision != stale and screen.view.owner is None
        assert text(screen, "#error") == ""
        await pilot.press("enter")
        assert "nothing to release" in text(screen, "#detail")
        await pilot.press("escape", "escape", "escape")  # release -> inspect -> stop -> leave
        assert app.screen is not screen


async def test_stopping_a_live_coordinator_ends_it(live):
    async with wizard(live.repo, RUN_ID) as (app, screen, pilot):
        assert screen.view.coordinator.alive is True
        assert "It is running. s: stop it" in text(screen, "#detail")

        await pilot.press("l")  # releasing under a live coordinator is refused outright
        assert app.screen is screen and "still running: stop it first" in text(screen, "#error")

        await pilot.press("s")
        assert isinstance(app.screen, ConfirmScreen)
        assert f"pid {live.process.pid}" in app.screen.question
        await pilot.press("y")
        await until(pilot, lambda: text(screen, "#outcome") and idle(screen), "the stop", timeout=30)
        assert text(screen, "#outcome") == f"coordinator pid {live.process.pid} stopped"
        assert gone(live.process.pid)
        live.process.communicate(timeout=30)
        assert not psutil.pid_exists(live.process.pid)
        assert screen.view.owner is None and screen.step == "stop"
        assert "nothing to stop" in text(screen, "#detail")
        # a stopped coordinator leaves its run interrupted, not finished: the wizard goes on to replay
        assert screen.view.status == "interrupted"
        await pilot.press("enter")
        assert screen.step == "inspect"
        await pilot.press("enter")
        assert screen.step == "release" and "nothing to release" in text(screen, "#detail")
        await pilot.press("enter")
        await replay(pilot, app, screen, live.repo)
