"""Files `[setup]` copies into worktrees and keys its cache on: untracked and ignored files
matching globs, `.worktreeinclude`, and a commit's tree."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from .layout import OUTPOST_DIR, check_worktree_link
from .runner import _STATUS, _revision, output


def _paths(out: str | bytes) -> list[str]:
    return [path for path in str(out).split("\0") if path]


def untracked_files(repo_root: Path | str, globs: Sequence[str]) -> list[str]:
    """Untracked files (ignored ones included) of the checkout matching git glob pathspecs."""
    if not globs:
        return []
    specs = [f":(top,glob){pattern}" for pattern in globs]
    out = output(
        "git ls-files",
        repo_root,
        "ls-files",
        "-z",
        "--others",
        "--",
        *specs,
        f":(top,exclude){OUTPOST_DIR}",
        strip=False,
    )
    return _paths(out)


def included_files(repo_root: Path | str, include_file: Path | str) -> list[str]:
    """Files a `.worktreeinclude` names (gitignore syntax) that git ignores, as Claude Code copies."""
    out = output(
        "git ls-files",
        repo_root,
        "ls-files",
        "-z",
        "--others",
        "--ignored",
        f"--exclude-from={include_file}",
        "--",
        ".",
        f":(top,exclude){OUTPOST_DIR}",
        strip=False,
    )
    named = _paths(out)
    ignored: list[str] = []
    for start in range(0, len(named), 500):  # bounded command lines
        chunk = [f":(top,literal){path}" for path in named[start : start + 500]]
        out = output(
            "git ls-files",
            repo_root,
            "ls-files",
            "-z",
            "--others",
            "--ignored",
            "--exclude-standard",
            "--",
            *chunk,
            strip=False,
        )
        ignored += _paths(out)
    return sorted(set(ignored))


def tree_files(repo_root: Path | str, commit: str, globs: Sequence[str]) -> list[tuple[str, str]]:
    """(path, blob id) of the files in commit's tree matching globs as git's glob pathspec reads
    them (`*` stays within a directory, `**` crosses them); ls-tree has no glob magic itself."""
    _revision(commit, "commit")
    patterns = [_glob_pattern(pattern) for pattern in globs]
    out = output("git ls-tree", repo_root, "ls-tree", "-r", "-z", "--full-tree", commit, strip=False)
    files = []
    for entry in _paths(out):
        meta, _, path = entry.partition("\t")
        if any(pattern.fullmatch(path) for pattern in patterns):
            files.append((path, meta.split()[2]))
    return sorted(files)


def _glob_pattern(glob: str) -> re.Pattern[str]:
    out, index = "", 0
    while index < len(glob):
        if glob.startswith("**/", index):
            out, index = out + "(?:.*/)?", index + 3
        elif glob.startswith("**", index):
            out, index = out + ".*", index + 2
        elif glob[index] == "*":
            out, index = out + "[^/]*", index + 1
        elif glob[index] == "?":
            out, index = out + "[^/]", index + 1
        elif glob[index] == "[" and "]" in glob[index + 2 :]:
            end = glob.index("]", index + 2)
            body = glob[index + 1 : end]
            body = body.replace("\\", "\\\\")
            out += "[" + ("^" + body[1:] if body[:1] == "!" else body) + "]"
            index = end + 1
        else:
            out, index = out + re.escape(glob[index]), index + 1
    return re.compile(out)


def untracked_entries(directory: Path | str) -> list[str]:
    """Untracked and ignored entries of a worktree as status shows them (a directory ends in /)."""
    check_worktree_link(directory)
    out = output(
        "git status",
        directory,
        *_STATUS,
        "--porcelain",
        "-z",
        "--ignored=matching",
        "--untracked-files=normal",
        strip=False,
    )
    return [entry[3:] for entry in _paths(out) if entry[:3] in ("?? ", "!! ")]
