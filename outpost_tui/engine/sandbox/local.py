"""Local sandbox: commands are child processes in their own process group, in the worktree.

Cancellation and timeouts signal the whole group (TERM, then KILL after a short grace), and after
every command everything it started is killed and confirmed gone, including processes that left the
group (see containment: a cgroup per command, or the tracked process tree), so nothing the agent
started in the background survives its command, let alone its attempt.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import anyio
import psutil

from .. import git, gitenv, pids
from ..core.spec import Isolation
from . import containment, isolation, syscalls
from .base import Completed, LineSink, Sandbox, SandboxContext, SandboxError, SandboxProvider, Stop, StopSink
from .child import Child
from .lines import LineSplitter, Tail

TERM_GRACE = 2.0
# Seconds the output may stay open once the command's group is gone; longer means a process that
# left the group (a daemon started in its own session) still holds it.
DRAIN_GRACE = 2.0
# A process group's start time recorded by an older version is an epoch time; one counted from the
# boot stays below this (three years of uptime).
_EPOCH_STARTS = 1e8


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal_below(leader: int, sig: int) -> None:
    """`sig` to the leader's descendants in its process group, not to the leader."""
    for child in containment.below(leader):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(child) == leader:
                os.kill(child, sig)


async def stop_group(
    process: Child,
    grace: float = TERM_GRACE,
    also: Callable[[], Awaitable[None]] | None = None,
    *,
    spare_leader: bool = False,
) -> str:
    """TERM the process group (then run `also`: the rest of the stop that TERMs), KILL it after
    `grace`, and reap the leader; returns what ended the leader: "exited" (before the TERM),
    "TERM" or "KILL". `spare_leader`: the leader is bubblewrap, which TERM ends at once (and
    the fence with it, KILLing the agent in its grace): the TERM goes to what runs inside, and
    bubblewrap ends when its command does."""
    pgid = process.pid
    if process.returncode is not None:
        _signal_group(pgid, signal.SIGKILL)
        return "exited"
    if spare_leader:
        await anyio.to_thread.run_sync(_signal_below, pgid, signal.SIGTERM)
    else:
        _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    if also is not None:
        await also()
    ended_by = "TERM"
    with anyio.move_on_after(max(0.0, deadline - time.monotonic())):
        await process.wait()
    if process.returncode is None:
        ended_by = "KILL"
        _signal_group(pgid, signal.SIGKILL)
        await process.wait()
    # Children that ignored TERM or were started in the background die with the group.
    _signal_group(pgid, signal.SIGKILL)
    return ended_by


