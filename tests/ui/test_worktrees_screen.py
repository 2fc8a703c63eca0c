"""The worktrees review screen on worktrees a real race kept: one with an untracked file, one clean."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import DataTable, RichLog, Static

from tests.conftest import FAKE_AGENT, git, make_repo
from outpost_tui.ui.screens.confirm import ConfirmScreen
from outpost_tui.ui.screens.worktrees import BranchLogScreen, WorktreesScreen

pytestmark = pytest.mark.anyio
VALIDATE = Path(__file__).parents[1] / "fixtures" / "agents" / "validate.py"


class HostApp(App):
    def __init__(self, screen) -> None:
        super().__init__()
        self.start_screen = screen

    def on_mount(self) -> None:
        self.animation_level = "none"
        self.push_screen(self.start_screen)


@pytest.fixture
def kept(tmp_path) -> Path:
    """A repository after a race that kept two worktrees: `dirty` (an untracked file) and `clean`
    (its agent failed after committing)."""
    repo = make_repo(tmp_path / "repo")

    def candidate(key: str, *flags: str) -> str:
        argv = json.dumps([sys.executable, str(FAKE_AGENT), "--write", "fix.txt", "--content", "bad",
                           "--commit", *flags])
        return f'\n[[candidates]]\nkey = "{key}"\nagent = "command"\nbrief = "fix"\ncommand = {argv}\n'

    race = tmp_path / "race.toml"
    race.write_text(textwrap.dedent(f"""\
        [race]
        name = "keep"
        repository = "{repo}"
        concurrency = 2

        [validate]
        command = {json.dumps([sys.executable, str(VALIDATE)])}
        """) + candidate("dirty", "--dirty") + candidate("clean", "--exit", "1"))
    done = subprocess.run([sys.executable, "-m", "outpost_tui.cli", "run", str(race), "--headless"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    return repo


async def until(pilot, condition, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.02)


def text(screen, selector: str) -> str:
    return str(screen.query_one(selector, Static).content)


def rows(table: DataTable) -> dict[str, list[str]]:
    return {str(table.get_row_at(i)[0]): [str(c) for c in table.get_row_at(i)] for i in range(table.row_count)}


async def select(pilot, screen: WorktreesScreen, key: str) -> dict:
    table = screen.query_one("#worktrees", DataTable)
    index = list(rows(table)).index(f"{key}#1")
    table.move_cursor(row=index)
    await until(pilot, lambda: (screen.selected() or {}).get("key") == key, f"{key} to be selected")
    return screen.selected()


async def test_lists_both_and_removes_only_the_clean_one_keeping_its_branch(kept):
    screen = WorktreesScreen(kept)
    app = HostApp(screen)
    async with app.run_test(size=(120, 40)) as pilot:
        table = screen.query_one("#worktrees", DataTable)
        await until(pilot, lambda: table.row_count == 2, "the worktree list")
        listed = rows(table)
        assert listed["dirty#1"][2] == "has changes" and listed["clean#1"][2] == "clean"
        race_id = listed["dirty#1"][1]
        assert race_id == listed["clean#1"][1] != "—"

        dirty = await select(pilot, screen, "dirty")
        await until(pilot, lambda: text(screen, "#details").startswith(f"{dirty['path']}\nbranch"),
                    "dirty's details")
        details = text(screen, "#details")
        assert "?? untracked-notes.txt" in details and "fake agent change" in details

        await pilot.press("delete")
        assert app.screen is screen  # refused before asking
        assert "not removed" in text(screen, "#error") and dirty["path"] in text(screen, "#error")
        assert (Path(dirty["path"]) / "untracked-notes.txt").read_text() == "scratch\n"

        clean = await select(pilot, screen, "clean")
        await pilot.press("delete")
        assert isinstance(app.screen, ConfirmScreen)
        assert clean["path"] in app.screen.question and clean["branch"] in app.screen.question
        await pilot.press("n")
        assert Path(clean["path"]).is_dir()

        await pilot.press("delete", "y")
        await until(pilot, lambda: table.row_count == 1, "the list without the clean worktree")
        assert not Path(clean["path"]).exists()
        assert list(rows(table)) == ["dirty#1"]
        assert git(kept, "rev-parse", "--verify", clean["branch"]) == clean["head"]
        assert Path(dirty["path"], "untracked-notes.txt").exists()


async def test_shows_the_branch_log_with_patches_and_the_open_command(kept):
    screen = WorktreesScreen(kept)
    app = HostApp(screen)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        table = screen.query_one("#worktrees", DataTable)
        await until(pilot, lambda: table.row_count == 2, "the worktree list")
        clean = await select(pilot, screen, "clean")

        await pilot.press("o")
        assert any(f"cd {clean['path']}" in str(n.message) for n in app._notifications)

        await pilot.press("d")
        assert isinstance(app.screen, BranchLogScreen)
        log = app.screen.query_one(RichLog)
        await until(pilot, lambda: len(log.lines) > 3, "the patches")
        shown = "\n".join(line.text for line in log.lines)
        assert "fake agent change" in shown and "+bad" in shown and "fix.txt | 1 +" in shown
        await pilot.press("escape")
        assert app.screen is screen


async def test_an_unreachable_container_engine_is_a_one_line_note(kept, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/outpost-test.sock")
    screen = WorktreesScreen(kept)
    async with HostApp(screen).run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: text(screen, "#containers").startswith("Containers not listed"),
                    "the container note")
        note = text(screen, "#containers")
        assert len(note.splitlines()) == 1 and "cannot reach the container engine" in note
        # The worktrees are listed by their own worker: the engine's absence does not hide them.
        await until(pilot, lambda: screen.query_one("#worktrees", DataTable).row_count == 2, "the worktrees")


async def test_a_worktree_whose_git_link_was_changed_is_shown_but_never_read_with_git(kept, tmp_path):
    """An agent that rewired its worktree's .git to a configuration of its own gets no git run there."""
    marker = tmp_path / "ran"
    planted = make_repo(tmp_path / "planted")
    git(planted, "config", "core.fsmonitor", f"touch {marker}; false")
    screen = WorktreesScreen(kept)
    app = HostApp(screen)
    async with app.run_test(size=(120, 40)) as pilot:
        table = screen.query_one("#worktrees", DataTable)
        await until(pilot, lambda: table.row_count == 2, "the worktree list")
        dirty = await select(pilot, screen, "dirty")
        (Path(dirty["path"]) / ".git").write_text(f"gitdir: {planted / '.git'}\n")
        await pilot.press("r")  # reload the list
        await until(pilot, lambda: rows(table).get("dirty#1", ["", "", ""])[2].startswith("git link"),
                    "the changed link to be marked")
        await select(pilot, screen, "dirty")
        await until(pilot, lambda: "link" in text(screen, "#details").split("\n", 2)[-1],
                    "the details to say why they are not shown")
    assert not marker.exists()
