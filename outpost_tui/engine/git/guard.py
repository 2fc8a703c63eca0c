"""What a candidate must leave as it found it: the user's refs, HEAD, git settings and checkout.

In the local sandbox a candidate shares the repository's git directory, and in a container its refs
stay writable (git needs them to commit). So the state a candidate must not change is recorded when
the race starts and compared after every attempt and at the end: every ref outside the race's own
branches, the checkout's HEAD and those of the user's other worktrees, the git settings that make
git run programs or change what it sees (config, config.worktree files, hooks, info/, alternates,
shallow) and the checkout's content. Settings files are put back from the record at once (the
candidate's version is kept as evidence); refs are the user's to put back, with the command that
does it, since the user may have moved them on purpose meanwhile.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import stat
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..files import link_atomically, write_atomically
from ..paths import real_path
from .host import HostSnapshot, host_snapshot
from .layout import OUTPOST_DIR, RECOVERY, WORKSPACES
from .runner import GitError, _git_dirs, output
from .worktrees import BRANCH_PREFIX

# Files whose content changes what git runs or sees, relative to the common git directory (and to
# each submodule's git directory under modules/).
SETTINGS_FILES = ("config", "config.worktree", "shallow", "objects/info/alternates")
SETTINGS_TREES = ("hooks", "info")
# Past this a file is compared by digest only and cannot be put back (and is said so).
MAX_RESTORABLE = 4 * 1024 * 1024
TAMPERING = "tampering"  # .outpost/recovery/tampering/<race>/<who>/: what a candidate wrote
# Refs the engine itself creates while races run (other races' branches, archives): new ones are
# not a candidate's doing; moving or deleting existing ones is.
ENGINE_NAMESPACES = (f"refs/heads/{BRANCH_PREFIX}/", "refs/outpost/")
# What one check reports at most, one entry each: a candidate that makes twenty thousand refs must
# not bury the branch it moved. The rest are counted in one more entry, and every change with its
# undo is listed in a file kept as evidence.
MAX_REPORTED = 50


@dataclass(frozen=True)
class Saved:
    """One settings file as recorded: its mode and content (or a symlink's target)."""

    mode: int
    digest: str
    content: bytes | None  # None: a symlink, or too large to keep
    link: str | None = None


@dataclass(frozen=True)
class GuardChange:
    """One thing in the user's repository that is not as the race found it."""

    kind: str  # ref | head | setting | working-tree | more (the changes past MAX_REPORTED, counted)
    name: str  # the ref, "HEAD", the file (relative to the git directory), or "working tree"
    change: str  # moved | created | deleted | changed | added | removed
    before: str | None = None
    after: str | None = None
    undo: str | None = None  # the command that puts it back (refs and HEAD)
    restored: bool = False  # put back from the record by the engine (settings files)
    evidence: str | None = None  # where the version found was kept
    checkout: bool = False  # the user's checked-out branch, HEAD or working tree

    @property
    def identity(self) -> tuple[str, str, str | None]:
        return (self.kind, self.name, self.after)

    def describe(self) -> str:
        if self.kind == "more":
            listed = f", each with its undo in {self.evidence}" if self.evidence else ""
            return f"and {self.name}{listed}"
        if self.kind == "working-tree":
            text = "your working tree was written to"
        elif self.kind == "setting":
            text = f"{self.change} {self.name}"
        elif self.change == "moved":
            text = f"moved {self.name} from {_short(self.before)} to {_short(self.after)}"
        elif self.change == "created":
            text = f"created {self.name} at {_short(self.after)}"
        elif self.change == "deleted":
            text = f"deleted {self.name} (was {_short(self.before)})"
        else:
            text = f"changed {self.name} from {self.before} to {self.after}"
        if self.checkout and self.kind == "ref":
            text += " (your checked-out branch)"
        if self.restored:
            text += "; restored from the record"
            if self.evidence:
                text += f", what was found kept in {self.evidence}"
        elif self.kind == "setting":
            text += "; NOT restored (too large to keep a copy): check it"
        if self.undo:
            text += f"; undo: {self.undo}"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "change": self.change,
            "before": self.before,
            "after": self.after,
            "undo": self.undo,
            "restored": self.restored,
            "evidence": self.evidence,
            "checkout": self.checkout,
            "description": self.describe(),
        }


