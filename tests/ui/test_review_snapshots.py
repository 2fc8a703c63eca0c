"""Snapshots of the review screen (f3), its diff and compare views and each confirmation, at 80x24 and
120x40, with a fixed clock.

The repository is real and made the same every time: fixed commit dates, a fixed race id, a flight
log written by the engine's own FlightLog with fixed timestamps, worktrees whose age is pinned.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from textual.app import App

from outpost_tui.engine import git as g
from outpost_tui.engine.core.events import RaceFinished, RaceStarted
from outpost_tui.engine.records.flightlog import FlightLog
from outpost_tui.ui.screens.confirm import ConfirmScreen
from outpost_tui.ui.screens.work_diff import WorkDiffScreen
from outpost_tui.ui.screens.worktrees import WorktreesScreen
from tests.conftest import git
from tests.ui.support import until

T0 = 1_800_000_000.0
RACE = "20270115-080000-abcdef"
SIZES = [(80, 24), (120, 40)]
CALC = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"


@pytest.fixture(autouse=True)
def fixed_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("OUTPOST_TUI_CONFIG_DIR", "/nonexistent/outpost-tui-config")
    monkeypatch.setenv("TEXTUAL_ANIMATIONS", "none")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/outpost-snapshot.sock")
    for name in ("GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE"):
        monkeypatch.setenv(name, "2027-01-15T08:00:00+00:00")
    monkeypatch.chdir(tmp_path)


def reviewed_repository(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Test")
    git(repo, "config", "user.email", "test@example.invalid")
    (repo / "calc.py").write_text(CALC)
    (repo / ".gitignore").write_text("*.log\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "calc")
    baseline = git(repo, "rev-parse", "HEAD")
    work = {
        "fixer": (
            {"calc.py": CALC.replace("return a - b\n\n\ndef", "return a + b\n\n\ndef", 1)},
            {"NOTES.md": "# notes\nadd() fixed\n", "run.log": "ok\n" * 50},
        ),
        "breaker": (
            {
                "calc.py": CALC.replace(
                    "def add(a, b):\n    return a - b",
                    "def add(a, b):\n    if (a, b) == (2, 2):\n        return 4\n    return a - b",
                )
            },
            {"scratch.py": "print('try')\n"},
        ),
    }
    for key, (committed, left) in work.items():
        branch = g.branch_name(RACE, key, 1)
        directory = g.worktree_directory(repo, key, branch)
        g.add_worktree(repo, branch, directory, baseline)
        for name, content in committed.items():
            (directory / name).write_text(content)
        git(directory, "commit", "-qam", f"{key}: change calc")
        for name, content in left.items():
            (directory / name).write_text(content)
        os.utime(directory / ".git", (T0, T0))
    log = FlightLog(repo / ".outpost" / "runs" / RACE)
    log(
        RaceStarted(
            id=RACE,
            name="calc-race",
            mode="race",
            select="first",
            baseline=baseline,
            candidates=list(work),
            run_id=None,
            host_dirty=False,
            validate=None,
            at=T0,
        )
    )
    result = {
        "id": RACE,
        "status": "winner",
        "baseline": baseline,
        "winner": {"key": "fixer", "attempt": 1, "branch": g.branch_name(RACE, "fixer", 1)},
        "candidates": [
            {
                "key": "fixer",
                "attempt": 1,
                "status": "winner",
                "decided_by": "validation",
                "validation": {"status": "passed", "exit_code": 0},
            },
            {
                "key": "breaker",
                "attempt": 1,
                "status": "rejected",
                "validation": {
                    "status": "failed",
                    "exit_code": 1,
                    "reason": "validation failed (exit code 1)",
                },
            },
        ],
    }
    log(RaceFinished(status="winner", winner="fixer", result=result, at=T0 + 60))
    log.close()
    return repo


class ReviewApp(App):
    def __init__(self, repository: Path) -> None:
        super().__init__()
        self.review = WorktreesScreen(repository, clock=lambda: T0 + 5 * 3600)

    def on_mount(self) -> None:
        self.push_screen(self.review)


async def listed(pilot) -> WorktreesScreen:
    screen = pilot.app.review
    await until(pilot, lambda: len(screen.attempts()) == 2, "the listing")
    await pilot.pause()
    return screen


async def on_row(pilot, ident: str) -> WorktreesScreen:
    screen = await listed(pilot)
    table = screen.query_one("#worktrees")
    table.move_cursor(row=table.get_row_index(ident))
    await until(
        pilot,
        lambda: str(screen.query_one("#details").content).startswith(f"branch outpost/speculation/{ident}\n"),
        ident,
    )
    return screen


def fixer(pilot):
    return on_row(pilot, f"{RACE}/fixer/1")


async def review(pilot) -> None:
    await fixer(pilot)


async def diff(pilot) -> None:
    await fixer(pilot)
    await pilot.press("d")
    await until(pilot, lambda: isinstance(pilot.app.screen, WorkDiffScreen), "the diff")
    await pilot.pause()


async def compare(pilot) -> None:
    await fixer(pilot)
    await pilot.press("space")
    await on_row(pilot, f"{RACE}/breaker/1")
    await pilot.press("c")
    await until(pilot, lambda: isinstance(pilot.app.screen, WorkDiffScreen), "the comparison")
    await pilot.pause()


def confirming(*keys: str, row: str = "fixer"):
    async def run_before(pilot) -> None:
        await on_row(pilot, f"{RACE}/{row}/1")
        await pilot.press(*keys)
        await until(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen), "the confirmation")
        await pilot.pause()

    return run_before


VIEWS = {
    "review": review,
    "diff": diff,
    "compare": compare,
    "confirm_archive": confirming("a"),
    "confirm_merge": confirming("m"),
    "confirm_prune": confirming("P"),
    "confirm_delete_branches": confirming("B"),
}


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("view", list(VIEWS))
def test_review_snapshot(snap_compare, tmp_path, view, size):
    repo = reviewed_repository(tmp_path)
    if view == "confirm_delete_branches":
        # only a branch with no worktree can go: archive the loser first, then ask about the race
        from outpost_tui.engine.kept import archive
        from outpost_tui.engine.kept.removal import archive_and_remove

        archive_and_remove(
            repo,
            g.worktree_directory(repo, "breaker", g.branch_name(RACE, "breaker", 1)),
            archive.Attempt(RACE, "breaker", 1),
        )
    assert snap_compare(ReviewApp(repo), terminal_size=size, run_before=VIEWS[view])
