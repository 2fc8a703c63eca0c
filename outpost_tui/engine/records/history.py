"""Looking back at races: the flight logs under `<repo>/.outpost/runs/<race-id>/`, read back.

Every race leaves its events there as JSON lines (see flightlog.py), so a finished race can be
listed, printed again as its headless run printed it, or shown in the app as it ended. A race whose
coordinator died has no race-finished event: it is "unfinished". Reading never fails on one bad
race: a torn last line (a crash mid-write) is skipped and a race that cannot be read at all is
listed with its problem.

What is read back is checked against the log's seal first (flightlog.py): a race whose files
changed after it wrote them is "tampered", listed with what changed and nothing it claims (no
status, no winner), and `show` refuses it; a race with no seal (recorded before logs were sealed,
or still running, or killed) is read as it is and marked "unsealed".
"""

from __future__ import annotations

import difflib
import heapq
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from ... import exitcodes
from .. import git
from ..core.events import (
    Admitted,
    AgentStarted,
    Event,
    EventKind,
    RaceFinished,
    RaceStarted,
    event_from_payload,
)
from ..core.model import RaceModel
from ..core.result import RaceResult, race_result_from_json
from ..core.spec import BudgetSpec, CandidateSpec, RaceSpec
from ..errors import OutpostError
from .flightlog import SealCheck, check_seal, flight_log_lines, parsed_lines, runs_directory, verified_bytes

RACE_FILE = "race.jsonl"
UNFINISHED = "unfinished"
UNREADABLE = "unreadable"
TAMPERED = "tampered"
UNKNOWN_AGENT = "?"


class UnknownRace(OutpostError):
    """No recorded race has this id; the message is one line naming the closest ids."""


class UnreadableRace(OutpostError):
    """The race's directory is there but its race-level events cannot be read (one line)."""


class TamperedRace(UnreadableRace):
    """The race's flight log is not what the race wrote (its seal says so): nothing of it is shown."""

    exit_code = exitcodes.CORRUPT_CHECKPOINT


@dataclass(frozen=True)
class RecordedRace:
    id: str
    directory: Path
    name: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    status: str = UNFINISHED  # a race status, "unfinished", "unreadable" or "tampered"
    winner: str | None = None
    winner_branch: str | None = None
    candidates: tuple[str, ...] = ()
    run_id: str | None = None
    problem: str | None = None
    seal: str = "unsealed"  # "sealed", "unsealed" or "tampered": see flightlog.SealCheck

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "status": self.status,
            "finished": self.finished,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "winner": self.winner,
            "winner_branch": self.winner_branch,
            "candidates": list(self.candidates),
            "run_id": self.run_id,
            "directory": str(self.directory),
            "problem": self.problem,
            "seal": self.seal,
        }


def runs_root(repository: str | Path) -> Path:
    """`<repo>/.outpost/runs` of the checkout containing `repository` (GitError if none)."""
    return runs_directory(git.repository_root(repository) / git.OUTPOST_DIR)


# ----------------------------------------------------------------------------- reading


def event_from_json(data: dict[str, Any], *, race_level: bool) -> Event | None:
    """An Event back from its flight-log line; None for a kind this version does not know.

    Race-level events (race.jsonl) keep their whole payload: only attempt files carry the
    `key`/`attempt` envelope."""
    data = dict(data)
    try:
        kind = EventKind(data.pop("kind", None))
        at = float(data.pop("at"))
    except (ValueError, TypeError, KeyError):
        return None
    key = attempt = None
    if not race_level:
        key = data.pop("key", None)
        attempt = data.pop("attempt", None)
        if not isinstance(key, str):
            return None
    return event_from_payload(kind, key, attempt, data, at)


def _events_of(path: Path, rank: int, race_level: bool) -> Iterator[tuple[float, int, int, Event]]:
    for index, line in enumerate(flight_log_lines(path)):
        event = event_from_json(line, race_level=race_level)
        if event is not None:
            yield event.at, rank, index, event


