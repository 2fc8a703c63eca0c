"""The command palette (ctrl+p): every action the app can take right now, by name.

The app decides what exists (a race to start, candidates to cancel, themes to switch to) through
one method, `palette_commands()`; this provider only matches the user's typing against it. Asking
the app at each search keeps the list current: a candidate that settled since the palette opened
no longer offers "Cancel candidate".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from textual.command import DiscoveryHit, Hit, Hits, Provider

PaletteCommand = tuple[str, str, Callable[[], Any]]


@runtime_checkable
class PaletteHost(Protocol):
    def palette_commands(self) -> list[PaletteCommand]:
        """(title, help, callback) for each command available now."""


class OutpostCommands(Provider):
    """Lists the host app's `palette_commands()`; an app without it contributes nothing."""

    def _commands(self) -> list[PaletteCommand]:
        app = self.app
        if not isinstance(app, PaletteHost):
            return []
        return list(app.palette_commands())

    async def discover(self) -> Hits:
        for title, help_text, callback in self._commands():
            yield DiscoveryHit(title, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, help=help_text)


def theme_commands(
    theme_names: Iterable[str], switch: Callable[[str], Any], current: str | None = None
) -> list[PaletteCommand]:
    """Commands "Switch theme: <name>", one per theme but the current one, for palette_commands()."""
    return [
        (f"Switch theme: {name}", f"Use the {name} colours", _bind(switch, name))
        for name in sorted(theme_names)
        if name != current
    ]


def _bind(switch: Callable[[str], Any], name: str) -> Callable[[], Any]:
    # A closure per name: a lambda in the comprehension would capture only the last one.
    return lambda: switch(name)
