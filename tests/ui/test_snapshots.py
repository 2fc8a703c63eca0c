"""A few snapshots at a fixed size, with a fixed clock, no cursor blink and animations off.

The mid-race picture replays a recorded sequence of engine events (fixed timestamps) into the
race's model: the screen renders from the model only, so this is exactly what a live race shows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from outpost_tui.engine.core.events import (
    Admitted,
    AgentStarted,
    Log,
    RaceStarted,
    Retry,
    Settled,
    Text,
    Tool,
    UsageReported,
    ValidationFinished,
    ValidationStarted,
)
from outpost_tui.samples import materialise
from outpost_tui.ui.app import OutpostApp
from tests.ui.support import prepared

SIZE = (120, 36)
T0 = 1_800_000_000.0


def app_for(tmp_path: Path) -> OutpostApp:
    return OutpostApp(materialise("race", tmp_path / "demo"), testing=True, clock=lambda: T0 + 42)


def usage(i, c, w, o, cost):
    return {
        "input": i,
        "cached": c,
        "cache_write": w,
        "output": o,
        "cost_usd": cost,
        "complete": True,
        "estimated": False,
    }


RECORDED = [
    RaceStarted(
        id="20260101-000000-abcdef",
        name="calc-race",
        mode="race",
        select="first",
        baseline="0" * 40,
        candidates=["fixer", "breaker", "slow"],
        run_id=None,
        host_dirty=False,
        validate=None,
        at=T0,
    ),
    *[
        Admitted(
            key=key, attempt=1, branch=f"outpost/speculation/x/{key}/1", agent="demo", attempts=n, at=T0 + n
        )
        for n, key in enumerate(["fixer", "breaker", "slow"], 1)
    ],
    *[
        AgentStarted(key=key, attempt=1, program="demo", timeout=120, at=T0 + 4)
        for key in ["fixer", "breaker", "slow"]
    ],
    Tool(key="fixer", attempt=1, name="Read", input="calc.py", at=T0 + 5),
    Log(key="fixer", attempt=1, stream="stdout", lines=["def add(a, b):", "    return a - b"], at=T0 + 6),
    UsageReported(
        key="fixer",
        attempt=1,
        delta=usage(1200, 8000, 0, 300, 0.012),
        total=usage(1200, 8000, 0, 300, 0.012),
        race_total=usage(2000, 8000, 0, 500, 0.02),
        at=T0 + 7,
    ),
    Text(key="breaker", attempt=1, text="I'll special-case the failing input.", at=T0 + 8),
    ValidationStarted(key="breaker", attempt=1, commits=1, commit="1" * 40, at=T0 + 20),
    ValidationFinished(
        key="breaker",
        attempt=1,
        status="failed",
        exit_code=1,
        reason="validation failed (exit code 1)",
        verdict=None,
        at=T0 + 21,
    ),
    Settled(
        key="breaker",
        attempt=1,
        status="rejected",
        reason="validation failed (exit code 1)",
        commit="1" * 40,
        at=T0 + 21,
    ),
    Retry(key="slow", attempt=1, message="overloaded (529), retrying in 2s", retry=1, at=T0 + 30),
]


async def replay(pilot) -> None:
    await prepared(pilot)
    session = pilot.app.session
    session.started = True
    for event in RECORDED:
        session.bus.publish(event)
    # the footer shows a started race's keys, as it does once `s` starts one (action_start)
    pilot.app.screen.refresh_bindings()


@pytest.fixture(autouse=True)
def fixed_environment(monkeypatch, tmp_path):
    # A fixed path that does not exist: no user theme or keymap, and the help text shows the same path.
    monkeypatch.setenv("OUTPOST_TUI_CONFIG_DIR", "/nonexistent/outpost-tui-config")
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent/xdg")
    monkeypatch.setenv("TEXTUAL_ANIMATIONS", "none")


# The common terminal and a roomy one: every screen must be usable at the first and use the second.
SIZES = pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])


@SIZES
def test_race_ready_to_start(snap_compare, tmp_path, size):
    assert snap_compare(app_for(tmp_path), terminal_size=size, run_before=prepared)


@SIZES
def test_race_in_progress(snap_compare, tmp_path, size):
    async def run_before(pilot):
        await replay(pilot)
        await pilot.pause(0.3)

    assert snap_compare(app_for(tmp_path), terminal_size=size, run_before=run_before)


@SIZES
def test_confirm_accept(snap_compare, tmp_path, size):
    async def run_before(pilot):
        await replay(pilot)
        await pilot.pause(0.3)
        pilot.app.screen.action_accept()
        await pilot.pause(0.1)

    assert snap_compare(app_for(tmp_path), terminal_size=size, run_before=run_before)


@SIZES
def test_home(snap_compare, tmp_path, size, monkeypatch):
    # nothing recorded, and no agent CLI on PATH: the same picture on every machine
    monkeypatch.setenv("PATH", str(tmp_path))

    async def run_before(pilot):
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()  # the agents check and the recent races
        await pilot.pause()

    assert snap_compare(
        OutpostApp(testing=True, repository="/nonexistent/repo"), terminal_size=size, run_before=run_before
    )


@SIZES
def test_help(snap_compare, tmp_path, size):
    assert snap_compare(app_for(tmp_path), terminal_size=size, press=["question_mark"])


def record(
    key,
    attempt,
    status,
    *,
    error=None,
    decided_by=None,
    out=0,
    cost=0.0,
    duration=None,
    validation="not-run",
    exit_code=None,
    review=None,
    score=None,
):
    return {
        "key": key,
        "attempt": attempt,
        "agent": "demo",
        "status": status,
        "branch": f"outpost/speculation/20260101-000000-abcdef/{key}/{attempt}",
        "commit": f"{attempt}{key[0]}" * 20 if status in ("winner", "rejected") else None,
        "usage": usage(1000 * attempt, 4000, 0, out, cost),
        "score": score,
        "validation": {"status": validation, "exit_code": exit_code, "output": "", "reason": None},
        "retained_directory": None,
        "directory": None,
        "error": error,
        "decided_by": decided_by,
        "duration": duration,
        "review": review,
    }


RESULT = {
    "id": "20260101-000000-abcdef",
    "name": "calc-race",
    "status": "winner",
    "mode": "race",
    "select": "first",
    "repository": "/nonexistent/repo",
    "baseline": "0" * 40,
    "winner": {
        "key": "fixer",
        "attempt": 1,
        "branch": "outpost/speculation/20260101-000000-abcdef/fixer/1",
        "commit": "1f" * 20,
        "decided_by": "validation",
        "score": None,
    },
    "candidates": [
        record(
            "fixer",
            1,
            "winner",
            decided_by="validation",
            out=300,
            cost=0.012,
            duration=38.2,
            validation="passed",
            exit_code=0,
            review=["tests changed: tests/test_calc.py"],
        ),
        record(
            "breaker",
            1,
            "rejected",
            error="validation failed (exit code 1)",
            out=120,
            cost=0.004,
            duration=21.0,
            validation="failed",
            exit_code=1,
        ),
        record(
            "slow",
            2,
            "cancelled",
            error="cancelled: another candidate won",
            out=40,
            cost=0.001,
            duration=40.0,
        ),
    ],
    "previous_attempts": [record("slow", 1, "quota", error="usage limit reached", out=10, duration=3.0)],
    "usage": {
        "attempts": 4,
        "input": 7000,
        "cached": 16000,
        "cache_write": 0,
        "output": 470,
        "cost_usd": 0.017,
        "complete": True,
        "estimated": False,
    },
    "integration": {"status": "clean", "conflicts": [], "reason": None},
    "started_at": T0,
    "finished_at": T0 + 42,
    "duration": 42.0,
}


@SIZES
def test_result(snap_compare, tmp_path, size):
    from outpost_tui.ui.screens.result import ResultScreen

    async def run_before(pilot):
        await pilot.app.push_screen(ResultScreen(RESULT))
        await pilot.pause(0.1)

    assert snap_compare(app_for(tmp_path), terminal_size=size, run_before=run_before)


UNISOLATED = {
    "mode": "none",
    "warning": "candidates run unisolated, as you: they can write your repository's refs and .git, "
    '.outpost/ and each other\'s worktrees ([sandbox] isolation = "none"); install bubblewrap '
    "(Debian/Ubuntu: apt install bubblewrap) or use a container sandbox",
}


def test_result_of_an_unisolated_race(snap_compare, tmp_path):
    """The warning's one line, between the headline and the leaderboard, cut at the terminal's edge."""
    from outpost_tui.ui.screens.result import ResultScreen

    async def run_before(pilot):
        await pilot.app.push_screen(ResultScreen({**RESULT, "isolation": UNISOLATED}))
        await pilot.pause(0.1)

    assert snap_compare(app_for(tmp_path), terminal_size=(80, 24), run_before=run_before)
