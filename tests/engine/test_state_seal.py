"""State under .outpost/ verified before use: the seal key outside the repository, checkpoints a
candidate altered, flight logs it rewrote, and setup cache entries it planted something in. Each
attack beside its control: the same setup untouched, or the same edit sealed with the real key
(what the attacker cannot do), so each test shows it is the seal that tells them apart."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from outpost_tui import exitcodes
from outpost_tui.engine import EventKind, RaceStatus, build_spec, run_race
from outpost_tui.engine.core.spec import CandidateSpec, SandboxSpec, SetupSpec
from outpost_tui.engine.durable.checkpoint import (
    CheckpointStore,
    CorruptCheckpoint,
    UnsealedCheckpoint,
    checkpoint_key,
    list_runs,
    read_run,
    release_run,
    sealed_envelope,
)
from outpost_tui.engine.durable.local_transport import LocalTransport
from outpost_tui.engine.racing import setup as setups
from outpost_tui.engine.records import seal
from outpost_tui.engine.records.flightlog import seal_path
from outpost_tui.engine.records.history import (
    TAMPERED,
    TamperedRace,
    load_recording,
    recorded_races,
    recorded_result,
)
from tests.conftest import cmd
from tests.engine.test_checkpoint import IDENTITY, attempt_state, finished_state
from tests.projects import python_project

RUN = "sealed-run"
VALIDATE = Path(__file__).parents[1] / "fixtures" / "agents" / "validate.py"
UNISOLATED = SandboxSpec(isolation="none")  # the fallback: a candidate can reach .outpost/


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    return home


# ------------------------------------------------------------------------------- the key


def test_the_key_is_made_once_private_outside_the_repository_and_shared_by_processes(state_home):
    value = seal.seal(seal.CHECKPOINT, b"part")
    directory = state_home / "outpost-tui"
    key = directory / seal.KEY_FILE
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and key.stat().st_size == seal.KEY_BYTES
    assert [p.name for p in directory.iterdir()] == [seal.KEY_FILE]  # no temporary file left
    # another process finds the same key: what one coordinator sealed, another verifies
    other = subprocess.run(
        [
            sys.executable,
            "-c",
            "from outpost_tui.engine.records import seal; print(seal.seal(seal.CHECKPOINT, b'part'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert other.stdout.strip() == value and seal.verify(value, seal.CHECKPOINT, b"part")
    # control: the purpose and the parts are sealed, and their framing
    assert not seal.verify(value, seal.FLIGHT_LOG, b"part")
    assert seal.seal(seal.CHECKPOINT, b"ab", b"c") != seal.seal(seal.CHECKPOINT, b"a", b"bc")


def test_another_key_does_not_verify_what_this_one_sealed(tmp_path, monkeypatch):
    value = seal.seal(seal.CHECKPOINT, b"part")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "elsewhere"))
    assert not seal.verify(value, seal.CHECKPOINT, b"part")


def test_a_key_others_can_read_is_refused_in_one_line(state_home):
    directory = state_home / "outpost-tui"
    directory.mkdir(parents=True)
    (directory / seal.KEY_FILE).write_bytes(os.urandom(seal.KEY_BYTES))
    os.chmod(directory / seal.KEY_FILE, 0o644)
    with pytest.raises(seal.SealError) as refused:
        seal.seal(seal.CHECKPOINT, b"part")
    message = str(refused.value)
    assert str(directory / seal.KEY_FILE) in message and "mode 644" in message and "\n" not in message
    os.chmod(directory / seal.KEY_FILE, 0o600)  # control: the same key, private, is used
    assert seal.verify(seal.seal(seal.CHECKPOINT, b"part"), seal.CHECKPOINT, b"part")


# ------------------------------------------------------------------------------- checkpoints


def saved_run(tmp_path: Path) -> tuple[LocalTransport, str]:
    """A finished run a#1 rejected, b#1 the winner, saved and released by its coordinator."""
    transport = LocalTransport(tmp_path / "storage")
    state = finished_state("winner")
    state["candidates"] = ["a", "b"]
    b = attempt_state("b", 1, "settled", "winner")
    b["record"]["commit"] = "b" * 40
    state["attempts"].append(b)
    state["usage"]["attempts"] = 2
    state["result"]["candidates"] = [state["attempts"][0]["record"], b["record"]]
    store = CheckpointStore(transport, RUN)
    store.claim(state, identity=IDENTITY)
    store.release()
    return transport, checkpoint_key(RUN)


