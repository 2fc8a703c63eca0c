"""The app's first frame waits only for what it shows: the home screen paints before the race
machinery and the race file's editor are loaded, and a race screen before its race file is checked
(every agent's adapter, git) and before the editor, the race machinery and the Race itself (its
panels show the candidates from a sketch of the file, "preparing…", and fill in once the file is
checked and the Race built in a thread). Timings against a bare Textual app are in
tests/benchmarks/bench_app.py (first_frame)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest

from outpost_tui.engine.racefile import RaceFileError, load_race
from outpost_tui.ui import collector
from outpost_tui.ui.app import OutpostApp
from outpost_tui.ui.widgets.candidate_panel import CandidatePanel
from tests.benchmarks.bench_app import _race_file
from tests.ui.support import until

# The app, headless, exits once it has painted its first frame of the screen it opens on (the home
# screen or a race's), and prints which modules were loaded by then, whether its race was built
# and what the frame showed. App._display is where Textual hands a screen's frame to the terminal.
FIRST_FRAME = r"""
import json, sys
from outpost_tui.ui.app import OutpostApp

class FirstFrame(OutpostApp):
    __module__ = OutpostApp.__module__  # Textual finds CSS_PATH beside the class's module
    loaded = None

    def _display(self, screen, renderable):
        super()._display(screen, renderable)
        shown = type(screen).__name__ in ("HomeScreen", "RaceScreen")
        if renderable is not None and self.loaded is None and shown:
            self.loaded = sorted(sys.modules)
            built = self.session is not None and self.session.race is not None
            # the first frame is a whole screen's (Textual's LayoutUpdate): its lines as text
            painted = ["".join(s.text for s in strip) for strip in getattr(renderable, "strips", [])]
            self.call_later(self.exit, {"modules": self.loaded, "built": built, "painted": painted})

