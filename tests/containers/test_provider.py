"""The container sandbox provider against a real engine: isolation, streaming, exit codes,
cancellation, timeouts, ownership, git, cleanup and recovery."""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import replace

import anyio
import pytest

from outpost_tui.engine import git as engine_git
from outpost_tui.engine.core.spec import SandboxSpec
from outpost_tui.engine.sandbox import container_sandbox
from outpost_tui.engine.sandbox.base import SandboxError
from outpost_tui.engine.sandbox.container import ContainerProvider
from outpost_tui.engine.sandbox.container_engine import (
    container_name,
    list_containers,
    remove_race_containers,
)
from outpost_tui.engine.sandbox.container_scripts import WRAPPER
from outpost_tui.engine.sandbox.providers import provider_for
from tests.conftest import git

from .conftest import IMAGE, close

pytestmark = [pytest.mark.container, pytest.mark.anyio]

# Lists the container's processes (pid and command line), without ps in the image.
PROCESSES = [
    "python3",
    "-c",
    "import os\n"
    "for p in os.listdir('/proc'):\n"
    "    if p.isdigit():\n"
    "        try: print(p, open(f'/proc/{p}/cmdline','rb').read().replace(b'\\0',b' ').decode())\n"
    "        except OSError: pass",
]


async def processes(sandbox) -> str:
    return (await sandbox.run(PROCESSES)).stdout_tail


async def test_container_is_isolated_as_the_race_file_says(provider, attempt, engine, leftovers):
    provider = ContainerProvider(
        SandboxSpec(provider="podman", image=IMAGE, memory="256m", cpus=1.5, pids=128)
    )
    sandbox = await provider.acquire(attempt)
    try:
        client, _ = engine
        attrs = client.containers.get(sandbox.name).attrs
        host = attrs["HostConfig"]
        assert sandbox.name == f"outpost-{attempt.race_id}-alpha-1"
        assert attrs["Config"]["Labels"]["outpost.race"] == attempt.race_id
        assert attrs["Config"]["Labels"]["outpost.key"] == "alpha"
        assert attrs["Config"]["Labels"]["outpost.attempt"] == "1"
        assert attrs["Config"]["Labels"]["outpost.repository"] == str(attempt.repository.resolve())
        assert attrs["Config"]["User"] == f"{os.getuid()}:{os.getgid()}"
        assert host["NetworkMode"] == "none"
        dropped = {c.upper().removeprefix("CAP_") for c in host["CapDrop"] or []}
        # Docker keeps "ALL"; Podman lists the capabilities it dropped
        assert "ALL" in dropped or dropped >= {
            "CHOWN",
            "DAC_OVERRIDE",
            "KILL",
            "SETUID",
            "SETGID",
            "NET_RAW",
            "SYS_CHROOT",
            "NET_BIND_SERVICE",
        }
        assert not host.get("CapAdd")
        assert "no-new-privileges" in (host["SecurityOpt"] or [])
        assert host["Init"] is True
        assert host["Memory"] == 256 * 1024 * 1024
        assert host["NanoCpus"] == 1_500_000_000
        assert host["PidsLimit"] == 128
        # exactly the worktree, its view in place of the repository's worktree git directories
        # (its private repository) and the objects that repository borrows, read-only: no refs,
        # config, hooks or rivals of the repository's; never a Docker socket
        mounts = {m["Destination"]: (m["Source"], m["RW"]) for m in attrs["Mounts"]}
        git_dir = str(attempt.git_common_dir)
        assert mounts == {
            str(attempt.directory): (str(attempt.directory), True),
            f"{git_dir}/worktrees": (str(engine_git.candidate_view(attempt.directory)), True),
            f"{git_dir}/objects": (f"{git_dir}/objects", False),
        }
        assert not any(m["Source"].endswith(".sock") for m in attrs["Mounts"])
        # and what the process inside actually gets
        status = (await sandbox.run(["cat", "/proc/self/status"])).stdout_tail
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        assert fields["CapEff"].strip() == "0000000000000000"
        assert fields["NoNewPrivs"].strip() == "1"
        listing = (await processes(sandbox)).splitlines()
        commands = {pid: command for pid, _, command in (line.partition(" ") for line in listing)}
        assert "init" in commands["1"].split()[0]  # podman-init, docker-init or tini: not sleep
    finally:
        await close(sandbox)
    assert leftovers() == []


