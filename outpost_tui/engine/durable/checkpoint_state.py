"""What a saved durable-race state must look like before anything acts on it.

A checkpoint can be valid JSON and still be wrong (edited by hand, written by a buggy or newer
version, damaged in a way that keeps the JSON intact). Resuming from such a state would crash half
way, after the run was already claimed, or worse, replay the wrong attempts. So every read checks the
whole state first and reports the first problem as one line, naming the field; nothing is written
before that check passes. Each saved object's fields are declared once (STATE, ATTEMPT, RECORD,
USAGE, RESULT) and checked by one function; what ties fields together (branch names, attempt
numbers, the winner) follows as rules.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.spec import valid_key
from ..core.statuses import CandidateStatus, Phase, RaceStatus
from ..errors import OutpostError
from ..git import branch_name

FORMAT = 1
PHASES = tuple(str(phase) for phase in Phase)
CLEANUPS = ("pending", "done")
RACE_STATUSES = tuple(str(status) for status in RaceStatus)
CANDIDATE_STATUSES = tuple(str(status) for status in CandidateStatus)
HEX_COMMIT = re.compile(r"^[0-9a-f]{40,64}$")
TOKEN_FIELDS = ("input", "cached", "cache_write", "output")


class InvalidState(OutpostError):
    """The saved state breaks a rule; the message names the field and the problem."""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# --- the shapes: each saved object's fields, declared once -----------------------------------------


@dataclass(frozen=True)
class Field:
    """What one saved field must be: `test` passes its value, `expected` says what it should be."""

    test: Callable[[Any], bool]
    expected: str
    # The value when the field is absent; REQUIRED: it must be there. None passes every field
    # whose default is None (absent and null mean "not set").
    default: Any = None
    shape: Mapping[str, Field] | None = None  # an object's own fields


REQUIRED = object()


def _text(expected: str = "text", default: Any = None) -> Field:
    return Field(lambda value: isinstance(value, str), expected, default)


def _one_of(choices: tuple[str, ...], default: Any = REQUIRED) -> Field:
    words = " or ".join(choices) if len(choices) == 2 else f"one of {', '.join(choices)}"
    return Field(lambda value: value in choices, words, default)


def _object(shape: Mapping[str, Field] | None = None, default: Any = None) -> Field:
    return Field(lambda value: isinstance(value, dict), "an object", default, shape)


_LIST = Field(lambda value: isinstance(value, list), "a list")
_TIME = Field(lambda value: _is_number(value), "a time")
_FLAG = Field(lambda value: isinstance(value, bool), "true or false", False)
_RESOURCES = Field(
    lambda value: isinstance(value, list) and all(isinstance(item, str) for item in value),
    "a list of resource ids (text)",
    [],
)
_COMMIT = Field(
    lambda value: isinstance(value, str) and bool(HEX_COMMIT.fullmatch(value)), "a 40-64 digit hex commit"
)
_ATTEMPT_NUMBER = Field(lambda value: _is_count(value) and value >= 1, "a number >= 1", REQUIRED)

USAGE = {
    **{
        name: Field(lambda value: _is_number(value) and value >= 0, "a number >= 0", 0)
        for name in (*TOKEN_FIELDS, "cost_usd")
    },
    **dict.fromkeys(("complete", "estimated", "cost_unknown"), _FLAG),
}
COUNTED_USAGE = {
    **USAGE,
    "attempts": Field(lambda value: _is_count(value) and value >= 0, "a whole number >= 0", REQUIRED),
}
RECORD = {
    "key": _text("a candidate key", REQUIRED),
    "attempt": _ATTEMPT_NUMBER,
    "status": _one_of(CANDIDATE_STATUSES),
    "commit": _COMMIT,
    "score": Field(_is_number, "a number"),
    "usage": _object(USAGE),
    "cleanup": _one_of(CLEANUPS, "done"),
    **{
        name: _text()
        for name in ("agent", "branch", "error", "directory", "retained_directory", "decided_by")
    },
    "commits": _LIST,
    "review": _LIST,
    "resources": _RESOURCES,
    "validation": _object(),
    "quota": _object(),
    "started_at": _TIME,
    "finished_at": _TIME,
}
ATTEMPT = {
    "key": _text("a candidate key", REQUIRED),
    "attempt": _ATTEMPT_NUMBER,
    "branch": _text("the attempt's branch", REQUIRED),
    "phase": _one_of(PHASES),
    "cleanup": _one_of(CLEANUPS),
    "resources": _RESOURCES,
    "directory": _text("a directory (text)"),
    "accepted": _FLAG,
    "record": _object(RECORD, REQUIRED),
}
STATE = {
    "run_id": Field(lambda value: isinstance(value, str) and bool(value.strip()), "the run's name", REQUIRED),
    "identity": Field(lambda value: isinstance(value, str) and bool(value), "the run's identity", REQUIRED),
    "id": _text("the race id", REQUIRED),
    "baseline": Field(_COMMIT.test, _COMMIT.expected, REQUIRED),
    "select": _one_of(("first", "best"), "first"),
    **{name: _text() for name in ("race_file", "repository", "name", "mode")},
    "before": _object(),
    "candidates": Field(
        lambda value: (
            isinstance(value, list)
            and bool(value)
            and all(isinstance(c, str) and valid_key(c) for c in value)
            and len(set(value)) == len(value)
        ),
        "the list of candidate keys",
        REQUIRED,
    ),
    "attempts": Field(lambda value: isinstance(value, list), "a list", REQUIRED),
    "usage": _object(COUNTED_USAGE, REQUIRED),
    "finished": _FLAG,
    "status": _one_of(RACE_STATUSES, None),
}
RESULT = {
    "status": _one_of(RACE_STATUSES),
    "candidates": Field(_LIST.test, _LIST.expected, []),
    "previous_attempts": Field(_LIST.test, _LIST.expected, []),
    "usage": _object(USAGE),
}


def _check(where: str, data: Any, shape: Mapping[str, Field]) -> dict[str, Any]:
    """Raise InvalidState naming the first field of data that breaks its declared shape."""
    if not isinstance(data, dict):
        raise InvalidState(f"{where} is {type(data).__name__}, expected an object")
    for name, rule in shape.items():
        if name not in data or (data[name] is None and rule.default is None):
            if rule.default is REQUIRED:
                raise InvalidState(f"{_at(where, name)} is {data.get(name)!r}, expected {rule.expected}")
            continue
        value = data[name]
        if rule.shape is not None and isinstance(value, dict):
            _check(_at(where, name), value, rule.shape)
        elif not rule.test(value):
            shown = type(value).__name__ if rule.shape is not None else repr(value)
            raise InvalidState(f"{_at(where, name)} is {shown}, expected {rule.expected}")
    return data


def _at(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _check_record(
    where: str, record: Any, *, key: str | None = None, number: int | None = None
) -> dict[str, Any]:
    _check(where, record, RECORD)
    assert isinstance(record, dict)  # _check proved it an object
    if key is not None and record["key"] != key:
        raise InvalidState(f"{where}.key is {record['key']!r}, expected {key!r}")
    if number is not None and record["attempt"] != number:
        raise InvalidState(f"{where}.attempt is {record['attempt']!r}, expected {number}")
    return record


def _check_attempt(index: int, attempt: Any, race_id: str, candidates: list[str]) -> None:
    where = f"attempts[{index}]"
    _check(where, attempt, {name: ATTEMPT[name] for name in ("key", "attempt")})
    key, number = attempt["key"], attempt["attempt"]
    if key not in candidates:
        raise InvalidState(f"{where}.key {key!r} is not a candidate of this run ({', '.join(candidates)})")
    where = f"{where} ({key}#{number})"
    expected_branch = branch_name(race_id, key, number)
    if attempt.get("branch") != expected_branch:
        raise InvalidState(f"{where}.branch is {attempt.get('branch')!r}, expected {expected_branch!r}")
    _check(where, attempt, {name: rule for name, rule in ATTEMPT.items() if name != "record"})
    record = _check_record(f"{where}.record", attempt.get("record"), key=key, number=number)
    if record.get("branch") is not None and record["branch"] != expected_branch:
        raise InvalidState(f"{where}.record.branch is {record['branch']!r}, expected {expected_branch!r}")


def _started(attempt: dict[str, Any]) -> bool:
    """Whether the attempt was admitted (counted in usage.attempts): it left `waiting`, except an attempt
    cancelled before it started, which is settled as skipped without being admitted."""
    phase = attempt["phase"]
    if phase == Phase.WAITING:
        return False
    return bool(phase != Phase.SETTLED or attempt["record"]["status"] != CandidateStatus.SKIPPED)


def check_state(state: dict[str, Any], *, key: str | None = None) -> None:
    """Raise InvalidState naming the first thing wrong with a saved race state.

    `key` is the storage key the state was read from: the run id saved inside must hash to it.
    """
    if state.get("format", FORMAT) != FORMAT:
        raise InvalidState(f"state.format is {state.get('format')!r}, expected {FORMAT}")
    _check("", state, {name: STATE[name] for name in ("run_id",)})
    run_id = state["run_id"]
    if key is not None and not key.endswith(f"/{hashlib.sha256(run_id.encode()).hexdigest()}.json"):
        raise InvalidState(
            f"run_id {run_id!r} does not belong to this file (the file name is the sha256 of the run id)"
        )
    _check("", state, STATE)
    race_id, select, candidates, attempts, usage = (
        state["id"],
        state.get("select", "first"),
        state["candidates"],
        state["attempts"],
        state["usage"],
    )
    try:
        branch_name(race_id, "k", 1)
    except ValueError:
        raise InvalidState(f"id {race_id!r} is not a race id") from None

    latest: dict[str, dict[str, Any]] = {}
    for index, attempt in enumerate(attempts):
        _check_attempt(index, attempt, race_id, candidates)
        key_, number = attempt["key"], attempt["attempt"]
        previous = latest.get(key_)
        expected = 1 if previous is None else previous["attempt"] + 1
        if number != expected:
            raise InvalidState(
                f"attempts[{index}] is {key_}#{number}, expected {key_}#{expected} "
                f"(attempt numbers count from 1 without gaps)"
            )
        if previous is not None and previous["phase"] != Phase.SETTLED:
            raise InvalidState(
                f"{key_}#{previous['attempt']} is {previous['phase']} but was "
                f"superseded by {key_}#{number} (only the latest attempt may be unsettled)"
            )
        latest[key_] = attempt
    missing = [c for c in candidates if c not in latest]
    if missing:
        raise InvalidState(f"candidate {missing[0]!r} has no attempt")

    started = sum(1 for attempt in attempts if _started(attempt))
    if usage["attempts"] != started:
        raise InvalidState(f"usage.attempts is {usage['attempts']}, but {started} attempt(s) were started")

    winners = [a for a in attempts if a["record"]["status"] == CandidateStatus.WINNER]
    if len(winners) > 1:
        raise InvalidState(
            "more than one winner: " + ", ".join(f"{a['key']}#{a['attempt']}" for a in winners)
        )
    for winner in winners:
        name = f"winner {winner['key']}#{winner['attempt']}"
        if winner["phase"] != Phase.SETTLED:
            raise InvalidState(f"{name} is {winner['phase']}, not settled")
        if latest[winner["key"]] is not winner:
            raise InvalidState(f"{name} was superseded by a later attempt")
        if not winner["record"].get("commit"):
            raise InvalidState(f"{name} has no commit")
    if select == "best":
        for attempt in attempts:
            record = attempt["record"]
            # An operator's accept or a failed score (which records an error) needs no score.
            passed = (
                attempt.get("accepted")
                and record.get("error") is None
                and record.get("decided_by") != "operator"
            )
            scored = (
                passed
                and (
                    attempt["phase"] == Phase.VALIDATED
                    or record["status"] in (CandidateStatus.REJECTED, CandidateStatus.WINNER)
                )
            ) or (record["status"] == CandidateStatus.WINNER and record.get("decided_by") == "score")
            if scored and record.get("score") is None:
                raise InvalidState(
                    f"{attempt['key']}#{attempt['attempt']} passed validation in best mode but has no score"
                )

    finished, status = state.get("finished", False), state.get("status")
    if finished:
        if status is None:
            raise InvalidState("the run is finished but has no status")
        unsettled = [a for a in latest.values() if a["phase"] not in (Phase.WAITING, Phase.SETTLED)]
        if unsettled:
            raise InvalidState(
                f"the run is finished but {unsettled[0]['key']}#{unsettled[0]['attempt']} "
                f"is {unsettled[0]['phase']}"
            )
        if (status == RaceStatus.WINNER) != (len(winners) == 1):
            raise InvalidState(f"status is {status} but the attempts hold {len(winners)} winner(s)")
        if "result" not in state:
            raise InvalidState("the run is finished but its result is missing")
    if "result" in state:
        _check_result(state["result"], state)


def _check_result(result: Any, state: dict[str, Any]) -> None:
    for name in ("id", "baseline"):
        if isinstance(result, dict) and result.get(name) != state[name]:
            raise InvalidState(f"result.{name} is {result.get(name)!r}, expected {state[name]!r}")
    _check("result", result, RESULT)
    if state.get("status") is not None and result["status"] != state["status"]:
        raise InvalidState(
            f"result.status is {result['status']!r} but the run's status is {state['status']!r}"
        )
    for name in ("candidates", "previous_attempts"):
        for index, record in enumerate(result.get(name, [])):
            _check_record(f"result.{name}[{index}]", record)


def latest_attempts(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    latest: dict[str, dict[str, Any]] = {}
    for attempt in state.get("attempts", []):
        latest[attempt["key"]] = attempt
    return latest


def interrupted(state: dict[str, Any]) -> bool:
    """Whether a saved run stopped with an attempt still running or validated (needs a replay)."""
    return any(a["phase"] in (Phase.RUNNING, Phase.VALIDATED) for a in latest_attempts(state).values())


def run_status(state: dict[str, Any], owned: bool) -> str:
    """The one status `runs` and `recover --inspect` both show for a saved run."""
    if state.get("finished") and isinstance(status := state.get("status"), str):
        return status
    if owned:
        return "owned"
    return "interrupted" if interrupted(state) else "released"
