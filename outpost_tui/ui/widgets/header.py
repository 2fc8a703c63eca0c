"""The app's header: Textual's Header with its title kept in step synchronously.

Textual's Header sets its title from an async watcher that the app runs later (it is queued with
`call_next` on the app or the screen, not on the header). A screen torn down before that queued
call runs has no HeaderTitle any more, and the call raised `NoMatches('HeaderTitle')` into the
app: a crash seen when a test (or a quick user) leaves a screen right after opening it. Here the
watcher is a plain function, run at once, and it does nothing once the title is gone.
"""

from __future__ import annotations

from contextlib import suppress

from textual import events
from textual.css.query import NoMatches
from textual.dom import NoScreen
from textual.widget import Widget
from textual.widgets import Header
from textual.widgets._header import HeaderTitle


class OutpostHeader(Header):
    def _on_mount(self, event: events.Mount) -> None:
        # Header's own mount handler registers the async watcher; this one replaces it.
        event.prevent_default()
        Widget._on_mount(self, event)

        def set_title() -> None:
            # nothing to do once the header is being taken down with its screen
            with suppress(NoMatches, NoScreen):
                self.query_one(HeaderTitle).update(self.format_title())

        self.watch(self.app, "title", set_title)
        self.watch(self.app, "sub_title", set_title)
        self.watch(self.screen, "title", set_title)
        self.watch(self.screen, "sub_title", set_title)
