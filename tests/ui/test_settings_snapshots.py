"""Snapshots of the configure screen (f5) and its forms, and of the recovery wizard (f4), at 80x24
and 120x40, with a fixed clock, no cursor blink and animations off. (The worktrees screen, f3, is
snapshotted in test_review_snapshots.py.)

Everything shown is real: the sample race materialised into a git repository, a durable run saved
by the engine's own checkpoint store. What would differ from one run to the next is pinned: the
working directory (paths show relative to it), the clock, and the saved run's owner and times.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
from rich.cells import cell_len
from textual.coordinate import Coordinate
from textual.widgets import DataTable

from outpost_tui.engine.durable import checkpoint, local_transport, recovery
from outpost_tui.engine.racefile import load_race
from outpost_tui.samples import materialise
from outpost_tui.ui.app import OutpostApp
from outpost_tui.ui.screens.configure import ConfigureScreen
from outpost_tui.ui.screens.recovery import RecoveryScreen
from outpost_tui.ui.screens.settings_form import SettingsForm
from tests.engine.test_checkpoint import attempt_state
from tests.ui.support import until

T0 = 1_800_000_000.0
SIZES = pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
RUN_ID = "calc-durable"
RACE_ID = "20250101-120000-abcdef"  # the race id attempt_state's branches name


@pytest.fixture(autouse=True)
def fixed_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("OUTPOST_TUI_CONFIG_DIR", "/nonexistent/outpost-tui-config")
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent/xdg")
    monkeypatch.setenv("TEXTUAL_ANIMATIONS", "none")
    monkeypatch.chdir(tmp_path)
    # saved times are shown in local time: the same zone everywhere
    zone = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if zone is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = zone
    time.tzset()


def sample(tmp_path: Path) -> Path:
    return materialise("race", tmp_path / "demo")


def app_for(race_file: Path) -> OutpostApp:
    return OutpostApp(race_file, testing=True, clock=lambda: T0 + 42)


async def configure(pilot) -> ConfigureScreen:
    await pilot.press("f5")
    await until(pilot, lambda: isinstance(pilot.app.screen, ConfigureScreen), "the configure screen")
    await pilot.pause()
    return pilot.app.screen


async def configure_view(pilot) -> None:
    await configure(pilot)


async def budget_with_an_error(pilot) -> None:
    await configure(pilot)
    await pilot.press("b")
    form = pilot.app.screen
    assert isinstance(form, SettingsForm)
    form.query_one("#attempts").value = "0"
    await pilot.app.workers.wait_for_complete()
    await until(pilot, lambda: "attempts" in form.errors, "the inline error")
    await pilot.pause()


async def new_candidate(pilot) -> None:
    await configure(pilot)
    await pilot.press("n")
    await until(pilot, lambda: isinstance(pilot.app.screen, SettingsForm), "the candidate form")
    await pilot.pause()


CONFIGURE_VIEWS = {
    "configure": configure_view,
    "budget_error": budget_with_an_error,
    "new_candidate": new_candidate,
}


@SIZES
@pytest.mark.parametrize("view", list(CONFIGURE_VIEWS))
def test_configure_snapshot(snap_compare, tmp_path, view, size):
    assert snap_compare(app_for(sample(tmp_path)), terminal_size=size, run_before=CONFIGURE_VIEWS[view])


def saved_run(race_file: Path, monkeypatch) -> None:
    """A durable run of the sample race, saved by the engine's checkpoint store as a coordinator on
    another machine would leave it (its owner cannot be checked from here)."""
    spec = load_race(race_file)
    owner = checkpoint.Owner("0" * 32, 4_194_000, "build-host-7", T0 - 120, T0 - 120, T0 - 60)
    with monkeypatch.context() as patch:
        patch.setattr(checkpoint.Owner, "current", classmethod(lambda cls: owner))
        patch.setattr(time, "time", lambda: T0 - 60)
        # the revision the inspect step shows is a random name the storage gives each write
        patch.setattr(local_transport.uuid, "uuid4", lambda: uuid.UUID(int=0x5EED))
        store = checkpoint.CheckpointStore(recovery.transport_for(spec.repository), RUN_ID, spec.repository)
        attempts = [
            attempt_state("fixer", 1, "running"),
            attempt_state("breaker", 1, "settled", "rejected", error="validation failed (exit code 1)"),
            attempt_state("slow", 1, "waiting"),
        ]
        state = {
            "format": 1,
            "id": RACE_ID,
            "baseline": "0" * 40,
            "select": "first",
            "name": spec.name,
            "race_file": "race.toml",
            "candidates": ["fixer", "breaker", "slow"],
            "finished": False,
            "status": None,
            "attempts": attempts,
            "usage": {
                "attempts": 2,
                "input": 1200,
                "cached": 8000,
                "cache_write": 0,
                "output": 300,
                "cost_usd": 0.012,
                "complete": True,
                "estimated": False,
            },
        }
        store.claim(state, identity=checkpoint.race_identity(spec))


async def recovery_list(pilot) -> None:
    await pilot.press("f4")
    await until(pilot, lambda: isinstance(pilot.app.screen, RecoveryScreen), "the wizard")
    screen = pilot.app.screen
    await until(pilot, lambda: screen.summaries and not screen.busy, "the saved runs")
    runs = screen.query_one("#runs", DataTable)
    # its columns as wide as its rows from the moment they are shown (a table's own sizing waits
    # for the app to be idle, and a header drawn before then was kept at the old widths)
    await until(pilot, lambda: sized(runs), "the run list's columns sized to its rows")
    await pilot.pause()


def sized(table: DataTable) -> bool:
    columns = list(table.columns.values())
    return table.row_count > 0 and all(
        (column.content_width if column.auto_width else column.width)
        >= cell_len(str(table.get_cell_at(Coordinate(row, index))))
        for row in range(table.row_count)
        for index, column in enumerate(columns)
    )


async def recovery_inspect_step(pilot) -> None:
    # (the stop step is not pictured: it quotes this machine's host name and the real time)
    await recovery_list(pilot)
    screen = pilot.app.screen
    await pilot.press("enter")
    await until(
        pilot,
        lambda: screen.view is not None and screen.step == "stop" and not screen.busy,
        "the run's owner",
    )
    await pilot.press("i")
    await until(pilot, lambda: screen.step == "inspect" and not screen.busy, "the saved attempts")
    await pilot.pause()


RECOVERY_VIEWS = {"runs": recovery_list, "inspect": recovery_inspect_step}


@SIZES
@pytest.mark.parametrize("view", list(RECOVERY_VIEWS))
def test_recovery_snapshot(snap_compare, tmp_path, view, size, monkeypatch):
    race_file = sample(tmp_path)
    saved_run(race_file, monkeypatch)
    assert snap_compare(app_for(race_file), terminal_size=size, run_before=RECOVERY_VIEWS[view])
