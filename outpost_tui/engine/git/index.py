"""A checkout's index file read for one question: does any entry carry a flag that hides an edit
from `git status` (assume-unchanged, skip-worktree)?

The answer lets a clean-tree check skip its `git ls-files` when no entry is flagged. The file may
have been written by a candidate, so the read fails closed: anything this parser does not fully
understand (another version, a split or sparse index, a checksum that does not match, a count or
length that does not add up) is "maybe", and the caller asks git. Format: git's
Documentation/gitformat-index.txt (versions 2 to 4).
"""

from __future__ import annotations

import hashlib
import os
import struct

# An entry's 16-bit flags, after its 40 bytes of stat data and its object id.
_ASSUME_VALID = 0x8000
_EXTENDED = 0x4000
_NAME_MASK = 0x0FFF
# The extended flags (versions 3 and 4): skip-worktree (0x4000) and intent-to-add; the rest are zero.
_INTENT_TO_ADD = 0x2000
_STAT_BYTES = 40
# Extensions that move entries out of this file or fold directories into one flagged entry.
_ELSEWHERE = (b"link", b"sdir")


def may_hide_edits(index_file: str) -> bool:
    """False only when the index at `index_file` was read whole and no entry is flagged
    assume-unchanged or skip-worktree; True when one is, and whenever the file is in any doubt."""
    try:
        with open(index_file, "rb") as handle:
            data = handle.read()
    except OSError:
        return True
    try:
        return _flagged(data)
    except (struct.error, ValueError, IndexError):
        return True


def _flagged(data: bytes) -> bool:
    hash_size = _hash_size(data)
    if hash_size is None or data[:4] != b"DIRC":
        return True
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3, 4):
        return True
    end = len(data) - hash_size
    view = memoryview(data)
    at = 12
    previous = b""
    for _ in range(count):
        flags_at = at + _STAT_BYTES + hash_size
        (flags,) = struct.unpack_from(">H", data, flags_at)
        if flags & _ASSUME_VALID:
            return True
        name_at = flags_at + 2
        if flags & _EXTENDED:
            if version < 3:
                return True
            (extended,) = struct.unpack_from(">H", data, name_at)
            if extended & ~_INTENT_TO_ADD:  # skip-worktree, or a bit this read does not know
                return True
            name_at += 2
        if version == 4:
            strip, name_at = _varint(data, name_at)
            stop = data.index(b"\0", name_at, end)
            if strip > len(previous):
                return True
            previous = previous[: len(previous) - strip] + bytes(view[name_at:stop])
            if (flags & _NAME_MASK) not in (len(previous), _NAME_MASK):
                return True
            at = stop + 1
        else:
            length = flags & _NAME_MASK
            stop = data.index(b"\0", name_at, end) if length == _NAME_MASK else name_at + length
            if stop >= end or data[stop] != 0:
                return True
            # 1 to 8 NULs pad the entry to a multiple of eight bytes from its start
            at = at + ((stop - at) // 8 + 1) * 8
        if at > end:
            return True
    while at < end:  # extensions: a 4-byte signature and a 32-bit size each
        signature = data[at : at + 4]
        (size,) = struct.unpack_from(">I", data, at + 4)
        if signature in _ELSEWHERE:
            return True
        at += 8 + size
    return at != end


def _hash_size(data: bytes) -> int | None:
    """The object id size, told by which hash the file's checksum is (a zeroed checksum, as with
    index.skipHash, proves nothing: None)."""
    for name, size in (("sha1", 20), ("sha256", 32)):
        checksum = data[-size:]
        if (
            len(data) > 12 + size
            and checksum != bytes(size)
            and hashlib.new(name, data[:-size]).digest() == checksum
        ):
            return size
    return None


def _varint(data: bytes, at: int) -> tuple[int, int]:
    # git's offset varint: 7 bits a byte, most significant first, each continued byte adding one
    byte = data[at]
    value = byte & 0x7F
    at += 1
    while byte & 0x80:
        byte = data[at]
        value = ((value + 1) << 7) | (byte & 0x7F)
        at += 1
    return value, at


def index_file(git_dir: str) -> str:
    """Where git keeps the index of the checkout whose git directory is `git_dir` (the engine never
    sets GIT_INDEX_FILE for a checkout)."""
    return os.path.join(git_dir, "index")
