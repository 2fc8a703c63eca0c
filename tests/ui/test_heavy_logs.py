"""The race screen under agents that print without pause: new log lines cost the screen no layout,
a key that moves between panels restyles and repaints those two panels only, the screen draws
without holding the model's lock (the race's thread would wait on it), and a panel's log shows what
Textual's Log shows."""

from __future__ import annotations

import json
import re
import sys
import threading
from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.containers import Horizontal
from textual.widgets import Log

import outpost_tui.ui
from outpost_tui.ui.app import OutpostApp
from outpost_tui.ui.widgets.candidate_panel import CandidatePanel
from outpost_tui.ui.widgets.panel_log import PanelLog
from tests.conftest import make_repo
from tests.ui.support import prepared, until

pytestmark = pytest.mark.anyio
SIZE = (120, 40)

# An agent printing `batch` lines every 50 ms until it is stopped: its log grows at every tick.
PRINTER = r"""
import sys, time
key, batch, n = sys.argv[1], int(sys.argv[2]), 0
while True:
    sys.stdout.write("".join(f"{key} line {i}\n" for i in range(n, n + batch)))
    sys.stdout.flush()
    n += batch
    time.sleep(0.05)
"""


def printers(tmp_path, count: int, batch: int):
    repo = make_repo(tmp_path / "repo")
    text = f'[race]\nname = "printers"\nrepository = "{repo}"\n\n[validate]\ncommand = ["true"]\n'
    for n in range(1, count + 1):
        argv = json.dumps([sys.executable, "-c", PRINTER, f"c{n}", str(batch)])
        text += f'\n[[candidates]]\nkey = "c{n}"\nagent = "command"\nbrief = "print"\ncommand = {argv}\n'
    path = tmp_path / "race.toml"
    path.write_text(text)
    return path


async def started(pilot, app):
    """The race built, started (s), every agent running; its model."""
    await prepared(pilot)
    await pilot.press("s")
    model = app.session.model
    await until(pilot, lambda: all(c.state == "running" for c in model.candidates.values()), "the agents")
    return model


async def aborted(pilot, app) -> None:
    await pilot.press("x", "y")
    await until(pilot, lambda: app.session.result is not None, "the abort")


async def test_growing_logs_lay_nothing_out_and_a_key_restyles_only_the_two_panels(tmp_path):
    app = OutpostApp(printers(tmp_path, 4, 5), testing=True)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        panels = {panel.key: panel for panel in screen.query(CandidatePanel)}
        model = await started(pilot, app)
        await until(pilot, lambda: all(c.branch for c in model.candidates.values()), "their branches")
        # the footer shows the keys of a running race and a candidate with a branch (diff) from now on
        await pilot.press("2")
        await until(pilot, lambda: screen.focused is panels["c2"], "the focus on c2")
        await pilot.pause(0.3)

        layouts: list[int] = []
        full_paints: list[int] = []
        restyled: list[list] = []
        lay_out, paint_all = screen._refresh_layout, screen._compositor.render_full_update
        restyle = app.stylesheet.update_nodes
        screen._refresh_layout = lambda *a, **k: layouts.append(1) or lay_out(*a, **k)
        screen._compositor.render_full_update = lambda *a, **k: full_paints.append(1) or paint_all(*a, **k)

        def counted(nodes, *a, **k):
            nodes = list(nodes)
            restyled.append(nodes)
            return restyle(nodes, *a, **k)

        app.stylesheet.update_nodes = counted
        # every panel draws its growing log a few times over (the screen draws a panel per tick)
        drawn = {key: len(panel.query_one(PanelLog).lines) for key, panel in panels.items()}
        await until(
            pilot,
            lambda: all(len(p.query_one(PanelLog).lines) >= drawn[k] + 40 for k, p in panels.items()),
            "every log to grow",
        )
        assert layouts == [] and full_paints == [] and restyled == []

        await pilot.press("3")
        await until(pilot, lambda: screen.focused is panels["c3"], "the focus to move")
        await pilot.pause()
        # the panel that lost the focus and the one that took it, each on its own
        assert sorted(repr(node) for nodes in restyled for node in nodes) == [
            repr(panels["c2"]),
            repr(panels["c3"]),
        ]
        assert layouts == [] and full_paints == []
        await aborted(pilot, app)


