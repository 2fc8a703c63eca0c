"""Text from a candidate made safe to show: its control characters visible, never sent raw.

Everything a candidate prints or says reaches a terminal sooner or later (the headless progress
on stderr, the app's panels, `show`), and a terminal obeys what it is sent: an OSC 52 sequence
writes the user's clipboard, another retitles the window, a cursor move or a carriage return
draws over what the engine wrote, and C1 controls (U+0080-U+009F) are the same commands in one
character for a terminal that reads them. So every C0 and C1 control but the tab, and DEL, is
shown as its escape (`\\x1b`), which is what it would look like in Python and cannot be obeyed;
a lone surrogate (from a JSON `\\ud800`) becomes U+FFFD, since no stream can encode it.
"""

from __future__ import annotations

import re

# a line break is a control too where one line is expected (a forged progress line)
_CONTROLS = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\ud800-\udfff]")
_IN_TEXT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return "\ufffd" if "\ud800" <= char <= "\udfff" else f"\\x{ord(char):02x}"


def visible(text: str, *, lines: bool = False) -> str:
    """`text` with its control characters shown as escapes; `lines`: keep its line breaks (the
    agent's own words, several lines), else a line break is shown too."""
    pattern = _IN_TEXT if lines else _CONTROLS
    if pattern.search(text) is None:  # nearly every line: one scan in C, no copy
        return text
    return pattern.sub(_escape, text)


def visible_value(value: object) -> object:
    """A decoded payload with every string in it made visible (keys too), its shape kept."""
    if isinstance(value, str):
        return visible(value, lines=True)
    if isinstance(value, list):
        return [visible_value(item) for item in value]
    if isinstance(value, tuple):
        return tuple(visible_value(item) for item in value)
    if isinstance(value, dict):
        return {visible_value(key): visible_value(item) for key, item in value.items()}
    return value
