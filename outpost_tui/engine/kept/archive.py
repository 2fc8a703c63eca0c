"""Archives of candidate worktrees: everything in one that its branch does not hold, kept under a ref.

An archive is a commit `refs/outpost/archive/<race>/<key>/<attempt>` whose first parent is the
worktree's HEAD and whose tree is the worktree exactly as it is on disk: uncommitted edits, untracked
files, deletions, executable bits and symlinks, edits that index flags (assume-unchanged,
skip-worktree) hide from `git status`, and ignored files when asked for. The tree is built from the
files themselves, never through the worktree's index or filters, so it holds their bytes; what git
cannot say in a tree (permission bits beyond the executable one, empty directories) is written into
the commit message as a manifest. Archiving the same attempt again keeps the earlier archive as a
second parent: no archive is ever dropped.

A worktree is removed only after its archive is verified against the disk: every file hashed again
by this module and found in the archive's tree with the same mode and bytes, every object present,
the ref pointing at the commit. Removal renames the directory aside in one step before deleting it,
so an interruption at any point leaves either the worktree or a verified archive (usually both).
Restore recreates the worktree from its branch plus its archive, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import git
from ..git.integration import _candidate
from ..git.layout import _inside, _workspaces
from ..git.runner import _check, _first_line, _run
from ..git.worktrees import _worktree_lock
from .processes import Occupant, occupants

ARCHIVE_PREFIX = "refs/outpost/archive"
MANIFEST_MARKER = "outpost-archive-manifest: "
REMOVING = "removing"  # .outpost/recovery/removing-*: directories renamed aside on their way out
CHANGED = "changed"  # .outpost/recovery/changed-*: written to after their check; never deleted by us
_ZERO = "0" * 40
_GIT_TIMEOUT = 600.0


class ArchiveError(git.GitError):
    """Archiving, verifying, removing or restoring refused or failed; one line saying why."""


@dataclass(frozen=True)
class Attempt:
    """Which attempt a worktree or an archive belongs to."""

    race_id: str
    key: str
    attempt: int

    @property
    def ref(self) -> str:
        return f"{ARCHIVE_PREFIX}/{self.race_id}/{self.key}/{self.attempt}"

    @property
    def branch(self) -> str:
        return git.branch_name(self.race_id, self.key, self.attempt)

    @property
    def label(self) -> str:
        return f"{self.race_id}/{self.key}/{self.attempt}"


@dataclass
class Archive:
    attempt: Attempt
    ref: str
    commit: str
    head: str  # the worktree's HEAD when archived (the commit's first parent)
    directory: str
    files: int
    ignored_included: bool
    ignored_bytes: int  # ignored files left out (0 when included)
    ignored_files: int
    previous: str | None = None
    modes: dict[str, int] = field(default_factory=dict)
    empty_dirs: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "race_id": self.attempt.race_id,
            "key": self.attempt.key,
            "attempt": self.attempt.attempt,
            "ref": self.ref,
            "commit": self.commit,
            "head": self.head,
            "directory": self.directory,
            "files": self.files,
            "ignored_included": self.ignored_included,
            "ignored_bytes": self.ignored_bytes,
            "ignored_files": self.ignored_files,
            "previous": self.previous,
        }


# --- plumbing ----------------------------------------------------------------------------------


def _plumbing(
    root: Path, *args: str, input: bytes | None = None, index: Path | None = None, check: str | None = None
) -> bytes:
    """Object-store plumbing that needs stdin or a private index, with the engine's git settings.

    None of these commands runs a hook, a filter or the fsmonitor (hash-object --no-filters; the
    others never touch a working tree)."""
    try:
        status, out, err = _run(
            root, *args, input=input or b"", index=index, timeout=_GIT_TIMEOUT, binary=True, strip=False
        )
    except git.GitError as error:
        raise ArchiveError(str(error)) from error
    if status == git.GIT_TIMEOUT_STATUS:
        raise ArchiveError(f"git {args[0]} did not finish within {_GIT_TIMEOUT:g} s in {root}")
    if status != 0:
        raise ArchiveError(f"{check or 'git ' + args[0]} failed in {root}: {_first_line(err)}")
    return out if isinstance(out, bytes) else out.encode()  # binary=True: bytes


def _object_format(root: Path) -> str:
    out = _plumbing(root, "rev-parse", "--show-object-format").decode().strip()
    return out or "sha1"


def _blob_id(data: bytes, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    digest.update(b"blob %d\0" % len(data))
    digest.update(data)
    return digest.hexdigest()


# --- what a worktree holds ---------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    path: str  # relative, "/"-separated, as git names it
    kind: str  # "file" | "link" ("dir": an ignored directory left out whole)
    mode: int  # st_mode
    size: int


def _ignored_paths(directory: Path) -> set[str]:
    """Ignored paths of the worktree as git reports them (directories end with "/")."""
    status, out, err = _run(
        directory, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory", strip=False
    )
    if status != 0:
        raise ArchiveError(f"listing ignored files failed in {directory}: {_first_line(str(err))}")
    return {p for p in str(out).split("\0") if p}


def _is_ignored(path: str, ignored: set[str]) -> bool:
    if path in ignored:
        return True
    parts = path.split("/")
    return any("/".join(parts[:n]) + "/" in ignored for n in range(1, len(parts)))


def _walk(top: Path) -> Iterator[tuple[str, str, list[str], list[str]]]:
    """os.walk of a worktree as an archive sees it: (directory, its path with a trailing slash,
    dirs, files). The top's .git link is not part of it, and symlinks to directories are files
    (links), never descended into. Callers may prune `dirs` in place, as with os.walk."""
    for current, dirs, files in os.walk(top, followlinks=False):
        relative = os.path.relpath(current, top)
        prefix = "" if relative == "." else relative.replace(os.sep, "/") + "/"
        if not prefix:
            dirs[:] = [d for d in dirs if d != ".git"]
            files = [f for f in files if f != ".git"]
        for name in list(dirs):
            if os.path.islink(os.path.join(current, name)):
                dirs.remove(name)
                files.append(name)
        yield current, prefix, dirs, files


def scan(directory: Path | str, include_ignored: bool) -> tuple[list[Entry], list[str], list[Entry]]:
    """(entries to archive, empty directories, ignored entries left out) of a worktree on disk.

    Refuses a nested repository (a .git below the top): a tree could only name it, not hold it."""
    top = Path(directory)
    git.check_worktree_link(top)
    ignored = _ignored_paths(top)
    kept: list[Entry] = []
    left: list[Entry] = []
    empty: list[str] = []
    for current, prefix, dirs, files in _walk(top):
        if prefix and (".git" in dirs or ".git" in files):
            raise ArchiveError(
                f"{top / prefix} holds a nested git repository: an archive cannot hold it, "
                "so the worktree is not archived (move it out by hand)"
            )
        for name in list(dirs):
            if not include_ignored and f"{prefix}{name}/" in ignored:
                # left out whole, with its size, and never walked: node_modules, .venv, build trees
                dirs.remove(name)
                full = os.path.join(current, name)
                left.append(Entry(prefix + name, "dir", os.lstat(full).st_mode, disk_usage(full)))
        if prefix and not dirs and not files and not _is_ignored(prefix.rstrip("/"), ignored):
            empty.append(prefix.rstrip("/"))
        for name in files:
            path = prefix + name
            info = os.lstat(os.path.join(current, name))
            if stat.S_ISLNK(info.st_mode):
                kind = "link"
            elif stat.S_ISREG(info.st_mode):
                kind = "file"
            else:
                raise ArchiveError(
                    f"{top / path} is neither a file nor a symlink (a socket or a pipe?): not archived"
                )
            entry = Entry(path, kind, info.st_mode, info.st_blocks * 512)
            (left if not include_ignored and _is_ignored(path, ignored) else kept).append(entry)
    return kept, sorted(empty), left


def _content(top: Path, entry: Entry) -> bytes:
    full = top / entry.path
    if entry.kind == "link":
        return os.fsencode(os.readlink(full))
    with open(full, "rb") as handle:
        return handle.read()


def _git_mode(entry: Entry) -> str:
    if entry.kind == "link":
        return "120000"
    return "100755" if entry.mode & stat.S_IXUSR else "100644"


def _restored_mode(entry: Entry, umask: int) -> int:
    return (0o777 if entry.mode & stat.S_IXUSR else 0o666) & ~umask


# --- archive -----------------------------------------------------------------------------------


def attempt_of(branch: str | None) -> Attempt | None:
    match = git.SPECULATION_BRANCH.match(branch or "")
    return Attempt(match.group(1), match.group(2), int(match.group(3))) if match else None


def archived_commit(root: Path | str, attempt: Attempt) -> str | None:
    status, out, _ = _run(root, "rev-parse", "--verify", "--quiet", f"{attempt.ref}^{{commit}}")
    return str(out) if status == 0 and out else None


def write_tree(root: Path | str, directory: Path | str, entries: list[Entry]) -> str:
    """Write `entries` of the worktree at `directory` into the object store; the tree's id."""
    root, top = Path(root), Path(directory)
    with tempfile.TemporaryDirectory(prefix="outpost-archive-") as scratch:
        records = []
        # Each file's bytes go in through hash-object --no-filters: a clean filter or autocrlf the
        # worktree's attributes select must not change (or run a program on) what is kept.
        files = [e for e in entries if e.kind == "file"]
        oids: list[str] = []
        if any(b"\n" in os.fsencode(e.path) for e in files):
            raise ArchiveError(f"{top} holds a file whose name contains a newline: not archived")
        if files:
            listed = b"".join(os.fsencode(str(top / e.path)) + b"\n" for e in files)
            oids = (
                _plumbing(root, "hash-object", "-w", "--no-filters", "--stdin-paths", input=listed)
                .decode()
                .split()
            )
        for entry, oid in zip(files, oids, strict=True):  # hash-object prints one id per path
            records.append(f"{_git_mode(entry)} {oid}\t{entry.path}")
        for entry in (e for e in entries if e.kind == "link"):
            target = Path(scratch) / "link"
            target.write_bytes(_content(top, entry))
            oid = _plumbing(root, "hash-object", "-w", "--no-filters", str(target)).decode().strip()
            records.append(f"120000 {oid}\t{entry.path}")
        if not records:
            return _plumbing(root, "mktree", input=b"").decode().strip()
        index = Path(scratch) / "index"
        _plumbing(
            root,
            "update-index",
            "-z",
            "--add",
            "--index-info",
            input=b"".join(os.fsencode(r) + b"\0" for r in records),
            index=index,
        )
        return _plumbing(root, "write-tree", index=index).decode().strip()


