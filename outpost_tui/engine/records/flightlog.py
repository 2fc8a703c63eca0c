"""The flight log: every event as a JSON line under `<repo>/.outpost/runs/<race-id>/`.

One file per attempt (`<key>.<attempt>.jsonl`) plus `race.jsonl` for race-level events, so a
candidate's history can be read on its own. It is meant to be followed while the race runs
(`tail -f`) and to survive a killed coordinator, so every event other than log text is flushed to
the OS as it is written; log text, which can arrive at hundreds of thousands of lines a second, is
buffered and flushed at least once a second. Logs never enter the durable checkpoint.

A candidate may reach `.outpost/` and rewrite a log to claim it won, so the log is sealed: the
writer hashes every byte it appends, and when it closes it records each file's size and digest in
the state directory, sealed (`seal.py`; `<state>/flight-logs/<race-id>.json`, out of the
candidate's reach). A file that differs from that record afterwards (or one it never wrote) makes
the race "tampered" for `history` and `show`; a race with no record is "unsealed" (recorded before
logs were sealed, or its coordinator was killed before it closed the log). A durable replay
appends to the files a stopped coordinator left: a sealed file that changed meanwhile stays marked
tampered in the new seal; the lines of a coordinator killed before it sealed are vouched for as
they stood when the replay reopened them.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from .. import git
from ..core.events import Event, Log
from ..files import write_atomically
from ..statedir import state_directory
from . import seal

BUFFER = 256 * 1024
LOG_FLUSH_INTERVAL = 1.0  # seconds log lines may wait in the buffer
SEALS = "flight-logs"  # under the state directory
SUFFIX = ".jsonl"


def runs_directory(outpost_dir: Path) -> Path:
    return outpost_dir / "runs"


def make_private_directory(directory: Path) -> None:
    """Create directory and any missing parents, each 0700 (mkdir's mode passes through the umask
    and `parents=True` gives the parents the default mode)."""
    missing = []
    path = directory
    while not path.exists():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for path in reversed(missing):
        # made meanwhile (another race starting); it is tightened below all the same
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
        os.chmod(path, 0o700)
    if not directory.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "exists and is not a directory", str(directory))
    os.chmod(directory, 0o700)


class FlightLog:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        make_private_directory(directory)
        self._files: dict[str, IO[bytes]] = {}
        self._dumps = json.JSONEncoder(
            ensure_ascii=False, separators=(",", ":"), default=str, allow_nan=False
        ).encode
        self._unflushed: set[str] = set()  # files holding log lines not yet flushed
        self._flush_due: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        # What this writer appended, hashed as it goes: the seal vouches for these bytes only.
        self._digests: dict[str, Any] = {}
        self._sizes: dict[str, int] = {}
        self._sealable = bool(git.RACE_ID_PATTERN.fullmatch(directory.name))
        self._previous: dict[str, dict[str, Any]] = {}
        self._tampered: set[str] = set()
        if self._sealable:
            # a replay's files: a sealed one that changed since stays tampered in the new seal
            found = read_seal(directory.name)
            if found is not None and found["verified"]:
                self._previous, self._tampered = dict(found["files"]), set(found["tampered"])
            elif found is not None:
                self._tampered = {"its previous seal"}
        self.seal_problem: str | None = None  # why close() could not seal the log
        # Why the log could not be written (a full disk): said once, by the race, and the log is
        # not written on or sealed, since its bytes are no longer what the writer hashed.
        self.write_problem: str | None = None

    def _file(self, name: str) -> IO[bytes]:
        handle = self._files.get(name)
        if handle is None:
            path = self.directory / name
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
            digest, size = _digest_of(fd)
            before = self._previous.get(name)
            if before is not None and before != {"size": size, "sha256": digest.hexdigest()}:
                self._tampered.add(name)
            elif before is None and self._previous and size:
                self._tampered.add(name)  # a file the sealed log did not have
            self._digests[name], self._sizes[name] = digest, size
            handle = os.fdopen(fd, "ab", buffering=BUFFER)
            self._files[name] = handle
        return handle

    def __call__(self, event: Event) -> None:
        if self.write_problem is not None:
            return
        try:
            self._write(event)
        except OSError as error:
            self._failed(error)

    def _failed(self, error: OSError) -> None:
        if self.write_problem is None:
            why = error.strerror or str(error)
            self.write_problem = f"writing the flight log failed: {why} ({self.directory})"

    def _write(self, event: Event) -> None:
        name = "race.jsonl" if event.key is None else f"{event.key}.{event.attempt}.jsonl"
        handle = self._file(name)
        data = (self._dumps(event.to_json()) + "\n").encode()
        handle.write(data)
        self._digests[name].update(data)
        self._sizes[name] += len(data)
        if not isinstance(event, Log):
            handle.flush()
            self._unflushed.discard(name)
            return
        self._unflushed.add(name)
        now = time.monotonic()
        if self._flush_due is None:
            self._flush_due = now + LOG_FLUSH_INTERVAL
            self._start_timer()
        elif now >= self._flush_due:
            self.flush_logs()

    def _start_timer(self) -> None:
        # Log lines followed by silence must still reach the file: the event loop flushes them
        # when they are due. Without a running loop, the next write past the deadline does.
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._timer = loop.call_later(LOG_FLUSH_INTERVAL, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        try:
            self.flush_logs()
        except OSError as error:
            self._failed(error)

    def flush_logs(self) -> None:
        """Flush every file holding buffered log lines."""
        self._flush_due = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        names, self._unflushed = self._unflushed, set()
        for name in names:
            handle = self._files.get(name)
            if handle is not None:
                handle.flush()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._unflushed.clear()
        self._flush_due = None
        for handle in self._files.values():
            try:
                handle.close()
            except OSError as error:
                self._failed(error)
        self._files.clear()
        if self._sealable and self._digests and self.write_problem is None:
            files = {
                **self._previous,
                **{
                    name: {"size": self._sizes[name], "sha256": digest.hexdigest()}
                    for name, digest in self._digests.items()
                },
            }
            self._digests.clear()
            try:
                write_seal(self.directory.name, files, sorted(self._tampered))
            except (OSError, seal.SealError) as error:
                # the race's outcome stands; its log is merely unsealed, as a killed one is
                self.seal_problem = f"flight log not sealed: {error}"


def _digest_of(fd: int) -> tuple[Any, int]:
    """The sha256 of what an open file holds, and its size."""
    digest, offset = hashlib.sha256(), 0
    while chunk := os.pread(fd, 1 << 20, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest, offset


# ------------------------------------------------------------------------------ the seal


def seal_path(race_id: str) -> Path:
    return state_directory() / SEALS / f"{race_id}.json"


def _sealed_text(race_id: str, files: dict[str, Any], tampered: list[str]) -> bytes:
    return json.dumps({"race": race_id, "files": files, "tampered": tampered}, sort_keys=True).encode()


def write_seal(race_id: str, files: dict[str, Any], tampered: list[str]) -> None:
    """Record what the race's log files hold, sealed, where no candidate can write."""
    directory = seal_path(race_id).parent
    value = seal.seal(seal.FLIGHT_LOG, _sealed_text(race_id, files, tampered))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    document = {"race": race_id, "files": files, "tampered": tampered, "seal": value}
    write_atomically(seal_path(race_id), json.dumps(document, sort_keys=True).encode(), mode=0o600)


