"""What a saved durable-race state must look like before anything acts on it.

A checkpoint can be valid JSON and still be wrong (edited by hand, written by a buggy or newer
version, damaged in a way that keeps the JSON intact). Resuming from such a state would crash half
way, after the run was already claimed, or worse, replay the wrong attempts. So every read checks the
whole state first and reports the first problem as one line, naming the field; nothing is written
before that check passes.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

from ..git import branch_name
from ..core.spec import valid_key
from ..core.statuses import CandidateStatus, Phase, RaceStatus

FORMAT = 1
PHASES = tuple(str(phase) for phase in Phase)
CLEANUPS = ("pending", "done")
RACE_STATUSES = tuple(str(status) for status in RaceStatus)
CANDIDATE_STATUSES = tuple(str(status) for status in CandidateStatus)
HEX_COMMIT = re.compile(r"^[0-9a-f]{40,64}$")
TOKEN_FIELDS = ("input", "cached", "cache_write", "output")


class InvalidState(ValueError):
    """The saved state breaks a rule; the message names the field and the problem."""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _optional(where: str, data: dict, name: str, kind: type | tuple[type, ...], label: str) -> None:
    value = data.get(name)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise InvalidState(f"{where}.{name} is {value!r}, expected {label}")


def _check_usage(where: str, usage: Any, *, counted: bool) -> None:
    if not isinstance(usage, dict):
        raise InvalidState(f"{where} is {type(usage).__name__}, expected an object")
    names = (*TOKEN_FIELDS, "cost_usd")
    for name in names:
        value = usage.get(name, 0)
        if not _is_number(value) or value < 0:
            raise InvalidState(f"{where}.{name} is {value!r}, expected a number >= 0")
    for name in ("complete", "estimated", "cost_unknown"):
        if name in usage and not isinstance(usage[name], bool):
            raise InvalidState(f"{where}.{name} is {usage[name]!r}, expected true or false")
    if counted and (not _is_count(usage.get("attempts")) or usage["attempts"] < 0):
        raise InvalidState(f"{where}.attempts is {usage.get('attempts')!r}, expected a whole number >= 0")


def _check_record(where: str, record: Any, *, key: str | None = None, number: int | None = None) -> dict:
    if not isinstance(record, dict):
        raise InvalidState(f"{where} is {type(record).__name__}, expected an object")
    if not isinstance(record.get("key"), str) or (key is not None and record["key"] != key):
        raise InvalidState(f"{where}.key is {record.get('key')!r}, expected {key!r}" if key is not None
                           else f"{where}.key is {record.get('key')!r}, expected a candidate key")
    attempt = record.get("attempt")
    if not _is_count(attempt) or attempt < 1 or (number is not None and attempt != number):
        raise InvalidState(f"{where}.attempt is {attempt!r}, expected {number if number else 'a number >= 1'}")
    if record.get("status") not in CANDIDATE_STATUSES:
        raise InvalidState(f"{where}.status is {record.get('status')!r}, expected one of "
                           f"{', '.join(CANDIDATE_STATUSES)}")
    commit = record.get("commit")
    if commit is not None and (not isinstance(commit, str) or not HEX_COMMIT.fullmatch(commit)):
        raise InvalidState(f"{where}.commit is {commit!r}, expected a 40-64 digit hex commit")
    score = record.get("score")
    if score is not None and not _is_number(score):
        raise InvalidState(f"{where}.score is {score!r}, expected a number")
    if record.get("usage") is not None:
        _check_usage(f"{where}.usage", record["usage"], counted=False)
    if record.get("cleanup", "done") not in CLEANUPS:
        raise InvalidState(f"{where}.cleanup is {record.get('cleanup')!r}, expected pending or done")
    for name in ("agent", "branch", "error", "directory", "retained_directory", "decided_by"):
        _optional(where, record, name, str, "text")
    for name in ("commits", "resources", "review"):
        _optional(where, record, name, list, "a list")
    for name in ("validation", "quota"):
        _optional(where, record, name, dict, "an object")
    for name in ("started_at", "finished_at"):
        _optional(where, record, name, (int, float), "a time")
    if not all(isinstance(item, str) for item in record.get("resources") or []):
        raise InvalidState(f"{where}.resources must be a list of resource ids (text)")
    return record


def _check_attempt(index: int, attempt: Any, race_id: str, candidates: list[str]) -> None:
    where = f"attempts[{index}]"
    if not isinstance(attempt, dict):
        raise InvalidState(f"{where} is {type(attempt).__name__}, expected an object")
    key, number = attempt.get("key"), attempt.get("attempt")
    if not isinstance(key, str):
        raise InvalidState(f"{where}.key is {key!r}, expected a candidate key")
    if key not in candidates:
        raise InvalidState(f"{where}.key {key!r} is not a candidate of this run ({', '.join(candidates)})")
    if not _is_count(number) or number < 1:
        raise InvalidState(f"{where}.attempt is {number!r}, expected a number >= 1")
    where = f"{where} ({key}#{number})"
    expected_branch = branch_name(race_id, key, number)
    if attempt.get("branch") != expected_branch:
        raise InvalidState(f"{where}.branch is {attempt.get('branch')!r}, expected {expected_branch!r}")
    if attempt.get("phase") not in PHASES:
        raise InvalidState(f"{where}.phase is {attempt.get('phase')!r}, expected one of {', '.join(PHASES)}")
    if attempt.get("cleanup") not in CLEANUPS:
        raise InvalidState(f"{where}.cleanup is {attempt.get('cleanup')!r}, expected pending or done")
    resources = attempt.get("resources", [])
    if not isinstance(resources, list) or not all(isinstance(item, str) for item in resources):
        raise InvalidState(f"{where}.resources must be a list of resource ids (text)")
    _optional(where, attempt, "directory", str, "a directory (text)")
    if not isinstance(attempt.get("accepted", False), bool):
        raise InvalidState(f"{where}.accepted is {attempt.get('accepted')!r}, expected true or false")
    record = _check_record(f"{where}.record", attempt.get("record"), key=key, number=number)
    if record.get("branch") is not None and record["branch"] != expected_branch:
        raise InvalidState(f"{where}.record.branch is {record['branch']!r}, expected {expected_branch!r}")


def _started(attempt: dict) -> bool:
    """Whether the attempt was admitted (counted in usage.attempts): it left `waiting`, except an attempt
    cancelled before it started, which is settled as skipped without being admitted."""
    phase = attempt["phase"]
    if phase == Phase.WAITING:
        return False
    return phase != Phase.SETTLED or attempt["record"]["status"] != CandidateStatus.SKIPPED


def check_state(state: dict, *, key: str | None = None) -> None:
    """Raise InvalidState naming the first thing wrong with a saved race state.

    `key` is the storage key the state was read from: the run id saved inside must hash to it.
    """
    if state.get("format", FORMAT) != FORMAT:
        raise InvalidState(f"state.format is {state.get('format')!r}, expected {FORMAT}")
    run_id = state.get("run_id")
    if not isinstance(run_id, str) or not run_id.strip():
        raise InvalidState(f"run_id is {run_id!r}, expected the run's name")
    if key is not None and not key.endswith(f"/{hashlib.sha256(run_id.encode()).hexdigest()}.json"):
        raise InvalidState(f"run_id {run_id!r} does not belong to this file (the file name is the "
                           f"sha256 of the run id)")
    if not isinstance(state.get("identity"), str) or not state["identity"]:
        raise InvalidState("identity is missing")
    race_id = state.get("id")
    if not isinstance(race_id, str):
        raise InvalidState(f"id is {race_id!r}, expected the race id")
    try:
        branch_name(race_id, "k", 1)
    except ValueError:
        raise InvalidState(f"id {race_id!r} is not a race id") from None
    baseline = state.get("baseline")
    if not isinstance(baseline, str) or not HEX_COMMIT.fullmatch(baseline):
        raise InvalidState(f"baseline is {baseline!r}, expected a 40-64 digit hex commit")
    select = state.get("select", "first")
    if select not in ("first", "best"):
        raise InvalidState(f"select is {select!r}, expected first or best")
    for name in ("race_file", "repository", "name", "mode"):
        _optional("state", state, name, str, "text")
    _optional("state", state, "before", dict, "an object")

    candidates = state.get("candidates")
    if (not isinstance(candidates, list) or not candidates
            or not all(isinstance(c, str) and valid_key(c) for c in candidates)
            or len(set(candidates)) != len(candidates)):
        raise InvalidState(f"candidates is {candidates!r}, expected the list of candidate keys")
    attempts = state.get("attempts")
    if not isinstance(attempts, list):
        raise InvalidState(f"attempts is {type(attempts).__name__}, expected a list")
    usage = state.get("usage")
    _check_usage("usage", usage, counted=True)

    latest: dict[str, dict] = {}
    for index, attempt in enumerate(attempts):
        _check_attempt(index, attempt, race_id, candidates)
        key_, number = attempt["key"], attempt["attempt"]
        previous = latest.get(key_)
        expected = 1 if previous is None else previous["attempt"] + 1
        if number != expected:
            raise InvalidState(f"attempts[{index}] is {key_}#{number}, expected {key_}#{expected} "
                               f"(attempt numbers count from 1 without gaps)")
        if previous is not None and previous["phase"] != Phase.SETTLED:
            raise InvalidState(f"{key_}#{previous['attempt']} is {previous['phase']} but was "
                               f"superseded by {key_}#{number} (only the latest attempt may be unsettled)")
        latest[key_] = attempt
    missing = [c for c in candidates if c not in latest]
    if missing:
        raise InvalidState(f"candidate {missing[0]!r} has no attempt")

    started = sum(1 for attempt in attempts if _started(attempt))
    if usage["attempts"] != started:
        raise InvalidState(f"usage.attempts is {usage['attempts']}, but {started} attempt(s) were started")

    winners = [a for a in attempts if a["record"]["status"] == CandidateStatus.WINNER]
    if len(winners) > 1:
        raise InvalidState("more than one winner: " + ", ".join(f"{a['key']}#{a['attempt']}" for a in winners))
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
            passed = (attempt.get("accepted") and record.get("error") is None
                      and record.get("decided_by") != "operator")
            scored = (passed and (attempt["phase"] == Phase.VALIDATED
                                  or record["status"] in (CandidateStatus.REJECTED, CandidateStatus.WINNER))
                      or record["status"] == CandidateStatus.WINNER and record.get("decided_by") == "score")
            if scored and record.get("score") is None:
                raise InvalidState(f"{attempt['key']}#{attempt['attempt']} passed validation in best mode "
                                   f"but has no score")

    finished = state.get("finished", False)
    if not isinstance(finished, bool):
        raise InvalidState(f"finished is {finished!r}, expected true or false")
    status = state.get("status")
    if status is not None and status not in RACE_STATUSES:
        raise InvalidState(f"status is {status!r}, expected one of {', '.join(RACE_STATUSES)}")
    if finished:
        if status is None:
            raise InvalidState("the run is finished but has no status")
        unsettled = [a for a in latest.values() if a["phase"] not in (Phase.WAITING, Phase.SETTLED)]
        if unsettled:
            raise InvalidState(f"the run is finished but {unsettled[0]['key']}#{unsettled[0]['attempt']} "
                               f"is {unsettled[0]['phase']}")
        if (status == RaceStatus.WINNER) != (len(winners) == 1):
            raise InvalidState(f"status is {status} but the attempts hold {len(winners)} winner(s)")
        if "result" not in state:
            raise InvalidState("the run is finished but its result is missing")
    if "result" in state:
        _check_result(state["result"], state)


def _check_result(result: Any, state: dict) -> None:
    if not isinstance(result, dict):
        raise InvalidState(f"result is {type(result).__name__}, expected an object")
    for name in ("id", "baseline"):
        if result.get(name) != state[name]:
            raise InvalidState(f"result.{name} is {result.get(name)!r}, expected {state[name]!r}")
    if result.get("status") not in RACE_STATUSES:
        raise InvalidState(f"result.status is {result.get('status')!r}, expected one of {', '.join(RACE_STATUSES)}")
    if state.get("status") is not None and result["status"] != state["status"]:
        raise InvalidState(f"result.status is {result['status']!r} but the run's status is {state['status']!r}")
    for name in ("candidates", "previous_attempts"):
        records = result.get(name, [])
        if not isinstance(records, list):
            raise InvalidState(f"result.{name} is {type(records).__name__}, expected a list")
        for index, record in enumerate(records):
            _check_record(f"result.{name}[{index}]", record)
    if result.get("usage") is not None:
        _check_usage("result.usage", result["usage"], counted=False)


def latest_attempts(state: dict) -> dict[str, dict]:
    latest: dict[str, dict] = {}
    for attempt in state.get("attempts", []):
        latest[attempt["key"]] = attempt
    return latest


def interrupted(state: dict) -> bool:
    """Whether a saved run stopped with an attempt still running or validated (needs a replay)."""
    return any(a["phase"] in (Phase.RUNNING, Phase.VALIDATED) for a in latest_attempts(state).values())


def run_status(state: dict, owned: bool) -> str:
    """The one status `runs` and `recover --inspect` both show for a saved run."""
    if state.get("finished") and isinstance(state.get("status"), str):
        return state["status"]
    if owned:
        return "owned"
    return "interrupted" if interrupted(state) else "released"
