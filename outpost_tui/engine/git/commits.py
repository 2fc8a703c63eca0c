"""Commits in a candidate's worktree: its head and the commits since the baseline, changes left
uncommitted, the commit made on an agent's behalf, and clean-tree checks."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import sessions
from .index import index_file, may_hide_edits
from .layout import check_worktree_link
from .runner import _STATUS, _failure, _git_dir_names, _revision, _run, output

BOT_NAME = "outpost-tui"


BOT_EMAIL = "outpost-tui@localhost"


@dataclass(frozen=True)
class Commit:
    oid: str
    subject: str

    def to_json(self) -> dict[str, Any]:
        return {"oid": self.oid, "subject": self.subject}


def identity(directory: Path | str) -> dict[str, str]:
    """The user's git identity as seen from `directory` (repository, then global and system
    configuration): {"name": …, "email": …}, with whichever of the two is set."""
    status, out, _ = _run(directory, "config", "--get-regexp", r"^user\.(name|email)$", timeout=10)
    found: dict[str, str] = {}
    if status == 0:
        for line in str(out).splitlines():
            key, _, value = line.partition(" ")
            if value.strip():
                found[key.removeprefix("user.")] = value.strip()  # the last (most local) one wins
    return found


def head(directory: Path | str) -> str:
    check_worktree_link(directory)
    return str(output("reading HEAD", directory, "rev-parse", "--verify", "HEAD"))


def commits_since(directory: Path | str, baseline: str) -> list[Commit]:
    """Commits on HEAD since `baseline`, oldest first."""
    _revision(baseline, "baseline")
    check_worktree_link(directory)
    # Topological order puts HEAD last, which head_and_commits relies on.
    out = output(
        "listing commits",
        directory,
        "log",
        "--topo-order",
        "--reverse",
        "--no-show-signature",
        "--format=%H %s",
        f"{baseline}..HEAD",
        "--",
    )
    commits = []
    # one commit a line, "\n" only: a subject may hold a "\r" or a form feed (splitlines would
    # cut there and take what follows for a commit id, the head's among them)
    for line in str(out).split("\n"):
        oid, _, subject = line.partition(" ")
        if oid:
            commits.append(Commit(oid=oid, subject=subject))
    return commits


def head_and_commits(directory: Path | str, baseline: str) -> tuple[str, list[Commit]]:
    """HEAD and the commits since `baseline`: read through the repository's cat-file session
    when they are a plain line of commits on top of it (`walked`), else with `git log`."""
    _revision(baseline, "baseline")
    check_worktree_link(directory)
    found = walked(directory, baseline)
    if found is not None:
        return found
    commits = commits_since(directory, baseline)
    return (commits[-1].oid if commits else head(directory)), commits


# A longer line of commits, or any shape but a line, is git log's to list.
_WALK_LIMIT = 64


_HEX = re.compile(rb"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


# git's isspace(): not the vertical tab or the form feed
_SPACE = b" \t\n\r"


def walked(directory: Path | str, baseline: str) -> tuple[str, list[Commit]] | None:
    """HEAD and the commits since `baseline`, read from the commit objects through the repository's
    cat-file session; None (git log decides) unless the checkout is a linked worktree, nothing
    rewrites history (grafts, a shallow clone, replace refs), and HEAD sits on a line of at most
    _WALK_LIMIT commits with one parent each down to `baseline`: then baseline..HEAD is that line,
    and the objects are what git log reads."""
    dirs = _git_dir_names(os.fspath(Path(directory).absolute()))
    if dirs is None or not _HEX.fullmatch(baseline.encode()):
        return None
    git_dir, common = dirs
    name = os.path.basename(git_dir)
    if os.path.dirname(git_dir) != os.path.join(common, "worktrees") or _history_rewritten(common):
        return None
    try:
        [(oid, kind, content)] = sessions.read_objects(common, [f"worktrees/{name}/HEAD"])
        head_oid, commits = oid, list[Commit]()
        while oid != baseline:
            parsed = _parents_and_subject(content) if kind == "commit" else None
            if parsed is None or len(parsed[0]) != 1 or len(commits) == _WALK_LIMIT:
                return None
            commits.append(Commit(oid=oid, subject=parsed[1]))
            [(oid, kind, content)] = sessions.read_objects(common, [parsed[0][0]])
    except sessions.SessionFailed:
        return None
    commits.reverse()
    return head_oid, commits


def _history_rewritten(common: str) -> bool:
    """Anything that makes git log see other parents than the objects name: grafts, a shallow
    clone's boundary, replace refs (loose or packed)."""
    if os.path.lexists(os.path.join(common, "shallow")) or os.path.lexists(
        os.path.join(common, "info", "grafts")
    ):
        return True
    try:
        with os.scandir(os.path.join(common, "refs", "replace")) as entries:
            if any(True for _ in entries):
                return True
    except FileNotFoundError:
        pass
    except OSError:
        return True
    try:
        with open(os.path.join(common, "packed-refs"), "rb") as handle:
            return b" refs/replace/" in handle.read()
    except FileNotFoundError:
        return False
    except OSError:
        return True


