"""A child's exit reaches the loop that started it, in whichever thread that loop runs: the app runs
a race on a loop of its own in a worker thread, while its own loop runs in the main thread (Python
3.11's PidfdChildWatcher serves the main thread's loop only, and only once attached to it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# The sandbox's module is imported before any loop runs, or (as the app does when it builds a race)
# once the main thread's loop runs; then a loop in another thread starts a child and waits for it.
PROGRAM = r"""
import asyncio, sys, threading

def import_sandbox():
    from outpost_tui.engine.sandbox import local

async def child_in_another_thread():
    if sys.argv[1] == "late":
        import_sandbox()
    codes, waiters = [], []

    def race_thread():
        async def run():
            process = await asyncio.create_subprocess_exec("sh", "-c", "exit 3")
            waiters.extend(t.name for t in threading.enumerate() if "waitpid" in t.name)
            return await process.wait()
        codes.append(asyncio.run(run()))

    thread = threading.Thread(target=race_thread)
    thread.start()
    await asyncio.to_thread(thread.join)
    print(codes, waiters)

if sys.argv[1] == "early":
    import_sandbox()
asyncio.run(child_in_another_thread())
"""


@pytest.mark.parametrize("imported", ["early", "late"])
def test_a_loop_in_another_thread_hears_its_childs_exit(imported):
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, imported], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[3] []", done.stdout  # its exit code, and no waitpid thread
