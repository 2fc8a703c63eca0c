"""The footer's order on a narrow terminal: a screen's own controls, then the app's keys (quit,
help, f3-f5), then the rest. Whatever does not fit is at the end; `?` lists every key."""

from __future__ import annotations

from typing import cast

from textual.screen import Screen
from textual.widgets import Footer

from .host import Host


class FooterOrder(Screen):
    """Mixin for screens: FOOTER_FIRST and FOOTER_LAST name actions (without parameters)."""

    @property
    def host(self) -> Host:
        """The app, as the screens use it (its repository, its session, opening races)."""
        return cast(Host, self.app)

    FOOTER_FIRST: tuple[str, ...] = ()
    FOOTER_LAST: tuple[str, ...] = ()

    @property
    def active_bindings(self):
        bindings = super().active_bindings

        def rank(item) -> int:
            action = item[1].binding.action.split("(")[0]
            return 0 if action in self.FOOTER_FIRST else 2 if action in self.FOOTER_LAST else 1

        return dict(sorted(bindings.items(), key=rank))


class SteadyFooter(Footer):
    """A footer rebuilt only when what it shows changes. Textual's rebuilds itself (a recompose:
    every key widget mounted again, then a layout of the whole screen) whenever the bindings may
    have changed, which includes every focus change: moving between candidate panels, whose keys
    are the same, cost a full repaint each time."""

    _shown_bindings: tuple | None = None

    def bindings_changed(self, screen: Screen) -> None:
        shown = tuple(
            (binding.key, binding.action, binding.description, binding.show, enabled, tooltip)
            for _, binding, enabled, tooltip in screen.active_bindings.values()
        )
        if shown == self._shown_bindings and self._bindings_ready:
            return
        self._shown_bindings = shown
        super().bindings_changed(screen)
