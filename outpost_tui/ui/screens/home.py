"""Where the app starts without a race file: open one, try a sample, recover, review worktrees,
look back at a recorded race."""

from __future__ import annotations

import tempfile
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, OptionList, Static
from textual.widgets.option_list import Option

from ...samples import SampleError, materialise, samples

INTRO = """\
[b]outpost-tui[/b] races coding agents on one task and keeps the one whose work passes your tests.

Open a race file, or try a sample race (it runs offline: scripted agents, a real project, real tests).
"""


class HomeScreen(Screen):
    DEFAULT_CSS = """
    HomeScreen > Vertical { padding: 1 2; }
    HomeScreen #intro { height: auto; margin-bottom: 1; }
    HomeScreen OptionList { height: auto; max-height: 12; margin-top: 1; }
    """
    # The list, not the path input, has focus at start: with the input focused, every letter key
    # of this screen (o, r, w, t, ?) would be typed into it instead. `o` moves to the input.
    AUTO_FOCUS = "#samples"
    BINDINGS = [
        Binding("o", "open", "Open file", id="home.open"),
        Binding("r", "app.recover", "Recover", id="home.recover"),
        Binding("w", "app.worktrees", "Worktrees", id="home.worktrees"),
        Binding("h", "app.history", "History", id="home.history"),
    ]

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical():
            yield Static(INTRO, id="intro")
            yield Input(placeholder="path/to/race.toml (enter to open)", id="path")
            try:
                options = [Option(f"sample {s.name}: {s.description}", id=s.name) for s in samples()]
            except SampleError as error:
                options = [Option(f"no samples: {error}", disabled=True)]
            yield OptionList(*options, id="samples")
        yield Footer(compact=True)

    def action_open(self) -> None:
        self.query_one("#path", Input).focus()

    @on(Input.Submitted, "#path")
    def _open(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self.app.open_race(Path(event.value.strip()).expanduser())

    @on(OptionList.OptionSelected, "#samples")
    def _sample(self, event: OptionList.OptionSelected) -> None:
        name = event.option.id
        try:
            race_file = materialise(name, Path(tempfile.mkdtemp(prefix="outpost-sample-")) / name)
        except SampleError as error:
            self.notify(str(error), severity="error")
            return
        self.notify(f"sample {name} written to {race_file.parent}")
        self.app.open_race(race_file)
