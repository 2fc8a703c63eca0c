"""Help (`?`): the keys that work on the screen below, read from its live bindings.

Reading the bindings rather than keeping a written list means the help is never out of date: a
key the user rebound in keymap.toml shows as rebound, and an action the screen has disabled
right now is not listed.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Static

from ..keymap import keymap_path

CONVENTIONS = (
    "[b]1[/b]-[b]9[/b] focus a candidate panel, [b]tab[/b] cycles, [b]enter[/b] zooms, "
    "[b]escape[/b] goes back. [b]c[/b] cancels the focused candidate, [b]a[/b] accepts it by hand, "
    "[b]x[/b] aborts the race, [b]d[/b] shows its diff, [b]/[/b] searches a log. "
    "[b]?[/b] help, [b]ctrl+p[/b] command palette, [b]ctrl+q[/b] quits. "
    "A confirmation accepts with [b]y[/b] or [b]enter[/b] and refuses with [b]n[/b] or [b]escape[/b]."
)


class HelpScreen(ModalScreen[None]):
    CSS_PATH = "help.tcss"
    BINDINGS = [
        Binding("escape", "close", "Close", id="help.close"),
        Binding("question_mark", "close", "Close", show=False, id="help.close-again"),
    ]

    def __init__(self, screen: Screen | None = None) -> None:
        """screen: whose keys to list; by default the screen this one is pushed over."""
        super().__init__()
        self._target = screen

    @property
    def target(self) -> Screen:
        if self._target is not None:
            return self._target
        stack = self.app.screen_stack
        index = stack.index(self) if self in stack else len(stack)
        return stack[index - 1] if index > 0 else self.app.screen

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Keys", id="help-title")
            yield DataTable(id="help-keys", cursor_type="row", zebra_stripes=True)
            yield Static(CONVENTIONS, classes="help-text")
            yield Static(
                f"Rebind any key by its binding id in {keymap_path()}, under [keys], "
                'e.g. "race.cancel" = "k" (several keys: "k,ctrl+k").',
                classes="help-muted",
                markup=False,
            )
            yield Static("escape or ? closes this help.", classes="help-muted")

    def on_mount(self) -> None:
        table = self.query_one("#help-keys", DataTable)
        table.add_columns("Key", "Does", "Binding id")
        for keys, description, binding_id in self.key_rows():
            table.add_row(keys, description, binding_id)
        table.focus()

    def key_rows(self) -> list[tuple[str, str, str]]:
        """(keys, what they do, binding id) for each active binding of the target screen and the
        app behind it, keys of the same binding on one row: the screen's own first, then the
        app's, then the focused widget's (cursor movement and the like)."""
        target = self.target
        rows: dict[tuple[int, str], tuple[tuple[int, int], list[str], str, str]] = {}
        for active in target.active_bindings.values():
            binding = active.binding
            if binding.system and not binding.description:
                continue
            # A binding with several keys ("y,enter") arrives once per key: one row per binding.
            group = (id(active.node), binding.id or binding.action)
            display = self.app.get_key_display(binding)
            if group in rows:
                if display not in rows[group][1]:
                    rows[group][1].append(display)
                continue
            # Within a level, the bindings users can rebind (those with an id) come first.
            rank = (
                0 if active.node is target else 1 if active.node is self.app else 2,
                0 if binding.id else 1,
            )
            rows[group] = (rank, [display], binding.description or binding.action, binding.id or "")
        ordered = sorted(rows.values(), key=lambda row: row[0])
        return [(" ".join(keys), description, binding_id) for _, keys, description, binding_id in ordered]

    def action_close(self) -> None:
        self.dismiss(None)
