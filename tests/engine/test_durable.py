"""Durable races and crash recovery with a real coordinator (the headless CLI) killed by SIGKILL."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import psutil
import pytest

from outpost_tui.engine import CandidateSpec, build_spec, run_race_async
from outpost_tui.engine.core.spec import DurabilitySpec
from outpost_tui.engine.durable import run as durable
from outpost_tui.engine.durable.checkpoint import checkpoint_key, read_saved, sealed_envelope
from outpost_tui.engine.durable.local_transport import LocalTransport
from outpost_tui.engine.sandbox.local import resource_id_for
from tests.conftest import FAKE_AGENT, flags, git

CLI = [sys.executable, "-m", "outpost_tui.cli"]
VALIDATE = Path(__file__).parents[1] / "fixtures" / "agents" / "validate.py"
RUN_ID = "crash-test"


def race_file(
    tmp_path: Path,
    repo: Path,
    candidates: list[tuple[str, list[str]]],
    *,
    validate: list[str] | None = None,
    extra: str = "",
    tables: str = "",
) -> Path:
    validate = validate or [sys.executable, str(VALIDATE)]
    text = (
        textwrap.dedent(f"""\
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
        + tables
    )
    for key, options in candidates:
        argv = json.dumps([sys.executable, str(FAKE_AGENT), *options])
        text += f'\n[[candidates]]\nkey = "{key}"\nagent = "command"\nbrief = "fix {key}"\ncommand = {argv}\n'
    path = tmp_path / "race.toml"
    path.write_text(text)
    return path


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def start(path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*CLI, "run", str(path), "--headless", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(condition, what: str, process: subprocess.Popen | None = None, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"coordinator ended before {what}: {process.stderr.read()}")
        if time.monotonic() >= deadline:
            # what the coordinator said (its progress lines name the phase it was stuck in)
            said = ""
            if process is not None:
                process.kill()
                said = process.communicate(timeout=30)[1][-3000:]
            raise AssertionError(f"timed out waiting for {what}: {said}")
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
    path = race_file(
        tmp_path,
        repo,
        [
            (
                "a",
                flags(
                    ready=ready,
                    pidfile=tmp_path / "a.pid",
                    spawn_child=True,
                    hang_on_attempt=1,
                    write="fix.txt",
                    content="good",
                    commit=True,
                ),
            ),
            ("b", ["--write", "fix.txt", "--content", "bad", "--commit"]),
        ],
    )
    process = start(path)

    def settled_b():
        return any("settled" in p.read_text() for p in repo.glob(".outpost/runs/*/b.1.jsonl"))

    wait_for(lambda: ready.exists() and settled_b(), "a running and b settled", process)
    crash(process)
    first_pids = [int(p) for p in (tmp_path / "a.pid").read_text().split()]
    assert not gone(first_pids[0])  # the crash left the agent running: replay must stop it

    view = inspect(repo)
    phases = {(a["key"], a["attempt"]): a["phase"] for a in view["attempts"]}
    assert phases == {("a", 1): "running", ("b", 1): "settled"}
    statuses = {(a["key"], a["attempt"]): a["status"] for a in view["attempts"]}
    assert statuses == {("a", 1): "running (interrupted)", ("b", 1): "rejected"}
    assert view["status"] == "owned"
    result = release_and_replay(repo, path, view)

    assert result["status"] == "winner"
    assert result["winner"]["key"] == "a" and result["winner"]["attempt"] == 2
    by_key = {c["key"]: c for c in result["candidates"]}
    assert by_key["b"]["status"] == "rejected" and by_key["b"]["attempt"] == 1  # not rerun
    assert [(p["key"], p["attempt"], p["status"]) for p in result["previous_attempts"]] == [
        ("a", 1, "cancelled")
    ]
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


def assert_restarted_once(repo: Path, result: dict, key: str = "a") -> None:
    """One interrupted attempt of `key`, cancelled and kept, and a second one that won on its own branch."""
    race_id = result["id"]
    assert result["winner"]["key"] == key and result["winner"]["attempt"] == 2
    assert result["winner"]["branch"] == f"outpost/speculation/{race_id}/{key}/2"
    [previous] = result["previous_attempts"]
    assert (previous["key"], previous["attempt"], previous["status"]) == (key, 1, "cancelled")
    assert "interrupted" in previous["error"]
    assert previous["retained_directory"] and previous["branch"] != result["winner"]["branch"]
    assert result["usage"]["attempts"] == 2 and result["usage"]["complete"] is False
    for number in (1, 2):
        git(repo, "rev-parse", "--verify", f"outpost/speculation/{race_id}/{key}/{number}")


def test_killed_during_validation(repo, tmp_path):
    mark = tmp_path / "validating"
    path = race_file(
        tmp_path,
        repo,
        [("a", ["--write", "fix.txt", "--content", "good", "--commit"])],
        validate=[sys.executable, str(VALIDATE), "--mark", str(mark), "--hang-on-attempt", "1"],
    )
    process = start(path)
    wait_for(mark.exists, "validation to start", process)
    crash(process)
    view = inspect(repo)
    assert [(a["key"], a["phase"]) for a in view["attempts"]] == [("a", "running")]
    validation_pids = recorded_pids(view)
    result = release_and_replay(repo, path, view)
    assert_restarted_once(repo, result)
    assert all(gone(pid) for pid in validation_pids)


def test_allocation_runs_no_hook_of_the_repository(repo, tmp_path):
    """Allocation (`git worktree add`) once ran the repository's post-checkout hook, which a
    candidate of the local sandbox can write; the engine's git runs no hook at all now."""
    mark = tmp_path / "allocating"
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\necho $$ > {mark}\n")
    hook.chmod(0o755)
    path = race_file(tmp_path, repo, [("a", ["--write", "fix.txt", "--content", "good", "--commit"])])
    process = start(path)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert json.loads(out)["status"] == "winner"
    assert not mark.exists()


def test_killed_during_cleanup_keeps_the_validated_winner(repo, tmp_path):
    term = tmp_path / "loser-got-term"
    path = race_file(
        tmp_path,
        repo,
        [
            (
                "w",
                flags(wait_file=tmp_path / "l.pid", write="fix.txt", content="good", commit=True),
            ),
            ("l", ["--pidfile", str(tmp_path / "l.pid"), "--ignore-term", str(term), "--hang"]),
        ],
    )
    process = start(path)
    wait_for(term.exists, "the loser to be told to stop", process)
    crash(process)
    view = inspect(repo)
    phases = {a["key"]: a["phase"] for a in view["attempts"]}
    assert phases["w"] in ("validated", "settled") and phases["l"] == "running"
    loser_pid = int((tmp_path / "l.pid").read_text().split()[0])
    result = release_and_replay(repo, path, view)
    race_id = result["id"]
    assert result["winner"]["key"] == "w" and result["winner"]["attempt"] == 1  # not rerun
    assert result["winner"]["branch"] == f"outpost/speculation/{race_id}/w/1"
    assert result["usage"]["attempts"] == 2 and result["usage"]["complete"] is False
    # The interrupted loser is kept as history; its next attempt never starts, the winner stands.
    assert [(p["key"], p["attempt"], p["status"]) for p in result["previous_attempts"]] == [
        ("l", 1, "cancelled")
    ]
    by_key = {c["key"]: c for c in result["candidates"]}
    assert (by_key["l"]["attempt"], by_key["l"]["status"]) == (2, "skipped")
    for branch in ("w/1", "l/1"):
        git(repo, "rev-parse", "--verify", f"outpost/speculation/{race_id}/{branch}")
    assert git(repo, "branch", "--list", f"outpost/speculation/{race_id}/l/2") == ""
    assert gone(loser_pid)


def test_two_coordinators_at_once_exactly_one_proceeds(repo, tmp_path):
    go = tmp_path / "go"
    path = race_file(
        tmp_path,
        repo,
        [("a", ["--wait-file", str(go), "--write", "fix.txt", "--content", "good", "--commit"])],
    )
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


def test_quota_reruns_only_quota_stopped_candidates_and_tokens_add_up(repo, tmp_path):
    usage = ["--usage", "100", "1000", "10", "20", "--cost", "0.5"]
    path = race_file(
        tmp_path,
        repo,
        [
            (
                "q",
                [
                    "--quota",
                    "You've hit your usage limit",
                    "--quota-on-attempt",
                    "1",
                    *usage,
                    "--write",
                    "fix.txt",
                    "--content",
                    "good",
                    "--commit",
                ],
            ),
            ("r", [*usage, "--write", "fix.txt", "--content", "bad", "--commit"]),
        ],
    )
    first = cli("run", str(path), "--headless", "--json")
    assert first.returncode == 1 and json.loads(first.stdout)["status"] == "quota"
    first_usage = json.loads(first.stdout)["usage"]
    assert (first_usage["input"], first_usage["cached"], first_usage["output"]) == (200, 2000, 40)
    second = json.loads(cli("run", str(path), "--headless", "--json").stdout)
    assert second["status"] == "winner" and second["id"] == json.loads(first.stdout)["id"]
    assert second["winner"] == {**second["winner"], "key": "q", "attempt": 2}
    assert second["usage"]["attempts"] == 3
    # Cumulative across calls: the second call's q#2 adds to what q#1 and r#1 used in the first.
    assert {k: second["usage"][k] for k in ("input", "cached", "cache_write", "output", "cost_usd")} == {
        "input": 300,
        "cached": 3000,
        "cache_write": 30,
        "output": 60,
        "cost_usd": 1.5,
    }
    assert second["usage"]["complete"] is True
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
    assert done.returncode == 5, done.stderr
    assert "use a new run_id" in done.stderr and len(done.stderr.strip().splitlines()) == 1


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
    """`recover --stop` TERMs the coordinator: it stops its candidates but leaves the run as a crash
    would (minus the owner), so the next recovery step, replay, restarts the work."""
    ready = tmp_path / "ready"
    path = race_file(
        tmp_path,
        repo,
        [
            (
                "a",
                flags(
                    ready=ready,
                    pidfile=tmp_path / "a.pid",
                    hang_on_attempt=1,
                    write="fix.txt",
                    content="good",
                    commit=True,
                ),
            )
        ],
    )
    process = start(path)
    wait_for(ready.exists, "the agent to start", process)
    view = inspect(repo)
    assert view["status"] == "owned" and view["coordinator"]["alive"] is True
    stopped = cli("recover", RUN_ID, "--repo", str(repo), "--stop", "--json")
    assert stopped.returncode == 0 and json.loads(stopped.stdout)["stopped"] is True
    _, err = process.communicate(timeout=60)
    assert process.returncode == 10, err  # replay required
    assert f"recover {RUN_ID} --replay" in err
    assert gone(int((tmp_path / "a.pid").read_text().split()[0]))  # its candidates stopped too
    view = inspect(repo)
    assert view["owner"] is None and view["status"] == "interrupted"
    assert [(a["key"], a["phase"]) for a in view["attempts"]] == [("a", "running")]
    plain = cli("run", str(path), "--headless")
    assert plain.returncode == 10 and "--replay" in plain.stderr
    replay = cli("recover", RUN_ID, "--repo", str(repo), "--replay", "--json")
    assert replay.returncode == 0, replay.stderr
    assert_restarted_once(repo, json.loads(replay.stdout))


def test_ctrl_c_aborts_a_durable_run_for_good(repo, tmp_path):
    """The operator's Ctrl-C is an abort: the run finishes `aborted`, and calling it again returns
    that saved result without running anything."""
    ready = tmp_path / "ready"
    path = race_file(
        tmp_path,
        repo,
        [("a", ["--ready", str(ready), "--hang-on-attempt", "1", "--write", "fix.txt", "--commit"])],
    )
    process = start(path)
    wait_for(ready.exists, "the agent to start", process)
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 1 and json.loads(out)["status"] == "aborted"
    view = inspect(repo)
    assert view["owner"] is None and view["status"] == "aborted"
    branches = git(repo, "branch", "--list", "outpost/*")
    again = cli("run", str(path), "--headless", "--json")
    assert again.returncode == 1, again.stderr
    result = json.loads(again.stdout)
    assert result["status"] == "aborted" and result["id"] == view["race_id"]
    assert [(c["key"], c["attempt"], c["status"]) for c in result["candidates"]] == [("a", 1, "cancelled")]
    assert result["previous_attempts"] == [] and result["usage"]["attempts"] == 1
    assert git(repo, "branch", "--list", "outpost/*") == branches
    assert "admitted" not in again.stderr
    assert f"run {RUN_ID} had already finished: its saved result" in again.stderr


def test_unknown_run_id(repo, tmp_path):
    path = race_file(tmp_path, repo, [("a", ["--write", "fix.txt", "--content", "good", "--commit"])])
    assert cli("run", str(path), "--headless").returncode == 0
    done = cli("recover", "no-such-run", "--repo", str(repo), "--inspect")
    assert done.returncode == 7 and "no-such-run" in done.stderr and len(done.stderr.splitlines()) == 1


def damage_saved_state(repo: Path, damage) -> Path:
    """Rewrite the saved state through the storage itself (a valid object, header and JSON): only the
    content is wrong. Returns the object's path."""
    transport = LocalTransport(repo / ".outpost" / "storage")
    key = checkpoint_key(RUN_ID)
    stored = transport.read(key)
    envelope = json.loads(stored.data)
    damage(envelope["state"])
    # sealed again, as a buggy version would have written it: what is tested is the state's rules
    damaged = sealed_envelope(key, json.dumps(envelope["owner"]), json.dumps(envelope["state"]))
    transport.write(key, damaged, if_revision=stored.revision)
    return transport.object_path(key)


def test_valid_json_with_wrong_content_is_reported_and_left_alone(repo, tmp_path):
    path = race_file(
        tmp_path,
        repo,
        [
            ("a", ["--write", "fix.txt", "--content", "good", "--commit"]),
            ("b", ["--write", "fix.txt", "--content", "bad", "--commit"]),
        ],
    )
    assert cli("run", str(path), "--headless").returncode == 0
    original = next((repo / ".outpost" / "storage").rglob("*.object")).read_bytes()
    damages = {
        "an attempt without its key": (lambda s: s["attempts"][0].pop("key"), "attempts[0].key"),
        "a misspelt phase": (lambda s: s["attempts"][1].update(phase="runnig"), "phase is 'runnig'"),
        "a wrong attempt counter": (lambda s: s["usage"].update(attempts=7), "usage.attempts is 7"),
        "an unknown candidate": (lambda s: s["attempts"][1].update(key="zz"), "not a candidate"),
        "a second winner": (
            lambda s: s["attempts"][1]["record"].update(status="winner", commit="f" * 40),
            "more than one winner",
        ),
    }
    for what, (damage, expected) in damages.items():
        stored = damage_saved_state(repo, damage)
        damaged = stored.read_bytes()
        for args in (
            ["run", str(path), "--headless"],
            ["recover", RUN_ID, "--repo", str(repo), "--inspect"],
            ["recover", RUN_ID, "--repo", str(repo), "--replay"],
            ["recover", RUN_ID, "--repo", str(repo), "--release", "--revision", "x"],
        ):
            done = cli(*args)
            assert done.returncode == 6, (what, args, done.stderr)
            [line] = done.stderr.strip().splitlines()
            assert str(stored) in line and expected in line and "left untouched" in line, (what, line)
        listing = cli("runs", str(repo), "--json")
        assert listing.returncode == 0 and "Traceback" not in listing.stderr
        [run] = json.loads(listing.stdout)
        assert run["status"] == "corrupt" and expected in run["problem"], what
        assert stored.read_bytes() == damaged, what
        stored.write_bytes(original)  # the next damage starts from the good state


def test_a_storage_failure_stops_the_race_with_exit_8(repo, tmp_path):
    ready, go = tmp_path / "ready", tmp_path / "go"
    path = race_file(
        tmp_path,
        repo,
        [
            (
                "a",
                flags(ready=ready, wait_file=go, write="fix.txt", content="good", commit=True),
            )
        ],
    )
    process = start(path)
    wait_for(ready.exists, "the agent to start", process)
    # Replace the objects directory with a file (as root, permissions alone would not stop a write).
    objects = repo / ".outpost" / "storage" / "objects"
    objects.rename(objects.with_name("objects.saved"))
    objects.write_text("not a directory\n")
    go.touch()
    out, err = process.communicate(timeout=120)
    assert process.returncode == 8, err
    assert "Traceback" not in err and "operator" not in err
    assert err.strip().splitlines()[-1].startswith("outpost-tui: checkpoint storage failed")
    assert f"{objects} in storage" in err.strip().splitlines()[-1]
    result = json.loads(out)
    assert result["status"] == "aborted" and "checkpoint storage failed" in result["error"]
    # its work may have passed validation before the write failed: cancelled all the same (the
    # race stopped before a winner was chosen), never "rejected" with no reason
    assert result["candidates"][0]["status"] == "cancelled"
    assert result["candidates"][0]["error"] == "cancelled: checkpoint storage failed"
    # Ownership stays held: the last checkpoint still names the stopped coordinator.
    objects.unlink()
    objects.with_name("objects.saved").rename(objects)
    view = inspect(repo)
    assert view["owner"]["pid"] == process.pid and view["coordinator"]["alive"] is False
    assert [a["status"] for a in view["attempts"]] == ["running (interrupted)"]


def test_a_run_released_under_its_replay_exits_4(repo, tmp_path):
    ready, go = tmp_path / "ready", tmp_path / "go"
    path = race_file(
        tmp_path,
        repo,
        [
            (
                "a",
                flags(
                    ready=ready,
                    hang_on_attempt=1,
                    wait_file=go,
                    write="fix.txt",
                    content="good",
                    commit=True,
                ),
            )
        ],
    )
    process = start(path)
    wait_for(ready.exists, "the agent to start", process)
    crash(process)
    assert (
        cli(
            "recover", RUN_ID, "--repo", str(repo), "--release", "--revision", inspect(repo)["revision"]
        ).returncode
        == 0
    )
    ready.unlink()
    replay = subprocess.Popen(
        [*CLI, "recover", RUN_ID, "--repo", str(repo), "--replay", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(ready.exists, "the replayed agent to start", replay)
    # Someone releases the run while the replay still owns it: the replay's next save is refused.
    assert (
        cli(
            "recover", RUN_ID, "--repo", str(repo), "--release", "--revision", inspect(repo)["revision"]
        ).returncode
        == 0
    )
    go.touch()
    out, err = replay.communicate(timeout=120)
    assert replay.returncode == 4, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("outpost-tui: checkpoint not saved") and "released or taken over" in last
    assert "operator" not in err and "Traceback" not in err
    assert json.loads(out)["status"] == "aborted"


USAGE_AGENT = """\
import json, os, sys, time
print("usage agent started", flush=True)
while not os.path.exists(sys.argv[1]):
    print(json.dumps({"kind": "usage", "input": 1, "output": 1}), flush=True)
    time.sleep(0.01)
"""


def test_heartbeat_stays_fresh_while_agents_report_usage(repo, tmp_path, monkeypatch):
    # Small intervals: the agent reports usage for many heartbeat intervals within a second or two.
    monkeypatch.setattr(durable, "FLUSH_EVERY", 0.05)
    monkeypatch.setattr(durable, "HEARTBEAT_EVERY", 0.2)
    agent, stop = tmp_path / "usage_agent.py", tmp_path / "stop"
    agent.write_text(USAGE_AGENT)
    spec = build_spec(
        repository=repo,
        validate=["true"],
        run_id=RUN_ID,
        durability=DurabilitySpec(enabled=True),
        candidates=[
            CandidateSpec("a", "command", "report usage", command=(sys.executable, str(agent), str(stop)))
        ],
    )
    transport = LocalTransport(repo / ".outpost" / "storage")
    seen: list = []

    async def main() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(run_race_async, spec)
            deadline = time.monotonic() + 30
            try:
                while True:
                    saved = await anyio.to_thread.run_sync(
                        lambda: read_saved(transport, checkpoint_key(RUN_ID))
                    )
                    if saved is not None and saved.owner is not None and saved.state["usage"]["input"] > 0:
                        seen.append(saved)
                        if saved.owner.heartbeat_at - saved.owner.started_at > 5 * durable.HEARTBEAT_EVERY:
                            return
                    assert time.monotonic() < deadline, "the heartbeat never advanced while usage flowed"
                    await anyio.sleep(0.02)
            finally:
                stop.touch()

    anyio.run(main)
    last = seen[-1]
    # Usage kept flowing (dirty saves) all along, and each of them carried a fresh heartbeat.
    assert last.state["usage"]["input"] > seen[0].state["usage"]["input"]
    assert last.updated_at - last.owner.heartbeat_at < 0.5


BEST_SCORE = ["sh", "-c", 'if [ "$OUTPOST_CANDIDATE" = a ]; then echo 5; else echo 3; fi']


@pytest.mark.parametrize("crashed_while", ["settled", "validated"])
def test_best_mode_keeps_a_scored_attempt_through_a_crash(repo, tmp_path, crashed_while):
    ready = tmp_path / "b-ready"
    path = race_file(
        tmp_path,
        repo,
        [
            ("a", ["--write", "fix.txt", "--content", "good", "--commit"]),
            (
                "b",
                flags(ready=ready, hang_on_attempt=1, write="fix.txt", content="good", commit=True),
            ),
        ],
        extra='select = "best"',
        tables=f"\n[score]\ncommand = {json.dumps(BEST_SCORE)}\n",
    )
    process = start(path)

    def settled_a():
        return any("settled" in p.read_text() for p in repo.glob(".outpost/runs/*/a.1.jsonl"))

    wait_for(lambda: ready.exists() and settled_a(), "a scored and settled, b running", process)
    crash(process)
    if crashed_while == "validated":
        # The moment before a settled: validated and scored, sandbox not yet closed. The window is too
        # short to kill the coordinator in, so the saved state is rolled back to it instead.
        def unsettle(state: dict) -> None:
            [a] = [entry for entry in state["attempts"] if entry["key"] == "a"]
            a.update(phase="validated", cleanup="pending")
            a["record"].update(status="skipped", retained_directory=None, finished_at=None, cleanup="pending")

        damage_saved_state(repo, unsettle)
    view = inspect(repo)
    by_key = {a["key"]: a for a in view["attempts"]}
    assert by_key["a"]["phase"] == crashed_while and by_key["b"]["phase"] == "running"
    assert by_key["a"]["status"] == ("rejected" if crashed_while == "settled" else "validated (interrupted)")
    result = release_and_replay(repo, path, view)
    assert result["status"] == "winner"
    winner = result["winner"]
    assert (winner["key"], winner["attempt"], winner["score"], winner["decided_by"]) == ("a", 1, 5, "score")
    candidates = {c["key"]: c for c in result["candidates"]}
    assert (candidates["b"]["attempt"], candidates["b"]["status"], candidates["b"]["score"]) == (
        2,
        "rejected",
        3,
    )
    assert [(p["key"], p["attempt"]) for p in result["previous_attempts"]] == [("b", 1)]
    assert result["usage"]["attempts"] == 3
    assert git(repo, "branch", "--list", f"outpost/speculation/{result['id']}/a/2") == ""


def test_a_finished_run_with_cleanup_pending_is_cleaned_when_called_again(repo, tmp_path):
    """A coordinator that decided the race but could not finish a cleanup leaves the run owned; after
    release, calling the race returns the saved result and stops what that cleanup left."""
    path = race_file(tmp_path, repo, [("a", ["--write", "fix.txt", "--content", "good", "--commit"])])
    first = cli("run", str(path), "--headless", "--json")
    assert first.returncode == 0, first.stderr
    leftover = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        resource = resource_id_for(leftover.pid)

        def cleanup_left_pending(state: dict) -> None:
            [a] = state["attempts"]
            a.update(cleanup="pending", resources=[resource])
            a["record"].update(cleanup="pending", resources=[resource])

        damage_saved_state(repo, cleanup_left_pending)
        again = cli("run", str(path), "--headless", "--json")
        assert again.returncode == 0, again.stderr
        assert leftover.wait(timeout=10) == -signal.SIGKILL or gone(leftover.pid)
        result = json.loads(again.stdout)
        assert result["id"] == json.loads(first.stdout)["id"]  # the saved result: nothing ran again
        assert [c["cleanup"] for c in result["candidates"]] == ["done"]
        saved = read_saved(LocalTransport(repo / ".outpost" / "storage"), checkpoint_key(RUN_ID))
        assert saved.owner is None
        assert [a["cleanup"] for a in saved.state["attempts"]] == ["done"]
    finally:
        if leftover.poll() is None:
            leftover.kill()
            leftover.wait()


def test_a_replay_with_its_attempts_used_up_says_why_and_how_to_go_on(repo, tmp_path):
    ready = tmp_path / "ready"
    path = race_file(
        tmp_path,
        repo,
        [("a", ["--ready", str(ready), "--hang-on-attempt", "1", "--write", "fix.txt", "--commit"])],
        tables="\n[budget]\nattempts = 1\n",
    )
    process = start(path)
    wait_for(ready.exists, "the agent to start", process)
    process.send_signal(signal.SIGTERM)  # stopped, resumable
    assert process.wait(timeout=60) == 10
    replay = cli("recover", RUN_ID, "--repo", str(repo), "--replay", "--json")
    assert replay.returncode == 1, replay.stderr
    result = json.loads(replay.stdout)
    assert result["status"] == "budget-exhausted"
    assert "attempt budget exhausted: 1 of 1 used" in result["error"]
    assert "new run_id with a larger [budget] attempts" in result["error"]
    assert "new run_id" in replay.stderr


def test_a_stop_before_the_race_got_going_leaves_nothing_finished(repo, tmp_path):
    """SIGTERM (or quitting the app) while the race is still setting up must not record it as
    finished: calling it again runs it."""
    path = race_file(tmp_path, repo, [("a", ["--write", "fix.txt", "--content", "good", "--commit"])])
    from outpost_tui.engine.racefile import load_race

    spec = load_race(path)
    stopped = anyio.run(lambda: run_race_async(spec, on_start=lambda race: race.stop_resumable()))
    assert stopped.status.value == "aborted"
    again = cli("run", str(path), "--headless", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["winner"]["key"] == "a"


def test_the_coordinator_checkpoints_only_through_what_it_is_given(repo, tmp_path):
    from outpost_tui.engine import Race, RaceError, RaceStatus, load_race, new_race

    spec = load_race(
        race_file(tmp_path, repo, [("a", ["--write", "fix.txt", "--content", "good", "--commit"])])
    )
    with pytest.raises(RaceError, match="no checkpointing"):
        anyio.run(Race(spec).run)  # a durable spec is never run without its checkpoints
    assert not (repo / ".outpost" / "storage").exists()  # refused before anything was claimed
    race = new_race(spec)
    result = anyio.run(race.run)
    assert result.status is RaceStatus.WINNER
    assert isinstance(race.checkpointing, durable.DurableRun) and race.checkpointing.writes > 0
    saved = read_saved(LocalTransport(repo / ".outpost" / "storage"), checkpoint_key(RUN_ID))
    assert saved.state["finished"] is True and saved.owner is None
