"""The local sandbox with real processes: what a command leaves behind never outlives it, and never
keeps its run waiting."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import anyio
import psutil
import pytest

from outpost_tui.engine import pids
from outpost_tui.engine.sandbox import containment
from outpost_tui.engine.sandbox.base import SandboxContext, SandboxError
from outpost_tui.engine.sandbox.local import DRAIN_GRACE, LocalSandbox
from tests.conftest import HOST_PID

pytestmark = pytest.mark.anyio

# Starts a daemon in its own session (outside the command's process group) that inherits the
# command's stdout and stderr, and optionally a child of its own; records their pids, then exits.
DAEMON = """\
import os, subprocess, sys
nested = sys.argv[1] == "nested"
child = ["sleep", "300"]
if nested:
    child = [sys.executable, "-c",
             "import subprocess, time, sys\\n"
             "p = subprocess.Popen(['sleep', '300'])\\n"
             "open(sys.argv[1], 'a').write(f'{p.pid}\\\\n')\\n"
             "time.sleep(300)", sys.argv[2]]
daemon = subprocess.Popen(child, start_new_session=True)
with open(sys.argv[2], "a") as pids:
    pids.write(f"{daemon.pid}\\n")
print("started", flush=True)
"""


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def registered() -> list[str]:
    """What the sandbox recorded for a crashed coordinator's successor to clean up."""
    return []


def context_in(directory: Path, key: str = "alpha", attempt: int = 1, **options) -> SandboxContext:
    """An attempt's sandbox context in `directory` (its repository and worktree both), race "r"."""
    return SandboxContext(
        repository=directory,
        directory=directory,
        git_common_dir=directory,
        race_id="r",
        key=key,
        attempt=attempt,
        **options,
    )


@pytest.fixture
def sandbox(tmp_path, registered):
    async def register(resource: str) -> None:
        registered.append(resource)

    sandbox = LocalSandbox(context_in(tmp_path, register_resource=register))
    yield sandbox
    anyio.run(sandbox.close)  # removes the attempt's cgroup


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def wait_for_pids(path: Path, count: int) -> list[int]:
    with anyio.fail_after(10):
        while True:
            pids = path.read_text().split() if path.exists() else []
            if len(pids) >= count:
                return [int(pid) for pid in pids]
            await anyio.sleep(0.02)


@pytest.mark.parametrize("shape", ["single", "nested"])
async def test_a_daemon_holding_the_output_is_killed_and_the_run_ends(sandbox, tmp_path, shape):
    pids_file = tmp_path / "pids"
    seen: list[tuple[str, str]] = []
    with anyio.fail_after(30):  # the daemon would hold the output for 300 s
        done = await sandbox.run(
            [sys.executable, "-c", DAEMON, shape, str(pids_file)],
            on_output=lambda stream, lines: seen.extend((stream, line) for line in lines),
        )
    # (a nested daemon's own child may be killed before it could say so: fewer pids, not more)
    pids = await wait_for_pids(pids_file, 1)
    assert done.exit_code == 0 and done.stdout_tail == "started\n"
    assert done.duration < DRAIN_GRACE * 2 + 5
    assert not [pid for pid in pids if alive(pid)]
    assert "outpost: killed processes that left the command's process group" in done.stderr_tail
    assert str(pids[0]) in done.stderr_tail
    assert any(stream == "stderr" and "outpost: killed" in line for stream, line in seen)


async def test_a_daemon_does_not_stretch_a_timeout(sandbox, tmp_path):
    pids_file = tmp_path / "pids"
    program = DAEMON + "import time\ntime.sleep(300)\n"
    with anyio.fail_after(30):
        done = await sandbox.run([sys.executable, "-c", program, "single", str(pids_file)], timeout=1)
    assert done.timed_out
    assert not [pid for pid in await wait_for_pids(pids_file, 1) if alive(pid)]


async def test_an_ordinary_command_waits_for_no_grace(sandbox):
    done = await sandbox.run(["sh", "-c", "echo out; echo err >&2; sleep 30 & exit 3"])
    assert (done.exit_code, done.stdout_tail, done.stderr_tail) == (3, "out\n", "err\n")
    # the background sleep shared the group: swept at once, no drain grace spent
    assert done.duration < DRAIN_GRACE