def forge_a_winner(state: dict) -> None:
    """What a candidate would like the checkpoint to say: a#1, rejected, won with its commit."""
    a, b = state["attempts"]
    a["record"].update(status="winner", commit="c" * 40)
    b["record"]["status"] = "rejected"
    state["result"]["candidates"] = [a["record"], b["record"]]


def rewrite(transport: LocalTransport, key: str, data: bytes) -> None:
    # as a candidate with write access to .outpost/storage can: through the storage's own format
    transport.write(key, data, if_revision=transport.read(key).revision)


def test_a_checkpoint_edited_to_name_another_winner_is_refused_and_left_untouched(tmp_path):
    transport, key = saved_run(tmp_path)
    envelope = json.loads(transport.read(key).data)
    forge_a_winner(envelope["state"])
    owner, state = json.dumps(envelope["owner"]), json.dumps(envelope["state"], separators=(",", ":"))
    body = f'{{"format":1,"owner":{owner},"state":{state}'.encode()
    # the forger keeps the old seal (it cannot make one): it no longer matches
    rewrite(transport, key, body + b',"seal":"' + envelope["seal"].encode() + b'"}')
    path = transport.object_path(key)
    before = path.read_bytes()
    for step in (
        lambda: read_run(transport, RUN),
        lambda: CheckpointStore(transport, RUN).claim({}, identity=IDENTITY),
        lambda: release_run(transport, RUN, transport.read(key).revision),
    ):
        with pytest.raises(CorruptCheckpoint) as refused:
            step()
        message = str(refused.value)
        assert message.startswith(f"run {RUN}: {path}") and "does not match its seal" in message
        assert "\n" not in message and refused.value.exit_code == exitcodes.CORRUPT_CHECKPOINT
    assert path.read_bytes() == before
    [listed] = list_runs(transport)
    assert listed.status == "corrupt" and "does not match its seal" in listed.problem

    # control: the very same edit, sealed with the key (which no candidate holds), is believed
    rewrite(transport, key, sealed_envelope(key, owner, state))
    saved = read_run(transport, RUN)
    assert [(a["key"], a["record"]["status"]) for a in saved.state["attempts"]] == [
        ("a", "winner"),
        ("b", "rejected"),
    ]


def test_a_checkpoint_with_its_seal_cut_off_is_unsealed_and_refused(tmp_path):
    transport, key = saved_run(tmp_path)
    data = transport.read(key).data
    rewrite(transport, key, data[: data.rindex(b',"seal":')] + b"}")
    with pytest.raises(UnsealedCheckpoint) as refused:
        read_run(transport, RUN)
    assert "has no seal" in str(refused.value) and "new run_id" in str(refused.value)
    assert refused.value.exit_code == exitcodes.CORRUPT_CHECKPOINT
    assert [run.status for run in list_runs(transport)] == ["unsealed"]
    rewrite(transport, key, data)  # control: the file as the engine wrote it
    assert read_run(transport, RUN).state["attempts"][1]["record"]["status"] == "winner"
    assert [run.status for run in list_runs(transport)] == ["winner"]


def test_a_checkpoint_moved_to_another_runs_key_is_refused(tmp_path):
    transport, key = saved_run(tmp_path)
    other = checkpoint_key("another-run")
    # the other run's file holds this run's sealed bytes: the seal covers the key it was made for
    transport.write(other, transport.read(key).data, if_revision=None)
    with pytest.raises(CorruptCheckpoint) as refused:
        read_run(transport, "another-run")
    assert "does not match its seal" in str(refused.value)


def test_sealing_costs_little_per_save(tmp_path):
    """The seal is one HMAC over the bytes written (a timing for the record, bounded loosely)."""
    import time

    transport, key = saved_run(tmp_path)
    envelope = json.loads(transport.read(key).data)
    state = json.dumps(envelope["state"], separators=(",", ":"))
    started = time.process_time()
    for _ in range(2000):
        sealed_envelope(key, "null", state)
    per_save = (time.process_time() - started) / 2000
    print(f"seal per save: {per_save * 1e6:.1f} µs of CPU for a {len(state)}-byte state")
    assert per_save < 0.002


