"""Stopping a command in a container confirms its processes are gone (it does not infer it from a
closed output stream): at cancel, at timeout, at the in-container deadline with no coordinator
left, and when a command ends leaving a daemon that left its process group. Real engine, real
processes that ignore TERM."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import anyio
import pytest

from outpost_tui.engine.sandbox.container_engine import list_containers
from outpost_tui.engine.sandbox.container_scripts import KILL_GRACE, WRAPPER

from .conftest import IMAGE, close
from .test_provider import processes

pytestmark = [pytest.mark.container, pytest.mark.anyio]

# Ignores TERM, and starts a child in a session of its own that ignores TERM too.
STUBBORN = [
    "python3",
    "-c",
    "import signal, subprocess, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "subprocess.Popen(['sh', '-c', 'trap \"\" TERM; exec sleep 4343'], start_new_session=True)\n"
    "print('ready', flush=True)\n"
    "while True: time.sleep(1)",
]


def stubborn_left(listing: str) -> list[str]:
    return [line for line in listing.splitlines() if "sleep 4343" in line or "SIG_IGN" in line]


@pytest.mark.alone  # times the grace and the KILL to within seconds
async def test_a_cancelled_command_that_ignores_term_is_gone_within_the_grace(provider, attempt, leftovers):
    sandbox = await provider.acquire(attempt)
    try:
        ready = anyio.Event()
        async with anyio.create_task_group() as group:

            async def agent():
                await sandbox.run(STUBBORN, on_output=lambda s, lines: "ready" in lines and ready.set())

            group.start_soon(agent)
            with anyio.fail_after(60):
                await ready.wait()
            cancelled = time.monotonic()
            group.cancel_scope.cancel()
        stopped_in = time.monotonic() - cancelled
        remaining = await processes(sandbox)
    finally:
        await close(sandbox)
    assert stubborn_left(remaining) == [], remaining
    assert stopped_in < KILL_GRACE + 3, stopped_in
    assert leftovers() == []


@pytest.mark.alone  # times the timeout, the grace and the KILL to within seconds
async def test_a_timed_out_command_that_ignores_term_is_killed_and_confirmed_gone(
    provider, attempt, leftovers
):
    sandbox = await provider.acquire(attempt)
    try:
        done = await sandbox.run(STUBBORN, timeout=2)
        remaining = await processes(sandbox)
    finally:
        await close(sandbox)
    assert done.timed_out and done.exit_code == -9, done
    assert stubborn_left(remaining) == [], remaining
    assert done.duration < 2 + KILL_GRACE + 3, done.duration
    assert leftovers() == []


async def test_a_daemon_that_left_the_group_does_not_outlive_its_command(provider, attempt, leftovers):
    """What an agent leaves running must not be there when validation runs."""
    sandbox = await provider.acquire(attempt)
    try:
        done = await sandbox.run(
            [
                "sh",
                "-c",
                "setsid sh -c 'trap \"\" TERM; exec sleep 4343' </dev/null >/dev/null 2>&1 & echo started",
            ]
        )
        remaining = await processes(sandbox)
        assert (await sandbox.run(["true"])).exit_code == 0  # the keep-alive was spared
    finally:
        await close(sandbox)
    assert (done.exit_code, done.stdout_tail) == (0, "started\n")
    assert stubborn_left(remaining) == [], remaining
    assert leftovers() == []


async def test_the_deadline_inside_kills_what_ignores_term_without_a_coordinator(
    provider, attempt, engine, leftovers
):
    """The backstop does not die of its own TERM before it sends KILL."""
    client, _ = engine
    sandbox = await provider.acquire(attempt)
    try:

        def run_wrapper() -> tuple[int, float]:
            started = time.monotonic()
            exec_id = client.api.exec_create(
                sandbox.name,
                ["sh", "-c", WRAPPER, "outpost-run", "/tmp/.t.pid", "", "1", *STUBBORN],
                environment=[f"OUTPOST_RUN={WRAPPER}"],
            )["Id"]
            client.api.exec_start(exec_id)
            return client.api.exec_inspect(exec_id)["ExitCode"], time.monotonic() - started

        with anyio.fail_after(60):
            exit_code, elapsed = await anyio.to_thread.run_sync(run_wrapper)
        remaining = await processes(sandbox)
    finally:
        await close(sandbox)
    assert exit_code in (128 + 9, -9), exit_code  # KILLed: it ignored TERM
    assert elapsed < 30, elapsed
    assert stubborn_left(remaining) == [], remaining
    assert leftovers() == []


def test_an_agents_daemon_is_gone_before_validation_runs(engine, calc_repo, tmp_path):
    """Through the CLI: the agent leaves a TERM-ignoring daemon in its own session. Its container is
    removed before grading, and validation runs in a fresh one: no process of the agent is there
    (nor its /tmp), and validation passes only if that holds."""
    agent = (
        "import os, subprocess\n"
        "p = subprocess.Popen(['sh', '-c', 'trap \"\" TERM; exec sleep 4343'], start_new_session=True,\n"
        "                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,\n"
        "                     stderr=subprocess.DEVNULL)\n"
        "open('/tmp/daemon.pid', 'w').write(str(p.pid))\n"
        "open('calc.py', 'a').write('# touched\\n')\n"
        "subprocess.run(['git', 'commit', '-qam', 'touch'], check=True)\n"
    )
    validate = (
        "if [ -e /tmp/daemon.pid ] && [ -d /proc/$(cat /tmp/daemon.pid) ]; then echo daemon alive; exit 1; fi"
    )
    race_file = tmp_path / "race.toml"
    race_file.write_text(f"""\
[race]
name = "daemon in a container"
repository = "{calc_repo}"

[validate]
command = ["sh", "-c", {json.dumps(validate)}]

[sandbox]
provider = "podman"
image = "{IMAGE}"

[[candidates]]
key = "a"
agent = "command"
brief = "b"
command = ["python3", "-c", {json.dumps(agent)}]
""")
    done = subprocess.run(
        [sys.executable, "-m", "outpost_tui.cli", "run", str(race_file), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["winner"]["key"] == "a", done.stderr
    assert list_containers(result["id"]) == []
