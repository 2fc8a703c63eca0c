"""Durable races and crash recovery with a real coordinator (the headless CLI) killed by SIGKILL."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import FAKE_AGENT, git

CLI = [sys.executable, "-m", "outpost_tui.cli"]
VALIDATE = Path(__file__).parents[1] / "fixtures" / "agents" / "validate.py"
RUN_ID = "crash-test"


def race_file(tmp_path: Path, repo: Path, candidates: list[tuple[str, list[str]]], *,
              validate: list[str] | None = None, extra: str = "") -> Path:
    validate = validate or [sys.executable, str(VALIDATE)]
    text = textwrap.dedent(f"""\
        [race]
        name = "durable"
        repository = "{repo}"
        run_id = "{RUN_ID}"
        {extra}

        [validate]
        command = {json.dumps(validate)}

        [durability]
        enabled = true
        version = "1"
        """)
    for key, flags in candidates:
        argv = json.dumps([sys.executable, str(FAKE_AGENT), *flags])
        text += f'\n[[candidates]]\nkey = "{key}"\nagent = "command"\nbrief = "fix {key}"\ncommand = {argv}\n'
    path = tmp_path / "race.toml"
    path.write_text(text)
    return path


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def start(path: Path) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "run", str(path), "--headless", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(condition, what: str, process: subprocess.Popen | None = None, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"coordinator ended before {what}: {process.stderr.read()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def crash(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    process.stdout.close()
    process.stderr.close()


def inspect(repo: Path) -> dict:
    done = cli("recover", RUN_ID, "--repo", str(repo), "--inspect", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def recorded_pids(view: dict) -> list[int]:
    return [int(r.split(":")[1]) for a in view["attempts"] for r in a["resources"] if r.startswith("pgid:")]


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def release_and_replay(repo: Path, path: Path, view: dict) -> dict:
    """The recovery steps after a crash, each checked, ending with the replay's result."""
    assert view["owner"] is not None and view["coordinator"]["alive"] is False
    owned = cli("run", str(path), "--headless")
    assert owned.returncode == 3 and "recover" in owned.stderr and "Traceback" not in owned.stderr
    stale = cli("recover", RUN_ID, "--repo", str(repo), "--release", "--revision", "0" * 32)
    assert stale.returncode == 4, stale.stderr
    released = cli("recover", RUN_ID, "--repo", str(repo), "--release", "--revision", view["revision"])
    assert released.returncode == 0, released.stderr
    unauthorised = cli("run", str(path), "--headless")
    assert unauthorised.returncode == 10 and "--replay" in unauthorised.stderr
    replay = cli("recover", RUN_ID, "--repo", str(repo), "--replay", "--json")
    assert replay.returncode == 0, replay.stderr
    return json.loads(replay.stdout)


