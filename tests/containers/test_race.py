"""Whole races with [sandbox] provider = "podman": every candidate in its own container, the winner
chosen by the project's tests run inside it, no network, cancellation and cleanup by label."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import docker.errors
import pytest

from outpost_tui.engine import CandidateSpec, EventKind, build_spec, run_race
from outpost_tui.engine.core.spec import SandboxSpec, ValidateSpec
from outpost_tui.engine.sandbox.container_engine import list_containers
from tests.conftest import git

from .conftest import IMAGE

pytestmark = pytest.mark.container

# Validation prints who PID 1 is: in a sandbox container that is the engine's init, not the host's.
VALIDATE = ("sh", "-c", "echo \"pid1: $(tr '\\0' ' ' < /proc/1/cmdline)\"; exec python3 -m unittest -q")


def sandboxed(**options) -> SandboxSpec:
    return SandboxSpec(provider="podman", image=IMAGE, **options)


def agent(key: str, script: str, brief: str = "fix add", **env: str) -> CandidateSpec:
    return CandidateSpec(key, "command", brief, command=("python3", f"agents/{script}"), env=env)


def test_each_candidate_runs_in_its_own_container_and_tests_inside_pick_the_winner(engine, calc_repo):
    events = []
    directories: dict[str, str] = {}
    settled: list[bool] = []
    opened: list[bool] = []

    def on_event(event) -> None:
        events.append(event)
        if event.kind is EventKind.WORKTREE_READY:
            directories[event.key] = event.directory
        # "right" finishes only once "wrong" is settled, so "wrong" is rejected, never cancelled;
        # the gate opens once both hold, in whichever order they come ("right"'s container may
        # start after "wrong" has settled: a gate never opened would leave "right" waiting)
        if event.kind is EventKind.SETTLED and event.key == "wrong":
            settled.append(True)
        if settled and "right" in directories and not opened:
            Path(directories["right"], "gate").touch()
            opened.append(True)

    spec = build_spec(
        repository=calc_repo,
        candidates=[
            agent("wrong", "fix.py", FIX="return a * b"),
            agent("right", "fix.py", WAIT_FOR="gate"),
        ],
        validate=ValidateSpec(command=VALIDATE, timeout=120),
        sandbox=sandboxed(),
        name="containers",
    )
    result = run_race(spec, on_event=on_event)

    assert result.status.value == "winner", result.to_json()
    assert result.winner.key == "right"
    wrong, right = result.candidates
    assert wrong.status.value == "rejected"
    assert right.validation.status == "passed"
    # validation ran inside the container: PID 1 is the engine's init, and the tests found the fix
    assert (
        right.validation.output.startswith("pid1: /run/podman-init")
        or right.validation.output.startswith("pid1: /sbin/docker-init")
        or right.validation.output.startswith("pid1: /dev/init")
    ), right.validation.output
    assert "FAILED" in wrong.validation.output
    # one container per candidate, each its own (the hostname is the container's)
    texts = {e.key: e.text for e in events if e.kind is EventKind.TEXT}
    hosts = {key: text.split()[1] for key, text in texts.items()}
    assert set(hosts) == {"wrong", "right"} and len(set(hosts.values())) == 2
    assert socket.gethostname() not in hosts.values()
    assert "brief 'fix add'" in texts["right"]  # the brief arrived on stdin inside
    # the winner's commit, made inside as the host user, is on its branch on the host
    assert git(calc_repo, "show", f"{right.commit}:calc.py").count("return a + b") == 1
    stat = (Path(right.retained_directory) / "calc.py").stat()
    assert (stat.st_uid, stat.st_gid) == (os.getuid(), os.getgid())
    assert list_containers(result.id) == []


def test_a_candidate_cannot_reach_the_network(engine, calc_repo):
    events = []
    spec = build_spec(
        repository=calc_repo,
        candidates=[agent("reach", "reach.py")],
        validate=ValidateSpec(command=VALIDATE),
        sandbox=sandboxed(),
    )
    result = run_race(spec, on_event=events.append)
    [record] = result.candidates
    assert record.status.value == "failed"
    stderr = [line for e in events if e.kind is EventKind.LOG and e.stream == "stderr" for line in e.lines]
    assert any(line.startswith("network blocked:") for line in stderr), stderr
    assert not any("network reached" in line for e in events if e.kind is EventKind.LOG for line in e.lines)
    assert list_containers(result.id) == []


def test_a_hung_candidate_is_cancelled_and_its_container_removed(engine, calc_repo):
    """The winner only finishes after the hung candidate is running (a condition, not a sleep)."""
    race_id: list[str] = []
    directories: dict[str, str] = {}
    hung_running: list[list[dict]] = []
    opened: list[bool] = []

    def on_event(event) -> None:
        if event.kind is EventKind.RACE_STARTED:
            race_id.append(event.id)
        if event.kind is EventKind.WORKTREE_READY:
            directories[event.key] = event.directory
        if event.kind is EventKind.TEXT and event.key == "hung" and "ready" in event.text:
            hung_running.append(list_containers(race_id[0]))
        # the gate opens once both hold, in whichever order they come: the hung agent can be
        # ready before the winner's container has started (its worktree is ready only then), and
        # a gate never opened left both agents waiting, with no timeout, until pytest's
        if hung_running and "winner" in directories and not opened:
            Path(directories["winner"], "gate").touch()
            opened.append(True)

    spec = build_spec(
        repository=calc_repo,
        candidates=[
            agent("hung", "hang.py"),
            agent("winner", "fix.py", WAIT_FOR="gate"),
        ],
        validate=ValidateSpec(command=VALIDATE, timeout=120),
        sandbox=sandboxed(),
    )
    started = time.monotonic()
    result = run_race(spec, on_event=on_event)
    elapsed = time.monotonic() - started

    assert result.winner.key == "winner"
    hung = result.candidates[0]
    assert hung.status.value == "cancelled"
    assert hung.cleanup == "done"
    # it really was running in a container while the winner worked, and that container is gone
    # (its grading checkout's container may be there too: it is started while the agent works)
    assert [c["key"] for c in hung_running[0] if c["key"] == "hung" and c["role"] == "agent"] == ["hung"]
    assert list_containers(result.id) == []
    assert elapsed < 60


def test_headless_cli_race_in_containers(engine, calc_repo, tmp_path):
    race_file = tmp_path / "race.toml"
    race_file.write_text(f"""\