def _short(oid: str | None) -> str:
    return (oid or "?")[:12]


@dataclass
class GuardRecord:
    root: Path
    common: Path
    git_dir: Path
    race_id: str
    refs: dict[str, str]
    head: str  # the HEAD file's content: "ref: refs/heads/main" or an object id
    worktree_heads: dict[str, str]  # the user's other worktrees: HEAD file -> content
    settings: dict[str, Saved]  # absolute path -> saved state
    host: HostSnapshot | None
    seen: set[tuple[str, str, str | None]] = field(default_factory=set)  # GuardChange.identity
    # the checkout as the last compare found it (None: that compare did not get so far)
    latest_host: HostSnapshot | None = None

    @property
    def checked_out(self) -> str | None:
        return self.head.removeprefix("ref:").strip() if self.head.startswith("ref:") else None


def guard_record(
    root: Path, race_id: str, host: HostSnapshot | None, refs: dict[str, str] | None = None
) -> GuardRecord:
    """Record the repository at `root` as the race `race_id` finds it; `refs`: every ref as
    `listed_refs` read it moments before, while nothing else ran yet (else read here)."""
    root = Path(root)
    dirs = _git_dirs(root)
    if dirs is None:
        raise GitError(f"cannot read the git directory of {root}")
    git_dir, common = dirs
    return GuardRecord(
        root=root,
        common=common,
        git_dir=git_dir,
        race_id=race_id,
        refs=_not_the_races(listed_refs(root) if refs is None else refs, race_id),
        head=_read_head(git_dir / "HEAD"),
        worktree_heads=_worktree_heads(root, common),
        settings=_settings(common, git_dir),
        host=host,
    )


def guard_changes(record: GuardRecord, who: str) -> list[GuardChange]:
    """What changed since the record and was not reported before; settings files are put back.

    `who` names the evidence directory ("<key>-<attempt>", or "race")."""
    record.latest_host = None
    found: list[GuardChange] = []
    found += _compare_refs(record)
    found += _compare_heads(record)
    found += _compare_settings(record, who)
    found += _compare_checkout(record, found)
    fresh = [c for c in found if c.identity not in record.seen]
    record.seen.update(c.identity for c in fresh)
    return _capped(record, who, fresh)


def _weight(change: GuardChange) -> tuple[int, int]:
    """What an operator must see first: the checkout, then what existed and was changed (the
    user's branches before their tags and other refs), then what was only added."""
    if change.checkout:
        return (0, 0)
    if change.kind != "ref":
        return (1, 0)
    namespace = (
        0 if change.name.startswith("refs/heads/") else 1 if change.name.startswith("refs/tags/") else 2
    )
    return (2 if change.change != "created" else 3, namespace)


def _capped(record: GuardRecord, who: str, changes: list[GuardChange]) -> list[GuardChange]:
    """At most MAX_REPORTED changes, the ones that matter first, the rest counted in one entry."""
    if len(changes) <= MAX_REPORTED:
        return changes
    ordered = sorted(changes, key=_weight)  # stable: found order within a weight
    shown, rest = ordered[: MAX_REPORTED - 1], ordered[MAX_REPORTED - 1 :]
    counts: dict[str, int] = {}
    for change in rest:
        what = f"{change.kind}s {change.change}" if change.kind == "ref" else change.kind
        counts[what] = counts.get(what, 0) + 1
    detail = ", ".join(f"{n:,} {what}" for what, n in sorted(counts.items(), key=lambda item: -item[1]))
    summary = GuardChange(
        "more", f"{len(rest):,} more changes ({detail})", "more", evidence=_list_changes(record, who, ordered)
    )
    return [*shown, summary]


def _list_changes(record: GuardRecord, who: str, changes: list[GuardChange]) -> str | None:
    """Every change, one line each with its undo, in a file under .outpost/recovery/tampering/."""
    target = record.root / OUTPOST_DIR / RECOVERY / TAMPERING / record.race_id / who
    target = target / f"changes.{uuid.uuid4().hex[:8]}.txt"
    try:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(target, "x", encoding="utf-8", errors="surrogateescape") as listing:
            for change in changes:
                listing.write(change.describe() + "\n")
    except OSError:
        return None
    return str(target)


