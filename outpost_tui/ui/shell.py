"""Open the user's own shell in a directory: the app steps aside, the shell runs, the app comes back.

A candidate's worktree is what an agent left: before a shell (whose prompt may well run git) starts
in one, its git link is checked like every engine git run there (git.check_worktree_link), so a
rewritten link never gets the user's git to read a configuration the agent chose.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from textual.app import App, SuspendNotSupported

from ..engine import git

FALLBACK_SHELL = "/bin/sh"


def user_shell() -> str:
    return os.environ.get("SHELL") or FALLBACK_SHELL


def run_shell(directory: Path | str) -> int:
    """Run $SHELL in `directory` on this terminal and wait for it; its exit status.

    Raises OSError when the shell cannot start and GitError when the worktree's git link changed."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory} is not a directory")
    git.check_worktree_link(directory)
    env = {**os.environ, "OUTPOST_WORKTREE": str(directory)}
    return subprocess.call([user_shell()], cwd=directory, env=env)


def open_shell(app: App, directory: Path | str) -> str:
    """Suspend `app`, run the user's shell in `directory`, resume; one line saying how it went."""
    shell = user_shell()
    try:
        with app.suspend():
            status = run_shell(directory)
    except SuspendNotSupported:
        return f"this terminal cannot hand over to a shell; run: cd {directory}"
    except git.GitError as error:
        return f"no shell opened: {error}"
    except OSError as error:
        return f"no shell opened in {directory}: {shell}: {error.strerror or error}"
    return f"back from {shell} in {directory} (exit {status})"