def read_seal(race_id: str) -> dict[str, Any] | None:
    """The race's seal record (`verified`: whether its seal holds), or None when it has none."""
    try:
        document = json.loads(seal_path(race_id).read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"verified": False}
    if not isinstance(document, dict):
        return {"verified": False}
    files, tampered = document.get("files"), document.get("tampered")
    verified = (
        document.get("race") == race_id
        and isinstance(files, dict)
        and isinstance(tampered, list)
        and seal.verify(document.get("seal"), seal.FLIGHT_LOG, _sealed_text(race_id, files, tampered))
    )
    return {**document, "verified": verified}


@dataclass(frozen=True)
class SealCheck:
    """What a race's log files are against their seal: "sealed" (as the race wrote them),
    "unsealed" (nothing to check them against) or "tampered" (`problem` says which and how)."""

    state: Literal["sealed", "unsealed", "tampered"]
    problem: str | None = None


def check_seal(directory: Path, *, contents: bool = False) -> SealCheck:
    """The race's log files against their seal: every file's name and size, and with `contents`
    every byte too (reading a file costs its size; its size costs a stat)."""
    race_id = directory.name
    found = read_seal(race_id) if git.RACE_ID_PATTERN.fullmatch(race_id) else None
    if found is None:
        return SealCheck("unsealed")
    if not found["verified"]:
        return SealCheck("tampered", f"its seal {seal_path(race_id)} does not verify")
    if found["tampered"]:
        return SealCheck(
            "tampered", f"{found['tampered'][0]} was changed while the race was stopped, before its replay"
        )
    sealed: dict[str, Any] = found["files"]
    try:
        present = {path.name: path for path in directory.glob(f"*{SUFFIX}")}
    except OSError as error:
        return SealCheck("tampered", f"its files cannot be listed: {error.strerror or error}")
    for name in sorted(present.keys() - sealed.keys()):
        return SealCheck("tampered", f"{name} was not written by the race")
    for name in sorted(sealed.keys() - present.keys()):
        return SealCheck("tampered", f"{name} is missing")
    for name in sorted(sealed):
        expected = sealed[name]
        try:
            fd = os.open(present[name], os.O_RDONLY | os.O_CLOEXEC)
        except OSError as error:
            return SealCheck("tampered", f"{name} cannot be read: {error.strerror or error}")
        try:
            size = os.fstat(fd).st_size
            if not isinstance(expected, dict) or size != expected.get("size"):
                wrote = expected.get("size") if isinstance(expected, dict) else "?"
                return SealCheck(
                    "tampered", f"{name} changed after the race wrote it ({size} bytes, it wrote {wrote})"
                )
            if contents and _digest_of(fd)[0].hexdigest() != expected.get("sha256"):
                return SealCheck("tampered", f"{name} changed after the race wrote it")
        finally:
            os.close(fd)
    return SealCheck("sealed")


def verified_bytes(directory: Path, name: str, data: bytes) -> bool:
    """Whether `data`, read from the race's file `name`, is what its seal records."""
    found = read_seal(directory.name) if git.RACE_ID_PATTERN.fullmatch(directory.name) else None
    if not found or not found["verified"]:
        return False
    expected = (found.get("files") or {}).get(name)
    return isinstance(expected, dict) and expected == {
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def read_flight_log(path: Path) -> list[dict[str, Any]]:
    """Events of one flight-log file, in file order."""
    return list(flight_log_lines(path))


def flight_log_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of one flight-log file, in file order. A line that is not one (a torn
    last line, even one cut inside a multi-byte character) is skipped."""
    with open(path, "rb") as handle:
        yield from parsed_lines(handle)


def parsed_lines(lines: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """The JSON objects among flight-log lines (a file's, or bytes read once and verified)."""
    for raw in lines:
        try:
            value = json.loads(raw.decode("utf-8"))
        except ValueError:  # UnicodeDecodeError is one too
            continue
        if isinstance(value, dict):
            yield value