async def test_nothing_outside_the_command_is_touched(sandbox, tmp_path):
    """A process of ours holding a different pipe survives a daemon sweep."""
    bystander = await anyio.open_process(["sleep", "300"])
    try:
        await sandbox.run([sys.executable, "-c", DAEMON, "single", str(tmp_path / "pids")])
        assert alive(bystander.pid)
        assert alive(os.getpid())
    finally:
        bystander.kill()
        await bystander.wait()


async def test_a_cancelled_command_takes_its_daemon_with_it(sandbox, tmp_path):
    pids_file = tmp_path / "pids"
    program = DAEMON + "import time\ntime.sleep(300)\n"
    async with anyio.create_task_group() as group:

        async def run() -> None:
            await sandbox.run([sys.executable, "-c", program, "single", str(pids_file)])

        group.start_soon(run)
        [daemon] = await wait_for_pids(pids_file, 1)
        group.cancel_scope.cancel()
    with anyio.fail_after(10):
        while alive(daemon):
            await anyio.sleep(0.02)


async def test_a_daemon_left_by_a_command_that_exits_at_once_is_found_too(sandbox, tmp_path):
    """The command's pipes are known from this side: a leader that is already gone when the run
    looks (its /proc entry vanished) still has its escaped daemon found and killed."""
    pids_file = tmp_path / "pids"
    with anyio.fail_after(30):
        done = await sandbox.run(["sh", "-c", f"setsid sleep 300 & echo $! > {pids_file}; exit 0"])
    [daemon] = await wait_for_pids(pids_file, 1)
    assert done.exit_code == 0
    assert not alive(daemon)


def test_stale_empty_cgroups_of_killed_coordinators_are_swept_and_live_ones_kept():
    """A coordinator killed mid-race leaves its (emptied) attempt cgroup: the next probe removes
    it; a populated or recent one is left alone."""

    base = containment.cgroup_root()
    if base is None:
        pytest.skip("no writable cgroup v2 hierarchy on this machine")
    stale, recent = base / "test-stale.k.1.0", base / "test-recent.k.1.0"
    (stale / "command-1").mkdir(parents=True)
    recent.mkdir()
    os.utime(stale, (1, 1))
    try:
        containment._sweep_stale(base)
        assert not stale.exists()
        assert recent.exists()
    finally:
        for group in (stale / "command-1", stale, recent):
            if group.exists():
                group.rmdir()


def _cgroup_of(text: str) -> str:
    return next(line[3:] for line in text.splitlines() if line.startswith("0::"))


async def test_commands_one_after_another_share_one_emptied_cgroup(sandbox, registered, tmp_path):
    """An attempt's commands run one after another in one command cgroup, emptied and confirmed
    so between them: a daemon the first leaves is killed before the second starts, and the
    cgroup is recorded (for a crashed coordinator's successor) once."""

    if containment.cgroup_root() is None:
        pytest.skip("no writable cgroup v2 hierarchy on this machine")
    pids_file = tmp_path / "pids"
    try:
        first = await sandbox.run(
            ["sh", "-c", f"setsid sleep 300 & echo $! > {pids_file}; cat /proc/self/cgroup"]
        )
        [daemon] = await wait_for_pids(pids_file, 1)
        assert not alive(daemon)
        second = await sandbox.run(["cat", "/proc/self/cgroup"])
        third = await sandbox.run(["cat", "/proc/self/cgroup"])
        groups = {_cgroup_of(done.stdout_tail) for done in (first, second, third)}
        assert len(groups) == 1 and next(iter(groups)).endswith("/command-1")
        assert [r for r in registered if "/command-" in r] == [registered[-1]]
        attempt = Path(registered[0].removeprefix(containment.RESOURCE_CGROUP))
        assert attempt.is_dir()
    finally:
        await sandbox.close()
    assert not attempt.exists()  # the attempt's cgroup and the command's with it