class LocalSandbox(Sandbox):
    def __init__(
        self,
        context: SandboxContext,
        environ: Mapping[str, str] | None = None,
        provider: LocalProvider | None = None,
    ) -> None:
        """`environ`: the process's environment, scrubbed, as its provider read it for the race
        (by default, read at the first command); `provider`: the one that hands an attempt's
        emptied cgroups from its agent's sandbox to its grading checkout's."""
        self.context = context
        self._environ = environ
        self._provider = provider
        self.directory = context.directory
        self._running: set[Child] = set()
        self._commands = 0
        self._cgroup: Path | None = None  # the attempt's, made at its first command
        # Command cgroups found empty after their command, kept for the next one: a cgroup's
        # creation and removal cost the kernel about a millisecond, and most attempts run several
        # commands one after another (removed with the attempt's in close()).
        self._idle: list[Path] = []
        self._base_env: dict[str, str] | None = None
        self._fence: isolation.Fence | None = None  # made at the first command, when isolated

    @property
    def bwrap(self) -> str | None:
        return None if self._provider is None else self._provider.bwrap

    def _fenced(
        self, argv: Sequence[str], writable: Sequence[str], search: str, seccomp: int | None
    ) -> list[str]:
        """`argv` inside the attempt's fence: its worktree (or checkout), its own git repository,
        its private /tmp; made once, at the sandbox's first command. `seccomp`: the file bubblewrap
        reads the fence's system-call filter from."""
        program = self.bwrap
        assert program is not None, "only an isolated sandbox fences its commands"
        context = self.context
        if self._fence is None:
            tmp = Path(tempfile.mkdtemp(prefix=f"outpost-{context.key}-{context.attempt}-"))
            self._fence = isolation.Fence(
                repository=context.repository,
                common=context.git_common_dir,
                directory=self.directory,
                tmp=tmp,
                view=_view(self.directory),
                writable=tuple(self._provider.writable if self._provider else ()),
            )
        fence = self._fence
        if writable:
            fence = replace(fence, writable=(*fence.writable, *writable))
        return fence.wrap(program, argv, search, seccomp)

    def _environment(self) -> dict[str, str]:
        """The process's environment with the context's over it, scrubbed: read once (a copy and
        a scrub of the whole environment cost more than a spawn's own Python)."""
        if self._base_env is None:
            environ = gitenv.scrubbed() if self._environ is None else self._environ
            self._base_env = {**environ, **gitenv.scrubbed(self.context.env)}
        return self._base_env

    async def _attempt_cgroup(self, root: Path) -> Path:
        if self._cgroup is None and self._provider is not None:
            handed = self._provider.take_cgroups(self.context)
            if handed is not None:
                self._cgroup, self._idle, self._commands = handed
        if self._cgroup is None:
            context = self.context
            group = root / f"{context.race_id}.{context.key}.{context.attempt}.{uuid.uuid4().hex[:8]}"
            if context.register_resource is not None:
                with anyio.CancelScope(shield=True):
                    await context.register_resource(containment.RESOURCE_CGROUP + str(group))
            group.mkdir()
            self._cgroup = group
        return self._cgroup

    async def _command_cgroup(self, root: Path) -> Path:
        """An empty cgroup for the next command: one a previous command left empty, or a new one
        (recorded before it exists, as every command's processes are)."""
        attempt = await self._attempt_cgroup(root)
        while self._idle:
            group = self._idle.pop()
            if containment.reusable(group):
                return group
        self._commands += 1
        group = attempt / f"command-{self._commands}"
        if self.context.register_resource is not None:
            with anyio.CancelScope(shield=True):
                await self.context.register_resource(containment.RESOURCE_CGROUP + str(group))
        group.mkdir(parents=True)  # (the attempt's again, if a stale sweep took it)
        return group

    async def run(
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
        writable: Sequence[str] = (),
    ) -> Completed:
        grace = TERM_GRACE if grace is None else grace
        # a race started from a git hook must not aim the candidate's git at the user's repository
        full_env = {**self._environment(), **gitenv.scrubbed(env or {})}
        full_env.pop(containment.MARKER, None)
        program = argv[0]
        _check_program(program, self.directory, full_env.get("PATH"))
        launch = list(argv)
        fenced = self.bwrap is not None
        # the fence's seccomp program (syscalls.py): a file of this command's own until it starts
        seccomp = syscalls.program_fd() if fenced and isolation.probe().filtered else None
        try:
            if fenced:
                try:
                    launch = await anyio.to_thread.run_sync(
                        self._fenced, argv, writable, full_env.get("PATH", ""), seccomp
                    )
                except (OSError, git.GitError) as error:
                    raise SandboxError(f"cannot isolate {program!r}: {error}") from None
                full_env["TMPDIR"] = "/tmp"
            # Every process the command starts is contained: in a cgroup of its own, or else marked
            # and watched (see containment).
            group: Path | None = None
            token: str | None = None
            root = containment.cgroup_root()
            try:
                if root is not None:
                    group = await self._command_cgroup(root)
                    launch = ["/bin/sh", "-c", containment.SHIM, str(group / "cgroup.procs"), *launch]
            except OSError as error:
                raise SandboxError(
                    f"cannot create a cgroup for {program!r}: {error.strerror or error}"
                ) from None
            if group is None:
                token = uuid.uuid4().hex
                full_env[containment.MARKER] = token
                if self.context.register_resource is not None:
                    with anyio.CancelScope(shield=True):
                        await self.context.register_resource(containment.RESOURCE_MARKER + token)
            known: dict[int, float] = {}
            started = time.monotonic()
            outputs = {name: _Output(name, Tail(tail_bytes), on_output) for name in ("stdout", "stderr")}
            try:
                process = Child.start(
                    launch,
                    stdin=stdin,
                    cwd=self.directory,
                    env=full_env,
                    on_data=lambda name, chunk: outputs[name].take(chunk),
                    pass_fds=() if seccomp is None else (seccomp,),
                )
            except (FileNotFoundError, NotADirectoryError):
                if group is not None:
                    await anyio.to_thread.run_sync(containment.end_cgroup, group)
                raise SandboxError(f"program {program!r} not found") from None
            except PermissionError:
                if group is not None:
                    await anyio.to_thread.run_sync(containment.end_cgroup, group)
                raise SandboxError(f"program {program!r} is not executable (permission denied)") from None
        finally:
            if seccomp is not None:
                os.close(seccomp)
        self._running.add(process)
        pipes = process.pipe_ids
        timed_out = False
        ended = anyio.Event()

        def note(text: str) -> None:
            tail = outputs["stderr"].tail
            before = tail.text()
            gap = "\n" if before and not before.endswith("\n") else ""
            tail.add(f"{gap}{text}\n".encode())
            if on_output is not None:
                on_output("stderr", [text])

        async def wait() -> int:
            """The command's exit; the fallback records the command's tree meanwhile, by pid and
            start time (in this task: a task group would wrap what `end` raises in a group)."""
            if group is not None:
                return await process.wait()
            while True:
                known.update(await anyio.to_thread.run_sync(containment.descendants, process.pid))
                with anyio.move_on_after(containment.POLL):
                    return await process.wait()

        async def end() -> None:
            """Kill everything the command started that is still there, confirmed gone."""
            ended.set()
            try:
                if group is not None:
                    # most commands leave nothing behind: one read says so, no thread needed
                    gone = (
                        []
                        if containment.empty(group)
                        else await anyio.to_thread.run_sync(containment.kill_cgroup, group)
                    )
                    self._idle.append(group)  # confirmed empty: the next command's
                else:
                    gone = await anyio.to_thread.run_sync(containment.kill_tree, known, token)
            except containment.ContainmentError as error:
                raise SandboxError(f"processes of {program!r} could not be stopped: {error}") from None
            escaped = [f"{pid} {name}" for pid, name, pgid in gone if pgid != process.pid]
            if escaped:
                note("outpost: killed processes that left the command's process group: " + ", ".join(escaped))

        async def stop(why: str) -> None:
            """TERM, KILL after the grace, everything it started confirmed gone; told to on_stop."""
            report = Stop(why, grace)
            if on_stop is not None and process.returncode is None:
                on_stop(report)
            began = time.monotonic()
            strays: list[int] = []

            async def term_strays() -> None:
                # after the group's TERM, so that the agent itself is told first
                nonlocal strays
                if group is None:
                    known.update(await anyio.to_thread.run_sync(containment.descendants, process.pid))
                strays = await anyio.to_thread.run_sync(
                    containment.signal_strays, group, known, token, process.pid, signal.SIGTERM
                )

            report.ended_by = await stop_group(process, grace, term_strays, spare_leader=fenced)
            # what was TERMed outside the group has the same grace to end as the agent
            while strays and time.monotonic() - began < grace:
                strays = [pid for pid in strays if containment.alive(pid)]
                if strays:
                    await anyio.sleep(containment.POLL)
            if not ended.is_set():
                await end()
            report.seconds = time.monotonic() - began
            if on_stop is not None and report.ended_by != "exited":
                on_stop(report)

        async def drain() -> None:
            """Wait for the output to end; what holds it open after the command's end is killed."""
            drained = process.drained
            with anyio.move_on_after(DRAIN_GRACE):
                await drained.wait()
            if not drained.is_set():
                escaped = await anyio.to_thread.run_sync(containment.kill_pipe_holders, pipes)
                if escaped:
                    note(
                        "outpost: killed processes that left the command's process group "
                        f"but kept its output open: {', '.join(escaped)}"
                    )
                with anyio.move_on_after(DRAIN_GRACE):
                    await drained.wait()

        async def finish() -> None:
            """The command's end (or its timeout), everything it started gone, its output read."""
            nonlocal timed_out
            with anyio.move_on_after(timeout) as deadline:
                await wait()
            with anyio.CancelScope(shield=True):
                if deadline.cancelled_caught:
                    timed_out = True
                    await stop("timeout")
                else:
                    # The leader is gone; sweep whatever it left in its group so the pipes close.
                    _signal_group(process.pid, signal.SIGKILL)
                    await end()
            await drain()

        try:
            if group is None and self.context.register_resource is not None:
                with anyio.CancelScope(shield=True):
                    await self.context.register_resource(resource_id_for(process.pid))
            await finish()
        except BaseException as error:
            cancelled = isinstance(error, anyio.get_cancelled_exc_class())
            with anyio.CancelScope(shield=True):
                # The output is read on while the command stops (the loop's readers stay), so what
                # it prints in the grace (the usage of a call still in flight) is counted, up to
                # the end of its output.
                await stop("cancelled" if cancelled else "error")
                # a daemon that left the group would outlive the cancelled attempt (a /proc scan:
                # a few milliseconds)
                await anyio.to_thread.run_sync(containment.kill_pipe_holders, pipes)
                with anyio.move_on_after(DRAIN_GRACE):
                    await process.drained.wait()
            raise
        finally:
            self._running.discard(process)
            # what still holds the output (held by what cannot be killed) is no longer read
            process.close()
        return Completed(
            exit_code=process.returncode if process.returncode is not None else -signal.SIGKILL,
            stdout_tail=outputs["stdout"].tail.text(),
            stderr_tail=outputs["stderr"].tail.text(),
            timed_out=timed_out,
            duration=time.monotonic() - started,
        )

    async def close(self) -> None:
        for process in list(self._running):
            with anyio.CancelScope(shield=True):
                await stop_group(process)
        if self._fence is not None:
            # the private /tmp: nothing of the candidate's work lives there (its worktree does)
            tmp, self._fence = self._fence.tmp, None
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(lambda: shutil.rmtree(tmp, ignore_errors=True))
        if self._cgroup is not None:
            group, self._cgroup = self._cgroup, None
            if self._provider is not None and self.context.grading_follows and containment.empty(group):
                # Emptied (every command's processes confirmed gone), so the attempt's grading
                # checkout runs in it: a cgroup made and removed costs the kernel about a
                # millisecond, two per sandbox. Its settings are the attempt's own doing, as they
                # are between its commands; a cgroup made inside one is never reused.
                self._provider.hand_cgroups(self.context, (group, self._idle, self._commands))
                return
            with anyio.CancelScope(shield=True):
                try:
                    await anyio.to_thread.run_sync(containment.end_cgroup, group)
                except containment.ContainmentError as error:
                    raise SandboxError(str(error)) from None


