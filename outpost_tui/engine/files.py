"""Writing a file so that a crash leaves the old content or the new, never a mix."""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path


def write_atomically(
    path: str | os.PathLike[str], data: bytes, *, mode: int | None = None, dir_fd: int | None = None
) -> None:
    """Replace path's content in one step: a temporary file beside it, written and fsynced, renamed
    over it, and the directory fsynced so that the rename itself survives a crash.

    mode: the new file's permissions (default: the old file's, 0o644 for a new one), set on the
    temporary file before it is renamed, so nobody ever sees the content under looser ones.
    dir_fd: an open directory that `path` is relative to. Storage holds its directory open so that
    nobody can swap it for a link between the checks and the write; the temporary file is never
    followed through a link either (O_NOFOLLOW, O_EXCL)."""
    path = Path(path)
    if mode is None:
        try:
            mode = os.stat(path, dir_fd=dir_fd).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(
        temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd
    )
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    _sync_directory(path.parent, dir_fd)


def link_atomically(path: str | os.PathLike[str], target: str) -> None:
    """Make `path` a symbolic link to `target` in one step, whatever was there (not a directory)."""
    path = Path(path)
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    os.symlink(target, temp)
    try:
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    _sync_directory(path.parent, None)


def _sync_directory(directory: Path, dir_fd: int | None) -> None:
    if dir_fd is not None:
        os.fsync(dir_fd)
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