async def test_no_network_unless_asked(provider, attempt, leftovers):
    probe = [
        "python3",
        "-c",
        "import socket\n"
        "print(sorted(name for _, name in socket.if_nameindex()))\n"
        "socket.create_connection(('1.1.1.1', 53), timeout=5)",
    ]
    sandbox = await provider.acquire(attempt)
    try:
        done = await sandbox.run(probe)
    finally:
        await close(sandbox)
    assert done.exit_code != 0
    assert done.stdout_tail.strip() == "['lo']"
    assert "unreachable" in done.stderr_tail.lower() or "errno" in done.stderr_tail.lower()

    # the same probe with a network asked for: an interface besides loopback exists
    networked = ContainerProvider(SandboxSpec(provider="podman", image=IMAGE, network="bridge"))
    sandbox = await networked.acquire(replace(attempt, attempt=2))
    try:
        interfaces = await sandbox.run(
            probe[:2] + ["import socket; print(sorted(n for _, n in socket.if_nameindex()))"]
        )
    finally:
        await close(sandbox)
    assert interfaces.stdout_tail.strip() != "['lo']"
    assert leftovers() == []


async def test_output_streams_live_in_line_batches(provider, attempt, leftovers):
    """The second line is only printed after the test saw the first one: output is live."""
    gate = attempt.directory / "gate"
    program = (
        "import os, sys, time\n"
        "print('first', flush=True)\n"
        "print('to stderr', file=sys.stderr, flush=True)\n"
        f"while not os.path.exists({str(gate)!r}): time.sleep(0.01)\n"
        "print('second')\n"
        "print('no newline at the end', end='')\n"
    )
    seen: list[tuple[str, str]] = []

    def on_output(stream: str, lines: list[str]) -> None:
        seen.extend((stream, line) for line in lines)
        if ("stdout", "first") in seen:
            gate.touch()

    sandbox = await provider.acquire(attempt)
    try:
        with anyio.fail_after(60):
            done = await sandbox.run(["python3", "-c", program], on_output=on_output)
    finally:
        await close(sandbox)
    assert done.exit_code == 0
    assert [line for stream, line in seen if stream == "stdout"] == [
        "first",
        "second",
        "no newline at the end",
    ]
    assert ("stderr", "to stderr") in seen
    assert done.stdout_tail == "first\nsecond\nno newline at the end"
    assert leftovers() == []


async def test_exit_codes_env_and_large_output(provider, attempt, leftovers, monkeypatch):
    monkeypatch.setenv("OUTPOST_HOST_SECRET", "must-not-leak")
    sandbox = await provider.acquire(attempt)
    try:
        assert (await sandbox.run(["sh", "-c", "exit 3"])).exit_code == 3
        assert (await sandbox.run(["true"])).exit_code == 0
        env = await sandbox.run(["env"], env={"GREETING": "hello world", "EMPTY": ""})
        variables = dict(line.split("=", 1) for line in env.stdout_tail.splitlines())
        assert variables["GREETING"] == "hello world"
        assert variables["EMPTY"] == ""
        assert variables["HOME"] == "/tmp"
        assert "OUTPOST_HOST_SECRET" not in variables
        assert "OUTPOST_RUN" not in variables  # the wrapper's own variable stays the wrapper's
        pwd = await sandbox.run(["pwd"])
        assert pwd.stdout_tail.strip() == str(attempt.directory)

        lines: list[str] = []
        big = await sandbox.run(
            ["python3", "-c", "for i in range(20000): print('line', i)"],
            on_output=lambda stream, batch: lines.extend(batch),
            tail_bytes=1000,
        )
        assert big.exit_code == 0
        assert lines == [f"line {i}" for i in range(20000)]
        assert len(big.stdout_tail) <= 1000 and big.stdout_tail.endswith("line 19999\n")
    finally:
        await close(sandbox)
    assert leftovers() == []


