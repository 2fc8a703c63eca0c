"""The app over a real race whose candidate moves the user's checked-out branch. Unisolated, the
move lands: an error notification and a flagged panel, not a line lost in a log, and the race
warns that candidates run unisolated. Isolated, the move stays in the candidate's own repository:
nothing to flag."""

from __future__ import annotations

import json

import pytest
from textual.widgets import Static

from outpost_tui.ui.app import OutpostApp
from outpost_tui.ui.widgets.candidate_panel import CandidatePanel
from tests.conftest import git
from tests.ui.support import until

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("isolation", ["none", "bubblewrap"])
async def test_a_candidate_moving_the_users_branch_is_an_error_notification_and_a_flag(
    repo, tmp_path, isolation
):
    script = (
        "echo fixed > fix.txt && git add fix.txt && git commit -qm fix && "
        'git update-ref refs/heads/main "$(git commit-tree HEAD~1^{tree} -p HEAD~1 -m moved)"'
    )
    path = tmp_path / "race.toml"
    path.write_text(
        f'[race]\nname = "ui"\nrepository = "{repo}"\n[validate]\ncommand = ["true"]\n'
        f'\n[[candidates]]\nkey = "mover"\nagent = "command"\nbrief = "b"\n'
        f"command = {json.dumps(['sh', '-c', script])}\n"
        f'\n[sandbox]\nisolation = "{isolation}"\n'
    )
    main = git(repo, "rev-parse", "main")
    app = OutpostApp(path, start=True, testing=True)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await until(pilot, lambda: app.session.result, "the race to finish")
        panel = app.screen.query_one("#panel-mover", CandidatePanel)
        messages = [n.message for n in app._notifications]
        if isolation == "bubblewrap":
            await pilot.pause()
            assert git(repo, "rev-parse", "main") == main
            assert not panel.has_class("-tampering")
            assert not any("your repository was changed" in m or "unisolated" in m for m in messages)
            assert app.session.result.integration["status"] == "clean"
            return
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