def _view(directory: Path) -> Path | None:
    """The checkout's view, when the engine made its private repository: what the fence shows
    as the repository's worktree git directories (its git then writes that repository)."""
    try:
        view = git.candidate_view(directory)
    except git.GitError:
        return None  # not a checkout of the engine's
    return view if view.is_dir() else None


def _check_program(program: str, directory: Path, path: str | None) -> None:
    """The program must exist and be executable: checked here, before the cgroup shim execs it
    (its shell would otherwise answer with its own, image-dependent message)."""
    if os.sep not in program:
        if not _on_path(program, path):
            raise SandboxError(f"program {program!r} not found on PATH")
        return
    target = Path(directory) / program
    if not target.exists():
        raise SandboxError(f"program {program!r} not found")
    if target.is_dir() or not os.access(target, os.X_OK):
        raise SandboxError(f"program {program!r} is not executable (permission denied)")


# Where each program was last found on a PATH: a search stats every directory before it, for each
# of an attempt's commands; the file found is checked again (still there, still executable) instead.
_found: dict[tuple[str, str | None], str] = {}


def _on_path(program: str, path: str | None) -> bool:
    known = _found.get((program, path))
    if known is not None and os.access(known, os.X_OK) and not os.path.isdir(known):
        return True
    found = shutil.which(program, path=path)
    if found is None:
        _found.pop((program, path), None)
        return False
    _found[(program, path)] = found
    return True