async def test_the_operators_git_identity_is_written_by_the_first_command_only(
    engine, attempt, leftovers, tmp_path, monkeypatch
):
    """The operator's global identity reaches a container's empty home through its first command
    (no upload of its own), readable by git there as the global config, never as a variable."""
    home = tmp_path / "operator"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = Ada Operator\n\temail = ada@example.invalid\n")
    monkeypatch.setenv("HOME", str(home))
    provider = ContainerProvider(SandboxSpec(provider="podman", image=IMAGE))
    provider.warm_up()  # as a race does: connected (and the identity read) beside its start
    sandbox = await provider.acquire(attempt)
    try:
        mode = "import os; print(oct(os.stat('/tmp/.gitconfig').st_mode & 0o777))"
        first = await sandbox.run(
            ["sh", "-c", 'env; python3 -c "$1"; git config --global --get user.name', "sh", mode]
        )
        # a later command that removed it finds it gone: written once, by the first command
        second = await sandbox.run(["sh", "-c", "rm /tmp/.gitconfig; env"])
        third = await sandbox.run(["sh", "-c", "test -e /tmp/.gitconfig; echo $?"])
    finally:
        await close(sandbox)
        await provider.aclose()
    assert first.exit_code == 0, first.stderr_tail
    assert first.stdout_tail.splitlines()[-2:] == ["0o600", "Ada Operator"]
    assert "OUTPOST_GITCONFIG" not in first.stdout_tail and "OUTPOST_GITCONFIG" not in second.stdout_tail
    assert third.stdout_tail.strip() == "1"  # not written again
    assert leftovers() == []


async def test_a_warm_up_that_cannot_connect_fails_where_acquiring_would(attempt, tmp_path):
    """A race warms its provider up as it starts; an engine that is not there is said by the
    first acquire, in the same words as without the warm-up, and a later acquire tries again."""
    missing = f"unix://{tmp_path}/no-engine.sock"
    provider = ContainerProvider(SandboxSpec(provider="podman", image=IMAGE, endpoint=missing))
    provider.warm_up()
    for _ in range(2):
        with pytest.raises(SandboxError, match=f"cannot reach the container engine at {missing}"):
            await provider.acquire(attempt)
    await provider.aclose()


async def test_a_text_brief_arrives_exactly(provider, attempt, leftovers):
    """Text stdin travels in the exec's request (the wrapper writes it): every byte as given,
    shell syntax and printf directives included, and an empty one is an empty stdin."""
    brief = "fix add: $HOME `id` %s %% \\n \\ 'quoted' \"double\" résumé ✓\n\n  \n" * 200
    sandbox = await provider.acquire(attempt)
    try:
        done = await sandbox.run(
            [
                "python3",
                "-c",
                "import sys, hashlib; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())",
            ],
            stdin=brief.encode(),
        )
        empty = await sandbox.run(
            ["python3", "-c", "import sys; print(len(sys.stdin.buffer.read()))"], stdin=b""
        )
        seen = await sandbox.run(["sh", "-c", 'echo "${OUTPOST_STDIN-unset}"'], stdin=b"x")
        leftover_files = await sandbox.run(["sh", "-c", "ls -a /tmp | grep -c '^.outpost-.*stdin' || true"])
    finally:
        await close(sandbox)
    assert done.stdout_tail.strip() == hashlib.sha256(brief.encode()).hexdigest()
    assert empty.stdout_tail.strip() == "0"
    assert seen.stdout_tail.strip() == "unset"  # the command never sees the variable
    assert leftover_files.stdout_tail.strip() == "0"
    assert leftovers() == []


async def test_stdin_bytes_arrive_exactly(provider, attempt, leftovers):
    data = os.urandom(300_000) + b"\0\n\r\n" + "brief: résumé ✓".encode()
    sandbox = await provider.acquire(attempt)
    try:
        done = await sandbox.run(
            [
                "python3",
                "-c",
                "import sys, hashlib; d = sys.stdin.buffer.read(); "
                "print(len(d), hashlib.sha256(d).hexdigest())",
            ],
            stdin=data,
        )
        without = await sandbox.run(["python3", "-c", "import sys; print(len(sys.stdin.buffer.read()))"])
        leftover_files = await sandbox.run(["sh", "-c", "ls -a /tmp | grep -c '^.outpost-.*stdin' || true"])
    finally:
        await close(sandbox)
    assert done.stdout_tail.split() == [str(len(data)), hashlib.sha256(data).hexdigest()]
    assert without.stdout_tail.strip() == "0"  # no stdin: EOF at once, never a hang
    assert leftover_files.stdout_tail.strip() == "0"  # the stdin file is gone once opened
    assert leftovers() == []


