"""Durable storage by key, with compare-and-swap on an opaque revision: the interface.

`Transport` is what a durable race saves through; `LocalTransport` (`local_transport`) keeps objects
in a directory, and an object store can implement the same interface later. Its errors carry their
exit codes, and a key is checked here once so every implementation refuses the same keys. The
methods are synchronous: the engine calls them from a worker thread.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass

from ... import exitcodes
from ..errors import OutpostError

MAX_KEY_LENGTH = 512  # keeps LocalTransport's header within its HEADER_SIZE
KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")


class TransportError(OutpostError):
    """Storage failed; the message is one line naming the file or directory."""

    exit_code = exitcodes.STORAGE_UNWRITABLE


class TransportConflict(TransportError):
    """The stored revision is not the one the write or remove expected."""

    exit_code = exitcodes.REVISION_CHANGED


class CorruptObject(TransportError):
    """A stored object's header or size is wrong; the file is left as it is."""

    exit_code = exitcodes.CORRUPT_CHECKPOINT


class StorageUnwritable(TransportError):
    exit_code = exitcodes.STORAGE_UNWRITABLE


class ObjectTooLarge(TransportError):
    """An object over the transport's size limit (default 16 MiB); nothing was written."""


class InvalidKey(TransportError):
    exit_code = exitcodes.BAD_INPUT


@dataclass(frozen=True)
class Stored:
    data: bytes
    revision: str
    size: int
    modified_at: float


@dataclass(frozen=True)
class Entry:
    key: str
    revision: str
    size: int
    modified_at: float
    # Why the object cannot be read (corrupt header, symlink); its revision and size are then unknown.
    problem: str | None = None


class Transport(ABC):
    @abstractmethod
    def read(self, key: str) -> Stored | None:
        """The object at `key`, or None when there is none."""

    @abstractmethod
    def write(self, key: str, data: bytes, *, if_revision: str | None) -> str:
        """Store `data` if the current revision is `if_revision` (None: no object yet); returns the new
        revision. A different current revision raises TransportConflict."""

    @abstractmethod
    def remove(self, key: str, *, if_revision: str) -> None:
        """Delete the object if its current revision is `if_revision`, else raise TransportConflict."""

    @abstractmethod
    def list(self, prefix: str = "") -> list[Entry]:
        """Every object whose key starts with `prefix`, sorted by key."""

    def describe(self, key: str) -> str:
        """Where `key` lives, for messages."""
        return key


def check_key(key: str) -> str:
    if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key) or len(key) > MAX_KEY_LENGTH:
        raise InvalidKey(
            f"invalid storage key {key!r}: expected letters, digits, '.', '_', '-', '/' "
            f"(at most {MAX_KEY_LENGTH} characters, not starting with '/' or '.')"
        )
    if any(part in ("", ".", "..") for part in key.split("/")):
        raise InvalidKey(f"invalid storage key {key!r}: empty, '.' or '..' path segment")
    return key
