"""Long-lived git processes that serve one repository through a race: object reads (`git cat-file
--batch`) and ref transactions (`git update-ref --stdin`), one request at a time, where each would
otherwise start a process of its own (~3 ms of CPU each, eight attempts at once).

A session is started like any engine git process (the runner's environment and settings: hooks,
drivers and the rest switched off for its whole life) and ends when the race ends
(`close_sessions`) or after it has been idle a moment. It is only ever a shortcut: whatever goes
wrong in one (it died, timed out, answered something unexpected) ends it, and the caller does what
it did before, with a process of its own, which fails as loudly as it always did.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import threading
import time
from collections.abc import Sequence

from ..paths import real_path
from . import runner

IDLE_SECONDS = 2.0


REQUEST_TIMEOUT = 60.0


# Requests written before their answers are read: few enough that they always fit in the pipe
# (64 KiB), so the write never waits on a git that is itself waiting for its answers to be read.
_PIPELINE = 400


class SessionFailed(runner.GitError):
    """The session could not answer; it is closed, and the caller does the work another way
    (never raised past the package: each use catches it and runs its own process)."""


class Session:
    """One long-lived `git <args>` in a repository, one exchange at a time."""

    def __init__(self, root: str, args: tuple[str, ...]) -> None:
        self.root, self.args = root, args
        self.lock = threading.Lock()
        self.used = time.monotonic()
        self._process: subprocess.Popen[bytes] | None = None
        self._buffer = bytearray()
        self._deadline = 0.0

    def exchange(self, request: bytes) -> None:
        """Start the process if needed and write `request`; read the answer with `line`/`exactly`."""
        self._deadline = time.monotonic() + REQUEST_TIMEOUT
        if self._process is None or self._process.poll() is not None:
            self.close()
            try:
                self._process = runner._spawn(self.root, self.args)
            except runner.GitError as error:
                raise SessionFailed(str(error)) from None
            _watch()
        assert self._process.stdin is not None
        view = memoryview(request)
        try:
            while view:
                written = self._process.stdin.write(view)
                view = view[written or 0 :]
        except OSError as error:
            raise self._failed(f"cannot write to git: {error.strerror or error}") from None

    def running(self) -> bool:
        return self._process is not None

    def line(self) -> bytes:
        while (end := self._buffer.find(b"\n")) < 0:
            self._fill()
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return line

    def exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._fill()
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def _fill(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        fd = self._process.stdout.fileno()
        remaining = self._deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            raise self._failed(f"git did not answer within {REQUEST_TIMEOUT:g} s")
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise self._failed("git ended")
        self._buffer += chunk

    def failed(self, why: str) -> SessionFailed:
        """An answer that is not what the protocol says: the session is over."""
        return self._failed(why)

    def _failed(self, why: str) -> SessionFailed:
        err = self.close()
        return SessionFailed(f"{why}: {runner.error_line(err)}" if err.strip() else why)

    def close(self) -> str:
        """End the process (its input closed, then killed if it lingers); what it wrote to stderr."""
        process, self._process = self._process, None
        self._buffer.clear()
        if process is None:
            return ""
        try:
            _, err = process.communicate(timeout=5)  # its input closed: git ends
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
        return err.decode(errors="replace")


_sessions: dict[tuple[str, tuple[str, ...]], Session] = {}


_sessions_guard = threading.Lock()


_reaper: threading.Thread | None = None


def session(root: str, args: tuple[str, ...]) -> Session:
    """The repository's session of `git <args>` (made on first use); hold `.lock` around a use."""
    key = (_home(root), args)
    with _sessions_guard:
        found = _sessions.get(key)
        if found is None:
            found = _sessions[key] = Session(key[0], args)
        return found


def _home(root: str) -> str:
    """Where a repository's sessions run, the same from its checkout, a worktree of it or its git
    directory: the main checkout (a bare repository's own directory)."""
    real = real_path(root)
    dirs = runner._git_dir_names(real)
    common = dirs[1] if dirs is not None else real
    return os.path.dirname(common) if os.path.basename(common) == ".git" else common


