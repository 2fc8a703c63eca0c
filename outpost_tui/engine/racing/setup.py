"""An attempt's setup: what a fresh worktree needs before its agent starts ([setup]).

A real project's worktree has no virtual environment, no node_modules, no `.env`, and two dev
servers collide on one port. Before the agent starts, each attempt gets, in order: N free ports of
its own; the untracked files the race names (`copy`, and a `.worktreeinclude` the way Claude Code
reads it) copied from the user's checkout; the setup cache (what the setup command built the first
time for the same key files) copied in; then the setup command, in the attempt's sandbox.

Everything setup puts in the worktree is the setup's, never the candidate's: it stays out of
commits made on the candidate's behalf, a copied file the candidate commits itself is flagged in
review, and when the attempt ends those files are removed again only if nothing in them changed
(so a worktree holding nothing else can be removed; anything else keeps it).

A cache entry lives under `.outpost/cache/`, which a candidate may be able to write (the fallback
without bubblewrap, a container given too much), and what it plants there (a module in a cached
venv) would run in the next attempt and in the grading checkouts. So the engine records each
entry's digest (every path, kind, mode, link target and byte) when it builds it, sealed with its
key (`records.seal`), and checks what it copied out against that record before anything runs: an
entry without a valid seal, or whose copy differs, is discarded, the copy removed, and the setup
rebuilt, with a warning naming the entry.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import socket
import stat
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import git
from ..core.spec import RaceSpec
from ..paths import real_path
from ..records import seal
from ..records.flightlog import make_private_directory

WORKTREEINCLUDE = ".worktreeinclude"
CACHE_DIRECTORY = "cache"  # under .outpost/
MANIFEST = "outpost-cache.json"
CACHES_KEPT = 3  # cache entries kept per repository, newest first
FICLONE = 0x40049409  # linux/fs.h: share the source's blocks, copy on write
CONTAINER_FIRST_PORT = 8000  # a container has a network namespace of its own


@dataclass
class SetupState:
    """What setup did in one attempt's worktree (kept in memory while the attempt lives)."""

    copied: dict[str, str] = field(default_factory=dict)  # path -> sha256 of what was copied
    cache: str = "off"  # off | hit | built | miss (built, but not stored)
    ports: list[int] = field(default_factory=list)
    exit_code: int | None = None
    duration: float | None = None
    status: str = "not-run"  # not-run | passed | failed | timeout | error
    # Untracked and ignored files right after setup, with what identifies their content.
    products: dict[str, tuple[int, ...]] | None = None
    top_level: list[str] = field(default_factory=list)  # the entries status showed after setup

    @property
    def leave_out(self) -> list[str]:
        """Paths never committed on the candidate's behalf."""
        return sorted(set(self.copied) | set(self.top_level))

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            "duration": self.duration,
            "cache": self.cache,
            "copied": sorted(self.copied),
            "ports": list(self.ports),
            "files": self.leave_out,
        }


# --- ports ----------------------------------------------------------------------------------------

_reserved: set[int] = set()
_reserved_guard = threading.Lock()


class PortReservation:
    """N free TCP ports held for one attempt's lifetime.

    Within this process a port is never handed out twice while held; across processes (two races
    on one machine) a lock file per port, flocked for the lifetime, does the same. The kernel picks
    each port (bind to 0), so it was free when picked."""

    def __init__(self) -> None:
        self.ports: list[int] = []
        self._locks: list[int] = []

    @classmethod
    def take(cls, count: int) -> PortReservation:
        reservation = cls()
        try:
            while len(reservation.ports) < count:
                reservation._take_one()
        except BaseException:
            reservation.release()
            raise
        return reservation

    def _take_one(self) -> None:
        for _ in range(200):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            with _reserved_guard:
                if port in _reserved:
                    continue
                descriptor = _lock_port(port)
                if descriptor is None:
                    continue
                _reserved.add(port)
            self.ports.append(port)
            self._locks.append(descriptor)
            return
        raise OSError("no free port found for [setup] ports")

    def release(self) -> None:
        with _reserved_guard:
            for port in self.ports:
                _reserved.discard(port)
        for descriptor in self._locks:
            os.close(descriptor)  # closing drops the flock
        self.ports, self._locks = [], []


def _port_lock_directory() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    directory = Path(base) / f"outpost-tui-ports-{os.getuid()}"
    make_private_directory(directory)
    return directory


