"""The outpost-tui app: screens over the engine, themes from files, a command palette, rebindable keys."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import events
from textual.app import App
from textual.binding import Binding

from . import collector
from .commands import OutpostCommands

if TYPE_CHECKING:
    from ..engine.core.spec import RaceSpec
    from .race_sketch import RaceSketch
    from .session import RaceSession


class OutpostApp(App):
    TITLE = "outpost-tui"
    COMMANDS = App.COMMANDS | {OutpostCommands}
    CSS_PATH = "app.tcss"
    BINDINGS = [
        Binding("ctrl+q", "quit", "Quit", id="app.quit", priority=True),
        Binding("question_mark", "help", "Help", id="app.help"),
        # Short words: at 80 columns the footer holds every key that applies.
        Binding("f3", "worktrees", "Trees", id="app.worktrees", tooltip="Review kept worktrees"),
        Binding("f4", "recover", "Recover", id="app.recover", tooltip="Crash recovery wizard"),
        Binding("f5", "configure", "Config", id="app.configure", tooltip="Configure the race"),
        # Not in the footer (race screens fill it); the help screen and the palette list it.
        Binding("t", "pick_theme", "Pick theme", id="app.theme", show=False),
    ]

    def __init__(
        self,
        race_file: str | Path | None = None,
        *,
        start: bool = False,
        screen: str | None = None,
        repository: str | Path = ".",
        testing: bool = False,
        clock: Callable[[], float] = time.time,
        recorded: str | None = None,
        replay: bool = False,
    ) -> None:
        """recorded: the id of a race recorded in `repository`, to open read-only; replay: the
        race file's interrupted run may be replayed (`run RACE.toml --resume`)."""
        super().__init__()
        self.replay = replay
        self.recorded_race = recorded
        self.clock = clock  # elapsed times on screen; tests fix it
        self.race_file = Path(race_file) if race_file else None
        self.start_race_now = start
        self.first_screen = screen
        self.repository = Path(repository)
        self.testing = testing
        self.session: RaceSession | None = None
        self._load_errors: list[str] = []
        self.own_themes: list[str] = []  # loaded from theme files, listed first in the picker
        self.ring_bell = False  # settings.toml `bell = true`: the terminal bell when a race ends

    # ------------------------------------------------------------------------- start-up

    def get_theme_variable_defaults(self) -> dict[str, str]:
        # The app's own variables ($status-winner, ...) must parse under any theme, Textual's too.
        from .themes import STATUS_DEFAULTS

        return dict(STATUS_DEFAULTS)

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        # Tests and snapshots need a still cursor: a blinking one changes the picture.
        if self.testing and hasattr(event.widget, "cursor_blink"):
            event.widget.cursor_blink = False

    def on_mount(self) -> None:
        if self.testing:
            self.animation_level = "none"
        self.call_after_refresh(collector.app_painted)
        self._load_themes()
        self._load_keymap()
        from .settings import load_settings

        settings, _ = load_settings()  # its errors were reported with the theme's
        self.ring_bell = settings.get("bell") is True
        if self._load_errors:
            self.notify("; ".join(self._load_errors), severity="error", timeout=10)
        if self.race_file is not None:
            self.open_race(self.race_file, start=self.start_race_now, replay=self.replay)
        elif self.recorded_race is not None:
            self.show_recorded(self.recorded_race)
        elif self.first_screen == "recover":
            self.action_recover()
        elif self.first_screen == "worktrees":
            from .screens.home import HomeScreen

            self.push_screen(HomeScreen())  # escape from the review lands home
            self.action_worktrees()
        else:
            from .screens.home import HomeScreen

            self.push_screen(HomeScreen())

    def _load_themes(self) -> None:
        from .settings import saved_theme, settings_path
        from .themes import DEFAULT_THEME, load_themes

        themes, errors = load_themes()
        for theme in themes:
            self.register_theme(theme)
        self.own_themes = [theme.name for theme in themes]
        self._load_errors.extend(errors)
        saved, errors = saved_theme()
        self._load_errors.extend(errors)
        if saved is not None and saved not in self.available_themes:
            self._load_errors.append(
                f"{settings_path()}: theme: no theme named {saved!r} (using {DEFAULT_THEME})"
            )
            saved = None
        # The environment wins over the saved choice: it is how a script or a test asks for one.
        for wanted in (os.environ.get("OUTPOST_TUI_THEME"), saved, DEFAULT_THEME):
            if wanted and wanted in self.available_themes:
                self.theme = wanted
                break

    def _load_keymap(self) -> None:
        from .keymap import load_keymap

        keymap, errors = load_keymap()
        self._load_errors.extend(errors)
        if keymap:
            self.set_keymap(keymap)

    # --------------------------------------------------------------------------- races

    def open_race(self, path: Path, *, start: bool = False, replay: bool = False) -> None:
        """Open a race file on the race screen, ready to start (or started); `replay`: replaying
        its interrupted run is authorised."""
        from .race_sketch import sketch_race

        # The screen paints the file's candidates from its sketch; the file is checked (every
        # agent's adapter loaded, git run) after that, off this loop. A file with no sketch is
        # checked now, and goes no further than its one-line error.
        race: RaceSpec | RaceSketch | None = sketch_race(Path(path))
        if race is None:
            from ..engine.racefile import RaceFileError, load_race

            try:
                race = load_race(path)
            except RaceFileError as error:
                self.notify(str(error), severity="error", timeout=15)
                if not self.screen_stack or len(self.screen_stack) <= 1:
                    from .screens.home import HomeScreen

                    self.push_screen(HomeScreen())
                return
        self.race_file = Path(path)
        self.start_race(race, start=start, replay=replay)

    def start_race(self, spec: RaceSpec | RaceSketch, *, start: bool = True, replay: bool = False) -> None:
        """A race on the race screen: a checked spec, or a race file's sketch (checked once the
        screen has painted); `replay`: replaying its interrupted run is authorised."""
        from .screens.race import RaceScreen

        if self.session is not None and self.session.running:
            self.notify("a race is already running: abort it first (x)", severity="warning")
            return
        from .session import RaceSession

        self.session = RaceSession(spec, replay=replay)
        self.push_screen(RaceScreen(self.session, start=start, clock=self.clock))

    # ------------------------------------------------------------------ recorded races

    def recorded_repository(self) -> Path:
        """Where to look for recorded races: the current race's repository, else the app's."""
        race = self.session.race if self.session is not None else None
        return Path(race.repository) if race is not None and race.repository else self.repository

    def show_recorded(self, race_id: str, repository: Path | None = None) -> None:
        """Open a recorded race read-only on the race screen. Its logs can be large: they are
        read in a thread, and the screen opens when they are."""
        where = Path(repository) if repository is not None else self.recorded_repository()
        self.run_worker(self._load_recorded(race_id, where), group="recorded", exit_on_error=False)

    async def _load_recorded(self, race_id: str, repository: Path) -> None:
        import anyio.to_thread

        from ..engine.git import GitError
        from ..engine.records.history import UnknownRace, UnreadableRace, load_recording

        try:
            recording = await anyio.to_thread.run_sync(load_recording, repository, race_id)
        except (GitError, UnknownRace, UnreadableRace, OSError) as error:
            self._recorded_failed(str(error))
            return
        self._open_recorded(recording)

    def _open_recorded(self, recording: Any) -> None:
        from .screens.recorded_race import RecordedRaceScreen

        self.push_screen(RecordedRaceScreen(recording))
        if recording.skipped:
            self.notify(
                f"{recording.skipped} recorded event(s) could not be replayed and are left out",
                severity="warning",
            )

    def _recorded_failed(self, message: str) -> None:
        self.notify(message, severity="error", timeout=15)
        if len(self.screen_stack) <= 1:
            from .screens.home import HomeScreen

            self.push_screen(HomeScreen())

    def action_history(self) -> None:
        """Pick one of the races recorded in the current repository (newest first)."""
        from textual.command import SimpleCommand

        from ..engine.git import GitError
        from ..engine.records.history import recorded_races

        repository = self.recorded_repository()
        try:
            races = recorded_races(repository)
        except GitError as error:
            self.notify(f"no recorded races: {error}", severity="warning")
            return
        if not races:
            self.notify(f"no races recorded in {repository}", severity="warning")
            return

        def started(at: float | None) -> str:
            return time.strftime("%Y-%m-%d %H:%M", time.localtime(at)) if at else "?"

        self.search_commands(
            [
                SimpleCommand(
                    f"{race.id} · {race.name or '?'} · {race.status}"
                    + (f" · {race.winner} won" if race.winner else ""),
                    partial(self.show_recorded, race.id, repository),
                    race.problem or f"started {started(race.started_at)}; {', '.join(race.candidates)}",
                )
                for race in races
            ],
            placeholder="Show a recorded race…",
        )

    # ------------------------------------------------------------------------- actions

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action == "configure":
            # only before a race file's race starts, and not from configure itself: hidden
            # otherwise, the footer is short. A configure screen exists only once its module is
            # loaded: the first frame's footer asks this, and must not wait for that module (the
            # race file's editor, tomlkit and every agent's options).
            configure = sys.modules.get(f"{__package__}.screens.configure")
            return (
                self.session is not None
                and self.race_file is not None
                and not self.session.started
                and not (
                    configure is not None
                    and any(isinstance(screen, configure.ConfigureScreen) for screen in self.screen_stack)
                )
            )
        return True

    def action_help(self) -> None:
        from .screens.help import HelpScreen

        self.push_screen(HelpScreen())

    def action_pick_theme(self) -> None:
        from .screens.theme_picker import ThemePickerScreen

        if isinstance(self.screen, ThemePickerScreen):
            return

        def keep(name: str | None) -> None:
            if name is not None:
                self.keep_theme(name)

        self.push_screen(ThemePickerScreen(self.own_themes), keep)

    def action_change_theme(self) -> None:
        # Textual's own "Theme" palette command: the same picker, so every way of choosing a
        # theme previews it and remembers it.
        self.action_pick_theme()

    def keep_theme(self, name: str) -> None:
        """Use this theme now and at the next start."""
        from .settings import save_theme

        self.theme = name
        try:
            save_theme(name)
        except OSError as error:
            self.notify(
                f"theme {name} is used now but not remembered: "
                f"{error.strerror or error} ({error.filename or 'settings'})",
                severity="error",
            )

    def race_repository(self) -> Path:
        """The repository the open race is about (its file says which), else the app's."""
        if self.session is not None:
            race = getattr(self.session, "race", None)
            if race is not None and race.repository is not None:
                return Path(race.repository)
            if self.session.sketch.repository is not None:  # what its file names, checked or not
                return self.session.sketch.repository
        return self.repository

    def action_worktrees(self) -> None:
        from .screens.worktrees import WorktreesScreen

        self.push_screen(WorktreesScreen(self.race_repository()))

    def action_recover(self, run_id: str | None = None) -> None:
        if run_id is None and self.session is not None and not self.session.started:
            # the open race's own durable run, when it is the one waiting for recovery
            run_id = getattr(self.screen, "recovery_run", None)
        self.open_recovery(self.race_repository(), run_id)

    def open_recovery(self, repository: Path, run_id: str | None = None) -> None:
        """The recovery wizard; a replay it hands back starts at once."""
        from .screens.recovery import RecoveryScreen

        def replay(spec: RaceSpec | None) -> None:
            if spec is not None:
                self.start_race(spec, start=True)

        self.push_screen(RecoveryScreen(repository, run_id), replay)

    def action_screenshot(self, filename: str | None = None, path: str | None = None) -> None:
        """Save an SVG of the screen where the user will look for it, and say where: the
        Downloads directory when there is one, else the current directory."""
        if self.is_web:
            self.deliver_screenshot(filename, path)
            return
        downloads = Path.home() / "Downloads"
        directory = Path(path) if path else downloads if downloads.is_dir() else Path.cwd()
        try:
            saved = self.save_screenshot(filename, str(directory))
        except OSError as error:
            self.notify(f"screenshot not saved in {directory}: {error.strerror or error}", severity="error")
            return
        self.notify(f"screenshot saved: {Path(saved).resolve()}", markup=False)

    async def action_configure(self) -> None:
        from ..engine.racefile import RaceFileError
        from .screens.configure import ConfigureScreen

        if self.session is None or self.race_file is None:
            self.notify("open a race file first", severity="warning")
            return
        if self.session.started:
            self.notify("the race has started: configure it before starting", severity="warning")
            return
        if not self.session.checked:
            await self.session.prepare()  # pressed before the file's check ended: after it, then
            if not self.session.checked:  # the file does not check: said as `check` says it
                self.notify(f"cannot configure: {self.session.error}", severity="error", markup=False)
                return
        try:
            screen = ConfigureScreen(self.session.spec, self.race_file)
        except RaceFileError as error:  # the file changed on disk since it was opened
            self.notify(f"cannot configure: {error}", severity="error", markup=False)
            return

        def start(spec: RaceSpec | None) -> None:
            if spec is not None:  # saved and asked to start; None: left without starting
                self.start_race(spec, start=True)

        self.push_screen(screen, start)

    async def action_quit(self) -> None:
        session = self.session
        if session is None or not session.running:
            self.exit()
            return

        # Leaving the app is the coordinator going away, not a verdict on the race: a durable race
        # is stopped so that it can be replayed later (`x` is the abort that ends it for good).
        spec = session.spec
        durable = spec.durability.enabled

        def answer(yes: bool | None) -> None:
            if yes:
                if durable:
                    session.stop_resumable()
                else:
                    session.abort()
                self.run_worker(self._exit_when_settled(), group="quit")

        from .screens.confirm import ConfirmScreen

        question = (
            f"A durable race is running: stop it and quit? It stays resumable: "
            f"`outpost-tui recover {spec.run_id} --replay`"
            if durable
            else "A race is running: abort it and quit?"
        )
        self.push_screen(ConfirmScreen(question), answer)

    async def _exit_when_settled(self) -> None:
        # The race stops every candidate's processes before it returns: wait for that, then leave.
        await self.workers.wait_for_complete([w for w in self.workers if w.group == "race"])
        self.exit()

    def palette_commands(self) -> list[tuple[str, str, Callable[[], Any]]]:
        commands: list[tuple[str, str, Callable[[], Any]]] = [
            ("Show worktrees", "review the worktrees races kept", self.action_worktrees),
            ("Recover a crashed race", "stop, inspect, release, replay", self.action_recover),
            ("Show a recorded race…", f"races recorded in {self.recorded_repository()}", self.action_history),
            ("Help", "keys of this screen", self.action_help),
        ]
        session = self.session
        if session is not None:
            from .screens.race import RaceScreen

            screen = self.screen if isinstance(self.screen, RaceScreen) else None
            if not session.started and screen is not None:
                commands.append(("Start race", session.sketch.name, screen.action_start))
                commands.append(("Configure race", "edit candidates and budgets", self.action_configure))
            if session.running:
                commands.append(("Abort race", "cancel every running candidate", session.abort))
                for candidate in session.spec.candidates:
                    commands.append(
                        (
                            f"Cancel candidate {candidate.key}",
                            candidate.agent,
                            partial(session.cancel, candidate.key),
                        )
                    )
        commands.append(
            ("Pick theme", "preview themes as you move; enter keeps, escape restores", self.action_pick_theme)
        )
        for name in sorted(self.available_themes):
            commands.append((f"Switch theme: {name}", "", partial(self.keep_theme, name)))
        return commands