[race]
name = "calc in containers"
repository = "{calc_repo}"

[validate]
command = ["python3", "-m", "unittest", "-q"]

[sandbox]
provider = "podman"
image = "{IMAGE}"

[[candidates]]
key = "right"
agent = "command"
brief = "fix add"
command = ["python3", "agents/fix.py"]
""")
    done = subprocess.run(
        [sys.executable, "-m", "outpost_tui.cli", "run", str(race_file), "--headless", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "winner" and result["winner"]["key"] == "right"
    assert list_containers(result["id"]) == []


def test_a_missing_image_fails_the_candidate_with_one_clear_line(engine, calc_repo):
    spec = build_spec(
        repository=calc_repo,
        candidates=[agent("a", "fix.py")],
        validate=ValidateSpec(command=VALIDATE),
        sandbox=SandboxSpec(provider="podman", image="local/outpost-absent:0"),
    )
    result = run_race(spec)
    [record] = result.candidates
    assert record.status.value == "failed"
    assert "image 'local/outpost-absent:0' not found" in record.error
    assert "outpost-tui image build --tag local/outpost-absent:0" in record.error


def test_the_grading_container_starts_while_the_agent_works_and_runs_nothing_before_validation(
    engine, calc_repo
):
    """Started ahead (its create and start are off the attempt's path), yet fresh: no command has
    run in it before the result is graded there, and it is a container apart from the agent's."""
    client, _ = engine
    race_id: list[str] = []
    directories: dict[str, str] = {}
    seen: list[dict] = []

    def on_event(event) -> None:
        if event.kind is EventKind.RACE_STARTED:
            race_id.append(event.id)
        if event.kind is EventKind.WORKTREE_READY:
            directories[event.key] = event.directory
        if event.kind is EventKind.AGENT_STARTED:
            # the agent waits for the gate: it is still working while its grading container
            # comes up (a condition on the engine, polled from a thread of its own)
            def watch() -> None:
                deadline = time.monotonic() + 120
                try:
                    while time.monotonic() < deadline:
                        # The engine's summaries, in one request (the SDK's list inspects each
                        # container after it: one gone meanwhile is a 404 on Docker, a 500 on
                        # Podman), and the running one inspected, again next time if it went.
                        grading = client.api.containers(
                            all=True,
                            filters={
                                "label": [
                                    f"outpost.race={race_id[0]}",
                                    "outpost.key=fixer",
                                    "outpost.role=grading",
                                ]
                            },
                        )
                        running = [summary for summary in grading if summary.get("State") == "running"]
                        if running:
                            try:
                                attrs = client.api.inspect_container(running[0]["Id"])
                            except docker.errors.APIError:
                                attrs = None
                            if attrs is not None:
                                seen.append(
                                    {"name": attrs["Name"].lstrip("/"), "execs": attrs.get("ExecIDs")}
                                )
                                break
                        time.sleep(0.05)
                finally:
                    # the agent waits for the gate: whatever happened here, let it finish
                    Path(directories["fixer"], "gate").touch()

            threading.Thread(target=watch, daemon=True).start()

    spec = build_spec(
        repository=calc_repo,
        candidates=[agent("fixer", "fix.py", WAIT_FOR="gate")],
        validate=ValidateSpec(command=VALIDATE, timeout=120),
        sandbox=sandboxed(),
    )
    result = run_race(spec, on_event=on_event)

    assert result.winner is not None and result.winner.key == "fixer", result.to_json()
    [before] = seen  # it was running while the agent still waited at its gate
    assert before["name"].endswith("-fixer-1-grading")
    # nothing ran in it before validation (Docker Engine says null where Podman says [])
    assert before["execs"] in (None, []), before
    assert result.winner.validation.status == "passed"
    assert result.winner.validation.output.startswith("pid1: "), result.winner.validation.output
    assert list_containers(result.id) == []