async def test_a_cgroup_a_command_made_inside_its_own_keeps_the_next_command_out_of_it(sandbox):
    """A command that makes a cgroup inside its own (it could tune it to refuse new members)
    leaves that cgroup to the attempt's removal; the next command gets a new one and runs."""

    if containment.cgroup_root() is None:
        pytest.skip("no writable cgroup v2 hierarchy on this machine")
    mount = containment._cgroup2_mount()
    first = await sandbox.run(
        [
            "sh",
            "-c",
            'd=$(sed -n "s/^0:://p" /proc/self/cgroup); mkdir "$0$d/planted" && echo "$d"',
            str(mount),
        ]
    )
    assert first.exit_code == 0, first.stderr_tail
    second = await sandbox.run(["cat", "/proc/self/cgroup"])
    assert second.exit_code == 0
    assert _cgroup_of(second.stdout_tail) != first.stdout_tail.strip()
    assert (Path(f"{mount}{first.stdout_tail.strip()}") / "planted").is_dir()  # removed by close()


async def test_a_command_is_waited_for_without_a_thread_of_its_own(sandbox):
    """The command's exit comes to the event loop through a pidfd: no thread waits for it (what
    Python 3.11's asyncio starts per child unless told otherwise, and the sandbox's own fallback
    where there are no pidfds)."""
    threads: list[str] = []

    def seen(stream: str, lines: list[str]) -> None:
        threads.extend(thread.name for thread in threading.enumerate())

    done = await sandbox.run(["sh", "-c", "echo started; read line"], stdin=b"go\n", on_output=seen)
    assert done.exit_code == 0 and threads
    assert not [name for name in threads if "waitpid" in name or "child-exit" in name], threads


async def test_a_program_found_on_path_once_is_looked_for_again_when_it_goes(sandbox, tmp_path):
    """Where a program was found is remembered between commands, never trusted: removed or no
    longer executable, it is reported as not found, before anything starts."""
    tools = tmp_path / "tools"
    tools.mkdir()
    program = tools / "outpost-probe-tool"
    program.write_text("#!/bin/sh\necho here\n")
    program.chmod(0o755)
    env = {"PATH": f"{tools}:/usr/bin:/bin"}
    assert (await sandbox.run([program.name], env=env)).stdout_tail == "here\n"
    program.chmod(0o644)
    with pytest.raises(SandboxError, match="program 'outpost-probe-tool' not found on PATH"):
        await sandbox.run([program.name], env=env)
    program.chmod(0o755)
    assert (await sandbox.run([program.name], env=env)).exit_code == 0
    program.unlink()
    with pytest.raises(SandboxError, match="not found on PATH"):
        await sandbox.run([program.name], env=env)
    # one of the same name earlier on the PATH is the one that runs, as the shell would choose
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / program.name).write_text("#!/bin/sh\necho earlier\n")
    (earlier / program.name).chmod(0o755)
    program.write_text("#!/bin/sh\necho here\n")
    program.chmod(0o755)
    env = {"PATH": f"{earlier}:{tools}:/usr/bin:/bin"}
    assert (await sandbox.run([program.name], env=env)).stdout_tail == "earlier\n"


async def test_the_environment_is_read_once_per_attempt_and_scrubbed(tmp_path, monkeypatch):
    """The process's environment as the attempt's first command found it, git's location variables
    gone (from the process's, the context's and the command's own), the command's over the rest."""
    monkeypatch.setenv("GIT_DIR", "/elsewhere/.git")
    monkeypatch.setenv("OUTPOST_PROBE", "process")
    sandbox = LocalSandbox(
        context_in(tmp_path, env={"GIT_INDEX_FILE": "/elsewhere/index", "OUTPOST_CONTEXT": "context"})
    )
    try:
        show = [
            "sh",
            "-c",
            'echo "${GIT_DIR-}|${GIT_INDEX_FILE-}|${GIT_WORK_TREE-}|$OUTPOST_PROBE|$OUTPOST_CONTEXT"',
        ]
        first = await sandbox.run(show, env={"GIT_WORK_TREE": "/elsewhere"})
        assert first.stdout_tail == "|||process|context\n"
        monkeypatch.setenv("OUTPOST_PROBE", "changed")
        second = await sandbox.run(show, env={"OUTPOST_PROBE": "command"})
        assert second.stdout_tail == "|||command|context\n"
        # the attempt's environment is the one its first command found
        assert (await sandbox.run(show)).stdout_tail == "|||process|context\n"
    finally:
        await sandbox.close()