def _lock_port(port: int) -> int | None:
    descriptor = os.open(_port_lock_directory() / f"{port}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        os.close(descriptor)
        if error.errno in (errno.EWOULDBLOCK, errno.EACCES):
            return None  # another race holds it
        raise
    return descriptor


def port_environment(ports: list[int]) -> dict[str, str]:
    """OUTPOST_PORT (the first), OUTPOST_PORT_1, OUTPOST_PORT_2, ... for the rest."""
    env = {}
    for index, port in enumerate(ports):
        env["OUTPOST_PORT" if index == 0 else f"OUTPOST_PORT_{index}"] = str(port)
    return env


def container_ports(count: int) -> list[int]:
    return [CONTAINER_FIRST_PORT + index for index in range(count)]


# --- copying the user's files ---------------------------------------------------------------------


def files_to_copy(repository: Path, patterns: tuple[str, ...]) -> list[str]:
    """The user's untracked files the race names, and those its .worktreeinclude names."""
    paths = set(git.untracked_files(repository, patterns))
    include = repository / WORKTREEINCLUDE
    if include.is_file():
        paths.update(git.included_files(repository, include))
    return sorted(paths)


def copy_files(repository: Path, directory: Path, paths: list[str]) -> dict[str, str]:
    """Copy each file (a symlink as a symlink) into the worktree; path -> sha256 of what was copied.

    A path the worktree already has (git tracks it there) is left alone: the baseline's file wins."""
    copied: dict[str, str] = {}
    for path in paths:
        source, target = repository / path, directory / path
        if os.path.lexists(target) or not _inside(target, directory):
            continue
        info = os.lstat(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        if stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(source), target)
        elif stat.S_ISREG(info.st_mode):
            shutil.copy2(source, target, follow_symlinks=False)
        else:
            continue
        copied[path] = _content_hash(target)
    return copied


def _inside(path: Path, directory: Path) -> bool:
    # a symlinked parent directory in the worktree could aim a copy outside it
    return Path(real_path(path.parent)).is_relative_to(real_path(directory))


def _content_hash(path: Path) -> str:
    digest = hashlib.sha256()
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        digest.update(b"link\0" + os.fsencode(os.readlink(path)))
    else:
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


# --- the setup cache ------------------------------------------------------------------------------


def cache_key(spec: RaceSpec, repository: Path, baseline: str) -> str:
    """What the cache is valid for: the key files' content in the baseline, the command, the paths
    and where the setup runs (a venv built on the host is no use in a container)."""
    setup, sandbox = spec.setup, spec.sandbox
    files = git.tree_files(repository, baseline, setup.cache_key)
    identity = {
        "files": files,
        "command": list(setup.command or ()),
        "cache": list(setup.cache),
        "provider": sandbox.provider,
        "image": sandbox.image,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]


def cache_entry(outpost_dir: Path, key: str) -> Path:
    return outpost_dir / CACHE_DIRECTORY / key


@dataclass(frozen=True)
class Restored:
    """What restoring a cache entry did: `hit` when its copy is in the checkout; `problem` (one
    line naming the entry) when the entry was discarded as not what the engine built."""

    hit: bool
    problem: str | None = None


def _manifest_text(key: str, source: str, digests: dict[str, str]) -> bytes:
    return json.dumps({"key": key, "source": source, "digests": digests}, sort_keys=True).encode()


def store_cache(outpost_dir: Path, key: str, directory: Path, paths: tuple[str, ...]) -> bool:
    """Keep what setup built in `directory` as the cache for key; False when another race stored
    it first, or when what was copied aside is not what `directory` holds (the entry appears whole
    or not at all: built aside, digested and sealed, then renamed)."""
    root = outpost_dir / CACHE_DIRECTORY
    make_private_directory(root)
    entry = cache_entry(outpost_dir, key)
    if entry.exists():
        return False
    building = root / f".building-{key}-{secrets.token_hex(4)}"
    make_private_directory(building)
    try:
        digests: dict[str, str] = {}
        for path in paths:
            source = directory / path
            if os.path.lexists(source):
                clone_tree(source, building / path)
                digests[path] = tree_digest(building / path)
                if tree_digest(source) != digests[path]:
                    return False  # changed while it was copied: stored, it would be sealed as built
        value = seal.seal(seal.SETUP_CACHE, _manifest_text(key, str(directory), digests))
        manifest = {"source": str(directory), "paths": list(digests), "digests": digests, "seal": value}
        (building / MANIFEST).write_text(json.dumps(manifest))
        try:
            os.rename(building, entry)
        except OSError as error:
            if error.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return False
            raise
        _prune(root, keep=entry)
        return True
    finally:
        if building.exists():
            shutil.rmtree(building, ignore_errors=True)


def _prune(root: Path, keep: Path) -> None:
    """Keep the newest CACHES_KEPT entries: each is rebuilt by setup when its key comes back, and
    an old one (a venv of last month's requirements) only takes disk."""
    entries = sorted(
        (p for p in root.iterdir() if not p.name.startswith(".") and p != keep),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in entries[CACHES_KEPT - 1 :]:
        shutil.rmtree(old, ignore_errors=True)


def restore_cache(outpost_dir: Path, key: str, directory: Path) -> Restored:
    """Copy the cache for key into the checkout, each copy checked against the entry's sealed
    digests before it is used; an entry that fails is discarded and its copies removed."""
    entry = cache_entry(outpost_dir, key)
    if not os.path.lexists(entry):
        return Restored(False)
    try:
        manifest = json.loads((entry / MANIFEST).read_bytes())
    except (OSError, ValueError):
        if not os.path.lexists(entry):
            return Restored(False)  # discarded meanwhile by another checkout, which said so
        manifest = None
    digests = manifest.get("digests") if isinstance(manifest, dict) else None
    source = manifest.get("source") if isinstance(manifest, dict) else None
    if not (
        isinstance(digests, dict)
        and isinstance(source, str)
        and all(isinstance(path, str) and isinstance(value, str) for path, value in digests.items())
    ):
        return _discard(outpost_dir, key, "has no sealed record of what the engine built")
    assert isinstance(manifest, dict)
    if not seal.verify(manifest.get("seal"), seal.SETUP_CACHE, _manifest_text(key, source, digests)):
        return _discard(outpost_dir, key, "does not match its seal")
    copied: list[Path] = []
    try:
        for path, expected in digests.items():
            target = directory / path
            if os.path.lexists(target) or not _inside(target, directory):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            copied.append(target)
            clone_tree(entry / path, target)
            # the copy, not the entry, is what runs: checked after copying, nothing can change
            # between the check and the use
            if tree_digest(target) != expected:
                _remove_copies(copied)
                return _discard(outpost_dir, key, f"changed since it was built ({path})")
    except OSError as error:
        _remove_copies(copied)
        return _discard(outpost_dir, key, f"cannot be copied ({_one_line(error)})")
    if source:
        for target in copied:
            _relocate_scripts(target, source, str(directory))
    return Restored(True)


def _one_line(error: OSError) -> str:
    return " ".join(str(error.strerror or error).split())[:200]


def _remove_copies(copied: list[Path]) -> None:
    # each was made by this restore, where the checkout had nothing
    for target in copied:
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()


def _discard(outpost_dir: Path, key: str, why: str) -> Restored:
    """Put an entry the engine cannot vouch for out of use: renamed aside at once (a concurrent
    restore then finds no entry, not half of one), then removed."""
    entry = cache_entry(outpost_dir, key)
    aside = entry.with_name(f".discarded-{key}-{secrets.token_hex(4)}")
    try:
        os.rename(entry, aside)
    except FileNotFoundError:
        # another checkout discarded it while this one copied (and said why): only a miss here
        return Restored(False)
    shutil.rmtree(aside, ignore_errors=True)
    return Restored(False, f"setup cache entry {entry} {why}: discarded, setup runs without it")


def tree_digest(path: Path) -> str:
    """What a file or tree is, as one sha256: every path under it, its kind, a file's permission
    bits and bytes, a link's target (never followed). Directories' own modes are left out."""
    digest = hashlib.sha256()
    stack = [b""]
    root = os.fsencode(path)
    while stack:
        relative = stack.pop()
        full = root + relative
        info = os.lstat(full)
        if stat.S_ISLNK(info.st_mode):
            digest.update(b"L\0" + relative + b"\0" + os.readlink(full) + b"\0")
        elif stat.S_ISDIR(info.st_mode):
            digest.update(b"D\0" + relative + b"\0")
            # reversed onto the stack: popped in name order
            stack.extend(relative + b"/" + name for name in sorted(os.listdir(full), reverse=True))
        elif stat.S_ISREG(info.st_mode):
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as handle:
                content = hashlib.file_digest(handle, "sha256").digest()
            mode = stat.S_IMODE(info.st_mode).to_bytes(2, "big")
            digest.update(b"F\0" + relative + b"\0" + mode + content)
        else:
            digest.update(b"?\0" + relative + b"\0" + stat.S_IFMT(info.st_mode).to_bytes(4, "big"))
    return digest.hexdigest()


def clone_tree(source: Path, target: Path) -> None:
    """Copy a file or a directory tree, symlinks as symlinks, sharing blocks where the filesystem
    can (reflink: copy on write, so a candidate's writes never reach the cache or another worktree).
    Hard links are never used: they would share every later write."""
    if source.is_symlink() or not source.is_dir():
        _clone_file(source, target)
        return
    shutil.copytree(source, target, symlinks=True, copy_function=_clone_file)


def _clone_file(source: str | Path, target: str | Path) -> None:
    if os.path.islink(source):
        os.symlink(os.readlink(source), target)
        return
    if _reflink(source, target):
        shutil.copystat(source, target)
        return
    shutil.copy2(source, target)


_reflink_works: bool | None = None


def _reflink(source: str | Path, target: str | Path) -> bool:
    global _reflink_works
    if _reflink_works is False:
        return False
    with open(source, "rb") as src, open(target, "wb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
        except OSError:
            _reflink_works = False  # not this filesystem: plain copies from now on
            return False
    _reflink_works = True
    return True


def _relocate_scripts(tree: Path, old: str, new: str) -> None:
    """Point a cached tree's scripts (a venv's bin/pytest: `#!/old/worktree/.venv/bin/python`)
    at this worktree; a venv is otherwise tied to the directory it was built in."""
    old_bytes, new_bytes = os.fsencode(old), os.fsencode(new)
    for directory, _, names in os.walk(tree):
        if os.path.basename(directory) not in ("bin", "Scripts"):
            continue
        for name in names:
            path = os.path.join(directory, name)
            if os.path.islink(path) or os.path.getsize(path) > 1 << 20:
                continue
            with open(path, "rb") as handle:
                head = handle.read(2)
                if head != b"#!":
                    continue
                content = head + handle.read()
            if old_bytes in content:
                with open(path, "wb") as handle:
                    handle.write(content.replace(old_bytes, new_bytes))
    config = tree / "pyvenv.cfg"
    if config.is_file():
        config.write_bytes(config.read_bytes().replace(old_bytes, new_bytes))


# --- what setup left in the worktree --------------------------------------------------------------


def snapshot(directory: Path) -> tuple[list[str], dict[str, tuple[int, ...]]]:
    """The untracked and ignored entries of the worktree and, for every file under them, what
    changes when its content does (ctime cannot be set back by the one who writes)."""
    entries = git.untracked_entries(directory)
    files: dict[str, tuple[int, ...]] = {}
    for entry in entries:
        for path in _walk(directory / entry):
            info = os.lstat(path)
            files[os.path.relpath(path, directory)] = (
                info.st_mode,
                info.st_size,
                info.st_mtime_ns,
                info.st_ctime_ns,
                info.st_ino,
            )
    return [entry.rstrip("/") for entry in entries], files


def _walk(path: Path) -> Iterator[str]:
    if path.is_symlink() or not path.is_dir():
        yield str(path)
        return
    yield str(path)
    for directory, names, files in os.walk(path):
        for name in names + files:
            yield os.path.join(directory, name)


def remove_products(directory: Path, state: SetupState) -> bool:
    """Remove what setup left in the worktree if none of it changed and nothing else is untracked:
    it is a copy of the user's files or what the setup command rebuilds. True when removed."""
    if state.products is None:
        return False
    top_level, files = snapshot(directory)
    if files != state.products or sorted(top_level) != sorted(state.top_level):
        return False
    for path, digest in state.copied.items():
        if _content_hash(directory / path) != digest:
            return False
    for entry in top_level:
        left = directory / entry
        if left.is_dir() and not left.is_symlink():
            shutil.rmtree(left)
        else:
            left.unlink()
    return True


def output_tail(stdout: str, stderr: str, limit: int = 2000) -> str:
    text = (stdout + ("\n" if stdout and stderr else "") + stderr).strip()
    return text[-limit:]
