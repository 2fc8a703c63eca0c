"""The coordinator: admits candidates, runs their attempts, picks the winner, settles the race.

Race mode admits up to `concurrency` candidates at once in declared order and keeps the first
acceptable result, cancelling every other running attempt at once. Fallback mode is the same loop
with one candidate at a time. Best mode runs them all and promotes the highest score at the end.
Every transition is an event on the bus; durable races also save a checkpoint at each one.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.abc
import anyio.lowlevel

from .. import git
from ..agents import adapter_for
from ..core.events import (
    Admitted,
    BudgetExhausted,
    EventBus,
    Operator,
    RaceFinished,
    RaceStarted,
    Settled,
    Warned,
)
from ..core.result import CandidateRecord, RaceResult
from ..core.spec import KEY_RULE, CandidateSpec, RaceSpec, valid_key
from ..core.statuses import CandidateStatus, Phase
from ..errors import OutpostError
from ..kept.revalidation import recorded_validation
from ..records.flightlog import FlightLog, make_private_directory, runs_directory
from ..sandbox import EngineGone, SandboxError, SandboxProvider
from ..sandbox.local import LocalProvider
from ..sandbox.providers import provider_for
from . import setup as setups
from .attempt import Attempt
from .baseline import BaselineValidation
from .checkpointing import Checkpointing
from .state import _one_line


class RaceError(OutpostError):
    """The race cannot start; the message is one line for the operator."""


def new_race_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


class Race(BaselineValidation):
    """One race. Create it, subscribe to `bus`, then `await race.run()`.

    Built in layers, each in its own module and calling only those below it: `RaceState`
    (state.py), `Guarding` (guarding.py), `Settling` (settling.py), `Preparing` (preparing.py),
    `Metering` (metering.py), `Running` (running.py), `BaselineValidation` (baseline.py). Here:
    the operator's controls, admission and the run itself.

    `checkpointing` makes it durable: called with the race and its storage directory, it returns
    what saves the race at every transition (`engine.new_race` passes `DurableRun` for a durable
    spec; a durable spec without it is refused)."""

    def __init__(
        self,
        spec: RaceSpec,
        *,
        bus: EventBus | None = None,
        provider: SandboxProvider | None = None,
        checkpointing: Callable[[Race, Path], Checkpointing] | None = None,
    ) -> None:
        super().__init__(spec, bus=bus, provider=provider)
        self._make_checkpointing = checkpointing

    # ----------------------------------------------------------------- operator controls

    def cancel(self, key: str) -> bool:
        """Cancel one candidate: a running one is stopped, a waiting one will not start."""
        attempt = self.attempts.get(key)
        if attempt is None or self._finished or attempt.phase is Phase.SETTLED:
            return False
        attempt.cancel_reason = "cancelled by operator"
        self.bus.publish(Operator(key=key, attempt=attempt.number, action="cancel"))
        if attempt.scope is not None:
            attempt.scope.cancel()
        return True

    async def accept(self, key: str) -> str | None:
        """Make a candidate the winner by hand; returns why not, or None when done."""
        attempt = self.attempts.get(key)
        if attempt is None:
            return f"no candidate {key!r}"
        if self._finished or self._aborted or self._settling:
            return "the race is over"
        if self._winner is not None:
            return f"{self._winner.key} has already won"
        if attempt.directory is None and attempt.record.commit is None:
            return f"{key} has not started"
        directory = attempt.directory
        if attempt.result_fixed:  # the graded commit, whatever happened in the worktree since
            commit = attempt.record.commit
            commits = [git.Commit(c["oid"], c["subject"]) for c in attempt.record.commits]
        elif directory is not None and directory.exists():
            assert self.baseline is not None, "a started attempt's race has its baseline"
            if self._private is not None:
                assert self.repository is not None, "a started attempt's race has its repository"
                # what it committed so far is in its own repository until its agent ends
                try:
                    await anyio.to_thread.run_sync(
                        git.import_result, self.repository, directory, attempt.branch
                    )
                except git.GitError as error:
                    return _one_line(error)
            commit, commits = await anyio.to_thread.run_sync(git.head_and_commits, directory, self.baseline)
        else:  # a clean worktree already removed: its branch and record still hold the work
            commit = attempt.record.commit
            commits = [git.Commit(c["oid"], c["subject"]) for c in attempt.record.commits]
        if not commits:
            return f"{key} has no commits to accept"
        if attempt.scope is None and attempt.phase is not Phase.SETTLED:
            await attempt.settled.wait()  # it is closing its sandbox: accept its settled result
        if self._winner is not None or self._finished or self._settling:
            return "the race is over"
        self.bus.publish(Operator(key=key, attempt=attempt.number, action="accept"))
        if attempt.phase is Phase.SETTLED:
            attempt.record.commit = commit
            attempt.record.commits = [c.to_json() for c in commits]
            self.set_winner(attempt, "operator")
            attempt.record.status = CandidateStatus.WINNER
            attempt.record.error = None
            self.bus.publish(
                Settled(
                    key=key,
                    attempt=attempt.number,
                    status="winner",
                    reason="accepted by operator",
                    commit=attempt.record.commit,
                )
            )
            await self._save()
        else:
            attempt.operator_accept = True
            if attempt.scope is not None:
                attempt.scope.cancel()
        return None

    def stop_resumable(self) -> None:
        """Stop because the coordinator itself is being stopped (SIGTERM, `recover --stop`).

        A durable race is left as a crash would leave it, but tidily: every candidate's processes
        are stopped, nothing of the stop is saved, and ownership is released, so `recover --replay`
        picks it up where it was. Anything else is simply aborted."""
        if not self.spec.durability.enabled:
            self.abort()
            return
        if self._settling or self._finished:
            return  # its outcome is being written: let it finish and be saved
        self.suspended = True
        self.abort("cancelled: coordinator stopped (the run can be replayed)")

    def abort(self, reason: str | None = None) -> None:
        """Stop the race: every running candidate is cancelled and nothing more starts.

        Without a reason it is the operator's abort; the engine gives one when it stops the race
        itself (e.g. its checkpoint could not be saved), and each cancelled candidate says so."""
        if self._finished or self._aborted:
            return
        self._aborted = True
        self._admissions_closed = True
        if reason is None:
            self.bus.publish(Operator(action="abort"))
        for attempt in self.attempts.values():
            if attempt.scope is not None:
                attempt.cancel_reason = attempt.cancel_reason or reason or "cancelled: race aborted"
                attempt.scope.cancel()

    # ----------------------------------------------------------------------- the race

    async def run(self) -> RaceResult:
        self._check_spec()
        spec = self.spec
        if self._provider is None:
            self._provider = provider_for(spec.sandbox)
        # how candidates are kept from the user's repository and each other: in the result, and
        # said out loud when they are not
        mode, warning = await anyio.to_thread.run_sync(self._provider.isolation)
        self.isolation = {"mode": mode, "warning": warning or None}
        if warning:
            self.bus.publish(Warned(message=warning))
        self._provider.warm_up()  # a container engine's connection, while the repository is read
        try:
            self.repository = repository = await anyio.to_thread.run_sync(
                git.repository_root, spec.repository
            )
            outpost_dir, self._git_common_dir = await anyio.to_thread.run_sync(_outpost_dirs, repository)
            await self._read_repository(repository)
        except git.GitError as error:
            raise RaceError(_one_line(error)) from None
        baseline = self.baseline
        assert baseline is not None, "read with the repository"
        self._outpost_dir = outpost_dir
        await self._preflight(outpost_dir)
        self._started_at = time.time()

        if self._make_checkpointing is not None:
            self._durable = self._make_checkpointing(self, outpost_dir / "storage")
            finished = await self._durable.open()
            if finished is not None:
                winner = finished.winner
                # nothing ran: the run had finished before
                self.bus.publish(
                    RaceFinished(
                        status=str(finished.status),
                        winner=winner.key if winner else None,
                        result=finished.to_json(),
                        saved=True,
                    )
                )
                return finished
        else:
            self.id = new_race_id()
            for index, candidate in enumerate(spec.candidates):
                self.add_attempt(candidate, index, 1)

        race_id = self.id
        assert race_id is not None, "a new race's, or its saved run's"
        try:
            # (a durable run reads them again: resuming one, the crashed run's leftovers were
            # stopped meanwhile, and its record starts from what they left)
            refs = self._refs_before if self._durable is None else None
            fenced = self._provider is not None and self._provider.isolates_git

            def record() -> tuple[git.GuardRecord, git.PrivateTemplate | None]:
                found = git.guard_record(repository, race_id, self._host_before, refs)
                return found, git.private_template(repository, found.refs) if fenced else None

            self._record, self._private = await anyio.to_thread.run_sync(record)
        except git.GitError as error:
            raise RaceError(_one_line(error)) from None
        flight_log = FlightLog(runs_directory(outpost_dir) / race_id)
        unsubscribe = self.bus.subscribe(flight_log)
        try:
            self.bus.publish(
                RaceStarted(
                    id=race_id,
                    name=spec.name,
                    mode=spec.mode,
                    select=spec.select,
                    baseline=baseline,
                    candidates=[c.key for c in spec.candidates],
                    run_id=spec.run_id,
                    host_dirty=bool(self._host_before and self._host_before.dirty),
                    validate=recorded_validation(spec),
                )
            )
            if self._durable is not None:
                await self._durable.reconcile()
            await self._save()
            self._pending.extend(a for a in self.attempts.values() if a.phase is Phase.WAITING)
            self._baseline_done = anyio.Event()
            async with anyio.create_task_group() as group:
                self._background = group
                if self._durable is not None:
                    group.start_soon(self._durable.heartbeat)
                # beside the candidates, never before them: only the gate waits for it
                group.start_soon(self._validate_baseline)
                async with anyio.create_task_group() as workers:
                    for _ in range(spec.effective_concurrency):
                        workers.start_soon(self._worker)
                group.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await self._drain_sandboxes()
                result = await self._settle_race()
        finally:
            if not self._finished:
                with anyio.CancelScope(shield=True):
                    await self._release_sandboxes()
            unsubscribe()
            flight_log.close()
            if flight_log.write_problem is not None:
                self.bus.publish(Warned(message=flight_log.write_problem))
            with anyio.CancelScope(shield=True):
                # the git sessions its gradings and pins used go with the race
                await anyio.to_thread.run_sync(git.close_sessions, str(repository))
        return result

    async def _read_repository(self, repository: Path) -> None:
        """The baseline, the checkout's snapshot, the files [setup] copies and the refs, read at
        once: each is a git process of its own, and nothing else runs yet."""
        spec = self.spec
        failures: dict[int, Exception] = {}

        async def read(order: int, step: Callable[[], None]) -> None:
            try:
                await anyio.to_thread.run_sync(step)
            except Exception as error:  # raised below as it is, the first in this order
                failures[order] = error

        def baseline() -> None:
            self.baseline = git.resolve_commit(repository, spec.base)
            if spec.setup.cache:
                self._cache_key = setups.cache_key(spec, repository, self.baseline)

        def host() -> None:
            self._host_before = git.host_snapshot(repository)

        def copied() -> None:
            # read once: every candidate gets the same files (and a big checkout is walked once)
            self._copy_paths = setups.files_to_copy(repository, spec.setup.copy)

        def refs() -> None:
            # the guard's record of them, taken before any candidate can move one
            self._refs_before = git.listed_refs(repository)

        async with anyio.create_task_group() as reading:
            for order, step in enumerate((baseline, host, copied, refs)):
                reading.start_soon(read, order, step)
        if failures:
            raise failures[min(failures)]

    async def _release_sandboxes(self) -> None:
        """On the way out of a race that did not finish (cancelled by its caller, or failed): its
        attempts were not settled, so the sandboxes they hold are closed here; none outlives it."""
        for attempt in [*self.previous, *self.attempts.values()]:
            if attempt.sandbox is not None:
                await self._close_sandbox(attempt)
        await self._drain_sandboxes()

    async def _drain_sandboxes(self) -> None:
        """Wait for the sandboxes' removals (a container is removed after its attempt's verdict,
        off its path). One that was not removed is reported, and its attempt's cleanup is left
        pending (a resumed run, or `outpost-tui worktrees --remove-containers`, removes it)."""
        if self._provider is None:
            return
        left = await self._provider.drain(self.spec.cleanup_timeout)
        for resource_id, why in left.items():
            self.bus.publish(Warned(message=f"sandbox {resource_id} was not removed: {why}"))
            for attempt in [*self.previous, *self.attempts.values()]:
                if resource_id in attempt.record.resources:
                    attempt.cleanup = attempt.record.cleanup = "pending"

    def _check_spec(self) -> None:
        spec = self.spec
        if spec.durability.enabled and self._make_checkpointing is None:
            raise RaceError(
                "[durability] is enabled but this race has no checkpointing: build it with "
                "outpost_tui.engine.new_race(spec)"
            )
        if not spec.candidates:
            raise RaceError("a race needs at least one candidate")
        seen: set[str] = set()
        for candidate in spec.candidates:
            if not valid_key(candidate.key):
                raise RaceError(f"candidate key {candidate.key!r} is invalid: {KEY_RULE}")
            if candidate.key in seen:
                raise RaceError(f"candidate key {candidate.key!r} is used twice")
            seen.add(candidate.key)
            adapter_for(candidate.agent)  # raises ValueError for an unknown agent
        if (spec.select == "best") != (spec.score is not None):
            raise RaceError("select = 'best' needs a score, and a score needs select = 'best'")
        if spec.mode == "fallback" and (spec.select == "best" or (spec.concurrency or 1) > 1):
            raise RaceError(
                "mode 'fallback' runs one candidate at a time and stops at the first "
                "success: select 'best' and concurrency above 1 do not apply"
            )

    async def _preflight(self, outpost_dir: Path) -> None:
        """Refuse, before anything is claimed or started, what would fail every candidate in turn."""
        spec = self.spec
        if isinstance(self._provider, LocalProvider):
            # A missing validation or score program would fail each candidate only after its agent
            # had done (and paid for) its work.
            own_path = any("PATH" in candidate.env for candidate in spec.candidates)
            for what, command in (
                ("validate.command", spec.validate.command),
                ("score.command", spec.score.command if spec.score else None),
                ("setup.command", spec.setup.command),
            ):
                program = command[0] if command else None
                if program and os.sep not in program and not own_path and not shutil.which(program):
                    raise RaceError(f"{what}: program {program!r} not found on PATH")
        # where every attempt writes: its worktree, its flight log
        for directory in (outpost_dir / git.WORKSPACES, runs_directory(outpost_dir)):
            try:
                await anyio.to_thread.run_sync(make_private_directory, directory)
            except OSError as error:
                raise RaceError(f"cannot use {directory}: {error.strerror or error}") from None

    def add_attempt(self, candidate: CandidateSpec, index: int, number: int) -> Attempt:
        """Queue attempt `number` of a candidate (a durable run adds the attempts it resumes)."""
        assert self.id is not None, "attempts are added once the race has its id"
        branch = git.branch_name(self.id, candidate.key, number)
        record = CandidateRecord(key=candidate.key, attempt=number, agent=candidate.agent)
        attempt = Attempt(candidate=candidate, index=index, number=number, branch=branch, record=record)
        self.attempts[candidate.key] = attempt
        return attempt

    def _stopping(self) -> bool:
        return (
            self._admissions_closed
            or self._aborted
            or self.accounting.stops_race
            or (self._winner is not None and self.spec.select == "first")
        )

    async def _worker(self) -> None:
        while self._pending and not self._stopping():
            attempt = self._pending.popleft()
            if attempt.cancel_reason is not None:
                attempt.record.error = attempt.cancel_reason + " before it started"
                attempt.phase = Phase.SETTLED
                self._said_skipped(attempt)
                continue
            reason = self.accounting.admit()
            if reason is not None:
                if self.previous and reason.startswith("attempt budget exhausted"):
                    # a replay or quota rerun: the attempts of earlier calls count, and raising the
                    # budget changes the run's identity
                    explained = (
                        f"{reason} (attempts count across every call of run "
                        f"{self.spec.run_id}, interrupted ones included; to go on, start "
                        "the race under a new run_id with a larger [budget] attempts)"
                    )
                    if self.accounting.exhausted == reason:
                        self.accounting.exhausted = explained
                    reason = explained
                self._pending.appendleft(attempt)
                self._admissions_closed = True
                self.bus.publish(BudgetExhausted(reason=reason, stops_race=False))
                return
            await self._run_attempt(attempt)

    async def _run_attempt(self, attempt: Attempt) -> None:
        attempt.phase = Phase.RUNNING
        self._admitted += 1
        attempt.cleanup = "pending"
        attempt.record.started_at = time.time()
        attempt.record.branch = attempt.branch
        await self._save()  # saved before anything is allocated
        self.bus.publish(
            Admitted(
                key=attempt.key,
                attempt=attempt.number,
                branch=attempt.branch,
                agent=attempt.candidate.agent,
                attempts=self.accounting.attempts,
            )
        )
        with anyio.CancelScope() as scope:
            attempt.scope = scope
            if attempt.cancel_reason is not None:
                scope.cancel()
            try:
                await self._execute(attempt)
            except EngineGone as error:
                attempt.record.error = _one_line(error)
                self._engine_gone(error)
            except (SandboxError, git.GitError, ValueError, OSError) as error:
                attempt.record.error = _one_line(error)
            except Exception as error:  # a bug must fail one candidate, not lose the race
                attempt.record.error = f"internal error: {type(error).__name__}: {_one_line(error)}"
        attempt.scope = None
        with anyio.CancelScope(shield=True):
            if attempt.operator_accept and self._winner is None:
                await self._accept_by_operator(attempt)
            await self._settle_attempt(attempt, cancelled=scope.cancelled_caught)


def _outpost_dirs(repository: Path) -> tuple[Path, Path]:
    """<repository>/.outpost (made, and hidden from git) and the common git directory."""
    return git.ensure_outpost_dir(repository), git.git_common_dir(repository)