def _watch() -> None:
    """A process was started: make sure the reaper is running (it stops when none is left)."""
    global _reaper
    with _sessions_guard:
        if _reaper is None:
            _reaper = threading.Thread(target=_reap, name="outpost-git-sessions", daemon=True)
            _reaper.start()


def _reap() -> None:
    """End the processes of sessions idle for IDLE_SECONDS; stop once no session has one."""
    global _reaper
    while True:
        time.sleep(IDLE_SECONDS / 2)
        with _sessions_guard:
            live = [s for s in _sessions.values() if s.running()]
            if not live:
                _reaper = None
                return
        for found in live:
            if time.monotonic() - found.used > IDLE_SECONDS and found.lock.acquire(blocking=False):
                try:
                    if time.monotonic() - found.used > IDLE_SECONDS:
                        found.close()
                finally:
                    found.lock.release()


def close_sessions(root: str) -> None:
    """End the processes of every session of the repository at `root` (the race that used them is
    over; one that needs a session again starts it again)."""
    real = _home(root)
    with _sessions_guard:
        mine = [s for (where, _), s in _sessions.items() if where == real]
    for found in mine:
        with found.lock:
            found.close()


_NAME = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._/-]*$")


_HEX = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


def read_objects(root: str, names: Sequence[str]) -> list[tuple[str, str, bytes]]:
    """(object id, type, content) of each named object through the repository's `cat-file --batch`;
    ("", "missing", b"") for a name git finds no object for. A name is an object id or a ref
    (letters, digits, ".", "_", "/", "-"): nothing else is ever written to the session."""
    for name in names:
        if not _NAME.fullmatch(name) or ".." in name:
            raise SessionFailed(f"not a name to ask cat-file for: {name!r}")
    found = session(root, ("cat-file", "--batch"))
    answers: list[tuple[str, str, bytes]] = []
    with found.lock:
        try:
            for start in range(0, len(names), _PIPELINE):
                chunk = names[start : start + _PIPELINE]
                found.exchange("".join(f"{name}\n" for name in chunk).encode())
                for name in chunk:
                    answers.append(_answer(found, name))
        finally:
            found.used = time.monotonic()
    return answers


def _answer(found: Session, name: str) -> tuple[str, str, bytes]:
    """One of cat-file's answers: `<id> <type> <size>`, the content and a newline, or `<name> missing`."""
    line = found.line().decode(errors="replace")
    header = line.split(" ")
    if header == [name, "missing"]:
        return "", "missing", b""
    if len(header) != 3 or not _HEX.fullmatch(header[0]) or not header[2].isdigit():
        raise found.failed(f"cat-file answered {line[:80]!r} for {name}")
    if _HEX.fullmatch(name) and header[0] != name:
        raise found.failed(f"cat-file answered {header[0]} for {name}")
    content = found.exactly(int(header[2]) + 1)
    if content[-1:] != b"\n":
        raise found.failed("cat-file's answer did not end where its size said")
    return header[0], header[1], content[:-1]


def update_ref(root: str, ref: str, new: str, old: str = "") -> None:
    """Point `ref` at `new` in one transaction of the repository's `update-ref --stdin`; only
    from `old` when given (a ref that holds anything else is left as it is: the session fails)."""
    for value in (ref, new, old):
        if value and (not _NAME.fullmatch(value) or ".." in value):
            raise SessionFailed(f"not a name to give update-ref: {value!r}")
    found = session(root, ("update-ref", "--stdin"))
    with found.lock:
        try:
            update = " ".join(filter(None, ("update", ref, new, old)))
            found.exchange(f"start\n{update}\ncommit\n".encode())
            for expected in (b"start: ok", b"commit: ok"):
                answer = found.line()
                if answer != expected:
                    raise found.failed(f"update-ref answered {answer[:80]!r}")
        finally:
            found.used = time.monotonic()
