"""Subcommands of `outpost-tui`, one module each with `register(subparsers)`.

Each module's `register` adds its parser and sets `handler` (a function taking the parsed args and
returning an exit code) with `parser.set_defaults(handler=...)`.
"""

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