def _parents_and_subject(content: bytes) -> tuple[list[str], str] | None:
    """A commit object's parents and the subject `git log --format=%s` prints (the first paragraph
    of its message, blank lines before it skipped, lines joined with a space); None when in doubt
    (a re-encoded message, a NUL, no tree line first)."""
    header, blank, message = content.partition(b"\n\n")
    lines = header.split(b"\n")
    if not blank or b"\0" in content or not lines[0].startswith(b"tree "):
        return None
    parents = []
    for line in lines[1:]:  # git reads parents only right after the tree line
        if not line.startswith(b"parent "):
            break
        if not _HEX.fullmatch(line[7:]):
            return None
        parents.append(line[7:].decode())
    if any(line.startswith(b"encoding ") for line in lines):
        return None
    paragraph: list[bytes] = []
    for line in message.split(b"\n"):
        line = line.rstrip(_SPACE)
        if line:
            paragraph.append(line)
        elif paragraph:
            break
    return parents, b" ".join(paragraph).decode(errors="surrogateescape")


def _left_out(paths: Sequence[str]) -> list[str]:
    # Files the race's setup put in a worktree (copied from the user's checkout, or built) are
    # never the candidate's work: they stay out of anything committed on its behalf.
    return [f":(top,exclude,literal){path.rstrip('/')}" for path in paths]


def has_changes(directory: Path | str, leave_out: Sequence[str] = ()) -> bool:
    """Uncommitted tracked changes or untracked files that are not ignored (outside leave_out)."""
    check_worktree_link(directory)
    out = output(
        "git status",
        directory,
        *_STATUS,
        "--porcelain",
        "--untracked-files=normal",
        "--",
        ".",
        *_left_out(leave_out),
    )
    return bool(str(out).strip())


_IDENTITY_ERRORS = (
    "Please tell me who you are",
    "auto-detection is disabled",
    "empty ident name",
    "Author identity unknown",
    "Committer identity unknown",
)


def commit_all(directory: Path | str, message: str, leave_out: Sequence[str] = ()) -> str | None:
    """Commit everything left in the worktree on the agent's behalf; None when nothing changed.

    The first attempt refuses guessed identities (user.useConfigOnly); only when the repository
    has none configured does outpost-tui's own identity fill the gap, so a configured user keeps
    authorship. Hooks are skipped: the agent's leftovers are judged by validation, not by the
    user's pre-commit tooling. Paths in leave_out (the setup's files) are never added.
    """
    check_worktree_link(directory)
    output("git add", directory, "add", "-A", "--", ".", *_left_out(leave_out))
    commit = ("commit", "--quiet", "--no-verify", "--no-gpg-sign", "--allow-empty-message", "-m", message)
    status, _, err = _run(directory, *commit, config=("user.useConfigOnly=true",))
    if status != 0 and any(marker in err for marker in _IDENTITY_ERRORS):
        config = []
        configured = str(_run(directory, "config", "--get-regexp", r"^user\.(name|email)$")[1])
        names = {line.split(" ", 1)[0] for line in configured.splitlines()}
        if "user.email" not in names:
            config += [f"user.email={BOT_EMAIL}", f"user.name={BOT_NAME}"]
        elif "user.name" not in names:
            config += [f"user.name={BOT_NAME}"]
        status, _, err = _run(directory, *commit, config=config)
    if status != 0:
        if _run(directory, "diff", "--cached", "--quiet", "--no-ext-diff")[0] == 0:
            return None
        raise _failure("committing on the agent's behalf", directory, err)
    return head(directory)


def is_clean(directory: Path | str) -> bool:
    """Attached HEAD and no modified, untracked or ignored file, whatever the index's flags say:
    safe to remove."""
    check_worktree_link(directory)
    out = output(
        "git status",
        directory,
        *_STATUS,
        "--porcelain=v2",
        "--branch",
        "--untracked-files=normal",
        "--ignored",
    )
    for line in str(out).splitlines():
        if line == "# branch.head (detached)":
            return False
        if line and not line.startswith("# "):
            return False
    # status trusts the index: an edit behind assume-unchanged or skip-worktree is invisible to it
    return not hidden_edits(directory)


def hidden_edits(directory: Path | str) -> list[str]:
    """Paths whose index flags (assume-unchanged, skip-worktree) hide an edit on disk from git status.

    Each flagged file is hashed as git would store it and compared with the index's object id
    (which, once status shows nothing staged, is HEAD's). A flagged file gone from the disk counts:
    it is an edit too, and keeping a worktree is never the loss removing one can be.

    An index read whole with no flagged entry has none (no git process then); any doubt about
    the file, and git lists the flagged entries."""
    top = Path(directory)
    dirs = _git_dir_names(os.fspath(top.absolute()))
    if dirs is not None and not may_hide_edits(index_file(dirs[0])):
        return []
    status, out, err = _run(top, "ls-files", "-v", "-s", "-z", strip=False)
    if status != 0:
        raise _failure("git ls-files", top, str(err))
    hidden = []
    for record in str(out).split("\0"):
        if not record or "\t" not in record:
            continue
        meta, path = record.split("\t", 1)
        tag, _mode, oid, _stage = meta.split()
        if not (tag.islower() or tag == "S"):
            continue
        full = top / path
        try:
            data = os.fsencode(os.readlink(full)) if os.path.islink(full) else full.read_bytes()
        except FileNotFoundError:
            hidden.append(path)
            continue
        except OSError:
            hidden.append(path)  # unreadable: cannot be shown to match
            continue
        if blob_id(data, "sha256" if len(oid) == 64 else "sha1") != oid:
            hidden.append(path)
    return hidden


def blob_id(data: bytes, algorithm: str = "sha1") -> str:
    """The object id git gives `data` as a blob."""
    digest = hashlib.new(algorithm)
    digest.update(b"blob %d\0" % len(data))
    digest.update(data)
    return digest.hexdigest()
