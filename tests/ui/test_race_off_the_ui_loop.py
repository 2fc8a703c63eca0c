"""The app runs a race on an event loop of its own, in another thread: the agents' output is read
and decoded there, never on the app's loop, and the operator's controls still reach the race."""

from __future__ import annotations

import threading

import pytest

from outpost_tui.ui.app import OutpostApp
from outpost_tui.ui.screens.confirm import ConfirmScreen
from tests.conftest import make_repo
from tests.ui.support import prepared
from tests.ui.test_operator_fixes import fake, race_file
from tests.ui.test_race_screen import SIZE, until

pytestmark = pytest.mark.anyio


async def test_output_is_decoded_off_the_apps_loop_and_cancel_still_reaches_the_race(tmp_path):
    repo = make_repo(tmp_path / "repo")
    path = race_file(
        tmp_path,
        repo,
        [
            ("chatty", fake("--lines", "3000", "--pidfile", str(tmp_path / "chatty.pid"), "--hang")),
            ("quiet", fake("--pidfile", str(tmp_path / "quiet.pid"), "--hang")),
        ],
    )
    app = OutpostApp(path, testing=True)
    seen: dict[str, set[int]] = {}
    async with app.run_test(size=SIZE) as pilot:
        await prepared(pilot)
        session = app.session
        session.bus.subscribe(
            lambda event: seen.setdefault(event.kind.value, set()).add(threading.get_ident())
        )
        await pilot.press("s")
        model = session.model
        await until(pilot, lambda: model.candidates["chatty"].lines >= 3000, "every line of chatty")
        assert seen["log"] and threading.get_ident() not in seen["log"], seen  # not the app's thread

        await pilot.press("2", "c")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(pilot, lambda: model.candidates["quiet"].state == "cancelled", "quiet cancelled")
        assert model.candidates["chatty"].state == "running"

        await pilot.press("x")
        await pilot.press("y")
        await until(pilot, lambda: session.result is not None, "the race to end")
        assert session.result.status.value == "aborted"
        assert {c.key: str(c.status) for c in session.result.candidates} == {
            "chatty": "cancelled",
            "quiet": "cancelled",
        }
