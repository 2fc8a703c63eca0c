"""Checkpoint ownership, fencing and corruption on real files, with real competing processes."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from outpost_tui import exitcodes
from outpost_tui.engine.core.spec import (
    BudgetSpec,
    CandidateSpec,
    DurabilitySpec,
    RaceSpec,
    SandboxSpec,
    TokenLimits,
)
from outpost_tui.engine.durable.checkpoint import (
    AlreadyOwned,
    CheckpointError,
    CheckpointStore,
    CorruptCheckpoint,
    IdentityMismatch,
    RevisionChanged,
    UnknownRun,
    checkpoint_key,
    list_runs,
    race_identity,
    read_run,
    release_run,
    sealed_envelope,
)
from outpost_tui.engine.durable.local_transport import LocalTransport
from outpost_tui.engine.pids import this_host

RUN = "parser-race"
IDENTITY = "identity-1"


@pytest.fixture
def transport(tmp_path: Path) -> LocalTransport:
    return LocalTransport(tmp_path / "storage")


RACE_ID = "20250101-120000-abcdef"
BASELINE = "b" * 40


def attempt_state(key: str, number: int, phase: str, status: str = "skipped", **record) -> dict:
    branch = f"outpost/speculation/{RACE_ID}/{key}/{number}"
    return {
        "key": key,
        "attempt": number,
        "branch": branch,
        "phase": phase,
        "cleanup": "pending" if phase in ("running", "validated") else "done",
        "resources": [],
        "directory": None,
        "accepted": False,
        "record": {
            "key": key,
            "attempt": number,
            "agent": "command",
            "status": status,
            "branch": branch if phase != "waiting" else None,
            "commit": None,
            "usage": None,
            "score": None,
            "error": None,
            **record,
        },
    }


def initial(attempts: int = 0) -> dict:
    """A race state as the coordinator saves it: `attempts` attempts of candidate a were started
    (the earlier ones cancelled, the last one running); with none, a#1 is waiting."""
    entries = [attempt_state("a", n, "settled", "cancelled") for n in range(1, attempts)]
    entries.append(attempt_state("a", attempts, "running") if attempts else attempt_state("a", 1, "waiting"))
    return {
        "format": 1,
        "id": RACE_ID,
        "baseline": BASELINE,
        "select": "first",
        "candidates": ["a"],
        "finished": False,
        "status": None,
        "attempts": entries,
        "usage": {
            "attempts": attempts,
            "input": 0,
            "cached": 0,
            "cache_write": 0,
            "output": 0,
            "cost_usd": 0.0,
            "complete": True,
            "estimated": False,
        },
    }


def finished_state(status: str = "no-winner") -> dict:
    state = initial(1)
    state["attempts"][-1] = attempt_state("a", 1, "settled", "rejected")
    result = {
        "id": RACE_ID,
        "status": status,
        "baseline": BASELINE,
        "candidates": [state["attempts"][-1]["record"]],
        "previous_attempts": [],
    }
    return {**state, "finished": True, "status": status, "result": result}


def test_key_is_the_sha256_of_the_run_id(transport: LocalTransport) -> None:
    key = checkpoint_key(RUN)
    assert key == f"speculations/{hashlib.sha256(RUN.encode()).hexdigest()}.json"
    CheckpointStore(transport, RUN).claim(initial(), identity=IDENTITY)
    assert transport.object_path(key).is_file()
    with pytest.raises(CheckpointError) as blank:
        CheckpointStore(transport, "  ")
    assert blank.value.exit_code == exitcodes.BAD_INPUT