class _Output:
    """One output stream of a command: its tail kept, its lines handed on in batches (the last
    partial line only at the end of the stream)."""

    def __init__(self, label: str, tail: Tail, on_output: LineSink | None) -> None:
        self.label = label
        self.tail = tail
        self.on_output = on_output
        self.splitter = LineSplitter()

    def take(self, chunk: bytes) -> None:
        if not chunk:  # the end of the stream
            rest = self.splitter.flush()
            if rest and self.on_output is not None:
                self.on_output(self.label, rest)
            return
        self.tail.add(chunk)
        if self.on_output is not None:
            lines = self.splitter.feed(chunk)
            if lines:
                self.on_output(self.label, lines)


# an attempt's cgroup, its emptied command cgroups, and how many it has made
_Cgroups = tuple[Path, list[Path], int]


class LocalProvider(SandboxProvider):
    name = "local"

    def __init__(self, wanted: Isolation = "auto", writable: Sequence[str] = ()) -> None:
        """`wanted`: [sandbox] isolation; `writable`: [sandbox] writable."""
        self._wanted: Isolation = wanted
        self.writable = (*writable, *isolation.operator_writable())
        self.bwrap: str | None = None
        self._chosen = False
        self._warning = ""
        self._environ: dict[str, str] | None = None
        # an attempt's cgroups, emptied by its agent's sandbox, for its grading checkout's
        self._handed: dict[tuple[str, str, int], _Cgroups] = {}

    def isolation(self) -> tuple[str, str]:
        if not self._chosen:
            self.bwrap, self._warning = isolation.choose(self._wanted)
            self._chosen = True
        return (isolation.BUBBLEWRAP if self.bwrap else isolation.UNISOLATED), self._warning

    @property
    def isolates_git(self) -> bool:
        return self.isolation()[0] == isolation.BUBBLEWRAP

    async def acquire(self, context: SandboxContext) -> Sandbox:
        # the process's environment read once per race (a provider is a race's), not per sandbox:
        # each attempt has two (its agent's, its grading checkout's)
        if self._environ is None:
            self._environ = gitenv.scrubbed()
        self.isolation()
        return LocalSandbox(context, self._environ, self)

    def hand_cgroups(self, context: SandboxContext, cgroups: _Cgroups) -> None:
        self._handed[(context.race_id, context.key, context.attempt)] = cgroups

    def take_cgroups(self, context: SandboxContext) -> _Cgroups | None:
        if context.role != "grading":
            return None
        return self._handed.pop((context.race_id, context.key, context.attempt), None)

    async def drain(self, timeout: float | None = None) -> dict[str, str]:
        """Remove the cgroups handed on that no grading checkout took (its attempt ended first)."""
        left: dict[str, str] = {}
        handed, self._handed = [group for group, _, _ in self._handed.values()], {}
        with anyio.move_on_after(timeout):
            while handed:
                try:
                    await anyio.to_thread.run_sync(containment.end_cgroup, handed[0])
                except containment.ContainmentError as error:
                    left[containment.RESOURCE_CGROUP + str(handed[0])] = str(error)
                handed.pop(0)
        for group in handed:
            left[containment.RESOURCE_CGROUP + str(group)] = f"not removed within {timeout:g}s"
        return left

    def owns(self, resource_id: str) -> bool:
        return resource_id.startswith(("pgid:", containment.RESOURCE_CGROUP, containment.RESOURCE_MARKER))

    async def recover(self, resource_id: str) -> bool:
        """Kill what a crashed coordinator left: an attempt's cgroup (`cgroup:<path>`), the
        processes carrying a command's marker (`marker:<token>`), a process group
        (`pgid:<pid>:<start>`: the leader's start time guards against a reused pid killing an
        unrelated group)."""
        if resource_id.startswith(containment.RESOURCE_CGROUP):
            group = containment.valid_cgroup(resource_id[len(containment.RESOURCE_CGROUP) :])
            if group is None or not group.is_dir():
                return False
            await anyio.to_thread.run_sync(containment.end_cgroup, group)
            return True
        if resource_id.startswith(containment.RESOURCE_MARKER):
            token = resource_id[len(containment.RESOURCE_MARKER) :]
            return bool(await anyio.to_thread.run_sync(containment.kill_tree, {}, token))
        try:
            _, pid_text, started_text = resource_id.split(":", 2)
            pgid, started = int(pid_text), float(started_text)
        except ValueError:
            return False
        if started > _EPOCH_STARTS:
            started = pids.from_epoch(started)  # an older version's record
        members = [p for p in psutil.process_iter() if _pgid(p.pid) == pgid]
        if not members:
            return False
        leader = next((p for p in members if p.pid == pgid), None)
        try:
            if leader is not None:
                if abs(pids.started(leader) - started) > pids.START_TOLERANCE:
                    return False  # the pid was reused by an unrelated group
            elif any(pids.started(p) < started - pids.START_TOLERANCE for p in members):
                return False  # older than the recorded leader: not its children
        except psutil.Error:
            return False
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + TERM_GRACE
        # no event says when a process group that is not our child is gone: it is polled
        while _group_alive(pgid) and time.monotonic() < deadline:  # noqa: ASYNC110
            await anyio.sleep(0.02)
        _signal_group(pgid, signal.SIGKILL)
        return True


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def resource_id_for(pid: int) -> str:
    started = pids.start_of(pid)
    if started is None:  # gone already: any group under its pid is younger
        started = time.clock_gettime(time.CLOCK_BOOTTIME)
    return f"pgid:{pid}:{started:.3f}"