async def test_program_not_found_is_one_clear_error(provider, attempt, leftovers):
    sandbox = await provider.acquire(attempt)
    try:
        with pytest.raises(SandboxError, match=r"program 'no-such-agent' not found in image"):
            await sandbox.run(["no-such-agent", "--flag"])
        (attempt.directory / "script.sh").write_text("#!/bin/sh\necho hi\n")
        with pytest.raises(SandboxError, match="not executable"):
            await sandbox.run([str(attempt.directory / "script.sh")])
        # a program that exits 127 by itself is a result, not a start failure
        assert (await sandbox.run(["sh", "-c", "echo 'x: not found' >&2; exit 127"])).exit_code == 127
    finally:
        await close(sandbox)
    assert leftovers() == []


HANG = [
    "python3",
    "-c",
    "import subprocess, time\n"
    "subprocess.Popen(['sleep', '1000'])\n"  # a child in the same group
    "print('ready', flush=True)\n"
    "time.sleep(1000)",
]


async def test_cancellation_kills_the_process_group_inside(provider, attempt, leftovers):
    sandbox = await provider.acquire(attempt)
    try:
        ready = anyio.Event()
        started = time.monotonic()
        async with anyio.create_task_group() as group:

            async def agent():
                await sandbox.run(HANG, on_output=lambda s, lines: "ready" in lines and ready.set())
                pytest.fail("run returned instead of being cancelled")

            group.start_soon(agent)
            with anyio.fail_after(60):
                await ready.wait()
            group.cancel_scope.cancel()
        elapsed = time.monotonic() - started
        remaining = await processes(sandbox)
        assert "sleep 1000" not in remaining and "time.sleep" not in remaining, remaining
        assert elapsed < 20
        # the sandbox is still usable after a cancelled command
        assert (await sandbox.run(["true"])).exit_code == 0
    finally:
        await close(sandbox)
    assert leftovers() == []


async def test_timeout_stops_the_command_inside(provider, attempt, leftovers):
    sandbox = await provider.acquire(attempt)
    try:
        started = time.monotonic()
        done = await sandbox.run(HANG, timeout=2)
        elapsed = time.monotonic() - started
        remaining = await processes(sandbox)
    finally:
        await close(sandbox)
    assert done.timed_out
    assert done.exit_code < 0  # killed by a signal
    assert "ready" in done.stdout_tail
    assert 2 <= elapsed < 15
    assert "sleep 1000" not in remaining and "time.sleep" not in remaining, remaining
    assert leftovers() == []


async def test_a_deadline_inside_the_container_stops_a_command_without_its_coordinator(
    provider, attempt, engine, leftovers
):
    """The wrapper's own deadline: what stops a command when no coordinator is left to time it."""
    client, _ = engine
    sandbox = await provider.acquire(attempt)
    try:

        def run_wrapper() -> tuple[int, float]:
            started = time.monotonic()
            exec_id = client.api.exec_create(
                sandbox.name,
                ["sh", "-c", WRAPPER, "outpost-run", "/tmp/.t.pid", "", "1", "sh", "-c", "sleep 300"],
                environment=[f"OUTPOST_RUN={WRAPPER}"],
            )["Id"]
            client.api.exec_start(exec_id)
            return client.api.exec_inspect(exec_id)["ExitCode"], time.monotonic() - started

        with anyio.fail_after(60):
            exit_code, elapsed = await anyio.to_thread.run_sync(run_wrapper)
        remaining = await processes(sandbox)
    finally:
        await close(sandbox)
    assert exit_code in (128 + 15, 128 + 9, -15, -9), exit_code  # TERM (or KILL), not a normal end
    assert elapsed < 30, elapsed
    assert "sleep 300" not in remaining, remaining
    assert leftovers() == []


async def test_background_processes_do_not_outlive_their_command(provider, attempt, leftovers):
    sandbox = await provider.acquire(attempt)
    try:
        done = await sandbox.run(["sh", "-c", "sleep 777 & echo started"])
        remaining = await processes(sandbox)
    finally:
        await close(sandbox)
    assert done.exit_code == 0 and done.stdout_tail == "started\n"
    assert "sleep 777" not in remaining, remaining
    assert leftovers() == []


async def test_a_daemon_started_by_the_command_does_not_hang_it(provider, attempt, leftovers):
    """A process in its own session escapes the command's group and inherits its output; the run
    still ends when the command does, with its output and status (an agent starting a dev server
    must not hang the race)."""
    daemon = (
        "import subprocess\n"
        "subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "print('started', flush=True)\n"
    )
    sandbox = await provider.acquire(attempt)
    try:
        started = time.monotonic()
        with anyio.fail_after(60):
            done = await sandbox.run(["python3", "-c", daemon])
        elapsed = time.monotonic() - started
    finally:
        await close(sandbox)
    assert (done.exit_code, done.stdout_tail) == (0, "started\n")
    assert elapsed < 30, elapsed  # the daemon lives 300 s: the run did not wait for it
    assert leftovers() == []


