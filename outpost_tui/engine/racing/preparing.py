"""[setup] for one checkout: the user's files copied in, the cache, the setup command, and the
ports it is promised; a candidate's worktree gets it before its agent starts, a grading checkout
as its worktree had it."""

from __future__ import annotations

import time
from pathlib import Path

import anyio

from .. import git
from ..core.events import Log, SetupFinished, SetupStarted, Warned
from ..sandbox import Sandbox, SandboxError
from ..sandbox.local import LocalProvider
from ..verdict.grading import Prepare
from . import setup as setups
from .attempt import Attempt
from .settling import Settling
from .state import _one_line


class Preparing(Settling):
    """[setup] for the race's checkouts."""

    def _grading_setup(self, key: str, number: int, ports: list[int]) -> Prepare | None:
        """[setup] for a grading checkout, as its worktree had it (None: the race has none)."""
        if not (self.spec.setup.enabled or self._copy_paths):
            return None

        async def prepare(directory: Path, sandbox: Sandbox) -> str | None:
            failure = await self.prepare_directory(
                key, number, directory, sandbox, setups.SetupState(ports=list(ports))
            )
            return failure[0] if failure else None

        return prepare

    async def _take_ports(self) -> tuple[setups.PortReservation | None, list[int]]:
        """[setup] ports for one checkout: free host ports held until released, or in a container
        its own (its network namespace is its own, so they collide with no one's)."""
        count = self.spec.setup.ports
        if not isinstance(self._provider, LocalProvider):
            return None, setups.container_ports(count)
        reservation = await anyio.to_thread.run_sync(setups.PortReservation.take, count)
        return reservation, list(reservation.ports)

    async def _set_up(self, attempt: Attempt, directory: Path) -> bool:
        """[setup] in the attempt's worktree; False when it failed (the attempt then fails with
        the reason, and its agent never starts)."""
        state, record = attempt.setup, attempt.record
        assert state is not None and attempt.sandbox is not None
        failure = await self.prepare_directory(attempt.key, attempt.number, directory, attempt.sandbox, state)
        record.setup = state.to_json()
        if failure is not None:
            record.setup["output"] = failure[1]
            record.error = failure[0]
        return failure is None

    async def prepare_directory(
        self, key: str, number: int, directory: Path, sandbox: Sandbox, state: setups.SetupState
    ) -> tuple[str, str] | None:
        """Give one checkout what [setup] promises, in its sandbox: the user's files copied in,
        the cache, then the setup command. A candidate's worktree gets it before its agent starts;
        any other checkout of the baseline or a result (where validation runs) can get the same.
        Returns (reason, output tail) when it failed. Ports are the caller's: they are in the
        environment the sandbox was acquired with."""
        setup = self.spec.setup
        assert self.repository is not None and self._outpost_dir is not None
        self.bus.publish(
            SetupStarted(
                key=key,
                attempt=number,
                command=list(setup.command) if setup.command else None,
                ports=state.ports,
            )
        )
        started = time.monotonic()
        state.copied = await anyio.to_thread.run_sync(
            setups.copy_files, self.repository, directory, self._copy_paths
        )
        failure: tuple[str, str] | None = None
        if setup.command and self._cache_key is not None:
            failure = await self._cached_setup(key, number, directory, sandbox, state, self._cache_key)
        elif setup.command:
            failure = await self._setup_command(key, number, sandbox, state)
        state.duration = round(time.monotonic() - started, 3)
        if failure is None:
            state.top_level, state.products = await anyio.to_thread.run_sync(setups.snapshot, directory)
        self.bus.publish(
            SetupFinished(
                key=key,
                attempt=number,
                status=state.status,
                exit_code=state.exit_code,
                duration=state.duration,
                cache=state.cache,
                copied=sorted(state.copied),
                reason=failure[0] if failure else None,
            )
        )
        return failure

    async def _cached_setup(
        self,
        key: str,
        number: int,
        directory: Path,
        sandbox: Sandbox,
        state: setups.SetupState,
        cache_key: str,
    ) -> tuple[str, str] | None:
        """The setup command with the cache: built by one checkout of the baseline while the
        others wait, then copied to each. An entry discarded as not what the engine built (a
        candidate may have written it) is built again, once; then setup runs without it."""
        assert self._outpost_dir is not None
        # Only a checkout of the baseline builds the cache: a checkout of a candidate's result
        # runs its build files, which must never reach another candidate through the cache.
        on_baseline = await anyio.to_thread.run_sync(git.head, directory) == self.baseline
        for _ in range(2):
            async with self._cache_locks.setdefault(cache_key, anyio.Lock()):
                if not setups.cache_entry(self._outpost_dir, cache_key).exists():
                    state.cache = "miss"
                    failure = await self._setup_command(key, number, sandbox, state)
                    if failure is None and on_baseline:
                        stored = await anyio.to_thread.run_sync(
                            setups.store_cache, self._outpost_dir, cache_key, directory, self.spec.setup.cache
                        )
                        state.cache = "built" if stored else "miss"
                    return failure
            restored = await anyio.to_thread.run_sync(
                setups.restore_cache, self._outpost_dir, cache_key, directory
            )
            if restored.hit:
                state.cache = "hit"
                return await self._setup_command(key, number, sandbox, state)
            if restored.problem is not None:
                self.bus.publish(Warned(key=key, attempt=number, message=restored.problem))
        state.cache = "miss"
        return await self._setup_command(key, number, sandbox, state)

    async def _setup_command(
        self, key: str, number: int, sandbox: Sandbox, state: setups.SetupState
    ) -> tuple[str, str] | None:
        """Run [setup] command in the sandbox; (reason, output tail) when it failed."""
        setup = self.spec.setup
        assert setup.command

        def on_output(stream: str, lines: list[str]) -> None:
            self.bus.publish(Log(key=key, attempt=number, stream="setup", lines=lines))

        try:
            done = await sandbox.run(
                setup.command, on_output=on_output, timeout=setup.timeout, tail_bytes=4000
            )
        except SandboxError as error:
            state.status = "error"
            return f"setup could not start: {_one_line(error)}", ""
        state.exit_code = done.exit_code
        tail = setups.output_tail(done.stdout_tail, done.stderr_tail)
        last = " | ".join(line.strip() for line in tail.splitlines()[-3:] if line.strip())[-300:]
        if done.timed_out:
            state.status = "timeout"
            return f"setup timed out after {setup.timeout:g}s" + (f": {last}" if last else ""), tail
        if done.exit_code != 0:
            state.status = "failed"
            return f"setup failed (exit {done.exit_code})" + (f": {last}" if last else ""), tail
        state.status = "passed"
        return None
