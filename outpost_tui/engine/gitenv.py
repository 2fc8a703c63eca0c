"""The environment of every program the engine starts: git's own variables removed.

A race started from a git hook (pre-commit, post-commit, ...) or from a shell that exported
GIT_DIR, GIT_INDEX_FILE, GIT_WORK_TREE and the like would hand them to the engine's git and to every
agent, validation and score command: a candidate's `git commit` would then write the user's index
and move the user's branch. git documents dozens of such variables (repository discovery, the
object store, the index, configuration through GIT_CONFIG_* and GIT_CONFIG_PARAMETERS, replace
refs, namespaces, exec path, external diff, editor, pager, ssh), and new ones appear with new
versions, so every GIT_* variable goes except the identity of who commits.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# Who commits is the user's choice, wherever the race was started from.
KEPT = frozenset({"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"})


def is_scrubbed(name: str) -> bool:
    return name.startswith("GIT_") and name not in KEPT


def scrubbed(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`environ` (the process's own by default) without git's location and configuration variables."""
    source = os.environ if environ is None else environ
    return {name: value for name, value in source.items() if not is_scrubbed(name)}
