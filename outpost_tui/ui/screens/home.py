"""Where the app starts without a race file: open one, try a sample, look back at the races of this
repository, recover a durable run that needs it, review worktrees."""

from __future__ import annotations

import contextlib
import tempfile
import time
import tomllib
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Footer, Input, OptionList, Static
from textual.widgets.option_list import Option

from ...samples import SampleError, materialise, samples
from ..footer_order import FooterOrder
from ..widgets.header import OutpostHeader

INTRO = """\
[b]outpost-tui[/b] races coding agents on one task and keeps the one whose work passes your tests.

Open a race file, or try a sample race (it runs offline: scripted agents, a real project, real tests).
"""
OFFLINE_SAMPLE = "race"
RECENT = 12


class HomeScreen(FooterOrder):
    CSS_PATH = "home.tcss"
    # The list, not the path input, has focus at start: with the input focused, every letter key
    # of this screen (o, r, w, t, ?) would be typed into it instead. `o` moves to the input.
    AUTO_FOCUS = "#samples"
    BINDINGS = [
        Binding("o", "open", "Open file", id="home.open"),
        Binding("r", "recover_selected", "Recover", id="home.recover"),
        Binding("w", "app.worktrees", "Worktrees", id="home.worktrees"),
        Binding("h", "app.history", "History", id="home.history"),
    ]
    FOOTER_FIRST = ("open", "recover_selected")

    def __init__(self) -> None:
        super().__init__()
        # row key -> ("race", race id) or ("run", run id)
        self.recent: dict[str, tuple[str, str]] = {}

    def compose(self) -> ComposeResult:
        yield OutpostHeader()
        with Vertical():
            yield Static(INTRO, id="intro")
            yield Input(placeholder="path/to/race.toml (enter to open)", id="path")
            try:
                options = [Option(f"sample {s.name}: {s.description}", id=s.name) for s in samples()]
            except SampleError as error:
                options = [Option(f"no samples: {error}", disabled=True)]
            yield OptionList(*options, id="samples")
            yield Static("Recent races", id="recent-title", markup=False)
            yield DataTable(id="recent", cursor_type="row", zebra_stripes=True)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        samples_list = self.query_one("#samples", OptionList)
        # the offline sample first in line: enter runs something that costs nothing
        with contextlib.suppress(Exception):  # no such option (samples missing): the list says why
            samples_list.highlighted = samples_list.get_option_index(OFFLINE_SAMPLE)
        table = self.query_one("#recent", DataTable)
        table.add_columns("when", "race", "status", "winner", "cost", "time")
        # After the first frame: their threads load the engine (doctor's checks, the durable runs,
        # the recorded races), which the first paint would otherwise share the interpreter with.
        self.call_after_refresh(self._check_samples)
        self.call_after_refresh(self._load_recent, Path(self.host.repository))

    # ------------------------------------------------------------------ samples that spend

    @work(thread=True, group="home-samples", exit_on_error=False)
    def _check_samples(self) -> None:
        """A sample of real agents is offered only once they are installed and logged in (as
        `doctor` checks, without the network); otherwise its line says what is missing."""
        from ...engine.machine.doctor import agents_ready

        try:
            known = samples()
        except SampleError:
            return
        for sample in known:
            try:
                document = tomllib.loads((sample.directory / "race.toml").read_text())
            except (OSError, tomllib.TOMLDecodeError):
                continue
            kinds = {
                c["agent"]
                for c in document.get("candidates", [])
                if isinstance(c, dict) and isinstance(c.get("agent"), str)
            }
            if not kinds - {"demo", "command"}:
                continue
            failed = agents_ready(kinds)
            if failed:
                # short: the full story (install commands) is `outpost-tui doctor`'s
                why = "; ".join(check.detail.split(" (install")[0] for check in failed)
                self.app.call_from_thread(self._unavailable, sample.name, sample.description, why)

    def _unavailable(self, name: str, description: str, why: str) -> None:
        samples_list = self.query_one("#samples", OptionList)
        try:
            index = samples_list.get_option_index(name)
        except Exception:
            return
        samples_list.replace_option_prompt_at_index(
            index, f"sample {name} (spends tokens) not ready: {why} — see `outpost-tui doctor`"
        )
        samples_list.disable_option_at_index(index)

    # ------------------------------------------------------------------ recent races

    @work(thread=True, group="home-recent", exit_on_error=False)
    def _load_recent(self, repository: Path) -> None:
        """The repository's durable runs that need recovery, then its recorded races, newest first."""
        from ...engine.durable import recovery
        from ...engine.durable.checkpoint import CheckpointError
        from ...engine.git import GitError
        from ...engine.records.history import UnreadableRace, recorded_races, recorded_result
        from ...engine.records.report import money, seconds

        rows: list[tuple[str, tuple, tuple[str, str]]] = []
        try:
            runs = recovery.runs(repository)
        except (GitError, CheckpointError, OSError):
            runs = []
        for run in runs:
            if run.run_id is None or run.status not in ("interrupted", "owned"):
                continue
            if run.status == "owned":
                from ...engine.durable.ownership import coordinator_status

                if run.owner is None or coordinator_status(run.owner).alive is not False:
                    continue  # a coordinator is (or may be) still running it
            rows.append(
                (
                    f"run:{run.run_id}",
                    (
                        _when(run.updated_at),
                        run.run_id,
                        Text("needs recovery: r", style="bold yellow"),
                        "",
                        "",
                        "",
                    ),
                    ("run", run.run_id),
                )
            )
        try:
            races = recorded_races(repository)[:RECENT]
        except (GitError, OSError):
            races = []
        for race in races:
            cost = ""
            try:
                result = recorded_result(repository, race.id) if race.finished else None
            except (UnreadableRace, OSError):
                result = None
            if result:
                cost = money(result.get("usage") or {})
            took = seconds(race.finished_at - race.started_at) if race.finished_at and race.started_at else ""
            rows.append(
                (
                    f"race:{race.id}",
                    (
                        _when(race.started_at),
                        race.name or race.id,
                        race.status,
                        race.winner or "",
                        cost,
                        took,
                    ),
                    ("race", race.id),
                )
            )
        self.app.call_from_thread(self._show_recent, repository, rows)

    def _show_recent(self, repository: Path, rows: list) -> None:
        title = self.query_one("#recent-title", Static)
        table = self.query_one("#recent", DataTable)
        table.clear()
        self.recent.clear()
        for key, cells, what in rows:
            table.add_row(*cells, key=key)
            self.recent[key] = what
        title.update(
            f"Recent races in {repository.resolve()}"
            if rows
            else f"No races recorded in {repository.resolve()} yet"
        )

    def selected_recent(self) -> tuple[str, str] | None:
        table = self.query_one("#recent", DataTable)
        if not self.recent or table.cursor_row < 0:
            return None
        key = list(self.recent)[min(table.cursor_row, len(self.recent) - 1)]
        return self.recent[key]

    @on(DataTable.RowSelected, "#recent")
    def _recent_chosen(self) -> None:
        chosen = self.selected_recent()
        if chosen is None:
            return
        kind, ident = chosen
        if kind == "race":
            self.host.show_recorded(ident, Path(self.host.repository))
        else:
            self.action_recover_selected()

    def action_recover_selected(self) -> None:
        """r: the wizard, on the selected run when a run needing recovery is selected."""
        chosen = self.selected_recent() if self.query_one("#recent", DataTable).has_focus else None
        if chosen is None:
            # the first run that needs recovery, if any: one key from the home screen
            chosen = next((what for what in self.recent.values() if what[0] == "run"), None)
        run_id = chosen[1] if chosen is not None and chosen[0] == "run" else None
        self.host.open_recovery(Path(self.host.repository), run_id)

    # ------------------------------------------------------------------ opening

    def action_open(self) -> None:
        self.query_one("#path", Input).focus()

    @on(Input.Submitted, "#path")
    def _open(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self.host.open_race(Path(event.value.strip()).expanduser())

    @on(OptionList.OptionSelected, "#samples")
    def _sample(self, event: OptionList.OptionSelected) -> None:
        name = event.option.id
        if name is None:  # every sample option is made with its name as id
            return
        try:
            race_file = materialise(name, Path(tempfile.mkdtemp(prefix="outpost-sample-")) / name)
        except SampleError as error:
            self.notify(str(error), severity="error")
            return
        self.notify(f"sample {name} written to {race_file.parent}")
        self.host.open_race(race_file)


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at)) if at else "?"
