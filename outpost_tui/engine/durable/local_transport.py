"""`LocalTransport`: durable storage by key kept in a directory, with compare-and-swap on a revision.

On disk an object is `<directory>/objects/<key>.object`: a 1024-byte header (JSON with key, revision,
size and modified_at, padded with spaces, ending in a newline) followed by the payload. Every write
takes a per-key lock file, checks the expected revision, writes a temp file, fsyncs it, renames it
over the object and fsyncs the directory, so a reader sees the old object or the new one, never a mix.
Every path below the directory is opened component by component without following symlinks, so a
planted symlink cannot redirect a write outside the storage. A lock whose holder died on this host
is broken; one held from another host (shared storage) never is.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, overload

from ..files import write_atomically
from ..pids import process_start, same_process, this_boot, this_host
from .transport import (
    CorruptObject,
    Entry,
    InvalidKey,
    ObjectTooLarge,
    StorageUnwritable,
    Stored,
    Transport,
    TransportConflict,
    TransportError,
    check_key,
)

HEADER_SIZE = 1024
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
SUFFIX = ".object"
LOCK_TIMEOUT = 30.0
LOCK_RETRY = 0.01
# A lock file with no readable holder is only broken once it is this old: its creator may be between
# creating the file and writing its pid into it.
UNREADABLE_LOCK_AGE = 10.0

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


_start_cache: dict[int, float] = {}


def _own_start() -> float:
    # Keyed by pid so a forked child does not inherit its parent's start time.
    pid = os.getpid()
    if pid not in _start_cache:
        _start_cache[pid] = process_start(pid)
    return _start_cache[pid]


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


@dataclass(frozen=True)
class _Header:
    revision: str
    size: int
    modified_at: float


class LocalTransport(Transport):
    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        lock_timeout: float = LOCK_TIMEOUT,
    ) -> None:
        self.directory = Path(os.path.abspath(directory))
        self.max_bytes = max_bytes
        self.lock_timeout = lock_timeout

    def __repr__(self) -> str:
        return f"LocalTransport({str(self.directory)!r})"

    # ---- paths ----

    def _parts(self, key: str) -> tuple[list[str], str]:
        parts = check_key(key).split("/")
        return ["objects", *parts[:-1]], parts[-1] + SUFFIX

    def object_path(self, key: str) -> Path:
        dirs, name = self._parts(key)
        return self.directory.joinpath(*dirs, name)

    def describe(self, key: str) -> str:
        return str(self.object_path(key))

    @contextlib.contextmanager
    def _os_errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except OSError as error:
            # Names under dir_fd are relative and would mislead; only an absolute one says where.
            where = f" ({error.filename})" if os.path.isabs(str(error.filename or "")) else ""
            reason = _one_line(error.strerror or error)
            if isinstance(error, PermissionError) or error.errno in _UNWRITABLE:
                raise StorageUnwritable(
                    f"storage {self.directory} is not {action}: {reason}{where}"
                ) from None
            raise TransportError(f"storage {self.directory}: {reason}{where}") from None

    def _refuse_symlink(self, dir_fd: int, name: str, path: Path, error: OSError) -> None:
        """Turn the error of a no-follow open into a clear refusal when `name` is a symlink."""
        try:
            mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        except OSError:
            raise error from None
        if stat.S_ISLNK(mode):
            raise TransportError(f"refusing symlink {path} in storage {self.directory}") from None
        if error.errno == errno.ENOTDIR:
            raise TransportError(f"{path} in storage {self.directory} is not a directory") from None
        raise error

    def _open_root(self, create: bool) -> int | None:
        if create and not self.directory.is_dir():
            missing = []
            for path in (self.directory, *self.directory.parents):
                if path.exists():
                    break
                missing.append(path)
            for path in reversed(missing):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(path, 0o700)
                    os.chmod(path, 0o700)  # mkdir's mode is filtered by the umask
        # The directory itself may be a symlink: the operator chose it. Only what is below is checked.
        try:
            return os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            if create:
                raise
            return None

    @overload
    def _open_dirs(self, dirs: list[str], *, create: Literal[True]) -> int: ...
    @overload
    def _open_dirs(self, dirs: list[str], *, create: bool) -> int | None: ...
    def _open_dirs(self, dirs: list[str], *, create: bool) -> int | None:
        """An fd of directory/dirs..., opened without following symlinks (None: missing, not created)."""
        fd = self._open_root(create)
        if fd is None:
            return None
        path = self.directory
        try:
            for name in dirs:
                path = path / name
                child = self._open_dir(fd, name, path)
                if child is None:
                    if not create:
                        os.close(fd)
                        return None
                    with contextlib.suppress(FileExistsError):  # a concurrent writer made it
                        os.mkdir(name, 0o700, dir_fd=fd)
                    child = self._open_dir(fd, name, path)
                    if child is None:
                        raise FileNotFoundError(errno.ENOENT, "removed while being created", str(path))
                    os.fchmod(child, 0o700)  # mkdir's mode is filtered by the umask
                os.close(fd)
                fd = child
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _open_dir(self, dir_fd: int, name: str, path: Path) -> int | None:
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as error:
            self._refuse_symlink(dir_fd, name, path, error)
            raise

    # ---- headers ----

    def _header(self, fd: int, key: str, path: Path) -> _Header:
        """Parse the header of the open object `fd` and check it against the file's size."""
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TransportError(f"{path} in storage {self.directory} is not a regular file")
        raw = os.pread(fd, HEADER_SIZE, 0)

        def corrupt(reason: str) -> CorruptObject:
            return CorruptObject(f"{path}: corrupt object ({reason}); the file was left untouched")

        if len(raw) < HEADER_SIZE:
            raise corrupt(f"truncated header: {len(raw)} of {HEADER_SIZE} bytes")
        if not raw.endswith(b"\n"):
            raise corrupt("header does not end with a newline")
        try:
            fields = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as error:
            raise corrupt(f"header is not JSON: {_one_line(error)}") from None
        if not isinstance(fields, dict):
            raise corrupt("header is not a JSON object")
        revision, size, modified_at = fields.get("revision"), fields.get("size"), fields.get("modified_at")
        if fields.get("key") != key:
            raise corrupt(f"header names key {fields.get('key')!r}, expected {key!r}")
        if not isinstance(revision, str) or not revision:
            raise corrupt("header has no revision")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise corrupt("header has no valid size")
        if not isinstance(modified_at, (int, float)) or isinstance(modified_at, bool):
            raise corrupt("header has no valid modified_at")
        if info.st_size - HEADER_SIZE != size:
            raise corrupt(f"payload is {info.st_size - HEADER_SIZE} bytes, header says {size}")
        return _Header(revision, size, float(modified_at))

    def _open_object(self, dir_fd: int, name: str, path: Path) -> int | None:
        try:
            return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as error:
            self._refuse_symlink(dir_fd, name, path, error)
            raise

    def _current(self, dir_fd: int, name: str, key: str, path: Path) -> _Header | None:
        fd = self._open_object(dir_fd, name, path)
        if fd is None:
            return None
        try:
            return self._header(fd, key, path)
        finally:
            os.close(fd)

    # ---- the interface ----

    def read(self, key: str) -> Stored | None:
        dirs, name = self._parts(key)
        path = self.object_path(key)
        with self._os_errors("readable"):
            dir_fd = self._open_dirs(dirs, create=False)
            if dir_fd is None:
                return None
            try:
                fd = self._open_object(dir_fd, name, path)
            finally:
                os.close(dir_fd)
            if fd is None:
                return None
            try:
                # One fd: a concurrent replace swaps the directory entry, not this file's content.
                header = self._header(fd, key, path)
                if header.size > self.max_bytes:
                    raise ObjectTooLarge(
                        f"{path}: object is {header.size} bytes, over the {self.max_bytes}-byte limit"
                    )
                data = os.pread(fd, header.size + 1, HEADER_SIZE)
            finally:
                os.close(fd)
        if len(data) != header.size:
            raise CorruptObject(
                f"{path}: corrupt object (payload changed size while reading); the file was left untouched"
            )
        return Stored(data, header.revision, header.size, header.modified_at)

    def write(self, key: str, data: bytes, *, if_revision: str | None) -> str:
        dirs, name = self._parts(key)
        path = self.object_path(key)
        if len(data) > self.max_bytes:
            raise ObjectTooLarge(
                f"{path}: {len(data)} bytes exceed the {self.max_bytes}-byte limit "
                f"of storage {self.directory}"
            )
        with self._os_errors("writable"):
            dir_fd = self._open_dirs(dirs, create=True)
            try:
                with self._locked(key):
                    current = self._current(dir_fd, name, key, path)
                    self._expect(path, current, if_revision)
                    revision = uuid.uuid4().hex
                    modified_at = time.time()
                    header = json.dumps(
                        {"key": key, "revision": revision, "size": len(data), "modified_at": modified_at}
                    ).encode()
                    header = header.ljust(HEADER_SIZE - 1) + b"\n"
                    write_atomically(name, header + data, mode=0o600, dir_fd=dir_fd)
                    return revision
            finally:
                os.close(dir_fd)

    def remove(self, key: str, *, if_revision: str) -> None:
        dirs, name = self._parts(key)
        path = self.object_path(key)
        with self._os_errors("writable"):
            dir_fd = self._open_dirs(dirs, create=False)
            if dir_fd is None:
                raise TransportConflict(f"{path}: no object, expected revision {if_revision}")
            try:
                with self._locked(key):
                    self._expect(path, self._current(dir_fd, name, key, path), if_revision)
                    os.unlink(name, dir_fd=dir_fd)
                    os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def list(self, prefix: str = "") -> list[Entry]:
        if prefix:
            # A prefix may end inside a segment or with '/': check it as a key without the slash.
            check_key(prefix.rstrip("/") or prefix)
        entries: list[Entry] = []
        with self._os_errors("readable"):
            objects_fd = self._open_dirs(["objects"], create=False)
            if objects_fd is None:
                return entries
            try:
                for top, _dirs, files, dir_fd in os.fwalk(".", dir_fd=objects_fd, follow_symlinks=False):
                    relative = os.path.normpath(top)
                    for file in files:
                        if not file.endswith(SUFFIX):
                            continue
                        key = (
                            file[: -len(SUFFIX)] if relative == "." else f"{relative}/{file[: -len(SUFFIX)]}"
                        )
                        if not key.startswith(prefix):
                            continue
                        entry = self._entry(dir_fd, file, key)
                        if entry is not None:
                            entries.append(entry)
            finally:
                os.close(objects_fd)
        entries.sort(key=lambda entry: entry.key)
        return entries

    def _entry(self, dir_fd: int, file: str, key: str) -> Entry | None:
        try:
            check_key(key)
        except InvalidKey:
            return None
        path = self.object_path(key)
        try:
            header = self._current(dir_fd, file, key, path)
        except FileNotFoundError:
            return None  # removed while listing
        except TransportError as error:
            try:
                mtime = os.stat(file, dir_fd=dir_fd, follow_symlinks=False).st_mtime
            except FileNotFoundError:
                return None
            return Entry(key, "", -1, mtime, problem=str(error))
        if header is None:
            return None
        return Entry(key, header.revision, header.size, header.modified_at)

    # ---- write helpers ----

    @staticmethod
    def _expect(path: Path, current: _Header | None, if_revision: str | None) -> None:
        found = current.revision if current else None
        if found != if_revision:
            raise TransportConflict(
                f"{path}: revision is {found or 'absent'}, expected {if_revision or 'absent'}"
            )

    # ---- per-key lock ----

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        locks_fd = self._open_dirs(["locks"], create=True)
        name = hashlib.sha256(key.encode()).hexdigest()[:40] + ".lock"
        path = self.directory / "locks" / name
        holder = json.dumps(
            {"pid": os.getpid(), "host": this_host(), "boot": this_boot(), "start": _own_start(), "key": key}
        ).encode()
        try:
            deadline = time.monotonic() + self.lock_timeout
            while True:
                try:
                    fd = os.open(
                        name,
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                        0o600,
                        dir_fd=locks_fd,
                    )
                except FileExistsError:
                    if self._break_if_stale(locks_fd, name):
                        continue
                    if time.monotonic() >= deadline:
                        raise TransportError(
                            f"timed out after {self.lock_timeout:g} s waiting for the lock "
                            f"{path} ({self._holder_text(locks_fd, name)})"
                        ) from None
                    time.sleep(LOCK_RETRY)
                    continue
                try:
                    os.fchmod(fd, 0o600)
                    os.write(fd, holder)
                finally:
                    os.close(fd)
                break
            try:
                yield
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=locks_fd)
        finally:
            os.close(locks_fd)

    @staticmethod
    def _read_holder(locks_fd: int, name: str) -> tuple[dict[str, Any] | None, float] | None:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=locks_fd)
        except FileNotFoundError:
            return None
        try:
            mtime = os.fstat(fd).st_mtime
            raw = os.read(fd, 4096)
        finally:
            os.close(fd)
        try:
            holder = json.loads(raw)
            if not (
                isinstance(holder, dict)
                and isinstance(holder.get("pid"), int)
                and isinstance(holder.get("start"), (int, float))
                and isinstance(holder.get("host"), str)
                and isinstance(holder.get("boot"), str)
            ):
                holder = None
        except ValueError:
            holder = None
        return holder, mtime

    def _holder_text(self, locks_fd: int, name: str) -> str:
        found = self._read_holder(locks_fd, name)
        if found is None or found[0] is None:
            return "holder unknown"
        return f"held by pid {found[0]['pid']} on {found[0]['host']}"

    def _break_if_stale(self, locks_fd: int, name: str) -> bool:
        """Remove the lock if its holder is dead; True when the caller should retry at once.

        Breakers serialise on a guard file and re-read the lock under it, so two waiters cannot both
        break the same stale lock and then delete each other's fresh one.
        """
        guard = os.open(
            ".break", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=locks_fd
        )
        try:
            fcntl.flock(guard, fcntl.LOCK_EX)
            found = self._read_holder(locks_fd, name)
            if found is None:
                return True  # released meanwhile
            holder, mtime = found
            if holder is None:
                stale = time.time() - mtime > UNREADABLE_LOCK_AGE
            else:
                # A holder on another host (shared storage) cannot be checked: never break it.
                stale = holder["host"] == this_host() and not same_process(
                    holder["pid"], holder["start"], holder["boot"]
                )
            if stale:
                os.unlink(name, dir_fd=locks_fd)
            return stale
        finally:
            os.close(guard)
