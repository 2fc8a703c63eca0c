"""The engine's own directory outside every repository (XDG state): the key records are sealed
with, the seals of flight logs, the log of unexpected errors. An isolated candidate never sees it."""

from __future__ import annotations

import os
from pathlib import Path


def state_directory() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(base):  # the XDG rule: a relative value is ignored
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "outpost-tui"