def snapshot(
    root: Path | str, directory: Path | str, include_ignored: bool = False, leave_out: Sequence[str] = ()
) -> str:
    """The tree of the worktree as it is on disk (committed or not), written to the object store.

    `leave_out`: paths that are not the candidate's work (what the race's setup put there)."""
    entries, _, _ = scan(directory, include_ignored)
    prefixes = [path.rstrip("/") for path in leave_out]
    entries = [e for e in entries if not any(e.path == p or e.path.startswith(p + "/") for p in prefixes)]
    return write_tree(root, directory, entries)


def archive(
    root: Path | str, directory: Path | str, attempt: Attempt, *, include_ignored: bool = False
) -> Archive:
    """Commit everything in `directory` to the attempt's archive ref, verified; the worktree stays."""
    root, top = Path(root), Path(directory).absolute()
    head = git.head(top)
    entries, empty, left = scan(top, include_ignored)
    tree = write_tree(root, top, entries)
    umask = _umask()
    modes = {
        e.path: stat.S_IMODE(e.mode)
        for e in entries
        if e.kind == "file" and stat.S_IMODE(e.mode) != _restored_mode(e, umask)
    }
    manifest = {
        "directory": str(top),
        "head": head,
        "modes": {p: oct(m) for p, m in modes.items()},
        "empty_dirs": empty,
        "ignored_included": include_ignored,
        "ignored_left_out": {"files": len(left), "bytes": sum(e.size for e in left)},
    }
    previous = archived_commit(root, attempt)
    parents = ["-p", head] + (["-p", previous] if previous else [])
    message = (
        f"outpost archive of {attempt.label}\n\n{len(entries)} files from {top}\n\n"
        f"{MANIFEST_MARKER}{json.dumps(manifest, sort_keys=True)}\n"
    )
    identity = ("-c", f"user.name={git.BOT_NAME}", "-c", f"user.email={git.BOT_EMAIL}")
    commit = (
        _plumbing(root, *identity, "commit-tree", "--no-gpg-sign", tree, *parents, input=message.encode())
        .decode()
        .strip()
    )
    # compare-and-swap: another archive of the same attempt in between must not be overwritten
    _plumbing(
        root,
        "update-ref",
        "-m",
        "outpost archive",
        attempt.ref,
        commit,
        previous or _ZERO,
        check=f"writing {attempt.ref}",
    )
    done = Archive(
        attempt,
        attempt.ref,
        commit,
        head,
        str(top),
        len(entries),
        include_ignored,
        0 if include_ignored else sum(e.size for e in left),
        0 if include_ignored else len(left),
        previous,
        modes,
        empty,
    )
    verify(root, top, done)
    return done


