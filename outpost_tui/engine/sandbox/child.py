"""A command's process as the event loop sees it: its output read by the loop's own readers, its
input written by a writer, its exit heard through a pidfd, all in the thread of the loop that
started it (the app runs a race on a loop of its own in a worker thread).

asyncio's subprocess machinery (a transport and a protocol per pipe, a stream over each, a task
reading each stream, and on Python 3.11 a thread waiting for each child) cost the engine several
times what the fork itself costs, for the short commands a race runs by the dozen (an agent, its
validation, its score, each in its own process). Here a command is one fork and three file
descriptors watched by the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import anyio

READ_CHUNK = 256 * 1024
# Where a stream's data goes, as it comes: (name, bytes); b"" once the stream has ended.
DataSink = Callable[[str, bytes], None]


class Child:
    """One started command: `wait()` for its exit code, `drained` once both outputs have ended,
    `close()` when done with it. The first exception `on_data` raises is raised by `wait()`; later
    data still reaches `on_data`, whose further exceptions are dropped."""

    def __init__(self, process: subprocess.Popen[bytes], on_data: DataSink, stdin: bytes | None) -> None:
        self._loop = asyncio.get_running_loop()
        self._process = process
        self.pid = process.pid
        self.returncode: int | None = None
        self.drained = anyio.Event()
        self._error: BaseException | None = None
        self._failed = False
        self._wake = anyio.Event()
        self._on_data = on_data
        assert process.stdout is not None and process.stderr is not None, "both are pipes"
        self._outputs = {process.stdout.fileno(): "stdout", process.stderr.fileno(): "stderr"}
        self.pipe_ids = {f"pipe:[{os.fstat(fd).st_ino}]" for fd in self._outputs}
        for fd in self._outputs:
            os.set_blocking(fd, False)
            self._loop.add_reader(fd, self._readable, fd)
        self._input = memoryview(stdin or b"")
        if process.stdin is not None:
            os.set_blocking(process.stdin.fileno(), False)
            self._write()
        self._watch_exit()

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        *,
        stdin: bytes | None,
        cwd: Path,
        env: Mapping[str, str],
        on_data: DataSink,
        pass_fds: Sequence[int] = (),
    ) -> Child:
        """Start `argv` in a session of its own (its own process group); OSError as Popen raises it.
        `pass_fds`: files the command inherits, under the same numbers."""
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
            bufsize=0,
            pass_fds=pass_fds,
        )
        try:
            return cls(process, on_data, stdin)
        except BaseException:
            # not watched, so nobody else would: the command and its group go, reaped here
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            for pipe in (process.stdin, process.stdout, process.stderr):
                if pipe is not None:
                    pipe.close()
            raise

    async def wait(self) -> int:
        """The exit code (negative: the signal that ended it); raises what `on_data` raised first."""
        while True:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            if self.returncode is not None:
                return self.returncode
            if self._wake.is_set():
                self._wake = anyio.Event()
            await self._wake.wait()

    def close(self) -> None:
        """Stop reading and writing: this process's ends of the pipes are closed (what still holds
        the other ends gets EPIPE or EOF). The exit is still heard if it has not come yet."""
        for fd in list(self._outputs):
            self._end_output(fd, deliver=False)
        self._end_input()

    # -- the loop's callbacks ---------------------------------------------------------------------

    def _readable(self, fd: int) -> None:
        try:
            chunk = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            self._deliver(self._outputs[fd], chunk)
        else:
            self._end_output(fd, deliver=True)

    def _end_output(self, fd: int, *, deliver: bool) -> None:
        name = self._outputs.pop(fd, None)
        if name is None:
            return
        self._loop.remove_reader(fd)
        stream = self._process.stdout if name == "stdout" else self._process.stderr
        assert stream is not None
        stream.close()
        if deliver:
            self._deliver(name, b"")
        if not self._outputs:
            self.drained.set()

    def _deliver(self, name: str, chunk: bytes) -> None:
        try:
            self._on_data(name, chunk)
        except BaseException as error:
            if not self._failed:
                self._failed, self._error = True, error
                self._wake.set()

    def _write(self) -> None:
        stdin = self._process.stdin
        if stdin is None:
            return
        try:
            while self._input:
                self._input = self._input[os.write(stdin.fileno(), self._input) :]
        except BlockingIOError:
            self._loop.add_writer(stdin.fileno(), self._write_more)
            return
        except OSError:
            pass  # the command closed its stdin without reading it all: that is its choice
        self._end_input()

    def _write_more(self) -> None:
        stdin = self._process.stdin
        if stdin is not None:
            self._loop.remove_writer(stdin.fileno())
        self._write()

    def _end_input(self) -> None:
        stdin = self._process.stdin
        if stdin is not None and not stdin.closed:
            self._loop.remove_writer(stdin.fileno())
            stdin.close()

    def _watch_exit(self) -> None:
        try:
            pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            # no pidfds (a kernel before 5.3, another system): a thread waits, as asyncio's would
            threading.Thread(target=self._wait_in_thread, name="outpost-child-exit", daemon=True).start()
            return
        self._loop.add_reader(pidfd, self._pidfd_readable, pidfd)

    def _pidfd_readable(self, pidfd: int) -> None:
        self._loop.remove_reader(pidfd)
        os.close(pidfd)
        self._reap()

    def _wait_in_thread(self) -> None:
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            self._loop.call_soon_threadsafe(self._reap)

    def _reap(self) -> None:
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:  # reaped by someone else: what asyncio's watchers say then too
            code = 255
        else:
            code = os.waitstatus_to_exitcode(status)
        self.returncode = self._process.returncode = code
        self._wake.set()
