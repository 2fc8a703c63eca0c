"""The container engine going away mid-race (a package upgrade restarts it): the race says so,
settles the candidates on it with that reason, and `worktrees --remove-containers` removes what
they left once the engine is back. The test runs its own Podman API service on a socket of its
own and stops only that one."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from outpost_tui.engine.sandbox.base import SandboxError
from outpost_tui.engine.sandbox.container_engine import connect, list_containers

from .conftest import IMAGE, unavailable

pytestmark = pytest.mark.container

CLI = [sys.executable, "-m", "outpost_tui.cli"]
HANG = "import time\nopen('ready', 'w').close()\nprint('ready', flush=True)\nwhile True: time.sleep(1)\n"


class Service:
    """`podman system service` on its own socket, started and stopped by this test only."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.endpoint = f"unix://{socket}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["podman", "system", "service", "--time=0", self.endpoint],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                client, _ = connect(self.endpoint, timeout=10)
                client.close()
                return
            except SandboxError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    unavailable(f"cannot start a Podman service on {self.socket}")
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None


@pytest.fixture
def service(engine):
    if shutil.which("podman") is None:
        unavailable("podman is not installed: no Podman service of the test's own")
    own = Service(Path(f"/tmp/podman-test-{uuid.uuid4().hex[:8]}.sock"))
    own.start()
    yield own
    own.stop()
    own.socket.unlink(missing_ok=True)


def test_the_engine_going_away_mid_race_is_said_and_its_containers_removed_afterwards(
    service, calc_repo, tmp_path
):
    race_file = tmp_path / "race.toml"
    race_file.write_text(f"""\
[race]
name = "the engine goes away"
repository = "{calc_repo}"
concurrency = 2

[sandbox]
provider = "podman"
image = "{IMAGE}"
endpoint = "{service.endpoint}"

[[candidates]]
key = "a"
agent = "command"
brief = "b"
command = ["python3", "-c", {json.dumps(HANG)}]

[[candidates]]
key = "b"
agent = "command"
brief = "b"
command = ["python3", "-c", {json.dumps(HANG)}]
""")
    race = subprocess.Popen(
        [*CLI, "run", str(race_file), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while len(list((calc_repo / ".outpost" / "workspaces").glob("*/ready"))) < 2:
            assert race.poll() is None and time.monotonic() < deadline, race.communicate()
            time.sleep(0.05)
        service.stop()  # the engine goes away under both running candidates
        out, err = race.communicate(timeout=120)
    finally:
        if race.poll() is None:
            race.kill()
            race.wait()
    assert race.returncode == 1, err
    assert "Traceback" not in err
    said = [line for line in err.splitlines() if "race warning: the container engine at" in line]
    assert len(said) == 1 and f"{service.endpoint}" in said[0] and "went away" in said[0], err
    assert "--remove-containers" in said[0]
    result = json.loads(out)
    for candidate in result["candidates"]:
        assert candidate["status"] == "failed", candidate
        assert candidate["error"].startswith(f"the container engine at {service.endpoint}"), candidate
        assert "went away" in candidate["error"] and "cleanup failed" not in candidate["error"]
        assert candidate["cleanup"] == "pending"

    service.start()  # back again: the containers are still there, stopped or running
    left = list_containers(result["id"], endpoint=service.endpoint)
    # both agents' (and the grading containers started beside them, when they got that far)
    assert sorted(c["key"] for c in left if c["role"] == "agent") == ["a", "b"]
    assert {c["role"] for c in left} <= {"agent", "grading"}
    worktrees = [*CLI, "worktrees", str(calc_repo), "--remove-containers", "--endpoint", service.endpoint]
    asked = subprocess.run(worktrees, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert asked.returncode == 1 and "needs confirmation" in asked.stderr and "--yes" in asked.stderr
    assert len(list_containers(result["id"], endpoint=service.endpoint)) == len(left)
    removed = subprocess.run([*worktrees, "--yes", "--json"], capture_output=True, text=True, timeout=120)
    assert removed.returncode == 0, removed.stderr
    assert json.loads(removed.stdout)["removed"] == len(left)
    assert list_containers(result["id"], endpoint=service.endpoint) == []


def test_containers_of_a_race_that_has_not_finished_are_kept(service, calc_repo, tmp_path, engine):
    """A container labelled with a race this repository has no finished record of is left alone."""
    # made on the test's own Podman service, which the command asks (the suite's engine may be
    # another: CI runs this directory on Docker Engine too)
    client, _ = connect(service.endpoint, timeout=60)
    race_id = f"test-{uuid.uuid4().hex[:10]}"
    container = client.containers.create(
        IMAGE,
        ["sleep", "300"],
        name=f"outpost-{race_id}-a-1",
        labels={"outpost.race": race_id, "outpost.repository": str(calc_repo.resolve())},
    )
    try:
        done = subprocess.run(
            [
                *CLI,
                "worktrees",
                str(calc_repo),
                "--remove-containers",
                "--yes",
                "--json",
                "--endpoint",
                service.endpoint,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        plan = json.loads(done.stdout)
        assert plan["removed"] == 0
        assert [k["name"] for k in plan["kept"]] == [f"outpost-{race_id}-a-1"]
        assert "has not finished" in plan["kept"][0]["why"]
        assert len(list_containers(race_id, endpoint=service.endpoint)) == 1
    finally:
        container.remove(force=True)
        client.close()