# ------------------------------------------------------------------------------- flight logs


def finished_race(repo: Path, *extra: CandidateSpec):
    spec = build_spec(
        repository=repo,
        mode="fallback",
        validate=[sys.executable, str(VALIDATE)],
        sandbox=UNISOLATED,
        # in fallback order: the extra candidates run first, each to its end
        candidates=[
            *extra,
            cmd("bad", "--write", "fix.txt", "--content", "bad", "--commit"),
            cmd("good", "--write", "fix.txt", "--content", "good", "--commit"),
        ],
    )
    result = run_race(spec)
    assert result.winner is not None and result.winner.key == "good"
    return result


def claim_bad_won(race_file: Path) -> None:
    lines = race_file.read_text().splitlines()
    forged = []
    for line in lines:
        event = json.loads(line)
        if event["kind"] == "race-finished":
            event["winner"] = "bad"
            event["result"]["winner"] = {**event["result"]["winner"], "key": "bad"}
        forged.append(json.dumps(event))
    race_file.write_text("\n".join(forged) + "\n")


def test_a_race_log_rewritten_to_claim_a_win_is_tampered_and_not_shown(repo):
    result = finished_race(repo)
    [race] = recorded_races(repo)
    # control first: the log as the race wrote it
    assert (race.status, race.winner, race.seal) == ("winner", "good", "sealed")
    assert recorded_result(repo, result.id)["winner"]["key"] == "good"

    claim_bad_won(repo / ".outpost" / "runs" / result.id / "race.jsonl")
    [race] = recorded_races(repo)
    assert (race.status, race.winner, race.finished, race.seal) == (TAMPERED, None, False, TAMPERED)
    assert race.problem.startswith("race.jsonl changed after the race wrote it")
    for read in (recorded_result, load_recording):
        with pytest.raises(TamperedRace) as refused:
            read(repo, result.id)
        assert "does not match its flight log's seal" in str(refused.value)
        assert refused.value.exit_code == exitcodes.CORRUPT_CHECKPOINT


def test_an_attempt_log_planted_or_edited_in_a_sealed_race_is_tampered(repo):
    result = finished_race(repo)
    directory = repo / ".outpost" / "runs" / result.id
    good = directory / "good.1.jsonl"
    original = good.read_bytes()
    # same size, different bytes: only the content check sees it
    good.write_bytes(original.replace(b'"good"', b'"evil"', 1))
    assert len(good.read_bytes()) == len(original)
    assert recorded_races(repo)[0].status == "winner"  # history reads race.jsonl only
    with pytest.raises(TamperedRace, match=r"good\.1\.jsonl changed after the race wrote it"):
        load_recording(repo, result.id)
    good.write_bytes(original)  # control: put back, it reads again
    assert load_recording(repo, result.id).result.winner.key == "good"

    (directory / "evil.1.jsonl").write_text('{"kind":"settled","at":1,"key":"evil","attempt":1}\n')
    [race] = recorded_races(repo)
    assert race.status == TAMPERED and race.problem == "evil.1.jsonl was not written by the race"


# An agent that rewrites its own race's race.jsonl while the race runs (the fallback lets it reach
# .outpost/): the seal covers what the engine appended, so the edit is caught after the race ends.
REWRITER = textwrap.dedent("""\
    import pathlib, sys
    runs = pathlib.Path(sys.argv[1]) / ".outpost" / "runs"
    [race] = [p for p in runs.iterdir() if p.is_dir()]
    log = race / "race.jsonl"
    log.write_text(log.read_text().replace('"bad"', '"cheater"'))
    """)


def test_a_candidate_rewriting_its_races_log_while_it_runs_is_caught(repo):
    rewriter = CandidateSpec("rewriter", "command", "b", command=(sys.executable, "-c", REWRITER, str(repo)))
    result = finished_race(repo, rewriter)
    [race] = recorded_races(repo)
    assert race.status == TAMPERED and race.problem.startswith("race.jsonl changed after the race wrote it")
    with pytest.raises(TamperedRace):
        recorded_result(repo, result.id)


