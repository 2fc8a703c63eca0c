"""A command's process watched by the event loop itself: its output, its input and its exit, with
no thread, task or transport of its own, in whichever thread the loop runs (the app runs a race on
a loop of its own in a worker thread)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import anyio
import psutil
import pytest

from outpost_tui.engine.sandbox.child import Child, DataSink

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _collect() -> tuple[dict[str, bytearray], list[str], DataSink]:
    seen: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
    ends: list[str] = []

    def on_data(name: str, chunk: bytes) -> None:
        if chunk:
            seen[name] += chunk
        else:
            ends.append(name)

    return seen, ends, on_data


async def _run_to_its_end(argv: list[str], directory, stdin: bytes | None = None):
    """(exit code, output by stream, the streams whose end was told) of a command run to its end."""
    seen, ends, on_data = _collect()
    child = Child.start(argv, stdin=stdin, cwd=directory, env=os.environ, on_data=on_data)
    code = await child.wait()
    await child.drained.wait()
    child.close()
    return code, {name: bytes(data) for name, data in seen.items()}, ends


async def test_output_exit_code_and_the_end_of_both_streams(tmp_path):
    code, seen, ends = await _run_to_its_end(["sh", "-c", "echo out; echo err >&2; exit 3"], tmp_path)
    assert code == 3
    assert seen["stdout"] == b"out\n" and seen["stderr"] == b"err\n"
    assert sorted(ends) == ["stderr", "stdout"]  # each stream's end told once


async def test_an_input_larger_than_a_pipe_holds_arrives_whole(tmp_path):
    data = os.urandom(3 * 1024 * 1024)  # the pipe holds 64 KiB: written as the command reads
    code, seen, _ = await _run_to_its_end(["cat"], tmp_path, stdin=data)
    assert code == 0 and seen["stdout"] == data


async def test_a_command_that_never_reads_its_input_is_no_error(tmp_path):
    argv = ["sh", "-c", "exec 0<&-; echo done"]
    code, seen, _ = await _run_to_its_end(argv, tmp_path, stdin=b"x" * (1024 * 1024))
    assert code == 0 and seen["stdout"] == b"done\n"


async def test_what_the_output_sink_raises_is_raised_by_wait_and_the_command_still_reaped(tmp_path):
    class Refused(Exception):
        pass

    calls: list[bytes] = []

    def on_data(name: str, chunk: bytes) -> None:
        calls.append(chunk)
        if chunk:
            raise Refused(chunk)

    child = Child.start(
        ["sh", "-c", "echo one; sleep 0.2; echo two"],
        stdin=None,
        cwd=tmp_path,
        env=os.environ,
        on_data=on_data,
    )
    with pytest.raises(Refused):
        await child.wait()
    assert await child.wait() == 0  # the first exception once; then the exit
    await child.drained.wait()
    child.close()
    assert calls[-1] == b"" and b"two\n" in calls  # later data still handed on, its errors dropped


async def test_the_pipes_named_are_the_commands_own_output(tmp_path):
    _, _, on_data = _collect()
    child = Child.start(["sleep", "30"], stdin=None, cwd=tmp_path, env=os.environ, on_data=on_data)
    child_stdin_closed = Child.start(
        ["sleep", "30"], stdin=b"", cwd=tmp_path, env=os.environ, on_data=on_data
    )
    try:
        theirs = {os.readlink(f"/proc/{child_stdin_closed.pid}/fd/{fd}") for fd in (1, 2)}
        assert child_stdin_closed.pipe_ids == theirs and all(p.startswith("pipe:[") for p in theirs)
        assert child.pipe_ids.isdisjoint(theirs)
    finally:
        for started in (child, child_stdin_closed):
            os.killpg(started.pid, 9)
            assert await started.wait() == -9
            started.close()


async def test_a_closed_child_releases_the_output_it_no_longer_reads(tmp_path):
    _, _, on_data = _collect()
    holder = tmp_path / "holder.pid"
    # a daemon in a session of its own keeps the output open after the command's end
    child = Child.start(
        ["sh", "-c", f"setsid sh -c 'echo $$ > {holder}; exec sleep 30' & exit 0"],
        stdin=None,
        cwd=tmp_path,
        env=os.environ,
        on_data=on_data,
    )
    assert await child.wait() == 0
    with anyio.move_on_after(0.3):
        await child.drained.wait()
    assert not child.drained.is_set()  # held open by the daemon
    child.close()
    while not holder.exists() or not holder.read_text().strip():
        await anyio.sleep(0.01)
    os.kill(int(holder.read_text()), 9)


PROGRAM = r"""
import asyncio, os, sys, threading
sys.path.insert(0, sys.argv[1])

async def child_in_another_thread():
    from outpost_tui.engine.sandbox.child import Child, DataSink
    codes, waiters = [], []

    def race_thread():
        async def run():
            child = Child.start(["sh", "-c", "exit 3"], stdin=None, cwd="/", env=os.environ,
                                on_data=lambda name, chunk: None)
            waiters.extend(t.name for t in threading.enumerate() if t is not threading.main_thread()
                           and t is not threading.current_thread())
            code = await child.wait()
            child.close()
            return code
        codes.append(asyncio.run(run()))

    thread = threading.Thread(target=race_thread)
    thread.start()
    await asyncio.to_thread(thread.join)
    print(codes, [w for w in waiters if not w.startswith("asyncio")])

asyncio.run(child_in_another_thread())
"""


def test_a_loop_in_another_thread_hears_its_childs_exit_with_no_thread_waiting():
    import subprocess

    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", PROGRAM, root], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[3] []", done.stdout  # its exit code, and no thread waiting for it


async def test_a_command_that_cannot_be_watched_is_killed_and_reaped(tmp_path, monkeypatch):
    """Started but not watched (here: the loop refuses its pidfd), a command would run on with
    nobody to stop or reap it: it is killed with its group before the error is raised."""
    loop = asyncio.get_running_loop()
    original = loop.add_reader

    def add_reader(fd, callback, *args):
        if callback.__name__ == "_pidfd_readable":
            raise OSError("no more watchers")
        return original(fd, callback, *args)

    before = {child.pid for child in psutil.Process().children()}
    monkeypatch.setattr(loop, "add_reader", add_reader)
    with pytest.raises(OSError, match="no more watchers"):
        Child.start(
            ["sleep", "30"], stdin=None, cwd=tmp_path, env=os.environ, on_data=lambda name, chunk: None
        )
    monkeypatch.undo()
    # neither running nor a zombie: a child not reaped would still be listed
    assert {child.pid for child in psutil.Process().children()} == before
