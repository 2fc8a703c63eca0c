"""The user's repository as a race found it: the commit a revision names, and a snapshot of branch,
HEAD and working-tree status to compare with afterwards."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .layout import OUTPOST_DIR
from .runner import _STATUS, GitError, _revision, _run, output

if TYPE_CHECKING:
    from hashlib import _Hash


@dataclass(frozen=True)
class HostSnapshot:
    head: str
    branch: str  # "HEAD" when detached
    dirty: bool
    fingerprint: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def resolve_commit(repo_root: Path | str, rev: str = "HEAD") -> str:
    """The full object id of the commit `rev` names."""
    _revision(rev, "revision")
    status, out, _ = _run(repo_root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if status != 0 or not out:
        raise GitError(f"{rev!r} does not name a commit in {repo_root}")
    return str(out)


def _outpost_path(path: str) -> bool:
    return path == OUTPOST_DIR or path.startswith(OUTPOST_DIR + "/")


def host_snapshot(repo_root: Path | str) -> HostSnapshot:
    """HEAD, branch, dirtiness and a fingerprint of the checkout's content (outside .outpost/).

    One `status` call gives head, branch and every change; `diff` runs only when tracked files
    changed, since otherwise it would print nothing.
    """
    root = Path(repo_root)
    out = output("git status", root, *_STATUS, "--porcelain=v2", "--branch", "--untracked-files=all", "-z")
    head = branch = ""
    tracked_changes = False
    untracked: list[str] = []
    entries = str(out).split("\0")
    index = 0
    while index < len(entries):
        entry = entries[index]
        index += 1
        if entry.startswith("# branch.oid "):
            head = entry.removeprefix("# branch.oid ")
        elif entry.startswith("# branch.head "):
            branch = entry.removeprefix("# branch.head ")
        elif entry.startswith("? "):
            if not _outpost_path(entry[2:]):
                untracked.append(entry[2:])
        elif entry[:2] in ("1 ", "2 ", "u "):
            fields = {"1 ": 8, "2 ": 9, "u ": 10}[entry[:2]]
            path = entry.split(" ", fields)[-1]
            if entry.startswith("2 "):
                index += 1  # a rename is followed by its original path
            if not _outpost_path(path):
                tracked_changes = True
    if not head or head == "(initial)":
        raise GitError(f"repository has no commits yet: {root}")
    if branch == "(detached)":
        branch = "HEAD"
    digest = hashlib.sha256()
    digest.update(head.encode() + b"\0")
    if tracked_changes:
        patch = output(
            "git diff",
            root,
            "diff",
            "HEAD",
            "--binary",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--",
            ".",
            f":(top,exclude){OUTPOST_DIR}",
            binary=True,
            strip=False,
        )
        digest.update(b"diff\0%d\0" % len(patch) + patch)
    for path in sorted(untracked):
        _hash_file(digest, root, path)
    return HostSnapshot(
        head=head, branch=branch, dirty=tracked_changes or bool(untracked), fingerprint=digest.hexdigest()
    )


def _hash_file(digest: _Hash, root: Path, path: str) -> None:
    full = root / path
    name = os.fsencode(path)
    try:
        info = os.lstat(full)
        digest.update(b"file\0%d\0%s\0%o\0" % (len(name), name, info.st_mode))
        if stat.S_ISLNK(info.st_mode):
            digest.update(os.fsencode(os.readlink(full)))
        elif stat.S_ISREG(info.st_mode):
            with open(full, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
    except FileNotFoundError:
        # Deleted between status and now: still part of what the snapshot saw.
        digest.update(b"gone\0%d\0%s\0" % (len(name), name))
    except OSError as error:
        raise GitError(f"cannot read {full}: {error.strerror}") from error