async def test_each_tick_redraws_one_band_of_panels_and_a_round_redraws_them_all(tmp_path):
    from outpost_tui.ui.screens import race

    app = OutpostApp(printers(tmp_path, 4, 5), testing=True)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        panels = {panel.key: panel for panel in screen.query(CandidatePanel)}
        await started(pilot, app)
        ticks: list[set[str]] = []
        refresh = screen.refresh_panels

        def counted(rotate: bool = False) -> None:
            if rotate:  # the timer's
                ticks.append(set())
            refresh(rotate)

        for key, panel in panels.items():
            draw = panel.refresh_from
            panel.refresh_from = lambda model, force=False, key=key, draw=draw: (
                ticks and ticks[-1].add(key),
                draw(model, force),
            )
        screen.refresh_panels = counted
        await until(pilot, lambda: len(ticks) >= 12, "a dozen ticks")
        # four panels, two a row (120 columns): a panel per tick, each once in a round of four
        assert race.PANELS_PER_TICK == 1 and all(len(drawn) <= 1 for drawn in ticks), ticks
        for start in range(len(ticks) - 4):
            assert set().union(*ticks[start : start + 4]) == set(panels), ticks
        await aborted(pilot, app)


async def test_the_screen_draws_without_holding_the_models_lock(tmp_path):
    app = OutpostApp(printers(tmp_path, 2, 20), testing=True)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        await prepared(pilot)
        model = app.session.model
        log = screen.query_one("#panel-c1", CandidatePanel).query_one(PanelLog)
        free: list[bool] = []
        write = log.write_lines

        def lock_is_free() -> bool:
            """What the race's thread finds when it updates the model meanwhile."""
            taken: list[bool] = []

            def race_thread() -> None:
                taken.append(model.lock.acquire(timeout=0))
                if taken[0]:
                    model.lock.release()

            thread = threading.Thread(target=race_thread)
            thread.start()
            thread.join()
            return taken[0]

        def checked(lines, scroll_end=None):
            free.append(lock_is_free())
            return write(lines, scroll_end)

        log.write_lines = checked
        await pilot.press("s")
        await until(pilot, lambda: len(free) >= 5 and len(log.lines) >= 100, "c1's log drawn a few times")
        assert all(free), free
        await aborted(pilot, app)


class SideBySide(App):
    CSS = "Log { width: 1fr; height: 1fr; scrollbar-size-horizontal: 0; }"

    def compose(self) -> ComposeResult:
        with Horizontal():
            # neither takes the focus, which would restyle it (a panel's log never takes it)
            yield Log(max_lines=50, id="textual")
            yield PanelLog(max_lines=50, id="panel")

    def on_mount(self) -> None:
        for log in self.query(Log):
            log.can_focus = False


async def test_a_panels_log_shows_what_textuals_log_shows():
    batches = [
        [f"line {n}" for n in range(30)],
        ["", "two\nlines", "tab\there", "wide 漢字 line", "bell\x07", "crlf\r\nend", "trailing\n"],
        [f"more {n} " + "x" * 2 * n for n in range(40)],  # past max_lines: the first ones go; wider
        ["last"],
    ]
    app = SideBySide()
    async with app.run_test(size=(100, 20)) as pilot:
        textual, panel = app.query_one("#textual", Log), app.query_one("#panel", PanelLog)
        for batch in batches:
            textual.write_lines(batch)
            panel.write_lines(batch)
            await pilot.pause()
            assert list(panel.lines) == list(textual.lines)
            await until(pilot, lambda: panel.virtual_size == textual.virtual_size, "the same size")
            assert panel.scroll_offset == textual.scroll_offset
            for x in (0, 3):  # as it is, and scrolled sideways
                panel.scroll_to(x=x, animate=False, immediate=True)
                textual.scroll_to(x=x, animate=False, immediate=True)
                shown = [cells(panel.render_line(y)) for y in range(panel.size.height)]
                assert shown == [cells(textual.render_line(y)) for y in range(textual.size.height)]
                assert any(text for text, _, _ in shown[0])
            panel.scroll_end(animate=False, immediate=True)
            textual.scroll_end(animate=False, immediate=True)
        assert panel.lines[-1] == "last" and len(panel.lines) == 50


def cells(strip) -> list[tuple[str, object, object]]:
    """Each cell a line shows: its character, its style, and the offset text selection reads
    from it (where in the log's text a mouse on that cell is)."""
    shown = []
    for segment in strip:
        style = segment.style
        offset = style.meta.get("offset") if style is not None and style._meta else None
        plain = style.clear_meta_and_links() if style is not None else None
        for at, character in enumerate(segment.text):
            shown.append((character, plain, None if offset is None else (offset[0] + at, offset[1])))
    return shown


def test_no_rule_styles_a_panels_lines_or_log_by_its_focus():
    """A panel restyles only itself when the focus moves (CandidatePanel.watch_has_focus): a rule
    that styled what is inside it by its focus would not apply."""
    for path in Path(outpost_tui.ui.__file__).parent.rglob("*.tcss"):
        css = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.DOTALL)
        for selectors in re.findall(r"([^{}]+)\{", css):
            for selector in selectors.split(","):
                parts = selector.split()
                for at, part in enumerate(parts):
                    if part.startswith("CandidatePanel") and ":focus" in part:
                        assert at == len(parts) - 1, f"{path.name}: {selector.strip()}"