def test_claim_save_heartbeat_release(transport: LocalTransport) -> None:
    store = CheckpointStore(transport, RUN)
    state = store.claim(initial(), identity=IDENTITY)
    assert state == {**initial(), "identity": IDENTITY, "run_id": RUN} and not store.resumed
    saved = store.read()
    assert saved.owner.pid == os.getpid() and saved.owner.host == this_host()
    assert saved.revision == store.revision and saved.state == state

    store.save(initial(2))
    assert read_run(transport, RUN).state == {**initial(2), "identity": IDENTITY, "run_id": RUN}
    envelope = json.loads(transport.read(store.key).data)
    assert envelope["format"] == 1 and envelope["owner"]["id"] == store.owner.id

    first_beat = store.read().owner.heartbeat_at
    time.sleep(0.01)  # heartbeat_at is a wall-clock time: it must visibly advance
    store.heartbeat()
    after = store.read()
    assert after.owner.heartbeat_at > first_beat and after.state["usage"]["attempts"] == 2

    store.release()
    released = store.read()
    assert released.owner is None and released.state["usage"]["attempts"] == 2
    with pytest.raises(RuntimeError):
        store.save(initial(3))


def test_claim_on_an_owned_run_says_how_to_recover(transport: LocalTransport) -> None:
    CheckpointStore(transport, RUN).claim(initial(), identity=IDENTITY)
    before = transport.read(checkpoint_key(RUN))
    with pytest.raises(AlreadyOwned) as owned:
        CheckpointStore(transport, RUN, repository="/work/my repo").claim(initial(), identity=IDENTITY)
    message = str(owned.value)
    assert f"pid {os.getpid()} on {this_host()}" in message and "heartbeat" in message
    # a command that works from any directory, quoted for the shell
    assert f"`outpost-tui recover {RUN} --repo '/work/my repo' --stop`" in message
    assert "\n" not in message
    assert owned.value.exit_code == exitcodes.OWNED
    assert transport.read(checkpoint_key(RUN)).revision == before.revision


def test_release_is_fenced_by_revision_and_fences_the_old_coordinator(transport: LocalTransport) -> None:
    old = CheckpointStore(transport, RUN)
    old.claim(initial(), identity=IDENTITY)
    old.save(initial(1))
    inspected = read_run(transport, RUN)
    old.save(initial(2))  # the old coordinator was still writing after the inspection

    with pytest.raises(RevisionChanged) as stale:
        release_run(transport, RUN, inspected.revision)
    assert stale.value.exit_code == exitcodes.REVISION_CHANGED
    assert read_run(transport, RUN).owner is not None

    current = read_run(transport, RUN)
    release_run(transport, RUN, current.revision)
    assert read_run(transport, RUN).owner is None
    # Released but not yet reclaimed: the old coordinator's writes are already refused.
    with pytest.raises(RevisionChanged):
        old.save(initial(3))

    new = CheckpointStore(transport, RUN)
    resumed = new.claim(initial(), identity=IDENTITY)
    assert new.resumed and resumed["usage"]["attempts"] == 2
    for write in (lambda: old.save(initial(9)), old.heartbeat, old.release):
        with pytest.raises(RevisionChanged):
            write()
    new.save(initial(4))
    assert read_run(transport, RUN).state["usage"]["attempts"] == 4
    assert read_run(transport, RUN).owner.id == new.owner.id


def test_release_of_an_unknown_run(transport: LocalTransport) -> None:
    with pytest.raises(UnknownRun) as unknown:
        release_run(transport, "never-ran", "whatever")
    assert unknown.value.exit_code == exitcodes.UNKNOWN_RUN


def test_identity_mismatch(transport: LocalTransport) -> None:
    store = CheckpointStore(transport, RUN)
    store.claim(initial(), identity=IDENTITY)
    store.release()
    with pytest.raises(IdentityMismatch) as mismatch:
        CheckpointStore(transport, RUN).claim(initial(), identity="identity-2")
    assert mismatch.value.exit_code == exitcodes.IDENTITY_MISMATCH
    assert f"saved run {RUN}" in str(mismatch.value) and "use a new run_id" in str(mismatch.value)
    assert read_run(transport, RUN).owner is None


