"""Paths as the user would type them from where they started the app."""

from __future__ import annotations

from pathlib import Path


def shown_path(path: Path) -> str:
    """A path as the user would type it from here: relative when under the working directory."""
    try:
        return str(Path(path).absolute().relative_to(Path.cwd())) or "."
    except ValueError:
        return str(path)