def _tampered(race_id: str, directory: Path, check: SealCheck) -> TamperedRace:
    return TamperedRace(
        f"recorded race {race_id!r} does not match its flight log's seal: {check.problem}; "
        f"nothing it says is shown"
    )


def _race_file(directory: Path) -> tuple[bytes, SealCheck]:
    """race.jsonl, read once, and the log's seal checked on those very bytes (the other files'
    names and sizes only: a summary reads nothing else)."""
    data = (directory / RACE_FILE).read_bytes()
    check = check_seal(directory)
    if check.state == "sealed" and not verified_bytes(directory, RACE_FILE, data):
        check = SealCheck("tampered", f"{RACE_FILE} changed after the race wrote it")
    return data, check


def _race_summary(race_id: str, directory: Path) -> RecordedRace:
    try:
        data, check = _race_file(directory)
        if check.state == "tampered":
            return RecordedRace(race_id, directory, status=TAMPERED, problem=check.problem, seal=TAMPERED)
        events = [
            e
            for e in (event_from_json(line, race_level=True) for line in parsed_lines(data.splitlines(True)))
            if e is not None
        ]
    except FileNotFoundError:
        return RecordedRace(race_id, directory, status=UNREADABLE, problem=f"no {RACE_FILE}")
    except OSError as error:
        return RecordedRace(
            race_id,
            directory,
            status=UNREADABLE,
            problem=f"cannot read {RACE_FILE}: {error.strerror or error}",
        )
    started = [e for e in events if isinstance(e, RaceStarted)]
    if not started:
        return RecordedRace(
            race_id, directory, status=UNREADABLE, problem=f"{RACE_FILE} has no race-started event"
        )
    first = started[0]
    last_start = max(i for i, e in enumerate(events) if isinstance(e, RaceStarted))
    # A durable race replayed after a crash starts again in the same directory: it is finished
    # only when a race-finished event follows its last start.
    finish = next((e for e in reversed(events[last_start:]) if isinstance(e, RaceFinished)), None)
    candidates = first.candidates
    summary = RecordedRace(
        race_id,
        directory,
        name=_text(first.name),
        started_at=first.at,
        candidates=tuple(str(c) for c in candidates) if isinstance(candidates, list) else (),
        run_id=_text(first.run_id),
        seal=check.state,
    )
    if finish is None:
        return summary
    result = finish.result if isinstance(finish.result, dict) else {}
    winner = found if isinstance(found := result.get("winner"), dict) else {}
    return RecordedRace(
        race_id,
        directory,
        name=summary.name,
        started_at=summary.started_at,
        finished_at=finish.at,
        status=str(finish.status or result.get("status") or "?"),
        winner=_text(finish.winner) or _text(winner.get("key")),
        winner_branch=_text(winner.get("branch")),
        candidates=summary.candidates,
        run_id=summary.run_id,
        seal=summary.seal,
    )


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def recorded_races(repository: str | Path) -> list[RecordedRace]:
    """Every race recorded in the repository, newest first. Raises GitError when `repository` is
    not in a git checkout; any problem with one race is in its `problem`, never an exception."""
    root = runs_root(repository)
    try:
        entries = [entry for entry in os.scandir(root) if entry.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []
    except OSError as error:
        raise git.GitError(f"cannot list {root}: {error.strerror or error}") from None
    races = [_race_summary(entry.name, Path(entry.path)) for entry in entries]

    def newest(race: RecordedRace) -> tuple[float, str]:
        if race.started_at is not None:
            return race.started_at, race.id
        try:
            return race.directory.stat().st_mtime, race.id
        except OSError:
            return 0.0, race.id

    return sorted(races, key=newest, reverse=True)


def recorded_result(repository: str | Path, race_id: str) -> dict[str, Any] | None:
    """The result document the race's race-finished event holds (what `run --json` printed), or
    None when the race never finished. Reads only the race-level file."""
    directory = race_directory(repository, race_id)
    result = None
    try:
        data, check = _race_file(directory)
        if check.state == "tampered":
            raise _tampered(race_id, directory, check)
        for line in parsed_lines(data.splitlines(True)):
            match event_from_json(line, race_level=True):
                case RaceStarted():
                    result = None  # a replayed durable race: only a finish after its last start counts
                case RaceFinished(result=dict() as finished):
                    result = finished
    except OSError as error:
        raise UnreadableRace(
            f"recorded race {race_id!r} cannot be read: {RACE_FILE}: {error.strerror or error}"
        ) from None
    return result


def recorded_seal(repository: str | Path, race_id: str) -> SealCheck:
    """What the race's flight log is against its seal, every byte checked."""
    return check_seal(race_directory(repository, race_id), contents=True)


def race_directory(repository: str | Path, race_id: str) -> Path:
    """The flight-log directory of one race; UnknownRace when there is none."""
    return _find(runs_root(repository), race_id)


def _find(root: Path, race_id: str) -> Path:
    # The id becomes a path component: anything that is not a race id is refused before use.
    if git.RACE_ID_PATTERN.fullmatch(race_id) and ".." not in race_id:
        directory = root / race_id
        if directory.is_dir() and not directory.is_symlink():
            return directory
    try:
        known = sorted(entry.name for entry in os.scandir(root) if entry.is_dir(follow_symlinks=False))
    except OSError:
        known = []
    if not known:
        raise UnknownRace(f"no recorded race {race_id!r}: no race has been recorded in {root}")
    closest = difflib.get_close_matches(race_id, known, n=3, cutoff=0.3) or known[-3:]
    raise UnknownRace(f"no recorded race {race_id!r} in {root} (closest: {', '.join(closest)})")


def _attempt_files(directory: Path, order: list[str]) -> list[Path]:
    """`<key>.<attempt>.jsonl` files, in declared candidate order then attempt number."""
    position = {key: index for index, key in enumerate(order)}

    def rank(path: Path) -> tuple[int, str, int, str]:
        key, _, number = path.name.removesuffix(".jsonl").rpartition(".")
        return (position.get(key, len(position)), key, int(number) if number.isdigit() else 0, path.name)

    return sorted((p for p in directory.glob("*.jsonl") if p.name != RACE_FILE), key=rank)


def iter_events(repository: str | Path, race_id: str) -> Iterator[Event]:
    """The race's events from all its files, in timestamp order (equal timestamps: race-level
    events first, then candidates in declared order). UnknownRace is raised here, at the call;
    a file that cannot be opened is left out; TamperedRace when the log does not match its seal."""
    directory = race_directory(repository, race_id)
    check = check_seal(directory, contents=True)
    if check.state == "tampered":
        raise _tampered(race_id, directory, check)
    return _events_in(directory)


def _events_in(directory: Path) -> Iterator[Event]:
    race_file = directory / RACE_FILE
    order: list[str] = []
    try:
        for line in flight_log_lines(race_file):
            match event_from_json(line, race_level=True):
                case RaceStarted(candidates=list() as candidates):
                    order = [str(key) for key in candidates]
                    break
    except OSError:
        pass
    sources = [(race_file, True), *((path, False) for path in _attempt_files(directory, order))]
    return _merged(sources)


def _merged(sources: list[tuple[Path, bool]]) -> Iterator[Event]:
    streams = []
    for rank, (path, race_level) in enumerate(sources):
        try:
            path.stat()
        except OSError:
            continue
        streams.append(_tolerant(_events_of(path, rank, race_level)))
    # heapq.merge keeps each file's own order: the order its events were published in.
    for _, _, _, event in heapq.merge(*streams, key=lambda item: item[:3]):
        yield event


def _tolerant(stream: Iterator[tuple[float, int, int, Event]]) -> Iterator[tuple[float, int, int, Event]]:
    try:
        yield from stream
    except OSError:
        return  # a file that became unreadable mid-way: what was read stands


def load_events(repository: str | Path, race_id: str) -> list[Event]:
    """Every recorded event of one race, merged from all its files in timestamp order."""
    return list(iter_events(repository, race_id))


# ------------------------------------------------------------------------- recordings


@dataclass
class Recording:
    """A recorded race read back: its summary, a spec good enough to lay it out, the model the
    live race ended with, and its result (None when it never finished)."""

    race: RecordedRace
    repository: Path
    spec: RaceSpec
    model: RaceModel
    result: RaceResult | None
    result_json: dict[str, Any] | None
    baseline: str | None
    last_event_at: float | None
    events: int = 0
    agents: dict[str, str] = field(default_factory=dict)
    skipped: int = 0  # events whose payload could not be replayed


def load_recording(
    repository: str | Path, race_id: str, *, consumers: Iterable[Callable[[Event], object]] = ()
) -> Recording:
    """Replay a recorded race into a fresh model (and any `consumers`, e.g. a progress printer)
    in one pass over its files, without holding every event in memory."""
    root = git.repository_root(repository)
    directory = _find(runs_directory(root / git.OUTPOST_DIR), race_id)
    check = check_seal(directory, contents=True)
    if check.state == "tampered":
        raise _tampered(race_id, directory, check)
    summary = _race_summary(race_id, directory)
    if summary.seal == TAMPERED:
        raise _tampered(race_id, directory, SealCheck("tampered", summary.problem))
    if summary.problem:
        raise UnreadableRace(f"recorded race {race_id!r} cannot be read: {summary.problem}")
    model = RaceModel([(key, UNKNOWN_AGENT) for key in summary.candidates])
    agents: dict[str, str] = {}
    timeouts: dict[str, float] = {}
    baseline = None
    mode: Literal["race", "fallback"] = "race"
    select: Literal["first", "best"] = "first"
    finish: RaceFinished | None = None
    last_at = None
    count = skipped = 0
    for event in _events_in(directory):
        last_at = event.at
        try:
            model(event)
            for consumer in consumers:
                consumer(event)
        except (KeyError, TypeError, ValueError, AttributeError):
            # Valid JSON with a payload this version cannot take (edited by hand, written by a
            # different version): the rest of the race still reads back.
            skipped += 1
            continue
        count += 1
        match event:
            case RaceStarted():
                baseline = event.baseline or baseline
                if event.mode in ("race", "fallback"):
                    mode = cast(Literal["race", "fallback"], event.mode)
                if event.select in ("first", "best"):
                    select = cast(Literal["first", "best"], event.select)
                finish = None
            case RaceFinished():
                finish = event
            case Admitted(agent=agent) if agent and event.key is not None:
                agents[event.key] = str(agent)
            case AgentStarted(timeout=timeout) if isinstance(timeout, (int, float)) and event.key is not None:
                timeouts[event.key] = float(timeout)
    result_json = finish.result if finish is not None else None
    result = None
    if isinstance(result_json, dict):
        try:
            result = race_result_from_json(result_json)
        except (KeyError, ValueError, TypeError):
            result = None  # the summary and the model still tell the story
        for record in result_json.get("candidates") or []:
            if isinstance(record, dict) and record.get("key") and record.get("agent"):
                agents.setdefault(str(record["key"]), str(record["agent"]))
    for key, candidate in model.candidates.items():
        candidate.agent = agents.get(key, UNKNOWN_AGENT)
    spec = RaceSpec(
        repository=root,
        candidates=tuple(
            CandidateSpec(key, agents.get(key, UNKNOWN_AGENT), "", timeout=timeouts.get(key))
            for key in summary.candidates
        ),
        name=summary.name or race_id,
        mode=mode,
        select=select,
        run_id=summary.run_id,
        budget=BudgetSpec(),
    )
    return Recording(
        summary,
        root,
        spec,
        model,
        result,
        result_json if isinstance(result_json, dict) else None,
        baseline or (result.baseline if result else None),
        last_at,
        count,
        agents,
        skipped,
    )