def _umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


def _tree_entries(root: Path, commit: str) -> dict[str, tuple[str, str]]:
    out = _plumbing(root, "ls-tree", "-r", "-z", "--full-tree", commit)
    entries: dict[str, tuple[str, str]] = {}
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        mode, _kind, oid = meta.decode().split()
        entries[os.fsdecode(path)] = (mode, oid)
    return entries


def manifest_of(root: Path | str, commit: str) -> dict[str, Any]:
    message = _plumbing(Path(root), "cat-file", "commit", commit).decode(errors="replace")
    for line in message.splitlines():
        if line.startswith(MANIFEST_MARKER):
            manifest: dict[str, Any] = json.loads(line.removeprefix(MANIFEST_MARKER))
            return manifest
    raise ArchiveError(f"{commit[:12]} is not an outpost archive (no manifest in its message)")


def verify(root: Path | str, directory: Path | str, archived: Archive) -> set[str]:
    """Prove the archive holds the worktree as it is now; ArchiveError naming the first difference."""
    root, top = Path(root), Path(directory)
    resolved = archived_commit(root, archived.attempt)
    if resolved != archived.commit:
        raise ArchiveError(
            f"{archived.ref} does not point at the archive {archived.commit[:12]}: {top} not removed"
        )
    parents = _plumbing(root, "rev-list", "--parents", "-n", "1", archived.commit).decode().split()[1:]
    if not parents or parents[0] != git.head(top):
        raise ArchiveError(f"the HEAD of {top} moved since it was archived: not removed")
    tree = _tree_entries(root, archived.commit)
    entries, empty, left = scan(top, archived.ignored_included)
    algorithm = _object_format(root)
    seen = set()
    for entry in entries:
        expected = tree.get(entry.path)
        if expected is None:
            raise ArchiveError(
                f"{top / entry.path} is not in the archive {archived.commit[:12]}: not removed"
            )
        mode, oid = expected
        if mode != _git_mode(entry) or oid != _blob_id(_content(top, entry), algorithm):
            raise ArchiveError(
                f"{top / entry.path} differs from its archived copy (changed while archiving?): not removed"
            )
        if archived.modes.get(entry.path, stat.S_IMODE(entry.mode)) != stat.S_IMODE(entry.mode):
            raise ArchiveError(
                f"the permissions of {top / entry.path} changed since it was archived: not removed"
            )
        seen.add(entry.path)
    extra = sorted(set(tree) - seen)
    if extra:
        raise ArchiveError(f"{top / extra[0]} is in the archive but gone from the disk: not removed")
    if sorted(empty) != sorted(archived.empty_dirs):
        raise ArchiveError(f"the empty directories of {top} changed since it was archived: not removed")
    # every blob readable from the object store, not only named by the tree
    listed = "".join(f"{oid}\n" for _, oid in tree.values()).encode()
    if listed:
        checked = _plumbing(root, "cat-file", "--batch-check", input=listed).decode()
        if "missing" in checked:
            raise ArchiveError(f"the archive {archived.commit[:12]} misses objects: {top} not removed")
    return {entry.path for entry in left}