async def test_a_quiet_command_outlasts_the_engine_request_timeout(attempt, engine, leftovers):
    provider = ContainerProvider(SandboxSpec(provider="podman", image=IMAGE), request_timeout=2)
    sandbox = await provider.acquire(attempt)
    try:
        done = await sandbox.run(["sh", "-c", "sleep 3; echo done"])
    finally:
        await close(sandbox)
    assert (done.exit_code, done.stdout_tail) == (0, "done\n")


async def test_files_written_inside_belong_to_the_container_user(provider, attempt, leftovers):
    sandbox = await provider.acquire(attempt)
    try:
        await sandbox.run(["sh", "-c", "echo data > made-inside.txt; mkdir -p sub; touch sub/f"])
    finally:
        await close(sandbox)
    made = attempt.directory / "made-inside.txt"
    assert made.read_text() == "data\n"
    for path in (made, attempt.directory / "sub", attempt.directory / "sub" / "f"):
        assert (path.stat().st_uid, path.stat().st_gid) == (os.getuid(), os.getgid())

    # the mapping is real, not "root writes everything": another uid:gid owns what it writes
    os.chmod(attempt.directory, 0o777)
    os.chmod(engine_git.candidate_view(attempt.directory), 0o777)  # the path probe writes there
    other = ContainerProvider(SandboxSpec(provider="podman", image=IMAGE), user=(4321, 4322))
    sandbox = await other.acquire(replace(attempt, attempt=2))
    try:
        whoami = await sandbox.run(["id", "-u"])
        await sandbox.run(["sh", "-c", "echo x > by-other.txt"])
    finally:
        await close(sandbox)
    assert whoami.stdout_tail.strip() == "4321"
    stat = (attempt.directory / "by-other.txt").stat()
    assert (stat.st_uid, stat.st_gid) == (4321, 4322)
    assert leftovers() == []


async def test_the_repository_configuration_and_hooks_are_out_of_reach(provider, attempt, leftovers):
    """An agent inside can commit, in a repository of its own: a hook or a setting it plants is
    that repository's, never one the host's git would run."""
    git_dir = attempt.git_common_dir
    config_before = (git_dir / "config").read_bytes()
    sandbox = await provider.acquire(attempt)
    try:
        planted = await sandbox.run(
            [
                "sh",
                "-c",
                f"echo 'touch /tmp/pwned' > {git_dir}/hooks/post-checkout; "
                "git config core.fsmonitor 'touch /tmp/pwned' && git config --get core.fsmonitor",
            ]
        )
        committed = await sandbox.run(
            [
                "sh",
                "-c",
                "echo x > inside.txt && git add inside.txt && "
                "git commit -qm inside && git log -1 --format=%s",
            ]
        )
    finally:
        await close(sandbox)
    # the hook's directory is not in the container; the setting went to its own repository
    assert "post-checkout: Directory nonexistent" in planted.stderr_tail
    assert planted.stdout_tail == "touch /tmp/pwned\n"
    assert "fsmonitor" in (engine_git.private_git_dir(attempt.directory) / "config").read_text()
    assert not (git_dir / "hooks" / "post-checkout").exists()
    assert (git_dir / "config").read_bytes() == config_before
    assert (committed.exit_code, committed.stdout_tail) == (0, "inside\n")
    assert leftovers() == []


async def test_git_works_inside_the_worktree(provider, attempt, leftovers):
    sandbox = await provider.acquire(attempt)
    try:
        (attempt.directory / "feature.txt").write_text("made in a container\n")
        status = await sandbox.run(["git", "status", "--porcelain"])
        commit = await sandbox.run(
            ["sh", "-c", "git add feature.txt && git commit -qm 'inside' && git rev-parse HEAD"]
        )
    finally:
        await close(sandbox)
    assert status.exit_code == 0, status.stderr_tail
    assert "?? feature.txt" in status.stdout_tail
    assert commit.exit_code == 0, commit.stderr_tail
    head = commit.stdout_tail.strip()
    # the commit is in its own repository until the engine brings it in, then on the attempt's
    # branch, the worktree clean
    assert git(attempt.repository, "rev-parse", "outpost/test/wt") != head
    assert engine_git.import_result(attempt.repository, attempt.directory, "outpost/test/wt") == head
    assert git(attempt.directory, "rev-parse", "HEAD") == head
    assert git(attempt.repository, "log", "-1", "--format=%s", "outpost/test/wt") == "inside"
    assert git(attempt.directory, "status", "--porcelain") == ""
    assert leftovers() == []


