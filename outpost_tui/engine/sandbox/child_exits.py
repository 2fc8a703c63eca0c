"""How the event loop learns that a child process exited, on Python 3.11.

3.11's asyncio waits for each child in a thread of its own (a thread started and a blocking waitpid
per command); a pidfd in the event loop tells the same exit without one, as 3.12 and later do by
themselves. 3.11's own PidfdChildWatcher serves one loop, the main thread's, and only once attached
to it; the app runs a race on a loop of its own in a worker thread. The watcher here waits on the
loop that started the child, whichever thread runs it.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVarTuple, Unpack

Args = TypeVarTuple("Args")


class LoopPidfdWatcher(asyncio.AbstractChildWatcher):
    """A child's exit through a pidfd read by the running loop that started it."""

    def add_child_handler(
        self, pid: int, callback: Callable[[int, int, Unpack[Args]], object], *args: *Args
    ) -> None:
        loop = asyncio.get_running_loop()  # asyncio starts a child from its loop's own thread
        pidfd = os.pidfd_open(pid)
        loop.add_reader(pidfd, self._exited, loop, pidfd, pid, callback, args)

    @staticmethod
    def _exited(
        loop: asyncio.AbstractEventLoop,
        pidfd: int,
        pid: int,
        callback: Callable[..., object],
        args: tuple[Any, ...],
    ) -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:  # reaped by someone else: asyncio's own watchers say 255 too
            code = 255
        else:
            code = os.waitstatus_to_exitcode(status)
        callback(pid, code, *args)

    def remove_child_handler(self, pid: int) -> bool:
        return False  # asyncio never asks; a handler ends with its child

    def attach_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Each child is watched by the loop that started it: no loop to attach."""

    def close(self) -> None:
        """Nothing is held between children."""

    def is_active(self) -> bool:
        return True

    def __enter__(self) -> LoopPidfdWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def watch_children_with_pidfds() -> None:
    """Use LoopPidfdWatcher for every loop, where Python is 3.11 and the kernel has pidfds."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    policy = asyncio.get_event_loop_policy()
    if not isinstance(policy, asyncio.DefaultEventLoopPolicy):
        return  # someone else's loop policy: theirs to configure
    try:
        os.close(os.pidfd_open(os.getpid()))  # kernels before 5.3 have no pidfds
    except OSError:
        return
    policy.set_child_watcher(LoopPidfdWatcher())
