"""The app over a real race whose candidate moves the user's checked-out branch. Unisolated, the
move lands: an error notification and a flagged panel, not a line lost in a log, and the race
warns that candidates run unisolated (the guard is the fallback's defence). Isolated, the move
stays in the candidate's own repository: the user's branch never moves, nothing to flag."""

from __future__ import annotations

import json

import pytest
from textual.widgets import Static

from outpost_tui.ui.app import OutpostApp
from outpost_tui.ui.widgets.candidate_panel import CandidatePanel
from tests.conftest import git
from tests.ui.support import until

pytestmark = pytest.mark.anyio

# commits its fix, then points the branch named main at a commit of its own, off HEAD~1
MOVER = (
    "echo fixed > fix.txt && git add fix.txt && git commit -qm fix && "
    'git update-ref refs/heads/main "$(git commit-tree HEAD~1^{tree} -p HEAD~1 -m moved)"'
)


def mover_race(tmp_path, repo, isolation: str):
    path = tmp_path / "race.toml"
    path.write_text(
        f'[race]\nname = "ui"\nrepository = "{repo}"\n[validate]\ncommand = ["true"]\n'
        f'\n[[candidates]]\nkey = "mover"\nagent = "command"\nbrief = "b"\n'
        f"command = {json.dumps(['sh', '-c', MOVER])}\n"
        f'\n[sandbox]\nisolation = "{isolation}"\n'
    )
    return path


async def ended(pilot, app) -> None:
    """The race finished and the screen refreshed once after it: what it notifies was said."""
    await until(pilot, lambda: app.session.result, "the race to finish")
    summary = app.screen.query_one("#summary", Static)
    await until(pilot, lambda: "winner mover" in str(summary.render()), "the summary to show the end")


async def test_a_candidate_moving_the_users_branch_is_an_error_notification_and_a_flag(repo, tmp_path):
    main = git(repo, "rev-parse", "main")
    app = OutpostApp(mover_race(tmp_path, repo, "none"), start=True, testing=True)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await ended(pilot, app)
        panel = app.screen.query_one("#panel-mover", CandidatePanel)
        messages = [n.message for n in app._notifications]
        warnings = [n.message for n in app._notifications if n.severity == "warning"]
        assert any("candidates run unisolated" in m for m in warnings), messages
        await until(pilot, lambda: panel.has_class("-tampering"), "the panel to be flagged")
        reason = str(panel.query_one(".reason", Static).render())
        assert reason.startswith("⚠ changed your repository: moved refs/heads/main")
        errors = [n for n in app._notifications if n.severity == "error"]
        assert any(
            "your repository was changed: mover#1: moved refs/heads/main" in n.message for n in errors
        ), [n.message for n in app._notifications]
        assert app.session.result.integration["status"] == "blocked"
    assert git(repo, "rev-parse", "main") != main  # the move landed: what the guard reported


async def test_isolated_the_same_candidate_leaves_the_users_branch_and_nothing_is_flagged(repo, tmp_path):
    """The isolation is the defence: the candidate's update-ref succeeds (it exits 0, its fix is
    the winner) in the repository of its own, and the user's main stays where it was."""
    main = git(repo, "rev-parse", "main")
    app = OutpostApp(mover_race(tmp_path, repo, "bubblewrap"), start=True, testing=True)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await ended(pilot, app)
        panel = app.screen.query_one("#panel-mover", CandidatePanel)
        messages = [n.message for n in app._notifications]
        log = list(app.session.model.candidates["mover"].log)
        result = app.session.result
        assert not panel.has_class("-tampering")
        assert "changed your repository" not in str(panel.query_one(".reason", Static).render())
    assert "── agent ended (exit 0)" in log, log  # the move ran, and worked where it could
    assert not any("your repository was changed" in m or "unisolated" in m for m in messages), messages
    assert result.isolation["mode"] == "bubblewrap" and not result.tampering
    assert result.integration["status"] == "clean"
    assert git(repo, "rev-parse", "main") == main
    assert git(repo, "show", f"{result.winner.commit}:fix.txt") == "fixed"