async def test_resource_is_registered_before_the_container_exists(provider, attempt, engine, leftovers):
    client, _ = engine
    registered: list[tuple[str, int]] = []

    async def register(resource_id: str) -> None:
        existing = client.containers.list(
            all=True, filters={"name": container_name(attempt.race_id, attempt.key, attempt.attempt)}
        )
        registered.append((resource_id, len(existing)))

    sandbox = await provider.acquire(replace(attempt, register_resource=register))
    await close(sandbox)
    assert registered == [(f"container:{sandbox.name}", 0)]
    assert sandbox.resource_id == f"container:{sandbox.name}"
    assert provider.owns(sandbox.resource_id) and not provider.owns("pid:123")


async def test_close_halts_the_container_at_once_and_drain_removes_it(provider, attempt, engine, leftovers):
    import docker

    client, _ = engine
    sandbox = await provider.acquire(attempt)
    assert client.containers.get(sandbox.name).status == "running"
    # a daemon the command left behind (as a hostile agent would) is frozen with the rest
    # (the command waits for its first beat: on a loaded machine the wrapper's sweep could
    # otherwise end the daemon before it wrote any)
    await sandbox.run(
        [
            "sh",
            "-c",
            "(trap '' TERM; while :; do date +%s%N > beat; sleep 0.01; done) & "
            "while [ ! -s beat ]; do sleep 0.01; done",
        ]
    )
    await sandbox.close()
    await sandbox.close()
    # closed: nothing in it runs (paused, or already removed) and nothing can be started in it
    state = {c["Names"][0].lstrip("/"): c["State"] for c in leftovers()}
    assert state.get(sandbox.name, "removed") in ("paused", "removed")
    with pytest.raises(SandboxError, match="closed"):
        await sandbox.run(["true"])
    beat = (attempt.directory / "beat").read_text()
    assert await provider.drain() == {}
    with pytest.raises(docker.errors.NotFound):
        client.containers.get(sandbox.name)
    assert (attempt.directory / "beat").read_text() == beat  # it never ran again after close
    assert set(sandbox.timings) >= {"create", "start", "halt", "remove"}
    assert await provider.drain() == {}  # nothing left to wait for
    assert leftovers() == []


async def test_recover_and_label_sweep_remove_leftovers(attempt, engine, race_id, leftovers):
    # a coordinator that "crashed": its sandboxes were never closed
    crashed = ContainerProvider(SandboxSpec(provider="podman", image=IMAGE))
    first = await crashed.acquire(attempt)
    await crashed.acquire(replace(attempt, key="beta"))
    await crashed.acquire(replace(attempt, key="gamma"))
    assert {c["key"] for c in list_containers(race_id)} == {"alpha", "beta", "gamma"}
    assert all(c["repository"] == str(attempt.repository.resolve()) for c in list_containers(race_id))

    fresh = ContainerProvider(SandboxSpec(provider="podman", image=IMAGE))
    assert await fresh.recover(first.resource_id) is True
    assert await fresh.recover(first.resource_id) is False  # idempotent
    assert await fresh.recover("pid:1") is False
    assert {c["key"] for c in list_containers(race_id)} == {"beta", "gamma"}
    assert remove_race_containers(race_id) == 2
    assert list_containers(race_id) == []
    assert leftovers() == []
    # the repository and worktree are untouched
    assert (attempt.directory / "base.txt").read_text() == "base\n"


async def test_recover_never_removes_a_container_that_is_not_ours(provider, engine, race_id):
    client, _ = engine
    name = f"outpost-{race_id}-foreign-1"
    stranger = client.containers.run(
        IMAGE, ["sleep", "300"], name=name, detach=True, init=True, network_mode="none"
    )
    try:
        assert await provider.recover(f"container:{name}") is False
        assert client.containers.get(name).status == "running"
    finally:
        stranger.remove(force=True)


async def test_a_stale_container_of_the_same_attempt_is_replaced(provider, attempt, leftovers):
    stale = await provider.acquire(attempt)
    again = await ContainerProvider(SandboxSpec(provider="podman", image=IMAGE)).acquire(attempt)
    try:
        assert again.name == stale.name
        assert (await again.run(["true"])).exit_code == 0
        assert len(leftovers()) == 1
    finally:
        await close(again)
    assert leftovers() == []


