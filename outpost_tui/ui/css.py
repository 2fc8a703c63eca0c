"""Where the app's Textual CSS lives: in a `.tcss` file beside the module it styles.

A screen names its file with `CSS_PATH = "<module>.tcss"` (Textual reads it when the screen is
first pushed; every rule starts with the screen's type, so it cannot reach another screen). A
widget has no CSS_PATH in Textual: its default CSS is read from its file with `widget_css`, and
keeps the default rules' priority, below the screens' and the user's.
"""

from __future__ import annotations

from pathlib import Path


def widget_css(module_file: str) -> str:
    """The CSS in the .tcss file beside `module_file` (a widget module's `__file__`)."""
    return Path(module_file).with_suffix(".tcss").read_text(encoding="utf-8")
