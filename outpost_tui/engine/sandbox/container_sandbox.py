"""One container sandbox: commands run through exec with their output streamed back frame by
frame, stopped (however they detached) when cancelled or timed out, and the container halted on
close (its removal left to the provider, off the attempt's path)."""

from __future__ import annotations

import contextlib
import math
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.from_thread
import anyio.to_thread

from .. import gitenv
from .base import Completed, EngineGone, LineSink, Sandbox, SandboxError, Stop, StopSink
from .container_engine import (
    RESOURCE_PREFIX,
    _docker,
    _first_line,
    _tar,
    _unreachable,
    describe_endpoint,
    gone,
)
from .container_scripts import (
    BACKSTOP_MARGIN,
    KILL_GRACE,
    MARKER,
    STDIN_IN_REQUEST,
    STOPPER,
    STREAM_GRACE,
    WRAPPER,
)
from .lines import LineSplitter, Tail

if TYPE_CHECKING:
    from docker import APIClient

# How long a first command waits for its container's keep-alive to write the marker (it does
# as the container starts: milliseconds, unless it cannot write at all; the probe then says why)
MARKER_WAIT = 5.0


@dataclass
class _Stream:
    """Output of one exec, fed from the pump thread on the event loop."""

    on_output: LineSink | None
    tail_bytes: int
    splitters: dict[str, LineSplitter] = field(
        default_factory=lambda: {"stdout": LineSplitter(), "stderr": LineSplitter()}
    )
    tails: dict[str, Tail] = field(default_factory=dict)
    done: anyio.Event = field(default_factory=anyio.Event)
    error: BaseException | None = None
    sink_error: BaseException | None = None
    # set when run() returns: a stream still draining after a kill must not report any more
    closed: bool = False

    def __post_init__(self) -> None:
        self.tails = {"stdout": Tail(self.tail_bytes), "stderr": Tail(self.tail_bytes)}

    def feed(self, stream: str, chunk: bytes) -> None:
        if self.closed:
            return
        self.tails[stream].add(chunk)
        lines = self.splitters[stream].feed(chunk)
        if lines:
            self._emit(stream, lines)

    def _emit(self, stream: str, lines: list[str]) -> None:
        if self.on_output is None or self.sink_error is not None or self.closed:
            return
        try:
            self.on_output(stream, lines)
        except Exception as error:  # reported after the command, not inside the pump thread
            self.sink_error = error

    def finish(self, error: BaseException | None) -> None:
        self.error = error
        for stream, splitter in self.splitters.items():
            rest = splitter.flush()
            if rest:
                self._emit(stream, rest)
        self.done.set()