# --- removal -----------------------------------------------------------------------------------


@dataclass
class Removal:
    directory: str
    archive: Archive
    freed_bytes: int
    occupants: list[Occupant] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "archive": self.archive.to_json(),
            "freed_bytes": self.freed_bytes,
        }


class Occupied(ArchiveError):
    """A process runs in the worktree: it is not removed."""

    def __init__(self, directory: Path, found: list[Occupant]) -> None:
        named = "; ".join(o.describe() for o in found[:3]) + (
            f"; and {len(found) - 3} more" if len(found) > 3 else ""
        )
        super().__init__(f"{directory} is in use by {named}: not removed")
        self.occupants = found


def disk_usage(path: Path | str) -> int:
    """Bytes `path` takes on disk (allocated blocks; hard links counted once)."""
    total, seen = 0, set()
    for current, dirs, files in os.walk(path, followlinks=False):
        for name in [*dirs, *files, ""] if current == str(path) else [*dirs, *files]:
            full = os.path.join(current, name) if name else current
            try:
                info = os.lstat(full)
            except FileNotFoundError:
                continue
            if (info.st_dev, info.st_ino) in seen:
                continue
            seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512
    return total


def archive_and_remove(
    root: Path | str, directory: Path | str, attempt: Attempt, *, include_ignored: bool = False
) -> Removal:
    """Archive the worktree, verify the archive, then remove the worktree (the branch stays)."""
    root, top = Path(root), Path(directory).absolute()
    if not _inside(top, _workspaces(root)):
        raise ArchiveError(f"{top} is not a worktree under {_workspaces(root)}: not removed")
    found = occupants(top)
    if found:
        raise Occupied(top, found)
    archived = archive(root, top, attempt, include_ignored=include_ignored)
    found = occupants(top)  # one may have started while archiving
    if found:
        raise Occupied(top, found)
    left_out = verify(root, top, archived)
    git_dir = _worktree_git_dir(top)
    freed = disk_usage(top) + (disk_usage(git_dir) if git_dir else 0)
    aside = root / git.OUTPOST_DIR / git.RECOVERY / f"{REMOVING}-{top.name}-{uuid.uuid4().hex[:8]}"
    aside.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # One rename: from here the worktree is gone for git, and the bytes still on disk until deleted.
    with _worktree_lock(root).exclusive():
        os.rename(top, aside)
        _check("git worktree prune", root, "worktree", "prune")
    # Whatever wrote into the worktree between the check and the rename is caught here, before a
    # byte is deleted: the directory then stays aside, whole, and the error says where.
    changed = _written_since(root, aside, archived, left_out)
    if changed is not None:
        # out of the removing-* names, which a later prune deletes as finished business
        kept = aside.with_name(f"{CHANGED}-{top.name}-{uuid.uuid4().hex[:8]}")
        os.rename(aside, kept)
        raise ArchiveError(
            f"{changed} changed while {top} was being removed: nothing was deleted, the "
            f"directory is kept whole at {kept} (its archive {archived.commit[:12]} "
            "holds what was checked)"
        )
    shutil.rmtree(aside)
    return Removal(str(top), archived, freed)


