"""Subcommands of `outpost-tui`, one module each with `register(subparsers)`.

Each module's `register` adds its parser and sets `handler` (a function taking the parsed args and
returning an exit code) with `parser.set_defaults(handler=...)`.
"""

from __future__ import annotations

import argparse

MODULES = [
    "run",
    "check",
    "recover",
    "runs",
    "history",
    "show",
    "worktrees",
    "doctor",
    "image",
    "sample",
    "serve",
]


def add_repository_argument(parser: argparse.ArgumentParser) -> None:
    """The optional REPO positional the commands that read a repository's records share."""
    parser.add_argument(
        "repository",
        nargs="?",
        default=".",
        metavar="REPO",
        help="the repository (default: the current directory)",
    )