def _as_text(stdin: bytes | None) -> str | None:
    """Stdin that can travel as a variable in the exec's request (JSON text, no NUL), else None."""
    if stdin is None or len(stdin) > STDIN_IN_REQUEST or b"\0" in stdin:
        return None
    try:
        return stdin.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def owner_and_remove(path: Path) -> tuple[int, int] | None:
    """The owner of the file at `path` (None: there is none), which is then removed."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    _unlink(path)
    return info.st_uid, info.st_gid


class ContainerHost(Protocol):
    """What a sandbox needs of the provider that made it (`container.ContainerProvider`)."""

    image: str
    endpoint: str | None
    gitconfig: str  # the operator's git identity, for each container's first command to write

    @property
    def inside(self) -> tuple[int, int]: ...

    def pumps(self) -> anyio.CapacityLimiter: ...

    def retire(self, sandbox: ContainerSandbox) -> None: ...

    async def check_paths(self, sandbox: ContainerSandbox) -> None: ...


class ContainerSandbox(Sandbox):
    def __init__(
        self,
        provider: ContainerHost,
        container: Any,
        directory: Path,
        name: str,
        timings: dict[str, float],
        marker: Path | None = None,
        marker_inside: str = "",
    ) -> None:
        self.provider = provider
        self.container = container
        self.directory = directory
        self.name = name
        self.resource_id = RESOURCE_PREFIX + name
        # create, start, first_exec, halt, remove (seconds): the per-attempt overhead of a container
        self.timings = timings
        # the file its keep-alive writes beside its checkout as it starts, for the provider's
        # check of the race's paths (None: checked before it was made); removed on close. Its
        # directory in the container: `marker_inside`.
        self.marker = marker
        self.marker_inside = marker_inside
        self._marker_taken = False
        self._closed = False
        self._fresh = True  # no command has run in it yet
        self._gone: EngineGone | None = None  # set once a call finds the engine gone
        # why the last stop could not confirm that a command's processes were gone, if it could not
        self._unconfirmed: str | None = None

    @property
    def _api(self) -> APIClient:
        api: APIClient = self.container.client.api
        return api

    async def run(self, argv: Sequence[str], **options: Any) -> Completed:
        """The Sandbox contract's run (its options as `execute` takes them), once the provider has
        checked the race's paths."""
        await self.provider.check_paths(self)
        # checked, by this marker or another's: not left in what its git shows it
        await self.take_marker()
        return await self.execute(argv, **options)

    async def take_marker(self) -> tuple[int, int] | None:
        """The owner of the marker its keep-alive writes as it starts, once written (None: not
        within `MARKER_WAIT`, or taken already); removed. Waited for: a keep-alive slower than
        the first command (a loaded machine) would leave it in the view the command sees."""
        if self._marker_taken or self.marker is None:
            return None
        self._marker_taken = True
        deadline = time.monotonic() + MARKER_WAIT
        while True:
            # one lstat a round: cheaper in the loop than a worker thread's hand-off
            owner = owner_and_remove(self.marker)
            if owner is not None or time.monotonic() >= deadline:
                return owner
            await anyio.sleep(0.01)

    async def execute(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        on_output: LineSink | None = None,
        timeout: float | None = None,
        tail_bytes: int = 64 * 1024,
        grace: float | None = None,
        on_stop: StopSink | None = None,
        writable: Sequence[str] = (),  # the container's own HOME holds an agent's state
    ) -> Completed:
        """`run` without waiting for the provider's check of the race's paths: that check's own
        probe."""
        if not argv:
            raise SandboxError("empty command")
        if self._closed:
            raise SandboxError(f"container {self.name} is closed")
        grace = KILL_GRACE if grace is None else grace
        started = time.monotonic()
        token = uuid.uuid4().hex[:16]
        pid_file = f"/tmp/.outpost-{token}.pid"
        stdin_file = f"/tmp/.outpost-{token}.stdin" if stdin is not None else ""
        # the host's timer acts first; the one inside only if the host is gone
        deadline = "" if timeout is None else str(math.ceil(timeout + KILL_GRACE + BACKSTOP_MARGIN))
        command = ["sh", "-c", WRAPPER, "outpost-run", pid_file, stdin_file, deadline, *map(str, argv)]
        variables = gitenv.scrubbed({**(env or {}), "OUTPOST_RUN": WRAPPER})
        variables.pop("OUTPOST_GITCONFIG", None)
        if self._fresh and self.provider.gitconfig:
            variables["OUTPOST_GITCONFIG"] = self.provider.gitconfig
        self._fresh = False
        text = _as_text(stdin)
        if text is not None:
            variables["OUTPOST_STDIN"] = text
        environment = [f"{key}={value}" for key, value in variables.items()]

        def create_exec() -> str:
            if stdin is not None and text is None:
                self.container.put_archive(
                    "/tmp", _tar({os.path.basename(stdin_file): stdin}, *self.provider.inside)
                )
            return str(
                self._api.exec_create(
                    self.container.id,
                    command,
                    stdout=True,
                    stderr=True,
                    environment=environment,
                    workdir=str(self.directory),
                )["Id"]
            )

        try:
            exec_id = await anyio.to_thread.run_sync(create_exec)
        except Exception as error:  # docker, requests and ssh errors alike
            self._check_gone(error)
            raise SandboxError(
                f"cannot run {argv[0]!r} in container {self.name}: {_first_line(error)}"
            ) from None
        stream = _Stream(on_output, tail_bytes)

        def pump() -> None:
            failure: BaseException | None = None
            try:
                frames = self._api.exec_start(exec_id, stream=True, demux=True)
                for out, err in frames:
                    if out:
                        anyio.from_thread.run_sync(stream.feed, "stdout", out)
                    if err:
                        anyio.from_thread.run_sync(stream.feed, "stderr", err)
            except BaseException as error:  # delivered to the event loop below
                failure = error
            with contextlib.suppress(RuntimeError):  # the event loop is gone: nobody is waiting any more
                anyio.from_thread.run_sync(stream.finish, failure)

        signalled: str | None = None
        timed_out = False
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._pump_thread, pump)
                with anyio.move_on_after(timeout) as waited:
                    await stream.done.wait()
                if waited.cancelled_caught:
                    timed_out = True
                    signalled = await self._stop(pid_file, stream, Stop("timeout", grace), on_stop)
                # a stream still open once the processes are confirmed gone is the engine's
                # lag: abandon it (removing the container ends it) rather than wait
                group.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            # the pump thread is abandoned, not stopped: it goes on feeding the stream, so what
            # the command prints while it stops is still read
            with anyio.CancelScope(shield=True):
                await self._stop(pid_file, stream, Stop("cancelled", grace), on_stop)
            raise
        finally:
            stream.closed = True
        if stream.error is not None:
            self._check_gone(stream.error)
        if self._gone is not None:
            self._unconfirmed = None
            raise self._gone
        if self._unconfirmed is not None:
            problem, self._unconfirmed = self._unconfirmed, None
            raise SandboxError(f"stopping {argv[0]!r} in container {self.name}: {problem}")
        if stream.error is not None:
            raise SandboxError(
                f"lost the output of {argv[0]!r} in container {self.name}: {_first_line(stream.error)}"
            )

        try:
            exit_code = await anyio.to_thread.run_sync(self._exit_code, exec_id)
        except Exception as error:
            self._check_gone(error)
            raise SandboxError(
                f"lost the exit status of {argv[0]!r} in container {self.name}: {_first_line(error)}"
            ) from None
        if "first_exec" not in self.timings:
            self.timings["first_exec"] = time.monotonic() - started
        stderr_tail = stream.tails["stderr"].text()
        if signalled is None and exit_code in (126, 127) and MARKER in stderr_tail:
            line = next(line for line in stderr_tail.splitlines() if MARKER in line)
            what = "not executable" if exit_code == 126 else "not found"
            raise SandboxError(
                f"program {argv[0]!r} {what} in image {self.provider.image} "
                f"({line.split(MARKER, 1)[1].strip()})"
            )
        if exit_code is None:
            exit_code = -9 if signalled else 1  # no status: killed, or the engine lost it
        elif signalled and exit_code > 128:
            exit_code = -(exit_code - 128)  # the shell's 128+N for "killed by signal N"
        if stream.sink_error is not None:
            raise stream.sink_error
        return Completed(
            exit_code=exit_code,
            stdout_tail=stream.tails["stdout"].text(),
            stderr_tail=stderr_tail,
            timed_out=timed_out,
            duration=time.monotonic() - started,
        )

    def _went_away(self, error: BaseException) -> EngineGone:
        return EngineGone(
            f"the container engine at {describe_endpoint(self.provider.endpoint)} "
            f"went away ({_first_line(error)})"
        )

    def _check_gone(self, error: BaseException) -> None:
        """Raise EngineGone when `error` says the engine itself is gone."""
        if _unreachable(error):
            self._gone = self._gone or self._went_away(error)
            raise self._gone from None

    async def _pump_thread(self, pump: Callable[[], None]) -> None:
        # abandon_on_cancel: a cancelled run must not wait for the stream; it stops the command
        # instead, and the thread ends when the stream does (at the latest when the container goes)
        await anyio.to_thread.run_sync(pump, abandon_on_cancel=True, limiter=self.provider.pumps())

    def _exit_code(self, exec_id: str) -> int | None:
        # The stream can close a moment before the engine records the status
        for _ in range(50):
            info = self._api.exec_inspect(exec_id)
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            time.sleep(0.02)
        return None

    async def _stop_processes(self, pid_file: str, grace: float) -> tuple[str | None, str]:
        """Run the stopper: TERM, KILL after the grace, confirmed gone. Returns what it took
        (none, term, kill; None when it could not confirm) and, then, why."""
        ticks = str(max(1, round(grace / 0.05)))

        def stop() -> tuple[str | None, str]:
            exec_id = self._api.exec_create(
                self.container.id,
                ["sh", "-c", STOPPER, "outpost-stop", pid_file, ticks],
                stdout=True,
                stderr=True,
            )["Id"]
            said = (self._api.exec_start(exec_id) or b"").decode(errors="replace").strip()
            if self._exit_code(exec_id) == 0:
                return said.splitlines()[-1] if said else "none", ""
            return None, said or "the stopper failed"

        try:
            return await anyio.to_thread.run_sync(stop)
        except Exception as error:  # docker, requests and ssh errors alike
            if _unreachable(error):
                self._gone = self._gone or self._went_away(error)
            return None, _first_line(error)

    async def _stop(
        self, pid_file: str, stream: _Stream, report: Stop, on_stop: StopSink | None
    ) -> str | None:
        """Stop the command and everything it started, confirmed gone; returns the last signal.

        The output stream is not the judge (a wrapper killed by TERM ends it while what ignores
        TERM lives on), nor waited for long once the stopper confirmed (Docker holds an exec's
        stream a few seconds after its processes are gone)."""
        if stream.done.is_set():
            return None
        if on_stop is not None:
            on_stop(report)
        began = time.monotonic()
        took, why = await self._stop_processes(pid_file, report.grace)
        report.seconds = time.monotonic() - began
        with anyio.move_on_after(STREAM_GRACE):
            await stream.done.wait()
        if took is None:
            self._unconfirmed = f"could not confirm that the command's processes are gone: {why}"
        report.ended_by = {"none": "exited", "term": "TERM"}.get(took or "", "KILL")
        if on_stop is not None:
            on_stop(report)
        return "KILL" if took in ("kill", None) else "TERM"

    async def close(self) -> None:
        """Halt the container at once (the kernel's freezer: none of its processes runs another
        instruction, and nothing can be started in it) and leave its removal to the provider, off
        the attempt's path (`drain` waits for it). An engine that cannot pause it (rootless on
        cgroup v1) removes it here instead, as does one whose container has already ended."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            try:
                halted = await anyio.to_thread.run_sync(self._halt)
            except Exception as error:  # docker, requests and ssh errors alike
                raise self.not_removed(error) from None
            finally:
                # halted or gone, nothing in it writes the marker any more: none is left behind
                if self.marker is not None:
                    await anyio.to_thread.run_sync(_unlink, self.marker)
        if halted:
            self.provider.retire(self)

    def _halt(self) -> bool:
        """Pause the container; False when it was removed instead (or was gone already)."""
        docker = _docker()
        started = time.monotonic()
        try:
            self._api.pause(self.container.id)
        except docker.errors.NotFound:
            return False
        except docker.errors.APIError:
            self.remove()
            return False
        self.timings["halt"] = time.monotonic() - started
        return True

    def remove(self) -> None:
        """Remove the container (blocking; running, paused or stopped alike)."""
        docker = _docker()
        started = time.monotonic()
        try:
            self.container.remove(force=True)
        except docker.errors.APIError as error:
            if not gone(error):
                raise
        self.timings["remove"] = time.monotonic() - started

    def not_removed(self, error: BaseException) -> SandboxError:
        if _unreachable(error):
            return EngineGone(
                f"{self._went_away(error)}: container {self.name} is left; "
                "`outpost-tui worktrees --remove-containers` removes it once the engine is back"
            )
        return SandboxError(f"cannot halt or remove container {self.name}: {_first_line(error)}")