def _written_since(root: Path, aside: Path, archived: Archive, left_out: set[str]) -> str | None:
    """The first file under `aside` that the archive does not hold as it is, or None."""
    tree = _tree_entries(root, archived.commit)
    algorithm = _object_format(root)
    for current, prefix, _dirs, files in _walk(aside):
        for name in files:
            path = prefix + name
            if _is_ignored(path, {p + "/" for p in left_out} | left_out):
                continue
            info = os.lstat(os.path.join(current, name))
            kind = "link" if stat.S_ISLNK(info.st_mode) else "file"
            entry = Entry(path, kind, info.st_mode, 0)
            expected = tree.get(path)
            if (
                expected is None
                or not (stat.S_ISLNK(info.st_mode) or stat.S_ISREG(info.st_mode))
                or expected != (_git_mode(entry), _blob_id(_content(aside, entry), algorithm))
            ):
                return path
    return None


def _worktree_git_dir(top: Path) -> Path | None:
    try:
        text = (top / ".git").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return (top / text.removeprefix("gitdir:").strip()).resolve() if text.startswith("gitdir:") else None


def leftovers(root: Path | str) -> list[Path]:
    """Directories a removal renamed aside and did not finish deleting (interrupted)."""
    recovery = Path(root) / git.OUTPOST_DIR / git.RECOVERY
    try:
        return sorted(p for p in recovery.iterdir() if p.name.startswith(REMOVING + "-") and p.is_dir())
    except FileNotFoundError:
        return []