# --- refs and HEADs -----------------------------------------------------------------------------


def listed_refs(root: Path) -> dict[str, str]:
    """Every ref of the repository at `root` and the object it names."""
    out = str(output("listing refs", root, "for-each-ref", "--format=%(objectname) %(refname)"))
    refs = {}
    for line in out.splitlines():
        oid, _, name = line.partition(" ")
        if name:
            refs[name] = oid
    return refs


def _not_the_races(refs: dict[str, str], race_id: str) -> dict[str, str]:
    own = f"refs/heads/{BRANCH_PREFIX}/{race_id}/"
    return {name: oid for name, oid in refs.items() if not name.startswith(own)}


def _read_head(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="surrogateescape").strip()
    except OSError:
        return ""


def _worktree_heads(root: Path, common: Path) -> dict[str, str]:
    """HEAD of each of the user's other worktrees (not the race's, under .outpost/workspaces)."""
    heads: dict[str, str] = {}
    workspaces = real_path(root / OUTPOST_DIR / WORKSPACES)
    try:
        entries = sorted((common / "worktrees").iterdir())
    except OSError:
        return heads
    for entry in entries:
        try:
            linked = real_path((entry / "gitdir").read_text(encoding="utf-8").strip())
        except OSError:
            continue
        if not linked.startswith(workspaces + os.sep):
            heads[str(entry / "HEAD")] = _read_head(entry / "HEAD")
    return heads


def _undo(root: Path, *args: str) -> str:
    return shlex.join(["git", "-C", str(root), *args])


def _compare_refs(record: GuardRecord) -> list[GuardChange]:
    now = _not_the_races(listed_refs(record.root), record.race_id)
    checked_out = record.checked_out
    changes = []
    for name in sorted(set(record.refs) | set(now)):
        before, after = record.refs.get(name), now.get(name)
        if before == after:
            continue
        checkout = name == checked_out
        if before is None:
            if name.startswith(ENGINE_NAMESPACES):
                continue
            assert after is not None
            changes.append(
                GuardChange(
                    "ref",
                    name,
                    "created",
                    None,
                    after,
                    _undo(record.root, "update-ref", "-d", name, after),
                    checkout=checkout,
                )
            )
        elif after is None:
            changes.append(
                GuardChange(
                    "ref",
                    name,
                    "deleted",
                    before,
                    None,
                    _undo(record.root, "update-ref", name, before, ""),
                    checkout=checkout,
                )
            )
        else:
            changes.append(
                GuardChange(
                    "ref",
                    name,
                    "moved",
                    before,
                    after,
                    _undo(record.root, "update-ref", name, before, after),
                    checkout=checkout,
                )
            )
    return changes


def _compare_heads(record: GuardRecord) -> list[GuardChange]:
    changes = []
    now = _read_head(record.git_dir / "HEAD")
    if now != record.head:
        back = record.checked_out
        undo = _undo(record.root, "checkout", back.removeprefix("refs/heads/") if back else record.head)
        changes.append(GuardChange("head", "HEAD", "changed", record.head, now, undo, checkout=True))
    for path, before in record.worktree_heads.items():
        after = _read_head(Path(path))
        if after != before:
            worktree = Path(path).parent
            changes.append(
                GuardChange(
                    "head",
                    str(worktree.relative_to(record.common) / "HEAD"),
                    "changed",
                    before,
                    after or None,
                )
            )
    return changes


# --- settings files -----------------------------------------------------------------------------


def _settings(common: Path, git_dir: Path) -> dict[str, Saved]:
    saved: dict[str, Saved] = {}
    for path in _settings_paths(common, git_dir):
        state = _save(path)
        if state is not None:
            saved[str(path)] = state
    return saved