def test_control_a_candidate_that_leaves_the_log_alone_is_sealed(repo):
    honest = CandidateSpec("honest", "command", "b", command=(sys.executable, "-c", "pass"))
    result = finished_race(repo, honest)
    [race] = recorded_races(repo)
    assert (race.status, race.seal) == ("winner", "sealed")
    assert recorded_result(repo, result.id)["id"] == result.id


def test_a_log_with_no_seal_is_read_as_it_is_and_marked_unsealed(repo):
    result = finished_race(repo)
    seal_path(result.id).unlink()  # as a race recorded before logs were sealed
    [race] = recorded_races(repo)
    assert (race.status, race.winner, race.seal) == ("winner", "good", "unsealed")
    assert race.to_json()["seal"] == "unsealed"


# ------------------------------------------------------------------------------- setup cache


def build_entry(tmp_path: Path) -> tuple[Path, str, Path]:
    """A cache entry stored by the engine from a built checkout: a venv-like tree."""
    built = tmp_path / "built"
    (built / ".venv" / "bin").mkdir(parents=True)
    (built / ".venv" / "lib").mkdir()
    (built / ".venv" / "lib" / "demo_lib.py").write_text("VALUE = 42\n")
    (built / ".venv" / "bin" / "tool").write_text(f"#!{built}/.venv/bin/python\n")
    os.chmod(built / ".venv" / "bin" / "tool", 0o755)
    os.symlink("lib/demo_lib.py", built / ".venv" / "link")
    outpost = tmp_path / "repo" / ".outpost"
    assert setups.store_cache(outpost, "k" * 32, built, (".venv",))
    return outpost, "k" * 32, setups.cache_entry(outpost, "k" * 32)


def _edit(entry: Path) -> None:
    (entry / ".venv" / "lib" / "demo_lib.py").write_text("VALUE = 666\n")


def _plant(entry: Path) -> None:
    (entry / ".venv" / "lib" / "sitecustomize.py").write_text("import os; os.system('evil')\n")


def _chmod(entry: Path) -> None:
    os.chmod(entry / ".venv" / "lib" / "demo_lib.py", 0o755)


def _relink(entry: Path) -> None:
    os.unlink(entry / ".venv" / "link")
    os.symlink("/etc/passwd", entry / ".venv" / "link")


def _reseal_digests(entry: Path) -> None:
    # the attacker edits the module and writes digests that match it; it cannot seal them
    _edit(entry)
    manifest = json.loads((entry / setups.MANIFEST).read_text())
    manifest["digests"][".venv"] = setups.tree_digest(entry / ".venv")
    (entry / setups.MANIFEST).write_text(json.dumps(manifest))


def _unseal(entry: Path) -> None:
    # as an entry written before entries were sealed
    manifest = json.loads((entry / setups.MANIFEST).read_text())
    (entry / setups.MANIFEST).write_text(json.dumps({"source": manifest["source"], "paths": [".venv"]}))


TAMPERINGS = {
    "module edited": (_edit, "changed since it was built (.venv)"),
    "module planted": (_plant, "changed since it was built (.venv)"),
    "mode changed": (_chmod, "changed since it was built (.venv)"),
    "link retargeted": (_relink, "changed since it was built (.venv)"),
    "digests rewritten to match": (_reseal_digests, "does not match its seal"),
    "no seal": (_unseal, "has no sealed record of what the engine built"),
}


@pytest.mark.parametrize("how", TAMPERINGS)
def test_a_tampered_cache_entry_is_discarded_and_nothing_of_it_stays_in_the_checkout(tmp_path, how):
    outpost, key, entry = build_entry(tmp_path)
    tamper, why = TAMPERINGS[how]
    tamper(entry)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    restored = setups.restore_cache(outpost, key, checkout)
    assert not restored.hit
    assert restored.problem == f"setup cache entry {entry} {why}: discarded, setup runs without it"
    assert list(checkout.iterdir()) == [] and not entry.exists()
    assert [p.name for p in entry.parent.iterdir()] == []  # nothing left aside either


