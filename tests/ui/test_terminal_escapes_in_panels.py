"""A candidate's escape sequences in the app: a real agent prints OSC 52, title changes, cursor
moves, C1 controls, BEL, backspace and carriage returns on stdout and stderr, in its own words and
in a tool's name; the race runs in the app, and neither the panel's log nor its reason line holds
one of them raw (the terminal would obey it), while each is there, shown as its escape."""

from __future__ import annotations

import json
import re
import sys

import pytest

from outpost_tui.ui.app import OutpostApp
from outpost_tui.ui.widgets.candidate_panel import CandidatePanel
from outpost_tui.ui.widgets.panel_log import PanelLog
from tests.cli.test_terminal_escapes import AGENT, SEQUENCES
from tests.conftest import make_repo
from tests.ui.support import prepared, until

pytestmark = pytest.mark.anyio
RAW = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\ud800-\udfff]")


async def test_the_panel_shows_escapes_and_holds_no_control(tmp_path):
    repo = make_repo(tmp_path / "repo")
    script = tmp_path / "escapes.py"
    script.write_text(AGENT)
    argv = json.dumps([sys.executable, str(script), json.dumps(SEQUENCES)])
    race = tmp_path / "race.toml"
    race.write_text(
        f'[race]\nname = "escapes"\nrepository = "{repo}"\n\n[validate]\ncommand = ["true"]\n'
        f'\n[[candidates]]\nkey = "shouter"\nagent = "command"\nbrief = "b"\ncommand = {argv}\n'
    )
    app = OutpostApp(race, testing=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await prepared(pilot)
        await pilot.press("s")
        await until(pilot, lambda: app.session.result is not None, "the race's end")
        model = app.session.model.candidates["shouter"]
        panel = app.screen.query_one(CandidatePanel)
        await until(pilot, lambda: panel._seen == model.log_count, "the panel's last lines")
        lines = list(panel.query_one(PanelLog).lines)
        reason = panel.line("reason")

    assert lines and reason
    assert [line for line in lines if RAW.search(line)] == []
    assert not RAW.search(reason), reason
    shown = "\n".join(lines)
    for text in (
        "out \\x1b]52;c;SGVsbG8=\\x07",
        "said \\x1b]0;pwned\\x07",
        "err \\x9b2J",
        "harmless\\x0dEVIL",
    ):
        assert text in shown, text
    assert "\\x1b]52;c;" in reason  # its reason: the agent's last stderr line