async def test_missing_image_says_how_to_build_one(attempt, engine, leftovers):
    provider = ContainerProvider(SandboxSpec(provider="podman", image="local/outpost-no-such:1"))
    with pytest.raises(SandboxError) as error:
        await provider.acquire(attempt)
    message = str(error.value)
    assert "image 'local/outpost-no-such:1' not found" in message
    assert "outpost-tui image build --tag local/outpost-no-such:1" in message
    assert "\n" not in message
    assert leftovers() == []


async def test_unreachable_engine_names_the_endpoint(attempt, tmp_path):
    endpoint = f"unix://{tmp_path}/no-engine.sock"
    provider = ContainerProvider(SandboxSpec(provider="docker", image=IMAGE, endpoint=endpoint))
    with pytest.raises(SandboxError) as error:
        await provider.acquire(attempt)
    assert endpoint in str(error.value) and "DOCKER_HOST" in str(error.value)
    assert "\n" not in str(error.value)


def test_provider_for_picks_the_container_provider():
    for name in ("docker", "podman"):
        provider = provider_for(SandboxSpec(provider=name, image=IMAGE))
        assert isinstance(provider, ContainerProvider) and provider.name == name


async def test_a_repository_the_container_user_cannot_write_is_refused_before_any_command(
    attempt, leftovers, monkeypatch
):
    """The race's paths are checked before its first command: the keep-alive's marker was not
    written, so a probe command says why; nothing the command asked for ran, and no marker is
    left beside its checkout."""
    monkeypatch.setattr(container_sandbox, "MARKER_WAIT", 0.5)  # it never comes
    os.chmod(engine_git.candidate_view(attempt.directory), 0o755)
    stranger = ContainerProvider(SandboxSpec(provider="podman", image=IMAGE), user=(4321, 4322))
    sandbox = await stranger.acquire(attempt)
    try:
        with pytest.raises(SandboxError, match=r"container cannot write in .*repositories"):
            await sandbox.run(["sh", "-c", ": > ran"])
        # still unchecked: the next command is refused the same way
        with pytest.raises(SandboxError, match=r"container cannot write in .*repositories"):
            await sandbox.run(["sh", "-c", ": > ran"])
    finally:
        await close(sandbox)
    assert not (attempt.directory / "ran").exists()
    assert leftovers() == []
    assert not list(engine_git.candidate_view(attempt.directory).glob(".outpost-owner-*"))


async def counting_execs(provider) -> list[list[str]]:
    """The commands the provider's sandboxes start in their containers from now on (each exec's
    command line, up to its argv: the wrapper's own arguments left out), in order."""
    api = (await provider.client()).api
    started: list[list[str]] = []
    create = api.exec_create

    def exec_create(container, command, *args, **options):
        if command[:3] == ["sh", "-c", WRAPPER]:
            started.append([*command[:3], *command[7:]])  # past outpost-run, pid, stdin, deadline
        else:
            started.append(list(command))
        return create(container, command, *args, **options)

    api.exec_create = exec_create
    return started


async def test_the_first_containers_keep_alive_checks_the_paths_without_a_probe_command(
    provider, attempt, leftovers
):
    """The race's first container writes its marker as it starts: its first command is the only
    exec it sees (no probe), the marker is gone once read, and later sandboxes carry none."""
    execs = await counting_execs(provider)
    sandbox = await provider.acquire(attempt)
    try:
        view = engine_git.candidate_view(attempt.directory).resolve()
        assert sandbox.marker is not None and sandbox.marker.parent == view
        with anyio.fail_after(30):  # the keep-alive writes it as the container starts
            while not sandbox.marker.exists():
                await anyio.sleep(0.01)
        done = await sandbox.run(["true"])
        later = await provider.acquire(replace(attempt, attempt=2))
        await close(later)
    finally:
        await close(sandbox)
    assert done.exit_code == 0
    assert execs == [["sh", "-c", WRAPPER, "true"]], execs  # the command's only: no probe
    assert later.marker is None
    assert not list(engine_git.candidate_view(attempt.directory).glob(".outpost-owner-*"))
    assert leftovers() == []


