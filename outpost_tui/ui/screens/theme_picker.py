"""Theme picker (`t`): moving through the list previews each theme on the whole app at once;
enter keeps the highlighted one, escape puts the previous one back.

The screen only previews; keeping (and remembering it for the next start) is the caller's
business, through the dismissed name.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option, OptionDoesNotExist


class ThemePickerScreen(ModalScreen[str | None]):
    CSS_PATH = "theme_picker.tcss"
    BINDINGS = [Binding("escape", "restore", "Cancel", id="theme.cancel")]

    def __init__(self, own_themes: list[str] | None = None) -> None:
        """own_themes: the themes loaded from files, listed first; Textual's own follow."""
        super().__init__()
        self.own_themes = own_themes or []
        self.original: str = ""

    def compose(self) -> ComposeResult:
        self.original = self.app.theme
        available = self.app.available_themes
        own = [name for name in self.own_themes if name in available]
        others = sorted(name for name in available if name not in own)
        width = max((len(name) for name in available), default=0)
        options: list[Option | None] = [self._option(name, width) for name in own]
        if own and others:
            options.append(None)
        options.extend(self._option(name, width) for name in others)
        with Vertical():
            yield Static("Theme", id="theme-title")
            yield OptionList(*options, id="themes")
            yield Static("↑↓ preview · enter keeps · escape restores", classes="help-muted")

    def _option(self, name: str, width: int) -> Option:
        theme = self.app.available_themes[name]
        label = Content.assemble(name.ljust(width + 2), ("dark" if theme.dark else "light", "dim"))
        return Option(label, id=name)

    def on_mount(self) -> None:
        options = self.query_one("#themes", OptionList)
        try:
            options.highlighted = options.get_option_index(self.original)
        except OptionDoesNotExist:  # a theme that was removed while in use
            options.highlighted = 0
        options.focus()

    @on(OptionList.OptionHighlighted, "#themes")
    def _preview(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id and event.option.id != self.app.theme:
            self.app.theme = event.option.id

    @on(OptionList.OptionSelected, "#themes")
    def _keep(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_restore(self) -> None:
        self.app.theme = self.original
        self.dismiss(None)