def _settings_paths(common: Path, git_dir: Path) -> list[Path]:
    paths = [common / name for name in SETTINGS_FILES]
    if git_dir != common:
        paths.append(git_dir / "config.worktree")
    with contextlib.suppress(OSError):
        paths += [entry / "config.worktree" for entry in (common / "worktrees").iterdir()]
    # submodules' git directories: their config and hooks run when git recurses into them
    for current, dirs, _files in os.walk(common / "modules", followlinks=False):
        base = Path(current)
        if (base / "objects").is_dir():
            paths += [base / name for name in SETTINGS_FILES]
            for tree in SETTINGS_TREES:
                paths += [
                    Path(c) / name
                    for c, _, names in os.walk(base / tree, followlinks=False)
                    for name in names
                ]
            dirs[:] = [d for d in dirs if d == "modules"]  # nested submodules only
    for tree in SETTINGS_TREES:
        for current, dirs, files in os.walk(common / tree, followlinks=False):
            base = Path(current)
            paths += [base / name for name in files]
            # a symlinked directory is recorded as the link it is, not walked
            paths += [base / name for name in dirs if (base / name).is_symlink()]
    return paths


def _save(path: Path) -> Saved | None:
    try:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(path)
            return Saved(info.st_mode, hashlib.sha256(os.fsencode(target)).hexdigest(), None, target)
        if not stat.S_ISREG(info.st_mode):
            return None
        digest = hashlib.sha256()
        kept = bytearray()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
                if len(kept) <= MAX_RESTORABLE:
                    kept += chunk
    except FileNotFoundError:
        return None
    except OSError as error:
        raise GitError(f"cannot read {path}: {error.strerror}") from error
    content = bytes(kept) if len(kept) <= MAX_RESTORABLE else None
    return Saved(info.st_mode, digest.hexdigest(), content)


def _compare_settings(record: GuardRecord, who: str) -> list[GuardChange]:
    now = _settings(record.common, record.git_dir)
    changes = []
    for path in sorted(set(record.settings) | set(now)):
        before, after = record.settings.get(path), now.get(path)
        if before == after or (
            before and after and before.digest == after.digest and before.mode == after.mode
        ):
            continue
        name = os.path.relpath(path, record.common)
        change = "added" if before is None else "removed" if after is None else "changed"
        evidence = _keep(record, who, Path(path), name) if after is not None else None
        restored = _restore(Path(path), before)
        changes.append(
            GuardChange(
                "setting",
                name,
                change,
                before.digest[:12] if before else None,
                after.digest[:12] if after else None,
                restored=restored,
                evidence=evidence,
            )
        )
    return changes


def _keep(record: GuardRecord, who: str, path: Path, name: str) -> str | None:
    """Copy what was found to .outpost/recovery/tampering/<race>/<who>/ before it is put back."""
    target = (
        record.root
        / OUTPOST_DIR
        / RECOVERY
        / TAMPERING
        / record.race_id
        / who
        / f"{name}.{uuid.uuid4().hex[:8]}"
    )
    try:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(path), target)
        else:
            with open(path, "rb") as source, open(target, "xb") as copy:
                for chunk in iter(lambda: source.read(1 << 20), b""):
                    copy.write(chunk)
            os.chmod(target, stat.S_IMODE(info.st_mode) & 0o700)
    except OSError:
        return None
    return str(target)


def _restore(path: Path, saved: Saved | None) -> bool:
    """Put `path` back as recorded (gone when it did not exist); False when that cannot be done."""
    try:
        if saved is None:
            if path.is_dir() and not path.is_symlink():
                return False  # a directory: kept where it is, reported
            os.unlink(path)
            return True
        if saved.link is None and saved.content is None:
            return False
        if path.is_dir() and not path.is_symlink():
            return False  # a directory: kept where it is, reported
        if saved.link is not None:
            link_atomically(path, saved.link)
        else:
            write_atomically(path, saved.content or b"", mode=stat.S_IMODE(saved.mode))
        return True
    except OSError:
        return False


# --- the checkout ---------------------------------------------------------------------------------


def _compare_checkout(record: GuardRecord, found: list[GuardChange]) -> list[GuardChange]:
    before = record.host
    if before is None:
        return []
    try:
        after = record.latest_host = host_snapshot(record.root)
    except GitError:
        return []
    moved = before.head != after.head
    written = (
        (before.fingerprint != after.fingerprint)
        if not moved
        else (before.dirty != after.dirty or after.dirty)
    )
    if not written:
        return []
    return [
        GuardChange(
            "working-tree",
            "working tree",
            "changed",
            before.fingerprint[:12],
            after.fingerprint[:12],
            checkout=True,
        )
    ]