async def test_agents_containers_start_before_grading_and_baseline_ones(provider, attempt, leftovers):
    """A grading or baseline container asked for while an agent's is being started waits until
    that one has started (they are needed later, and would share the engine and the cores)."""
    client = await provider.client()
    api = client.api
    said: list[tuple[str, str]] = []
    create, start = api.create_container, api.start

    def creating(*args, **options):
        said.append(("create", options["name"]))
        return create(*args, **options)

    def starting(container, *args, **options):
        started = start(container, *args, **options)
        said.append(("started", container))
        return started

    api.create_container, api.start = creating, starting
    sandboxes = {}

    async def acquire(name, context):
        sandboxes[name] = await provider.acquire(context)

    try:
        async with anyio.create_task_group() as group:
            # the agent's is asked for first; the others are asked for while it is being started
            group.start_soon(acquire, "agent", attempt)
            await anyio.wait_all_tasks_blocked()
            group.start_soon(acquire, "grading", replace(attempt, role="grading"))
            group.start_soon(acquire, "baseline", replace(attempt, key="baseline", attempt=0))
    finally:
        api.create_container, api.start = create, start
        for sandbox in sandboxes.values():
            await close(sandbox)
    agent = sandboxes["agent"]
    order = [
        what if what == "create" else f"started {'agent' if who == agent.container.id else 'other'}"
        for what, who in said
    ]
    assert order[:2] == ["create", "started agent"], said
    assert order.count("create") == 3 and len(sandboxes) == 3
    assert leftovers() == []


async def test_a_marker_written_late_is_waited_for_and_not_seen_by_the_first_command(
    provider, attempt, leftovers
):
    """A keep-alive slower than the first command (a loaded machine): the command waits for its
    marker, which the checkout's git then never shows it (no probe either)."""
    execs = await counting_execs(provider)
    sandbox = await provider.acquire(attempt)
    marker = sandbox.marker
    assert marker is not None
    aside = marker.with_name("aside")
    try:
        with anyio.fail_after(30):
            while not marker.exists():
                await anyio.sleep(0.01)
        marker.rename(aside)  # as if not written yet
        done: list = []

        async def first() -> None:
            done.append(await sandbox.run(["sh", "-c", 'ls -A "$0"', sandbox.marker_inside]))

        async with anyio.create_task_group() as group:
            group.start_soon(first)
            await anyio.wait_all_tasks_blocked()
            assert execs == []  # waiting for the marker
            aside.rename(marker)  # written now
    finally:
        await close(sandbox)
    assert done[0].exit_code == 0
    assert "outpost-owner" not in done[0].stdout_tail and "aside" not in done[0].stdout_tail
    assert execs == [["sh", "-c", WRAPPER, "sh", "-c", 'ls -A "$0"', sandbox.marker_inside]], execs
    assert leftovers() == []


async def test_a_marker_never_written_falls_back_to_the_probe_and_none_is_left(
    provider, attempt, leftovers, monkeypatch
):
    """A keep-alive that did not write its marker in time: the probe command checks the paths
    instead, and the marker written afterwards goes with the sandbox's close."""
    monkeypatch.setattr(container_sandbox, "MARKER_WAIT", 0.05)
    execs = await counting_execs(provider)
    sandbox = await provider.acquire(attempt)
    assert sandbox.marker is not None
    real, sandbox.marker = sandbox.marker, sandbox.marker.with_name(".outpost-owner-not-yet")
    try:
        done = await sandbox.run(["true"])
        sandbox.marker = real
    finally:
        await close(sandbox)
    assert done.exit_code == 0
    assert len(execs) == 2 and execs[1] == ["sh", "-c", WRAPPER, "true"], execs  # the probe first
    assert not list(engine_git.candidate_view(attempt.directory).glob(".outpost-owner-*"))
    assert leftovers() == []


async def test_a_container_that_cannot_pause_is_removed_by_close(provider, attempt, engine, leftovers):
    """An engine that cannot pause (rootless on cgroup v1), or a container that has ended (its
    keep-alive killed from inside): close removes it there and then, nothing is left to drain."""
    client, _ = engine
    sandbox = await provider.acquire(attempt)
    await sandbox.run(["sh", "-c", "kill -KILL $(cat /proc/1/task/1/children)"])
    with anyio.fail_after(60):  # the engine's wait endpoint answers once the container has ended
        await anyio.to_thread.run_sync(client.api.wait, sandbox.container.id)
    await sandbox.close()
    assert "halt" not in sandbox.timings and "remove" in sandbox.timings
    assert leftovers() == []
    assert await provider.drain() == {}
