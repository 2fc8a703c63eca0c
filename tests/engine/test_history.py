"""Looking back at races: the flight logs of real races (fake agents, real git, a real coordinator
killed by SIGKILL) read back as a listing, as events and as the model the race ended with."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from outpost_tui.engine import build_spec, run_race
from outpost_tui.engine.core.events import Event
from outpost_tui.engine.errors import OutpostError
from outpost_tui.engine.git import GitError
from outpost_tui.engine.records.flightlog import seal_path
from outpost_tui.engine.records.history import (
    UNFINISHED,
    UNREADABLE,
    UnknownRace,
    load_events,
    load_recording,
    recorded_races,
    recorded_result,
)
from tests.conftest import FAKE_AGENT, cmd, pids

CLI = [sys.executable, "-m", "outpost_tui.cli"]
VALIDATE = Path(__file__).parents[1] / "fixtures" / "agents" / "validate.py"


def finished_race(repo: Path) -> tuple[object, list[Event]]:
    """A fallback race of two fake agents (the first rejected, the second wins), and every event
    it published, as a subscriber saw them live."""
    seen: list[Event] = []
    spec = build_spec(
        repository=repo,
        mode="fallback",
        validate=[sys.executable, str(VALIDATE)],
        candidates=[
            cmd(
                "bad",
                "--write",
                "fix.txt",
                "--content",
                "bad",
                "--commit",
                "--lines",
                "30",
                "--usage",
                "10",
                "0",
                "0",
                "5",
            ),
            cmd("good", "--write", "fix.txt", "--content", "good", "--commit"),
        ],
    )
    result = run_race(spec, on_event=seen.append)
    assert result.winner is not None and result.winner.key == "good", json.dumps(
        [c.to_json() for c in result.candidates], indent=1, default=str
    )
    return result, seen


def as_written(event: Event) -> dict:
    """An event as its flight-log line holds it."""
    return json.loads(json.dumps(event.to_json(), default=str))


def runs(repo: Path) -> Path:
    return repo / ".outpost" / "runs"


def test_load_events_gives_back_every_event_in_the_order_it_was_published(repo):
    result, seen = finished_race(repo)
    loaded = load_events(repo, result.id)
    assert [(e.kind, e.key, e.attempt) for e in loaded] == [(e.kind, e.key, e.attempt) for e in seen]
    assert [as_written(e) for e in loaded] == [as_written(e) for e in seen]
    assert {e.key for e in loaded} == {None, "bad", "good"}
    assert all(isinstance(e, Event) for e in loaded)
    # from a subdirectory of the checkout too
    (repo / "sub").mkdir()
    assert len(load_events(repo / "sub", result.id)) == len(seen)


def test_a_recording_ends_where_the_live_race_ended(repo):
    result, seen = finished_race(repo)
    recording = load_recording(repo, result.id)
    assert recording.result_json == json.loads(json.dumps(result.to_json(), default=str))
    assert recording.result.winner.key == "good"
    assert recording.baseline == result.baseline
    assert recording.events == len(seen)
    assert [c.key for c in recording.spec.candidates] == ["bad", "good"]
    assert {c.agent for c in recording.spec.candidates} == {"command"}
    assert recording.spec.mode == "fallback"
    states = {key: c.state for key, c in recording.model.candidates.items()}
    assert states == {"bad": "rejected", "good": "winner"}
    bad = recording.model.candidates["bad"]
    assert bad.lines >= 30 and "log line 29" in bad.log and bad.usage.output == 5
    assert recording.model.candidates["good"].branch == result.winner.branch
    assert recorded_result(repo, result.id) == recording.result_json


def start_coordinator(path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*CLI, "run", str(path), "--headless"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def wait_for(condition, what: str, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"coordinator ended before {what}: {process.stderr.read()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def killed_race(repo: Path, tmp_path: Path) -> str:
    """A race whose coordinator was SIGKILLed while one agent ran and another had settled."""
    ready, pidfile = tmp_path / "hang-ready", tmp_path / "hang.pid"

    def argv(*flags):
        return json.dumps([sys.executable, str(FAKE_AGENT), *flags])

    path = tmp_path / "killed.toml"
    path.write_text(
        f'[race]\nname = "killed"\nrepository = "{repo}"\n\n[validate]\ncommand = ["false"]\n'
        f'\n[[candidates]]\nkey = "hangs"\nagent = "command"\nbrief = "b"\n'
        f"command = {argv('--ready', str(ready), '--pidfile', str(pidfile), '--hang')}\n"
        f'\n[[candidates]]\nkey = "fails"\nagent = "command"\nbrief = "b"\n'
        f"command = {argv('--exit', '3')}\n"
    )
    process = start_coordinator(path)

    def settled():
        return any("settled" in p.read_text() for p in runs(repo).glob("*/fails.1.jsonl"))

    try:
        wait_for(
            lambda: ready.exists() and pidfile.exists() and settled(), "hangs running, fails settled", process
        )
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        process.stderr.close()
    # The crash left the agent running (nobody stops it now): this test does.
    for pid in pids(pidfile):
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).kill()
    [directory] = [
        d
        for d in runs(repo).iterdir()
        if json.loads((d / "race.jsonl").read_text().splitlines()[0])["name"] == "killed"
    ]
    return directory.name


def test_a_finished_race_and_a_killed_one_are_listed_newest_first(repo, tmp_path):
    result, _ = finished_race(repo)
    killed = killed_race(repo, tmp_path)
    listed = recorded_races(repo)
    assert [r.id for r in listed] == [killed, result.id]
    newest, older = listed
    assert (newest.status, newest.finished, newest.finished_at) == (UNFINISHED, False, None)
    assert newest.name == "killed" and newest.candidates == ("hangs", "fails")
    assert newest.winner is None and newest.problem is None and newest.started_at
    assert (older.status, older.finished, older.winner) == ("winner", True, "good")
    assert older.winner_branch == result.winner.branch
    assert older.candidates == ("bad", "good")
    assert older.started_at <= older.finished_at <= newest.started_at
    assert older.to_json()["finished"] is True and newest.to_json()["status"] == "unfinished"
    # What was recorded before the kill reads back, and there is no result to give.
    events = load_events(repo, killed)
    assert [(e.kind, e.key) for e in events if e.kind == "settled"] == [("settled", "fails")]
    assert recorded_result(repo, killed) is None
    recording = load_recording(repo, killed)
    assert recording.result is None
    assert recording.model.candidates["hangs"].state == "running"
    assert recording.model.candidates["fails"].state == "failed"


def test_a_torn_last_line_and_unknown_kinds_are_skipped(repo):
    result, seen = finished_race(repo)
    seal_path(result.id).unlink()  # as a coordinator killed before it sealed its log leaves it
    directory = runs(repo) / result.id
    with open(directory / "good.1.jsonl", "ab") as handle:
        handle.write(
            json.dumps(
                {"kind": "from-a-later-version", "at": time.time(), "key": "good", "attempt": 1}
            ).encode()
            + b"\n"
        )
        handle.write('{"kind":"log","lines":["caf\u00e9'.encode()[:-1])  # cut inside "é"
    with open(directory / "race.jsonl", "ab") as handle:
        handle.write(b'{"kind":"race-fini')
    assert [as_written(e) for e in load_events(repo, result.id)] == [as_written(e) for e in seen]
    [race] = recorded_races(repo)
    assert race.status == "winner" and race.problem is None


def test_an_event_whose_payload_cannot_be_replayed_is_left_out(repo):
    result, seen = finished_race(repo)
    seal_path(result.id).unlink()  # as a coordinator killed before it sealed its log leaves it
    with open(runs(repo) / result.id / "bad.1.jsonl", "a") as handle:
        handle.write(json.dumps({"kind": "log", "at": time.time(), "key": "bad", "attempt": 1}) + "\n")
    recording = load_recording(repo, result.id)
    assert (recording.skipped, recording.events) == (1, len(seen))
    assert recording.model.candidates["bad"].state == "rejected"


def test_a_race_killed_while_writing_its_finish_is_unfinished(repo):
    result, _ = finished_race(repo)
    seal_path(result.id).unlink()  # as a coordinator killed before it sealed its log leaves it
    race_file = runs(repo) / result.id / "race.jsonl"
    lines = race_file.read_bytes().splitlines(keepends=True)
    assert b'"race-finished"' in lines[-1]
    race_file.write_bytes(b"".join(lines[:-1]) + lines[-1][:40])
    [race] = recorded_races(repo)
    assert (race.status, race.finished, race.winner) == (UNFINISHED, False, None)
    assert recorded_result(repo, result.id) is None


def test_unreadable_races_are_listed_with_their_problem(repo):
    result, _ = finished_race(repo)
    (runs(repo) / "20000101-000000-empty0").mkdir()
    broken = runs(repo) / "20000101-000000-broken"
    (broken / "race.jsonl").mkdir(parents=True)  # a directory where the file should be
    garbled = runs(repo) / "20000101-000000-garble"
    garbled.mkdir()
    (garbled / "race.jsonl").write_bytes(b"\x00\xff not json\n")
    for directory in (broken, garbled):
        os.utime(directory, (946684800, 946684800))  # 2000-01-01: undated races sort by their mtime
    listed = {r.id: r for r in recorded_races(repo)}
    assert listed[result.id].status == "winner"
    assert listed["20000101-000000-empty0"].problem == "no race.jsonl"
    assert listed["20000101-000000-broken"].problem.startswith("cannot read race.jsonl")
    assert listed["20000101-000000-garble"].problem == "race.jsonl has no race-started event"
    assert all(listed[k].status == UNREADABLE for k in listed if k != result.id)
    assert next(iter(listed)) == "20000101-000000-empty0"  # made just now
    assert list(listed)[1] == result.id


def test_an_unknown_race_id_is_a_one_line_error_naming_the_closest(repo):
    result, _ = finished_race(repo)
    typo = result.id[:-1] + ("0" if result.id[-1] != "0" else "1")
    for wrong in (typo, "../../etc", "nothing-like-it"):
        with pytest.raises(UnknownRace) as caught:
            load_events(repo, wrong)
        message = str(caught.value)
        assert isinstance(caught.value, OutpostError)
        assert "\n" not in message and repr(wrong) in message and result.id in message


def test_a_repository_without_races_and_a_directory_outside_git(repo, tmp_path):
    assert recorded_races(repo) == []
    with pytest.raises(UnknownRace, match="no race has been recorded"):
        load_events(repo, "20260101-000000-abcdef")
    outside = tmp_path / "plain"
    outside.mkdir()
    with pytest.raises(GitError):
        recorded_races(outside)
    assert not os.path.exists(repo / ".outpost" / "runs")  # reading never creates anything