def test_killed_while_agents_run(repo, tmp_path):
    ready = tmp_path / "a-ready"
    path = race_file(tmp_path, repo, [
        ("a", ["--ready", str(ready), "--pidfile", str(tmp_path / "a.pid"), "--spawn-child",
               "--hang-on-attempt", "1", "--write", "fix.txt", "--content", "good", "--commit"]),
        ("b", ["--write", "fix.txt", "--content", "bad", "--commit"]),
    ])
    process = start(path)
    settled_b = lambda: any("settled" in p.read_text() for p in repo.glob(".outpost/runs/*/b.1.jsonl"))
    wait_for(lambda: ready.exists() and settled_b(), "a running and b settled", process)
    crash(process)
    first_pids = [int(p) for p in (tmp_path / "a.pid").read_text().split()]
    assert not gone(first_pids[0])  # the crash left the agent running: replay must stop it

    view = inspect(repo)
    phases = {(a["key"], a["attempt"]): a["phase"] for a in view["attempts"]}
    assert phases == {("a", 1): "running", ("b", 1): "settled"}
    assert view["status"] == "owned"
    result = release_and_replay(repo, path, view)

    assert result["status"] == "winner"
    assert result["winner"]["key"] == "a" and result["winner"]["attempt"] == 2
    by_key = {c["key"]: c for c in result["candidates"]}
    assert by_key["b"]["status"] == "rejected" and by_key["b"]["attempt"] == 1  # not rerun
    assert [(p["key"], p["attempt"], p["status"]) for p in result["previous_attempts"]] == [("a", 1, "cancelled")]
    assert "interrupted" in result["previous_attempts"][0]["error"]
    assert result["usage"]["attempts"] == 3
    assert result["usage"]["complete"] is False
    race_id = result["id"]
    for branch in ("a/1", "a/2", "b/1"):
        git(repo, "rev-parse", "--verify", f"outpost/speculation/{race_id}/{branch}")
    assert all(gone(pid) for pid in first_pids)
    # Durable races keep every worktree.
    assert all(Path(c["directory"]).exists() for c in result["candidates"])
    # A finished race is returned again without running anything.
    again = cli("run", str(path), "--headless", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["id"] == race_id
    assert json.loads(again.stdout)["winner"] == result["winner"]


def test_killed_during_validation(repo, tmp_path):
    mark = tmp_path / "validating"
    path = race_file(tmp_path, repo, [
        ("a", ["--write", "fix.txt", "--content", "good", "--commit"])],
        validate=[sys.executable, str(VALIDATE), "--mark", str(mark), "--hang-on-attempt", "1"])
    process = start(path)
    wait_for(mark.exists, "validation to start", process)
    crash(process)
    view = inspect(repo)
    assert [(a["key"], a["phase"]) for a in view["attempts"]] == [("a", "running")]
    validation_pids = recorded_pids(view)
    result = release_and_replay(repo, path, view)
    assert result["winner"]["key"] == "a" and result["winner"]["attempt"] == 2
    assert result["usage"]["attempts"] == 2
    assert all(gone(pid) for pid in validation_pids)


def test_killed_during_allocation(repo, tmp_path):
    mark = tmp_path / "allocating"
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\nif [ ! -e {mark} ]; then touch {mark}; sleep 120; fi\n")
    hook.chmod(0o755)
    path = race_file(tmp_path, repo, [("a", ["--write", "fix.txt", "--content", "good", "--commit"])])
    process = start(path)
    wait_for(mark.exists, "the worktree to be allocated", process)
    crash(process)
    view = inspect(repo)
    assert [(a["key"], a["phase"]) for a in view["attempts"]] == [("a", "running")]
    result = release_and_replay(repo, path, view)
    assert result["winner"]["attempt"] == 2
    assert result["previous_attempts"][0]["status"] == "cancelled"
    assert result["usage"]["attempts"] == 2


def test_killed_during_cleanup_keeps_the_validated_winner(repo, tmp_path):
    term = tmp_path / "loser-got-term"
    path = race_file(tmp_path, repo, [
        ("w", ["--wait-file", str(tmp_path / "l.pid"), "--write", "fix.txt", "--content", "good", "--commit"]),
        ("l", ["--pidfile", str(tmp_path / "l.pid"), "--ignore-term", str(term), "--hang"]),
    ])
    process = start(path)
    wait_for(term.exists, "the loser to be told to stop", process)
    crash(process)
    view = inspect(repo)
    phases = {a["key"]: a["phase"] for a in view["attempts"]}
    assert phases["w"] in ("validated", "settled") and phases["l"] == "running"
    loser_pid = int((tmp_path / "l.pid").read_text().split()[0])
    result = release_and_replay(repo, path, view)
    assert result["winner"]["key"] == "w" and result["winner"]["attempt"] == 1  # not rerun
    assert result["usage"]["attempts"] == 2
    assert gone(loser_pid)


def test_two_coordinators_at_once_exactly_one_proceeds(repo, tmp_path):
    go = tmp_path / "go"
    path = race_file(tmp_path, repo, [
        ("a", ["--wait-file", str(go), "--write", "fix.txt", "--content", "good", "--commit"])])
    first, second = start(path), start(path)
    codes = []
    deadline = time.monotonic() + 60
    while not codes:
        codes = [p.returncode for p in (first, second) if p.poll() is not None]
        assert time.monotonic() < deadline
        time.sleep(0.02)
    go.touch()
    outputs = [p.communicate(timeout=60) for p in (first, second)]
    assert sorted([first.returncode, second.returncode]) == [0, 3], outputs
    loser_err = outputs[[first.returncode, second.returncode].index(3)][1]
    assert "already owned" in loser_err or "owned" in loser_err


@pytest.mark.parametrize("damage", ["garbled", "truncated"])
def test_damaged_checkpoint_is_reported_and_left_alone(repo, tmp_path, damage):
    path = race_file(tmp_path, repo, [("a", ["--write", "fix.txt", "--content", "good", "--commit"])])
    assert cli("run", str(path), "--headless").returncode == 0
    [stored] = list((repo / ".outpost" / "storage").rglob("*.object"))
    data = stored.read_bytes()
    damaged = data[:1024] + b"{not json" if damage == "garbled" else data[: len(data) - 40]
    stored.write_bytes(damaged)
    for args in (["run", str(path), "--headless"], ["recover", RUN_ID, "--repo", str(repo), "--inspect"]):
        done = cli(*args)
        assert done.returncode == 6, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert stored.read_bytes() == damaged


def test_quota_reruns_only_quota_stopped_candidates(repo, tmp_path):
    path = race_file(tmp_path, repo, [
        ("q", ["--quota", "You've hit your usage limit", "--quota-on-attempt", "1",
               "--write", "fix.txt", "--content", "good", "--commit"]),
        ("r", ["--write", "fix.txt", "--content", "bad", "--commit"]),
    ])
    first = cli("run", str(path), "--headless", "--json")
    assert first.returncode == 1 and json.loads(first.stdout)["status"] == "quota"
    second = json.loads(cli("run", str(path), "--headless", "--json").stdout)
    assert second["status"] == "winner" and second["id"] == json.loads(first.stdout)["id"]
    assert second["winner"] == {**second["winner"], "key": "q", "attempt": 2}
    assert second["usage"]["attempts"] == 3
    assert second["previous_attempts"][0]["status"] == "quota"
    assert second["previous_attempts"][0]["quota"]["message"] == "You've hit your usage limit"
    assert {c["key"]: c["attempt"] for c in second["candidates"]} == {"q": 2, "r": 1}
    branches = git(repo, "branch", "--list", "outpost/*")
    third = json.loads(cli("run", str(path), "--headless", "--json").stdout)
    assert third["winner"] == second["winner"]
    assert git(repo, "branch", "--list", "outpost/*") == branches


def test_changed_race_file_is_an_identity_mismatch(repo, tmp_path):
    path = race_file(tmp_path, repo, [("a", ["--write", "fix.txt", "--content", "good", "--commit"])])
    assert cli("run", str(path), "--headless").returncode == 0
    path.write_text(path.read_text().replace('brief = "fix a"', 'brief = "something else"'))
    done = cli("run", str(path), "--headless")
    assert done.returncode == 5 and "new run_id" in done.stderr or "run_id" in done.stderr


def test_checkpoint_files_are_private(repo, tmp_path):
    path = race_file(tmp_path, repo, [("a", ["--write", "fix.txt", "--content", "good", "--commit"])])
    assert cli("run", str(path), "--headless").returncode == 0
    storage = repo / ".outpost" / "storage"
    for item in storage.rglob("*"):
        mode = item.stat().st_mode & 0o777
        assert mode == (0o700 if item.is_dir() else 0o600), (item, oct(mode))
    listing = cli("runs", str(repo), "--json")
    assert json.loads(listing.stdout)[0]["run_id"] == RUN_ID
    assert json.loads(listing.stdout)[0]["status"] == "winner"


def test_recover_stop_ends_a_live_coordinator_and_the_run_resumes(repo, tmp_path):
    ready = tmp_path / "ready"
    path = race_file(tmp_path, repo, [
        ("a", ["--ready", str(ready), "--pidfile", str(tmp_path / "a.pid"), "--hang-on-attempt", "1",
               "--write", "fix.txt", "--content", "good", "--commit"])])
    process = start(path)
    wait_for(ready.exists, "the agent to start", process)
    view = inspect(repo)
    assert view["status"] == "owned" and view["coordinator"]["alive"] is True
    stopped = cli("recover", RUN_ID, "--repo", str(repo), "--stop", "--json")
    assert stopped.returncode == 0 and json.loads(stopped.stdout)["stopped"] is True
    out, _ = process.communicate(timeout=60)
    assert json.loads(out)["status"] == "aborted"
    assert gone(int((tmp_path / "a.pid").read_text().split()[0]))
    view = inspect(repo)
    assert view["owner"] is None and view["status"] == "aborted"
    again = cli("run", str(path), "--headless", "--json")
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert result["winner"]["key"] == "a" and result["winner"]["attempt"] == 2
    assert result["previous_attempts"][0]["status"] == "cancelled"


def test_unknown_run_id(repo, tmp_path):
    path = race_file(tmp_path, repo, [("a", ["--write", "fix.txt", "--content", "good", "--commit"])])
    assert cli("run", str(path), "--headless").returncode == 0
    done = cli("recover", "no-such-run", "--repo", str(repo), "--inspect")
    assert done.returncode == 7 and "no-such-run" in done.stderr and len(done.stderr.splitlines()) == 1
