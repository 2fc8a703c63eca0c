"""Archives of candidate worktrees: everything in one that its branch does not hold, kept under a ref.

An archive is a commit `refs/outpost/archive/<race>/<key>/<attempt>` whose first parent is the
worktree's HEAD and whose tree is the worktree exactly as it is on disk: uncommitted edits, untracked
files, deletions, executable bits and symlinks, edits that index flags (assume-unchanged,
skip-worktree) hide from `git status`, and ignored files when asked for. The tree is built from the
files themselves, never through the worktree's index or filters, so it holds their bytes; what git
cannot say in a tree (permission bits beyond the executable one, empty directories) is written into
the commit message as a manifest. Archiving the same attempt again keeps the earlier archive as a
second parent: no archive is ever dropped.

An archive is verified against the disk (`verify`): every file hashed again by this module and
found in the archive's tree with the same mode and bytes, every object present, the ref pointing at
the commit. Removing a worktree (`removal`) and recreating it (`restore`) are built on this module.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import git

ARCHIVE_PREFIX = "refs/outpost/archive"
MANIFEST_MARKER = "outpost-archive-manifest: "
ZERO_OID = "0" * 40
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


def plumbing(
    root: Path, *args: str, input: bytes | None = None, index: Path | None = None, check: str | None = None
) -> bytes:
    """Object-store plumbing that needs stdin or a private index, with the engine's git settings.

    None of these commands runs a hook, a filter or the fsmonitor (hash-object --no-filters; the
    others never touch a working tree)."""
    try:
        status, out, err = git.run(
            root, *args, input=input or b"", index=index, timeout=_GIT_TIMEOUT, binary=True
        )
    except git.GitError as error:
        raise ArchiveError(str(error)) from error
    if status == git.GIT_TIMEOUT_STATUS:
        raise ArchiveError(f"git {args[0]} did not finish within {_GIT_TIMEOUT:g} s in {root}")
    if status != 0:
        raise ArchiveError(f"{check or 'git ' + args[0]} failed in {root}: {git.error_line(err)}")
    return out


def object_format(root: Path) -> str:
    out = plumbing(root, "rev-parse", "--show-object-format").decode().strip()
    return out or "sha1"


# --- what a worktree holds ---------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    path: str  # relative, "/"-separated, as git names it
    kind: str  # "file" | "link" ("dir": an ignored directory left out whole)
    mode: int  # st_mode
    size: int


def _ignored_paths(directory: Path) -> set[str]:
    """Ignored paths of the worktree as git reports them (directories end with "/")."""
    status, out, err = git.run(
        directory,
        "ls-files",
        "-z",
        "--others",
        "--ignored",
        "--exclude-standard",
        "--directory",
        timeout=None,
    )
    if status != 0:
        raise ArchiveError(f"listing ignored files failed in {directory}: {git.error_line(str(err))}")
    return {p for p in str(out).split("\0") if p}


class NestedRepository(ArchiveError):
    """A git repository or worktree lives inside the worktree: no archive can hold its work."""

    def __init__(self, top: Path, where: Path) -> None:
        super().__init__(
            f"{where} holds a nested git repository: an archive cannot hold it, "
            f"so {top} is neither archived nor removed (move it out by hand)"
        )


def nested_repository(directory: str) -> str | None:
    """The first directory at or below `directory` holding a `.git`, symlinks never followed."""
    for current, dirs, files in os.walk(directory, followlinks=False):
        if ".git" in dirs or ".git" in files:
            return current
    return None


def is_ignored(path: str, ignored: set[str]) -> bool:
    if path in ignored:
        return True
    parts = path.split("/")
    return any("/".join(parts[:n]) + "/" in ignored for n in range(1, len(parts)))


def walk(top: Path) -> Iterator[tuple[str, str, list[str], list[str]]]:
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
    for current, prefix, dirs, files in walk(top):
        if prefix and (".git" in dirs or ".git" in files):
            raise NestedRepository(top, top / prefix)
        for name in list(dirs):
            if not include_ignored and f"{prefix}{name}/" in ignored:
                # left out whole, with its size, and never archived: node_modules, .venv, build trees
                dirs.remove(name)
                full = os.path.join(current, name)
                # ...but removing the worktree deletes it: a repository or worktree in there (a
                # candidate's `git worktree add`, a rival's worktree moved in) keeps the worktree
                nested = nested_repository(full)
                if nested is not None:
                    raise NestedRepository(top, Path(nested))
                left.append(Entry(prefix + name, "dir", os.lstat(full).st_mode, disk_usage(full)))
        if prefix and not dirs and not files and not is_ignored(prefix.rstrip("/"), ignored):
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
            (left if not include_ignored and is_ignored(path, ignored) else kept).append(entry)
    return kept, sorted(empty), left


def content(top: Path, entry: Entry) -> bytes:
    full = top / entry.path
    if entry.kind == "link":
        return os.fsencode(os.readlink(full))
    with open(full, "rb") as handle:
        return handle.read()


def git_mode(entry: Entry) -> str:
    if entry.kind == "link":
        return "120000"
    return "100755" if entry.mode & stat.S_IXUSR else "100644"


def _restored_mode(entry: Entry, umask: int) -> int:
    return (0o777 if entry.mode & stat.S_IXUSR else 0o666) & ~umask


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


# --- archive -----------------------------------------------------------------------------------


def attempt_of(branch: str | None) -> Attempt | None:
    match = git.SPECULATION_BRANCH.match(branch or "")
    return Attempt(match.group(1), match.group(2), int(match.group(3))) if match else None


def archived_commit(root: Path | str, attempt: Attempt) -> str | None:
    status, out, _ = git.run(
        root, "rev-parse", "--verify", "--quiet", f"{attempt.ref}^{{commit}}", timeout=None, strip=True
    )
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
                plumbing(root, "hash-object", "-w", "--no-filters", "--stdin-paths", input=listed)
                .decode()
                .split()
            )
        for entry, oid in zip(files, oids, strict=True):  # hash-object prints one id per path
            records.append(f"{git_mode(entry)} {oid}\t{entry.path}")
        for entry in (e for e in entries if e.kind == "link"):
            target = Path(scratch) / "link"
            target.write_bytes(content(top, entry))
            oid = plumbing(root, "hash-object", "-w", "--no-filters", str(target)).decode().strip()
            records.append(f"120000 {oid}\t{entry.path}")
        if not records:
            return plumbing(root, "mktree", input=b"").decode().strip()
        index = Path(scratch) / "index"
        plumbing(
            root,
            "update-index",
            "-z",
            "--add",
            "--index-info",
            input=b"".join(os.fsencode(r) + b"\0" for r in records),
            index=index,
        )
        return plumbing(root, "write-tree", index=index).decode().strip()


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
    umask = current_umask()
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
        plumbing(root, *identity, "commit-tree", "--no-gpg-sign", tree, *parents, input=message.encode())
        .decode()
        .strip()
    )
    # compare-and-swap: another archive of the same attempt in between must not be overwritten
    plumbing(
        root,
        "update-ref",
        "-m",
        "outpost archive",
        attempt.ref,
        commit,
        previous or ZERO_OID,
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


def current_umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


def tree_entries(root: Path, commit: str) -> dict[str, tuple[str, str]]:
    out = plumbing(root, "ls-tree", "-r", "-z", "--full-tree", commit)
    entries: dict[str, tuple[str, str]] = {}
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        mode, _kind, oid = meta.decode().split()
        entries[os.fsdecode(path)] = (mode, oid)
    return entries


def manifest_of(root: Path | str, commit: str) -> dict[str, Any]:
    message = plumbing(Path(root), "cat-file", "commit", commit).decode(errors="replace")
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
    parents = plumbing(root, "rev-list", "--parents", "-n", "1", archived.commit).decode().split()[1:]
    if not parents or parents[0] != git.head(top):
        raise ArchiveError(f"the HEAD of {top} moved since it was archived: not removed")
    tree = tree_entries(root, archived.commit)
    entries, empty, left = scan(top, archived.ignored_included)
    algorithm = object_format(root)
    seen = set()
    for entry in entries:
        expected = tree.get(entry.path)
        if expected is None:
            raise ArchiveError(
                f"{top / entry.path} is not in the archive {archived.commit[:12]}: not removed"
            )
        mode, oid = expected
        if mode != git_mode(entry) or oid != git.blob_id(content(top, entry), algorithm):
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
        checked = plumbing(root, "cat-file", "--batch-check", input=listed).decode()
        if "missing" in checked:
            raise ArchiveError(f"the archive {archived.commit[:12]} misses objects: {top} not removed")
    return {entry.path for entry in left}


def archives(root: Path | str) -> list[tuple[Attempt, str]]:
    """Every archive ref of the repository: (attempt, commit)."""
    out = str(
        git.output(
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
