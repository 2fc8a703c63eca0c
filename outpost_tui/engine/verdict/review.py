"""What the operator should look at before merging a winner, beside the test verdict.

Passing the project's tests says the change works; it does not say the tests are the ones the
project had, or that the change stays inside the repository. A candidate can win by weakening a
test, by editing the CI or a build script that runs on other machines, by planting a symlink that
points out of the tree, or by rewriting history so its branch no longer descends from the baseline.
None of these is refused (they can be legitimate); each becomes one flag on the record, shown
wherever the winner is.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from .. import git

TEST_PATH = re.compile(
    r"(^|/)(tests?|spec|__tests__)/|(^|/)(test_[^/]*|[^/]*_test\.[^/]+|"
    r"[^/]*\.(test|spec)\.[^/]+|conftest\.py)$"
)
BUILD_AND_CI = re.compile(
    r"(^|/)(\.github/workflows/|\.gitlab-ci\.yml$|\.circleci/|Jenkinsfile$|"
    r"\.pre-commit-config\.yaml$|Makefile$|[^/]*\.mk$|tox\.ini$|noxfile\.py$|"
    r"setup\.cfg$|pyproject\.toml$|package\.json$|\.githooks/|\.husky/)"
)
SHOWN = 5  # paths named per flag; the rest are counted


def review(repository: Path | str, baseline: str, commit: str, setup_files: Sequence[str] = ()) -> list[str]:
    """One line per thing worth a look in `commit` against `baseline`; [] when nothing is.

    setup_files: what the race's setup put in the worktree (copies of the user's untracked files,
    what the setup command built); committing them is never the candidate's work."""
    descends, changed = git.changes(repository, baseline, commit)
    flags: list[str] = []
    if not descends:
        flags.append(f"does not descend from the baseline {baseline[:12]}: history was rewritten")
    prefixes = [path.rstrip("/") for path in setup_files]
    committed = [
        c.path
        for c in changed
        if c.status != "D" and any(c.path == p or c.path.startswith(p + "/") for p in prefixes)
    ]
    if committed:
        flags.append(
            f"commits files setup put in its worktree (copied from your checkout or "
            f"built by [setup]; they may hold secrets): {_names(committed)}"
        )
    # a rename counts from both ends: moving a test out of the test paths disables it
    tests = [_shown(c) for c in changed if _matches(TEST_PATH, c)]
    if tests:
        removed = [c.path for c in changed if c.status == "D" and TEST_PATH.search(c.path)]
        what = "changed tests" + (f" (deleted {len(removed)})" if removed else "")
        flags.append(f"{what}: {_names(tests)}")
    build = [_shown(c) for c in changed if _matches(BUILD_AND_CI, c)]
    if build:
        flags.append(f"changed build or CI files: {_names(build)}")
    outside = [
        f"{c.path} -> {c.target}" for c in changed if c.target is not None and _leaves_tree(c.path, c.target)
    ]
    if outside:
        flags.append(f"symlinks pointing out of the repository: {_names(outside)}")
    return flags


def _matches(pattern: re.Pattern[str], change: git.Change) -> bool:
    return bool(pattern.search(change.path) or (change.old_path and pattern.search(change.old_path)))


def _shown(change: git.Change) -> str:
    return f"{change.old_path} -> {change.path}" if change.old_path else change.path


def _leaves_tree(path: str, target: str) -> bool:
    if target.startswith("/"):
        return True
    joined = posixpath.normpath(posixpath.join(str(PurePosixPath(path).parent), target))
    return joined == ".." or joined.startswith("../")


def _names(paths: list[str]) -> str:
    shown = ", ".join(paths[:SHOWN])
    return shown + (f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else "")