print(json.dumps(FirstFrame(sys.argv[1] if len(sys.argv) > 1 else None).run(headless=True, size=(200, 60))))
"""
# The race file's editor (f5) and what only it needs.
EDITOR = ("outpost_tui.ui.screens.configure", "outpost_tui.ui.race_document", "tomlkit")
# What starting a race needs, and no screen shows before.
RACING = ("outpost_tui.engine.racing.coordinator", "outpost_tui.engine.agents")
# What builds a Race (the race screen's first frame shows the candidates before it exists).
RACE = ("outpost_tui.engine.api", "outpost_tui.engine.racing")
# What checks a race file: its reader, every agent's adapter (their options), git.
CHECK = ("outpost_tui.engine.racefile", "outpost_tui.engine.agents", "outpost_tui.engine.git.")


def first_frame(tmp_path, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", FIRST_FRAME, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"OUTPOST_TUI_CONFIG_DIR": str(tmp_path / "config"), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    frame = json.loads(done.stdout.strip().splitlines()[-1])
    assert "outpost_tui.ui.app" in frame["modules"]
    return frame


def loaded_at_first_frame(tmp_path, *args: str) -> set[str]:
    return set(first_frame(tmp_path, *args)["modules"])


def test_the_home_screen_paints_before_the_race_machinery_and_the_editor_load(tmp_path):
    modules = loaded_at_first_frame(tmp_path)
    assert "outpost_tui.ui.screens.home" in modules
    assert sorted(m for m in modules if m.startswith(EDITOR + RACING)) == []


def test_a_race_screen_paints_its_candidates_before_the_race_is_built_and_the_editor_loads(tmp_path):
    race = _race_file(tmp_path, 8, 10, 1.0)
    frame = first_frame(tmp_path, str(race))
    modules = set(frame["modules"])
    assert "outpost_tui.ui.screens.race" in modules
    assert sorted(m for m in modules if m.startswith(EDITOR + RACE + CHECK)) == []
    assert "outpost_tui.engine.git" not in modules
    assert frame["built"] is False
    painted = "\n".join(frame["painted"])
    assert "preparing…" in painted
    # every candidate's panel is there, by its number, key and agent
    assert all(f"{n} c{n} · command" in painted for n in range(1, 9)), painted


pytestmark = pytest.mark.anyio


async def test_the_collector_the_command_line_holds_off_is_let_go_once_the_app_has_painted(tmp_path):
    collector.hold_off()  # as launch does before it loads the app
    try:
        assert not gc.isenabled()
        app = OutpostApp(_race_file(tmp_path, 2, 10, 1.0), testing=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, gc.isenabled, "the collector to run again")
    finally:
        gc.enable()


async def test_the_race_screen_fills_in_once_the_race_is_built(tmp_path):
    app = OutpostApp(_race_file(tmp_path, 2, 10, 1.0), testing=True)
    async with app.run_test(size=(120, 40)) as pilot:
        summary = app.screen.query_one("#summary")
        await until(pilot, lambda: "ready: press s to start" in str(summary.render()), "the race built")
        assert app.session.ready and not app.session.started
        states = {panel.key: panel.line("state") for panel in app.screen.query(CandidatePanel)}
        assert states == {"c1": "waiting", "c2": "waiting"}
        await pilot.press("s")
        await until(pilot, lambda: app.session.result is not None, "the race to end")
        assert app.session.model.candidates["c1"].lines == 10


async def test_a_race_file_whose_check_fails_after_the_first_frame_says_where_and_cannot_start(tmp_path):
    # Its candidates read (the screen paints them), but its repository is no git repository: only
    # the check, after the first frame, finds that.
    race = _race_file(tmp_path, 2, 10, 1.0)
    (tmp_path / "plain").mkdir()
    race.write_text(race.read_text().replace(str(tmp_path / "repo"), str(tmp_path / "plain")))
    app = OutpostApp(race, testing=True)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        assert [panel.key for panel in app.screen.query(CandidatePanel)] == ["c1", "c2"]
        await until(pilot, lambda: app.session.error is not None, "the race file's check to fail")
        await pilot.pause()
        said = str(app.screen.query_one("#summary").render())
        # the file, its line and key, and what is wrong: as `check` says it
        with pytest.raises(RaceFileError) as checked:
            load_race(race)
        assert said == f"cannot run: {checked.value}"
        assert said.startswith(f"cannot run: {race}:3: race.repository: not a git repository: ")
        assert [n.message for n in app._notifications] == [app.session.error]
        await pilot.press("s")
        await pilot.pause()
        assert not app.session.started and not app.session.checked and app.session.race is None
        await pilot.press("f5")  # nothing checked to configure: said, not a crash
        await pilot.pause()
        assert [n.message for n in app._notifications][-1] == f"cannot configure: {app.session.error}"


async def test_a_race_that_cannot_be_built_says_why_in_one_line_and_cannot_start(tmp_path, monkeypatch):
    # The race machinery cannot be loaded (as with a broken installation): building the Race fails.
    monkeypatch.setitem(sys.modules, "outpost_tui.engine.api", None)
    app = OutpostApp(_race_file(tmp_path, 2, 10, 1.0), testing=True)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        summary = app.screen.query_one("#summary")
        await until(pilot, lambda: app.session.error is not None, "the race's building to fail")
        await pilot.pause()
        said = str(summary.render())
        assert said.startswith("cannot run: cannot prepare the race: ModuleNotFoundError: ")
        assert "\n" not in said and "Traceback" not in said
        assert [n.message for n in app._notifications] == [app.session.error]
        await pilot.press("s")  # nothing to start: the key is not offered, and pressing it starts nothing
        await pilot.pause()
        assert not app.session.started and not app.screen.active_bindings.get("s")


@pytest.mark.parametrize("replay", [False, True])
async def test_the_app_opened_with_resume_may_replay_the_files_interrupted_run(tmp_path, replay):
    """`run RACE.toml --resume` opens the app on the file with replaying its interrupted run
    authorised, as the headless run does; without it, never."""
    race = _race_file(tmp_path, 2, 10, 1.0)
    race.write_text(
        race.read_text().replace('name = "flood"\n', 'name = "flood"\nrun_id = "r1"\n', 1)
        + "\n[durability]\nenabled = true\n"
    )
    app = OutpostApp(race, testing=True, replay=replay)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.session.checked, "the race file's check")
        assert app.session.spec.durability.enabled
        assert app.session.spec.durability.resume == ("retry-incomplete" if replay else None)
        assert app.session.race.spec.durability.resume == app.session.spec.durability.resume
