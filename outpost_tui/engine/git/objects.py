"""A commit's files and their contents, as the sealed verdict reads them: read through the
repository's `cat-file` session (engine/git/sessions.py) rather than a process each.

The trees are parsed here, and they are a candidate's bytes: anything the parse does not take as
exactly what git writes (a mode git does not write, an empty, "." or ".." name or one with a
slash, an object of the wrong type or missing, bytes left over) sends the whole listing to `git
ls-tree`, which says what git says about it. A listing is what `git ls-tree -r --full-tree` prints,
in its order."""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from pathlib import Path

from ..paths import real_path
from . import sessions
from .runner import GitError, _revision, output

_OBJECT_ID = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


# The modes git writes in a tree, as `ls-tree` prints them; a tree is "40000" inside the object.
_MODES = {b"100644": "100644", b"100755": "100755", b"120000": "120000", b"160000": "160000"}
_TREE_MODE = b"40000"


_Listing = tuple[tuple[str, tuple[str, str]], ...]


class _Unexpected(GitError):
    """What git writes does not look like this: `ls-tree` decides (caught in this module)."""


def tree(repo_root: Path | str, commit: str) -> dict[str, tuple[str, str]]:
    """Every file of `commit`: path -> (mode, object id)."""
    _revision(commit, "commit")
    return dict(_cached(real_path(repo_root), commit))


# Every grading reads the baseline's tree: a commit id names one tree for good, so it is listed
# once per race, by the first grading that asks (the others wait for it rather than list it too).
_listings: OrderedDict[tuple[str, str], _Listing] = OrderedDict()
_listing_locks: dict[tuple[str, str], threading.Lock] = {}
_listings_guard = threading.Lock()
_KEPT = 4


def _cached(root: str, commit: str) -> _Listing:
    key = (root, commit)
    with _listings_guard:
        lock = _listing_locks.setdefault(key, threading.Lock())
    with lock:
        with _listings_guard:
            if key in _listings:
                _listings.move_to_end(key)
                return _listings[key]
        listing = _listing(root, commit)
        with _listings_guard:
            _listings[key] = listing
            while len(_listings) > _KEPT:
                _listings.popitem(last=False)
            _listing_locks.pop(key, None)
    return listing


def _listing(root: str, commit: str) -> _Listing:
    if _OBJECT_ID.fullmatch(commit):
        try:
            return _walked(root, commit)
        except (sessions.SessionFailed, _Unexpected):
            pass
    out = str(output("listing files", root, "ls-tree", "-r", "-z", "--full-tree", commit, strip=False))
    files = []
    for entry in out.split("\0"):
        meta, _, path = entry.partition("\t")
        parts = meta.split()
        if path and len(parts) == 3:
            files.append((path, (parts[0], parts[2])))
    return tuple(files)


def _walked(root: str, commit: str) -> _Listing:
    """The listing from the commit's tree objects, read level by level through the session."""
    [(_, kind, content)] = sessions.read_objects(root, [commit])
    first = content.split(b"\n", 1)[0]
    if kind != "commit" or not first.startswith(b"tree "):
        raise _Unexpected(commit)
    top = first[5:].decode("ascii", errors="replace")
    if not _OBJECT_ID.fullmatch(top) or len(top) != len(commit):
        raise _Unexpected(top)
    trees: dict[str, list[tuple[bytes, bytes, str]]] = {}
    wanted = [top]
    while wanted:
        for oid, (_, kind, content) in zip(wanted, sessions.read_objects(root, wanted), strict=True):
            if kind != "tree":
                raise _Unexpected(oid)
            trees[oid] = _entries(content, len(top) // 2)
        below = (oid for parent in wanted for mode, _, oid in trees[parent] if mode == _TREE_MODE)
        wanted = list(dict.fromkeys(oid for oid in below if oid not in trees))
    files: list[tuple[str, tuple[str, str]]] = []

    def walk(oid: str, prefix: str, depth: int) -> None:
        if depth > 200:  # deeper is rare and Python's recursion is bounded: ls-tree lists it
            raise _Unexpected("trees nested deeper than a path can be")
        for mode, name, entry in trees[oid]:
            path = prefix + name.decode(errors="surrogateescape")
            if mode == _TREE_MODE:
                walk(entry, path + "/", depth + 1)
            else:
                files.append((path, (_MODES[mode], entry)))

    walk(top, "", 0)
    return tuple(files)


def _entries(content: bytes, size: int) -> list[tuple[bytes, bytes, str]]:
    """(mode, name, object id) of each entry of a tree object: `<mode> <name>\\0<id bytes>`."""
    entries = []
    at = 0
    while at < len(content):
        space, end = content.find(b" ", at), content.find(b"\0", at)
        if space < 0 or end < space:
            raise _Unexpected("a tree entry without its mode or name")
        mode, name = content[at:space], content[space + 1 : end]
        oid = content[end + 1 : end + 1 + size]
        if mode not in _MODES and mode != _TREE_MODE:
            raise _Unexpected(f"mode {mode!r}")
        if not name or name in (b".", b"..") or b"/" in name or len(oid) != size:
            raise _Unexpected(f"entry {name!r}")
        entries.append((mode, name, oid.hex()))
        at = end + 1 + size
    return entries


def blob(repo_root: Path | str, oid: str) -> bytes:
    _revision(oid, "object id")
    if _OBJECT_ID.fullmatch(oid):
        try:
            [(_, kind, content)] = sessions.read_objects(os.fspath(repo_root), [oid])
        except sessions.SessionFailed:
            pass
        else:
            if kind == "blob":
                return content
    return bytes(output("reading a file", repo_root, "cat-file", "blob", oid, binary=True, strip=False))
