"""The engine's seal on the state it keeps under `<repo>/.outpost/`: an HMAC-SHA256 under a secret
key that lives outside the repository.

A candidate is untrusted code running beside `.outpost/` (in the fallback without bubblewrap, or in
a container given more of the repository than it should see), so anything the engine reads back
from there (a checkpoint, a flight log, a setup cache entry) may have been written by it. The key
is in the user's state directory (`$XDG_STATE_HOME/outpost-tui/`, else `~/.local/state/outpost-tui/`,
0700), which the sandbox hides from candidates: without it nobody can make a seal that verifies, so
a forged or edited piece of state is refused rather than believed. Each use names its purpose, so
a seal made for one kind of state never verifies as another's.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

from ... import exitcodes
from ..errors import OutpostError
from ..statedir import state_directory

KEY_FILE = "seal.key"
KEY_BYTES = 32
SEAL_PATTERN = r"[0-9a-f]{64}"

# One purpose per kind of state: a checkpoint's seal must never pass for a flight log's.
CHECKPOINT = "checkpoint"
FLIGHT_LOG = "flight-log"
SETUP_CACHE = "setup-cache"

_keys: dict[str, hmac.HMAC] = {}  # state directory -> the keyed HMAC, copied for each seal


class SealError(OutpostError):
    """The seal key cannot be read or made; one line naming the file."""

    exit_code = exitcodes.STORAGE_UNWRITABLE


def key_path() -> Path:
    return state_directory() / KEY_FILE


def seal(purpose: str, *parts: bytes) -> str:
    """The seal of `parts` for `purpose`, as 64 hex digits."""
    keyed = _keyed().copy()
    _feed(keyed, purpose, parts)
    return keyed.hexdigest()


def verify(value: object, purpose: str, *parts: bytes) -> bool:
    """Whether `value` is the seal of `parts` for `purpose` (compared in constant time)."""
    if not isinstance(value, str):
        return False
    return hmac.compare_digest(value, seal(purpose, *parts))


def _feed(keyed: hmac.HMAC, purpose: str, parts: tuple[bytes, ...]) -> None:
    # Every part framed by its length: ("ab", "c") and ("a", "bc") seal differently.
    for part in (purpose.encode(), *parts):
        keyed.update(len(part).to_bytes(8, "big"))
        keyed.update(part)


def _keyed() -> hmac.HMAC:
    directory = state_directory()
    found = _keys.get(str(directory))
    if found is None:
        found = hmac.new(_load_or_create(directory), digestmod=hashlib.sha256)
        _keys[str(directory)] = found
    return found


def _load_or_create(directory: Path) -> bytes:
    path = directory / KEY_FILE
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)  # ours alone: a looser mode left by hand is tightened
        try:
            return _read_key(path)
        except FileNotFoundError:
            _create_key(directory, path)
            return _read_key(path)
    except OSError as error:
        raise SealError(f"the seal key {path} cannot be read or created: {error.strerror or error}") from None


def _create_key(directory: Path, path: Path) -> None:
    """Write a new key beside its place, then link it there: a reader finds the whole key or none,
    and of two processes creating it at once, one key wins and both use it."""
    temp = directory / f".{KEY_FILE}.{secrets.token_hex(8)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.write(fd, os.urandom(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):
            os.link(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_key(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SealError(f"the seal key {path} is not a regular file")
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            # Anyone else who can read it can forge every seal.
            raise SealError(
                f"the seal key {path} is readable or owned by another user (mode "
                f"{stat.S_IMODE(info.st_mode):o}): make it yours with mode 600, or remove it to start over"
            )
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:
        raise SealError(
            f"the seal key {path} is {len(key)} bytes, expected {KEY_BYTES}: remove it to make a new "
            f"one (what the old one sealed is then refused)"
        )
    return key