async def test_an_attempts_grading_checkout_runs_in_the_cgroup_its_agent_emptied(tmp_path):
    """The agent's sandbox hands its emptied cgroups to the attempt's grading checkout's (not to
    another attempt's, nor to one that is not a grading checkout); what nobody takes goes with the
    provider's drain at the race's end."""

    from outpost_tui.engine.sandbox.local import LocalProvider

    if containment.cgroup_root() is None:
        pytest.skip("no writable cgroup v2 hierarchy on this machine")
    provider = LocalProvider()
    # keys of its own: the other tests' sandboxes ("alpha", race "r") have cgroups of that name
    # while they run beside it

    async def cgroup_of(box) -> str:
        return _cgroup_of((await box.run(["cat", "/proc/self/cgroup"])).stdout_tail)

    agent = await provider.acquire(context_in(tmp_path, "handed", 1, grading_follows=True))
    pids_file = tmp_path / "pids"
    await agent.run(["sh", "-c", f"setsid sleep 300 & python3 {HOST_PID} --siblings > {pids_file}"])
    [daemon] = await wait_for_pids(pids_file, 1)
    used = await cgroup_of(agent)
    await agent.close()
    assert not alive(daemon)
    other = await provider.acquire(context_in(tmp_path, "another", 1, role="grading"))  # another attempt's
    grading = await provider.acquire(context_in(tmp_path, "handed", 1, role="grading"))
    try:
        assert await cgroup_of(other) != used
        assert await cgroup_of(grading) == used  # the same emptied cgroup, not a new one
    finally:
        await grading.close()
        await other.close()
    root = containment.cgroup_root()
    assert root is not None
    assert not list(root.glob("r.handed.1.*"))  # removed with the grading checkout's sandbox
    # an agent whose grading never comes: its cgroups are kept for it until the drain
    lonely = await provider.acquire(context_in(tmp_path, "lonely", 1, grading_follows=True))
    await cgroup_of(lonely)
    await lonely.close()
    held = list(root.glob("r.lonely.1.*"))
    assert len(held) == 1 and held[0].is_dir()
    assert await provider.drain(5.0) == {}
    assert not held[0].exists()


async def test_processes_that_cannot_be_confirmed_gone_fail_the_command_in_one_line(tmp_path, monkeypatch):
    """Tracked by the process tree (no cgroup), a command whose processes do not go after KILL
    fails with the sandbox's own error: one line, never an exception group from inside."""

    monkeypatch.setenv(containment.PREFERENCE, "tree")

    def unkillable(known, token):
        raise containment.ContainmentError("processes [4242] are still alive after KILL")

    monkeypatch.setattr(containment, "kill_tree", unkillable)
    sandbox = LocalSandbox(context_in(tmp_path, "a"))
    try:
        with pytest.raises(SandboxError) as failed:
            await sandbox.run(["sh", "-c", "exit 0"])
        assert str(failed.value) == (
            "processes of 'sh' could not be stopped: processes [4242] are still alive after KILL"
        )
    finally:
        await sandbox.close()


def test_a_process_the_tree_tracks_is_killed_after_a_clock_step(step_clock):
    """Without a cgroup, a command's processes are found again by pid and start time: a start time
    the clock moved would call a live one another process, and leave it running."""
    stray = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        known = {stray.pid: pids.process_start(stray.pid)}
        epoch = psutil.Process(stray.pid).create_time()
        step_clock(30)
        # the control: the epoch start time moved with the clock
        assert psutil.Process(stray.pid).create_time() - epoch == pytest.approx(30, abs=0.01)
        killed = containment.kill_tree(known, None)
        assert [pid for pid, _name, _group in killed] == [stray.pid]
        assert stray.wait(timeout=10) == -9
    finally:
        stray.kill()
        stray.wait()