# --- restore -----------------------------------------------------------------------------------


def restore(root: Path | str, attempt: Attempt, directory: Path | str | None = None) -> Path:
    """Recreate the attempt's worktree from its archive: HEAD as archived, every file byte for byte.

    The branch is checked out when it still points where the archive says; otherwise (moved or
    deleted) the worktree gets a detached HEAD at the archived commit and the branch is left alone."""
    root = Path(root)
    commit = archived_commit(root, attempt)
    if commit is None:
        raise ArchiveError(f"no archive of {attempt.label} ({attempt.ref} does not exist)")
    manifest = manifest_of(root, commit)
    head = manifest["head"]
    # a branch-only archive names no directory: the attempt's usual place
    target = Path(
        directory or manifest.get("directory") or git.worktree_directory(root, attempt.key, attempt.branch)
    ).absolute()
    if os.path.lexists(target):
        raise ArchiveError(f"{target} already exists: not restored over it")
    if not _inside(target, _workspaces(root)):
        raise ArchiveError(f"{target} is not under {_workspaces(root)}: not restored there")
    _check("git worktree prune", root, "worktree", "prune")
    branch_tip = _candidate(root, f"refs/heads/{attempt.branch}")
    checkout = [attempt.branch] if branch_tip == head else ["--detach", head]
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with _worktree_lock(root).exclusive():
        _check(
            f"creating worktree {target}",
            root,
            "worktree",
            "add",
            "--quiet",
            "--no-checkout",
            str(target),
            *checkout,
        )
    # The index follows HEAD (as a fresh checkout's would); the files come from the archive itself.
    _check("reading HEAD into the index", target, "read-tree", head)
    tree = _tree_entries(root, commit)
    blobs = _read_blobs(root, [oid for _, oid in tree.values()])
    modes = {path: int(value, 8) for path, value in manifest.get("modes", {}).items()}
    for path, (mode, oid) in sorted(tree.items()):
        full = target / path
        full.parent.mkdir(parents=True, exist_ok=True)
        if mode == "120000":
            os.symlink(os.fsdecode(blobs[oid]), full)
            continue
        with open(full, "wb") as handle:
            handle.write(blobs[oid])
        os.chmod(full, modes.get(path, (0o777 if mode == "100755" else 0o666) & ~_umask()))
    for path in manifest.get("empty_dirs", []):
        (target / path).mkdir(parents=True, exist_ok=True)
    return target


def _read_blobs(root: Path, oids: list[str]) -> dict[str, bytes]:
    unique = list(dict.fromkeys(oids))
    if not unique:
        return {}
    out = _plumbing(root, "cat-file", "--batch", input="".join(f"{o}\n" for o in unique).encode())
    blobs, position = {}, 0
    for oid in unique:
        end = out.index(b"\n", position)
        header = out[position:end].decode().split()
        size = int(header[2])
        blobs[oid] = out[end + 1 : end + 1 + size]
        position = end + 1 + size + 1
    return blobs


def archives(root: Path | str) -> list[tuple[Attempt, str]]:
    """Every archive ref of the repository: (attempt, commit)."""
    out = str(
        _check(
            "listing archives",
            root,
            "for-each-ref",
            "--format=%(refname) %(objectname)",
            ARCHIVE_PREFIX + "/",
        )
    )
    found = []
    for line in out.splitlines():
        name, _, oid = line.partition(" ")
        parts = name.removeprefix(ARCHIVE_PREFIX + "/").split("/")
        if len(parts) == 3 and parts[2].isdigit():
            found.append((Attempt(parts[0], parts[1], int(parts[2])), oid))
    return found


def iter_attempt_worktrees(root: Path | str) -> Iterator[tuple[Attempt, dict[str, Any]]]:
    for worktree in git.list_worktrees(root):
        attempt = attempt_of(worktree.get("branch"))
        if attempt is not None:
            yield attempt, worktree
