"""The footer's order on a narrow terminal: a screen's own controls, then the app's keys (quit,
help, f3-f5), then the rest. Whatever does not fit is at the end; `?` lists every key."""

from __future__ import annotations

from textual.screen import Screen


class FooterOrder(Screen):
    """Mixin for screens: FOOTER_FIRST and FOOTER_LAST name actions (without parameters)."""

    FOOTER_FIRST: tuple[str, ...] = ()
    FOOTER_LAST: tuple[str, ...] = ()

    @property
    def active_bindings(self):
        bindings = super().active_bindings

        def rank(item) -> int:
            action = item[1].binding.action.split("(")[0]
            return 0 if action in self.FOOTER_FIRST else 2 if action in self.FOOTER_LAST else 1

        return dict(sorted(bindings.items(), key=rank))
