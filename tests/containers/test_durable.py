"""A durable race in containers whose coordinator is killed mid-race: its containers outlive it
(the engine owns them), and replay removes them before running the interrupted candidates again."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from outpost_tui.engine.sandbox.container_engine import list_containers, remove_race_containers
from tests.conftest import git

from .conftest import IMAGE

pytestmark = pytest.mark.container

# Its first attempt says it is running by touching `ready-<key>` in its worktree, and hangs until
# the coordinator is killed; the replay's attempt fixes the bug.
CRASHY = """\
import os, subprocess, time
key = os.environ["OUTPOST_CANDIDATE"]
if os.environ["OUTPOST_ATTEMPT"] == "1":
    open(f"ready-{key}", "w").close()
    while True:
        time.sleep(1)
with open("calc.py") as handle:
    source = handle.read()
with open("calc.py", "w") as handle:
    handle.write(source.replace("return a - b", "return a + b", 1))
subprocess.run(["git", "commit", "-qam", f"fix add ({key})"], check=True)
"""


def durability_available() -> bool:
    return (
        importlib.util.find_spec("outpost_tui.engine.durable.run") is not None
        and importlib.util.find_spec("outpost_tui.commands.recover") is not None
    )


def outpost(*args: str, **options) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "outpost_tui.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **options,
    )


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


@pytest.mark.skipif(
    not durability_available(),
    reason="durable races (engine/durable/run.py, `outpost-tui recover`) not built yet",
)
def test_replay_removes_the_containers_a_killed_coordinator_left(engine, calc_repo, tmp_path):
    (calc_repo / "agents" / "crashy.py").write_text(CRASHY)
    git(calc_repo, "add", "-A")
    git(calc_repo, "commit", "-qm", "crashy agent")
    run_id = f"crash-{uuid.uuid4().hex[:8]}"
    race_file = tmp_path / "race.toml"
    candidates = "".join(
        f"""
[[candidates]]
key = "{key}"
agent = "command"
brief = "fix add"
command = ["python3", "agents/crashy.py"]
"""
        for key in ("first", "second")
    )
    race_file.write_text(f"""\
[race]
name = "crash in containers"
repository = "{calc_repo}"
run_id = "{run_id}"

[validate]
command = ["python3", "-m", "unittest", "-q"]

[sandbox]
provider = "podman"
image = "{IMAGE}"

[durability]
enabled = true
version = "1"
{candidates}""")
    try:
        crash_and_replay(race_file, run_id, calc_repo)
    finally:  # whatever failed, no container of this test may outlive it
        for container in list_containers(repository=calc_repo):
            remove_race_containers(container["race"])


def crash_and_replay(race_file, run_id: str, calc_repo) -> None:
    coordinator = outpost("run", str(race_file), "--headless", "--json")
    try:
        wait_for(
            lambda: (
                all(any(calc_repo.glob(f".outpost/workspaces/*/ready-{k}")) for k in ("first", "second"))
                or coordinator.poll() is not None
            ),
            120,
            "both candidates running in containers",
        )
        assert coordinator.poll() is None, coordinator.communicate()
        os.killpg(coordinator.pid, signal.SIGKILL)
        coordinator.wait(30)
    finally:
        if coordinator.poll() is None:
            os.killpg(coordinator.pid, signal.SIGKILL)
            coordinator.wait(30)

    # the engine kept the candidates' containers running without their coordinator (the
    # baseline's validation, in a container of its own, may have ended or not: not counted here)
    def candidates_of(containers):
        # the agents' own (a grading checkout's container may have been started beside each)
        return [c for c in containers if c["key"] != "baseline" and c["role"] == "agent"]

    left = candidates_of(list_containers(repository=calc_repo))
    assert sorted(c["key"] for c in left) == ["first", "second"]
    assert all(c["status"] == "running" for c in left)

    # ... and the listing commands show them as belonging to the run
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "outpost_tui.cli", *args], capture_output=True, text=True, timeout=120
        )

    worktrees = cli("worktrees", str(calc_repo), "--json")
    assert worktrees.returncode == 0, worktrees.stderr
    assert sorted(c["key"] for c in candidates_of(json.loads(worktrees.stdout)["containers"])) == [
        "first",
        "second",
    ]
    elsewhere = cli("worktrees", str(calc_repo), "--json", "--endpoint", "unix:///nonexistent.sock")
    assert elsewhere.returncode == 0  # the worktrees are still listed; the engine is named
    assert "nonexistent.sock" in json.loads(elsewhere.stdout)["container_engine_error"]
    runs = cli("runs", str(calc_repo), "--json")
    assert runs.returncode == 0, runs.stderr
    [run] = [r for r in json.loads(runs.stdout) if r["run_id"] == run_id]
    assert sorted(n for n in run["containers"] if not n.endswith(("-baseline-0", "-grading"))) == sorted(
        c["name"] for c in left
    )

    # the documented recovery: stop (confirm the coordinator is gone), inspect, release, replay
    def recover(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "outpost_tui.cli", "recover", run_id, "--repo", str(calc_repo), *args],
            capture_output=True,
            text=True,
            timeout=300,
        )

    stopped = recover("--stop")
    assert stopped.returncode == 0, stopped.stderr
    inspected = recover("--inspect", "--json")
    assert inspected.returncode == 0, inspected.stderr
    released = recover("--release", "--revision", str(json.loads(inspected.stdout)["revision"]))
    assert released.returncode == 0, released.stderr
    assert len(candidates_of(list_containers(repository=calc_repo))) == 2  # still there: replay's job
    replay = recover("--replay", "--json")
    assert replay.returncode == 0, replay.stderr
    result = json.loads(replay.stdout)
    assert result["status"] == "winner"
    # the leftovers were removed, and so were the replayed attempts' own containers
    assert list_containers(repository=calc_repo) == []
