"""The app's first frame waits only for what it shows: the home screen paints before the race
machinery and the race file's editor are loaded, and a race screen before the editor is. Timings
against a bare Textual app are in tests/benchmarks/bench_app.py (first_frame)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.benchmarks.bench_app import _race_file

# The app, headless, exits once it has painted its first frame of the screen it opens on (the home
# screen or a race's), and prints which modules were loaded by then. App._display is where Textual
# hands a screen's frame to the terminal.
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
            self.call_later(self.exit, self.loaded)

print(json.dumps(FirstFrame(sys.argv[1] if len(sys.argv) > 1 else None).run(headless=True, size=(200, 60))))
"""
# The race file's editor (f5) and what only it needs.
EDITOR = ("outpost_tui.ui.screens.configure", "outpost_tui.ui.race_document", "tomlkit")
# What starting a race needs, and no screen shows before.
RACING = ("outpost_tui.engine.racing.coordinator", "outpost_tui.engine.agents")


def loaded_at_first_frame(tmp_path, *args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", FIRST_FRAME, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"OUTPOST_TUI_CONFIG_DIR": str(tmp_path / "config"), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    modules = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "outpost_tui.ui.app" in modules
    return modules


def test_the_home_screen_paints_before_the_race_machinery_and_the_editor_load(tmp_path):
    modules = loaded_at_first_frame(tmp_path)
    assert "outpost_tui.ui.screens.home" in modules
    assert sorted(m for m in modules if m.startswith(EDITOR + RACING)) == []


def test_a_race_screen_paints_before_the_editor_loads(tmp_path):
    race = _race_file(tmp_path, 8, 10, 1.0)
    modules = loaded_at_first_frame(tmp_path, str(race))
    assert "outpost_tui.ui.screens.race" in modules
    assert sorted(m for m in modules if m.startswith(EDITOR)) == []
