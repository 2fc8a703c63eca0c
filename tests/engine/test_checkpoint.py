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
from outpost_tui.engine.checkpoint import (
    AlreadyOwned, CheckpointError, CheckpointStore, CorruptCheckpoint, IdentityMismatch, RevisionChanged,
    UnknownRun, checkpoint_key, list_runs, race_identity, read_run, release_run,
)
from outpost_tui.engine.ownership import this_host
from outpost_tui.engine.spec import BudgetSpec, CandidateSpec, DurabilitySpec, RaceSpec, SandboxSpec, TokenLimits
from outpost_tui.engine.transport import LocalTransport

RUN = "parser-race"
IDENTITY = "identity-1"


@pytest.fixture
def transport(tmp_path: Path) -> LocalTransport:
    return LocalTransport(tmp_path / "storage")


def initial(attempts: int = 0) -> dict:
    return {"id": "race-1", "finished": False, "usage": {"attempts": attempts, "tokens": 0},
            "attempts": [{"key": "a", "attempt": n + 1, "phase": "running"} for n in range(attempts)]}


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
        CheckpointStore(transport, RUN).claim(initial(), identity=IDENTITY)
    message = str(owned.value)
    assert f"pid {os.getpid()} on {this_host()}" in message and "heartbeat" in message
    assert f"run `outpost-tui recover {RUN}`" in message and "\n" not in message
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
    base = RaceSpec(repository=repository,
                    candidates=(CandidateSpec("a", "claude", "fix the parser", model="opus"),
                                CandidateSpec("b", "command", "fix the parser", command=("./agent",))),
                    budget=BudgetSpec(attempts=4, tokens=TokenLimits(output=1000), cost_usd=2.0),
                    durability=DurabilitySpec(enabled=True, version="1"))
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
        spec(repo, candidates=(CandidateSpec("a", "claude", "fix the parser", model="sonnet"),
                               CandidateSpec("b", "command", "fix the parser"))),
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
    attempts = [CheckpointStore(transport, RUN).read, lambda: read_run(transport, RUN),
                lambda: CheckpointStore(transport, RUN).claim(initial(), identity=IDENTITY),
                lambda: release_run(transport, RUN, "any")]
    for attempt in attempts:
        with pytest.raises(CorruptCheckpoint) as error:
            attempt()
        assert str(path) in str(error.value) and "\n" not in str(error.value)
        assert error.value.exit_code == exitcodes.CORRUPT_CHECKPOINT
    assert path.read_bytes() == before
    [summary] = list_runs(transport)
    assert summary.status == "corrupt" and str(path) in summary.problem


def test_list_runs(transport: LocalTransport) -> None:
    finished = CheckpointStore(transport, "finished-run")
    finished.claim(initial(), identity=IDENTITY)
    finished.save({**initial(1), "finished": True, "status": "winner"})
    finished.release()
    running = CheckpointStore(transport, "running-run")
    running.claim(initial(), identity=IDENTITY)
    runs = list_runs(transport)
    assert [(run.run_id, run.status) for run in runs] == [("running-run", "owned"), ("finished-run", "winner")]
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
import os, sys, time
from outpost_tui.engine.checkpoint import AlreadyOwned, CheckpointStore
from outpost_tui.engine.transport import LocalTransport
directory, go, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
transport = LocalTransport(directory)
print("ready", flush=True)
deadline = time.monotonic() + 60
while not os.path.exists(go):
    if time.monotonic() > deadline:
        sys.exit("never told to go")
    time.sleep(0.001)
for n in range(runs):
    try:
        CheckpointStore(transport, f"run-{n}").claim({"pid": os.getpid()}, identity="same")
        print(f"won run-{n}", flush=True)
    except AlreadyOwned:
        print(f"owned run-{n}", flush=True)
"""


def test_processes_claiming_at_once_exactly_one_wins(tmp_path: Path) -> None:
    runs, go = 6, tmp_path / "go"
    directory = tmp_path / "storage"
    children = [subprocess.Popen([sys.executable, "-c", CLAIMER, str(directory), str(go), str(runs)],
                                 stdout=subprocess.PIPE, text=True) for _ in range(3)]
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
        winners = [child.pid for child, lines in zip(children, outputs) if f"won run-{n}" in lines]
        losers = [child.pid for child, lines in zip(children, outputs) if f"owned run-{n}" in lines]
        assert len(winners) == 1 and len(losers) == 2, (n, outputs)
        saved = read_run(transport, f"run-{n}")
        assert saved.owner.pid == winners[0] and saved.state["pid"] == winners[0]