def spec(repository: Path, **changes) -> RaceSpec:
    base = RaceSpec(
        repository=repository,
        candidates=(
            CandidateSpec("a", "claude", "fix the parser", model="opus"),
            CandidateSpec("b", "command", "fix the parser", command=("./agent",)),
        ),
        budget=BudgetSpec(attempts=4, tokens=TokenLimits(output=1000), cost_usd=2.0),
        durability=DurabilitySpec(enabled=True, version="1"),
    )
    return dataclasses.replace(base, **changes)


def test_race_identity(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (tmp_path / "link").symlink_to(repo)
    reference = race_identity(spec(repo))
    assert len(reference) == 64
    assert race_identity(spec(tmp_path / "link")) == reference  # the repository's real path counts
    # What does not change the saved attempts' meaning leaves the identity alone.
    assert race_identity(spec(repo, concurrency=1, name="other", cleanup_timeout=5)) == reference
    changed = [
        spec(repo, durability=DurabilitySpec(enabled=True, version="2")),
        spec(repo, sandbox=SandboxSpec(provider="docker")),
        spec(repo, candidates=(CandidateSpec("a", "claude", "fix the lexer", model="opus"),)),
        spec(
            repo,
            candidates=(
                CandidateSpec("a", "claude", "fix the parser", model="sonnet"),
                CandidateSpec("b", "command", "fix the parser"),
            ),
        ),
        spec(repo, candidates=tuple(reversed(spec(repo).candidates))),
        spec(repo, budget=BudgetSpec(attempts=5, tokens=TokenLimits(output=1000), cost_usd=2.0)),
        spec(repo, budget=BudgetSpec(attempts=4, tokens=TokenLimits(output=999), cost_usd=2.0)),
        spec(repo, budget=BudgetSpec(attempts=4, tokens=TokenLimits(output=1000), cost_usd=3.0)),
        spec(repo, select="best"),
        spec(repo, mode="fallback"),
        spec(tmp_path),
    ]
    identities = [race_identity(changed_spec) for changed_spec in changed]
    assert reference not in identities and len(set(identities)) == len(identities)


def corrupt(transport: LocalTransport, how: str) -> None:
    key = checkpoint_key(RUN)
    if how == "truncated":
        path = transport.object_path(key)
        path.write_bytes(path.read_bytes()[:-10])
        return
    payloads = {
        "garbled": b'{"format":1,"owner":null,"state":{"usage":',
        "not-utf8": b"\xff\xfe{}",
        "wrong-format": b'{"format":2,"owner":null,"state":{}}',
        "no-state": b'{"format":1,"owner":null}',
        "bad-owner": b'{"format":1,"owner":{"pid":"12"},"state":{}}',
    }
    saved = transport.read(key)
    transport.write(key, payloads[how], if_revision=saved.revision)


@pytest.mark.parametrize("how", ["truncated", "garbled", "not-utf8", "wrong-format", "no-state", "bad-owner"])
def test_corrupt_checkpoint_is_reported_and_left_untouched(transport: LocalTransport, how: str) -> None:
    store = CheckpointStore(transport, RUN)
    store.claim(initial(1), identity=IDENTITY)
    store.release()
    corrupt(transport, how)
    path = transport.object_path(checkpoint_key(RUN))
    before = path.read_bytes()
    attempts = [
        CheckpointStore(transport, RUN).read,
        lambda: read_run(transport, RUN),
        lambda: CheckpointStore(transport, RUN).claim(initial(), identity=IDENTITY),
        lambda: release_run(transport, RUN, "any"),
    ]
    for attempt in attempts:
        with pytest.raises(CorruptCheckpoint) as error:
            attempt()
        assert str(path) in str(error.value) and "\n" not in str(error.value)
        assert error.value.exit_code == exitcodes.CORRUPT_CHECKPOINT
    assert path.read_bytes() == before
    [summary] = list_runs(transport)
    assert summary.status == "corrupt" and str(path) in summary.problem


def _winner_twice(state: dict) -> None:
    state["candidates"] = ["a", "b"]
    state["attempts"] = [attempt_state(key, 1, "settled", "winner", commit="c" * 40) for key in ("a", "b")]
    state["usage"]["attempts"] = 2


# Valid JSON, wrong content: each must be refused on read, naming what is wrong, before any write.
BAD_STATES = {
    "attempt without key": (lambda s: s["attempts"][0].pop("key"), "attempts[0].key"),
    "misspelt phase": (lambda s: s["attempts"][0].update(phase="runnig"), "phase is 'runnig'"),
    "bad cleanup": (lambda s: s["attempts"][0].update(cleanup="later"), "cleanup is 'later'"),
    "unknown candidate": (lambda s: s["attempts"][0].update(key="zz"), "'zz' is not a candidate"),
    "candidate without attempts": (lambda s: s["candidates"].append("b"), "candidate 'b' has no attempt"),
    "attempt gap": (
        lambda s: s["attempts"][1].update(
            attempt=3,
            branch=f"outpost/speculation/{RACE_ID}/a/3",
            record={**s["attempts"][1]["record"], "attempt": 3, "branch": None},
        ),
        "expected a#2",
    ),
    "foreign branch": (lambda s: s["attempts"][0].update(branch="main"), "branch is 'main'"),
    "record of another attempt": (
        lambda s: s["attempts"][0]["record"].update(attempt=7),
        "record.attempt is 7",
    ),
    "bad record status": (lambda s: s["attempts"][0]["record"].update(status="won"), "status is 'won'"),
    "usage not an object": (lambda s: s.update(usage=[1, 2]), "usage is list"),
    "usage tokens as text": (lambda s: s["usage"].update(input="12"), "usage.input is '12'"),
    "counter off": (lambda s: s["usage"].update(attempts=5), "usage.attempts is 5, but 2"),
    "baseline not hex": (lambda s: s.update(baseline="HEAD"), "baseline is 'HEAD'"),
    "race id not a race id": (lambda s: s.update(id="../x"), "id '../x' is not a race id"),
    "two winners": (_winner_twice, "more than one winner"),
    "finished without result": (
        lambda s: s.update(
            finished=True,
            status="no-winner",
            attempts=[attempt_state("a", 1, "settled", "rejected")],
            usage={**s["usage"], "attempts": 1},
        ),
        "result is missing",
    ),
    "unsettled superseded attempt": (
        lambda s: s["attempts"][0].update(phase="running"),
        "a#1 is running but was superseded",
    ),
    "run id of another file": (lambda s: s.update(run_id="other-run"), "does not belong to this file"),
}


@pytest.mark.parametrize("name", BAD_STATES)
def test_valid_json_with_a_wrong_state_is_refused_before_any_write(
    transport: LocalTransport, name: str
) -> None:
    store = CheckpointStore(transport, RUN)
    store.claim(initial(2), identity=IDENTITY)
    store.release()
    key = checkpoint_key(RUN)
    envelope = json.loads(transport.read(key).data)
    damage, expected = BAD_STATES[name]
    damage(envelope["state"])
    # sealed again, as a buggy version would have written it: what is tested is the state's rules
    damaged = sealed_envelope(key, json.dumps(envelope["owner"]), json.dumps(envelope["state"]))
    transport.write(key, damaged, if_revision=transport.read(key).revision)
    path = transport.object_path(key)
    before = path.read_bytes()
    for attempt in (
        lambda: read_run(transport, RUN),
        lambda: CheckpointStore(transport, RUN).claim(initial(), identity=IDENTITY),
        lambda: release_run(transport, RUN, transport.read(key).revision),
    ):
        with pytest.raises(CorruptCheckpoint) as error:
            attempt()
        message = str(error.value)
        assert str(path) in message and expected in message and "\n" not in message, message
        assert error.value.exit_code == exitcodes.CORRUPT_CHECKPOINT
    assert path.read_bytes() == before
    [summary] = list_runs(transport)
    assert summary.status == "corrupt" and expected in summary.problem


def test_every_save_refreshes_the_heartbeat(transport: LocalTransport) -> None:
    store = CheckpointStore(transport, RUN)
    store.claim(initial(), identity=IDENTITY)
    claimed = store.read().owner
    time.sleep(0.01)  # heartbeat_at is a wall-clock time: it must visibly advance
    store.save(initial(1))
    saved = store.read().owner
    assert saved.heartbeat_at > claimed.heartbeat_at
    assert (saved.id, saved.pid, saved.started_at) == (claimed.id, claimed.pid, claimed.started_at)


def test_runs_and_inspect_agree_on_a_released_interrupted_run(transport: LocalTransport) -> None:
    store = CheckpointStore(transport, RUN)
    store.claim(initial(1), identity=IDENTITY)
    store.release()
    [summary] = list_runs(transport)
    assert summary.status == "interrupted"


def test_list_runs(transport: LocalTransport) -> None:
    finished = CheckpointStore(transport, "finished-run")
    finished.claim(initial(), identity=IDENTITY)
    finished.save(finished_state())
    finished.release()
    running = CheckpointStore(transport, "running-run")
    running.claim(initial(), identity=IDENTITY)
    runs = list_runs(transport)
    assert [(run.run_id, run.status) for run in runs] == [
        ("running-run", "owned"),
        ("finished-run", "no-winner"),
    ]
    assert runs[0].owner.pid == os.getpid() and runs[1].owner is None
    assert runs[0].revision == running.revision and runs[0].key == checkpoint_key("running-run")


def test_state_must_be_plain_json(transport: LocalTransport) -> None:
    store = CheckpointStore(transport, RUN)
    store.claim(initial(), identity=IDENTITY)
    revision = store.revision
    for bad in ({"path": Path("/x")}, {"cost": float("nan")}):
        with pytest.raises(TypeError, match=f"state of run {RUN} is not plain JSON"):
            store.save(bad)
    assert read_run(transport, RUN).revision == revision


CLAIMER = """
import json, os, sys, time
from outpost_tui.engine.durable.checkpoint import AlreadyOwned, CheckpointStore
from outpost_tui.engine.durable.local_transport import LocalTransport
directory, go, runs, state = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
transport = LocalTransport(directory)
print("ready", flush=True)
deadline = time.monotonic() + 60
while not os.path.exists(go):
    if time.monotonic() > deadline:
        sys.exit("never told to go")
    time.sleep(0.001)
for n in range(runs):
    try:
        CheckpointStore(transport, f"run-{n}").claim({**state, "name": str(os.getpid())}, identity="same")
        print(f"won run-{n}", flush=True)
    except AlreadyOwned:
        print(f"owned run-{n}", flush=True)
"""


def test_processes_claiming_at_once_exactly_one_wins(tmp_path: Path) -> None:
    runs, go = 6, tmp_path / "go"
    directory = tmp_path / "storage"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIMER, str(directory), str(go), str(runs), json.dumps(initial())],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    try:
        for child in children:
            assert child.stdout.readline() == "ready\n"
        go.touch()
        outputs = [child.communicate(timeout=60)[0].split("\n") for child in children]
    finally:
        for child in children:
            child.kill()
            child.wait()
    assert all(child.returncode == 0 for child in children)
    transport = LocalTransport(directory)
    for n in range(runs):
        winners = [
            child.pid for child, lines in zip(children, outputs, strict=True) if f"won run-{n}" in lines
        ]
        losers = [
            child.pid for child, lines in zip(children, outputs, strict=True) if f"owned run-{n}" in lines
        ]
        assert len(winners) == 1 and len(losers) == 2, (n, outputs)
        saved = read_run(transport, f"run-{n}")
        assert saved.owner.pid == winners[0] and saved.state["name"] == str(winners[0])