def test_control_an_untouched_cache_entry_is_copied_and_relocated(tmp_path):
    outpost, key, entry = build_entry(tmp_path)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    restored = setups.restore_cache(outpost, key, checkout)
    assert restored == setups.Restored(True)
    assert (checkout / ".venv" / "lib" / "demo_lib.py").read_text() == "VALUE = 42\n"
    assert (checkout / ".venv" / "bin" / "tool").read_text() == f"#!{checkout}/.venv/bin/python\n"
    assert entry.is_dir()  # kept for the next checkout


# A candidate that, during its attempt, plants a value in the cached venv's copy of demo_lib, then
# leaves a change to be graded: its grading checkout's setup, and every later one, would run with
# 666 instead of 42 if setup used the entry.
PLANTER = textwrap.dedent("""\
    import pathlib, sys
    cache = pathlib.Path(sys.argv[1]) / ".outpost" / "cache"
    for module in cache.glob("*/.venv/lib/*/site-packages/demo_lib/__init__.py"):
        module.write_text("VALUE = 666\\nVERSION = 'planted'\\n")
        print("planted", module)
    pathlib.Path("planted.txt").write_text("done")
    """)
MODULES = ".venv/lib/*/site-packages/demo_lib/__init__.py"


def venv_race(repo: Path, *candidates: CandidateSpec):
    events: list = []
    spec = build_spec(
        repository=repo,
        candidates=candidates,
        validate=[".venv/bin/python", "check.py"],
        score=["echo", "1"],
        sandbox=UNISOLATED,
        setup=SetupSpec(
            command=("sh", "setup.sh"), cache=(".venv",), cache_key=("requirements*.txt", "wheels/*.whl")
        ),
    )
    return run_race(spec, on_event=events.append), events


def cache_warnings(events: list) -> list[str]:
    return [e.message for e in events if e.kind is EventKind.WARNING and "setup cache entry" in e.message]


@pytest.mark.parametrize("planted", [True, False], ids=["planted", "control"])
def test_a_module_planted_in_the_cache_during_an_attempt_never_reaches_a_later_setup(tmp_path, planted):
    repo = python_project(tmp_path / "project")
    first = cmd("first", "--write", "a.txt", "--commit")
    if planted:
        first = CandidateSpec("first", "command", "b", command=(sys.executable, "-c", PLANTER, str(repo)))
    result, events = venv_race(repo, first)
    [entry] = [p for p in (repo / ".outpost" / "cache").iterdir() if not p.name.startswith(".")]
    said = [line for e in events if e.kind is EventKind.LOG for line in e.lines if line.startswith("planted")]
    assert bool(said) is planted  # the attack did happen, on the entry the race built
    warnings = cache_warnings(events)
    if planted:
        # the grading checkout's setup found it: discarded, named, built again from the baseline
        assert warnings and all(
            f"setup cache entry {entry} changed since it was built" in w for w in warnings
        )
    else:
        assert warnings == []
    assert all("666" not in m.read_text() for m in entry.glob(MODULES))

    result, events = venv_race(repo, cmd("next", "--write", "b.txt", "--commit"))
    [record] = result.candidates
    assert result.status is RaceStatus.WINNER, record.error
    assert record.validation.status == "passed"  # check.py saw demo_lib.VALUE == 42
    assert cache_warnings(events) == [] and record.setup["cache"] == "hit"


def test_a_module_planted_between_races_is_discarded_and_rebuilt(tmp_path):
    repo = python_project(tmp_path / "project")
    venv_race(repo, cmd("first", "--write", "a.txt", "--commit"))
    [entry] = [p for p in (repo / ".outpost" / "cache").iterdir() if not p.name.startswith(".")]
    for module in entry.glob(MODULES):
        module.write_text("VALUE = 666\n")
    result, events = venv_race(repo, cmd("next", "--write", "b.txt", "--commit"))
    [record] = result.candidates
    assert result.status is RaceStatus.WINNER and record.validation.status == "passed", record.error
    warnings = cache_warnings(events)
    assert warnings and all(f"setup cache entry {entry} changed since it was built" in w for w in warnings)
    assert "built" in [e.cache for e in events if e.kind is EventKind.SETUP_FINISHED]
    assert all("666" not in m.read_text() for m in entry.glob(MODULES))
