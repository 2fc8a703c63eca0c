"""The coordinator: admits candidates, runs their attempts, picks the winner, settles the race.

Race mode admits up to `concurrency` candidates at once in declared order and keeps the first
acceptable result, cancelling every other running attempt at once. Fallback mode is the same loop
with one candidate at a time. Best mode runs them all and promotes the highest score at the end.
Every transition is an event on the bus; durable races also save a checkpoint at each one.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import time
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from .. import git
from ..git import guard
from . import setup as setups
from ..agents import LaunchContext, adapter_for
from .attempt import Attempt
from .budget import Accounting
from ..core.events import Event, EventBus, EventKind
from ..records.flightlog import FlightLog, make_private_directory, runs_directory
from ..core.model import RaceModel
from ..core.result import CandidateRecord, RaceResult, Validation
from ..agents.reachability import Reachability
from ..verdict.review import review
from ..kept.revalidation import recorded_validation
from ..sandbox import EngineGone, Sandbox, SandboxContext, SandboxError, SandboxProvider, provider_for
from ..sandbox.base import Completed, Stop
from ..sandbox.local import LocalProvider, resource_id_for
from ..core.spec import RaceSpec, valid_key
from ..core.statuses import CandidateStatus, Phase, RaceStatus
from ..core.usage import Usage
from ..verdict.validation import ValidationContext, score
from ..verdict import BaselineOutcome, Checkout, Verdict, grade, grade_baseline

CANCELLED_BY_WINNER = "cancelled: another candidate won"


class RaceError(Exception):
    """The race cannot start; the message is one line for the operator."""

    exit_code = 2


def new_race_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text[:500]


def _write_agent_files(files) -> None:
    for name, text in files.items():
        path = Path(name)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)


def _remove_agent_files(files) -> None:
    for name in files:
        Path(name).unlink(missing_ok=True)


class Race:
    """One race. Create it, subscribe to `bus`, then `await race.run()`."""

    def __init__(self, spec: RaceSpec, *, bus: EventBus | None = None,
                 provider: SandboxProvider | None = None) -> None:
        self.spec = spec
        self.bus = bus or EventBus()
        self.model = RaceModel([(c.key, c.agent) for c in spec.candidates])
        self.bus.subscribe(self.model)
        self._provider = provider
        self.id: str | None = None
        self.repository: Path | None = None
        self.baseline: str | None = None
        self.accounting = Accounting(spec.budget)
        self.attempts: dict[str, Attempt] = {}  # the latest attempt of each candidate
        self.previous: list[Attempt] = []  # superseded attempts (durable replays, quota reruns)
        self._pending: deque[Attempt] = deque()
        self._winner: Attempt | None = None
        self._accepted_pending: list[Attempt] = []
        self._aborted = False
        self._admissions_closed = False
        self._finished = False
        self._settling = False
        self._engine_gone_said = False
        self.suspended = False  # stopped by stop_resumable: the saved run stays resumable
        self._durable: Any = None  # durable.DurableRun when [durability] is enabled
        self._host_before: git.HostSnapshot | None = None
        self._record: guard.Record | None = None  # the user's repository as the race found it
        self._record_lock = anyio.Lock()
        self.tampering: list[dict] = []  # what candidates changed in it (result JSON "tampering")
        self._started_at: float | None = None
        self._outpost_dir: Path | None = None
        self._cache_key: str | None = None
        self._cache_locks: dict[str, anyio.Lock] = {}
        self._copy_paths: list[str] = []
        self.baseline_outcome: BaselineOutcome | None = None
        self._baseline_done: anyio.Event | None = None
        # sandboxes started ahead of their attempt's need run here (the attempt awaits them)
        self._background: anyio.abc.TaskGroup
        # what the baseline's validation started (durable races save it, so a replay stops it)
        self.baseline_resources: list[str] = []

    # ----------------------------------------------------------------- operator controls

    def cancel(self, key: str) -> bool:
        """Cancel one candidate: a running one is stopped, a waiting one will not start."""
        attempt = self.attempts.get(key)
        if attempt is None or self._finished or attempt.phase is Phase.SETTLED:
            return False
        attempt.cancel_reason = "cancelled by operator"
        self.bus.emit(EventKind.OPERATOR, key, attempt.number, action="cancel")
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
            commit, commits = await anyio.to_thread.run_sync(git.head_and_commits, directory,
                                                             self.baseline)
        else:  # a clean worktree already removed: its branch and record still hold the work
            commit = attempt.record.commit
            commits = [git.Commit(c["oid"], c["subject"]) for c in attempt.record.commits]
        if not commits:
            return f"{key} has no commits to accept"
        if attempt.scope is None and attempt.phase is not Phase.SETTLED:
            await attempt.settled.wait()  # it is closing its sandbox: accept its settled result
        if self._winner is not None or self._finished or self._settling:
            return "the race is over"
        self.bus.emit(EventKind.OPERATOR, key, attempt.number, action="accept")
        if attempt.phase is Phase.SETTLED:
            attempt.record.commit = commit
            attempt.record.commits = [c.to_json() for c in commits]
            self._set_winner(attempt, "operator")
            attempt.record.status = CandidateStatus.WINNER
            attempt.record.error = None
            self.bus.emit(EventKind.SETTLED, key, attempt.number, status="winner",
                          reason="accepted by operator", commit=attempt.record.commit)
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
            self.bus.emit(EventKind.OPERATOR, action="abort")
        for attempt in self.attempts.values():
            if attempt.scope is not None:
                attempt.cancel_reason = attempt.cancel_reason or reason or "cancelled: race aborted"
                attempt.scope.cancel()

    # ----------------------------------------------------------------------- the race

    async def run(self) -> RaceResult:
        self._check_spec()
        spec = self.spec
        try:
            self.repository = await anyio.to_thread.run_sync(git.repository_root, spec.repository)
            outpost_dir = await anyio.to_thread.run_sync(git.ensure_outpost_dir, self.repository)
            self._git_common_dir = await anyio.to_thread.run_sync(git.git_common_dir, self.repository)
            self.baseline = await anyio.to_thread.run_sync(git.resolve_commit, self.repository, spec.base)
            self._host_before = await anyio.to_thread.run_sync(git.host_snapshot, self.repository)
            if spec.setup.cache:
                self._cache_key = await anyio.to_thread.run_sync(setups.cache_key, spec,
                                                                 self.repository, self.baseline)
            # read once: every candidate gets the same files (and a big checkout is walked once)
            self._copy_paths = await anyio.to_thread.run_sync(setups.files_to_copy, self.repository,
                                                              spec.setup.copy)
        except git.GitError as error:
            raise RaceError(_one_line(error)) from None
        if self._provider is None:
            self._provider = provider_for(spec.sandbox)
        self._outpost_dir = outpost_dir
        await self._preflight(outpost_dir)
        self._started_at = time.time()

        if spec.durability.enabled:
            from ..durable.run import DurableRun

            self._durable = DurableRun(self, outpost_dir / "storage")
            finished = await self._durable.open()
            if finished is not None:
                winner = finished.winner
                self.bus.emit(EventKind.RACE_FINISHED, status=str(finished.status),
                              winner=winner.key if winner else None, result=finished.to_json(),
                              saved=True)  # nothing ran: the run had finished before
                return finished
        else:
            self.id = new_race_id()
            for index, candidate in enumerate(spec.candidates):
                self._add_attempt(candidate, index, 1)

        try:
            self._record = await anyio.to_thread.run_sync(guard.take, self.repository, self.id,
                                                          self._host_before)
        except git.GitError as error:
            raise RaceError(_one_line(error)) from None
        flight_log = FlightLog(runs_directory(outpost_dir) / self.id)
        unsubscribe = self.bus.subscribe(flight_log)
        try:
            self.bus.emit(EventKind.RACE_STARTED, id=self.id, name=spec.name, mode=spec.mode,
                          select=spec.select, baseline=self.baseline,
                          candidates=[c.key for c in spec.candidates], run_id=spec.run_id,
                          host_dirty=bool(self._host_before and self._host_before.dirty),
                          validate=recorded_validation(spec))
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
                result = await self._settle_race()
        finally:
            unsubscribe()
            flight_log.close()
        return result

    def _check_spec(self) -> None:
        spec = self.spec
        if not spec.candidates:
            raise RaceError("a race needs at least one candidate")
        seen: set[str] = set()
        for candidate in spec.candidates:
            if not valid_key(candidate.key):
                raise RaceError(f"candidate key {candidate.key!r} is invalid: use letters, digits, "
                                "'_' and '-', starting with a letter or digit (at most 64)")
            if candidate.key in seen:
                raise RaceError(f"candidate key {candidate.key!r} is used twice")
            seen.add(candidate.key)
            adapter_for(candidate.agent)  # raises ValueError for an unknown agent
        if (spec.select == "best") != (spec.score is not None):
            raise RaceError("select = 'best' needs a score, and a score needs select = 'best'")
        if spec.mode == "fallback" and (spec.select == "best" or (spec.concurrency or 1) > 1):
            raise RaceError("mode 'fallback' runs one candidate at a time and stops at the first "
                            "success: select 'best' and concurrency above 1 do not apply")

    async def _preflight(self, outpost_dir: Path) -> None:
        """Refuse, before anything is claimed or started, what would fail every candidate in turn."""
        spec = self.spec
        if isinstance(self._provider, LocalProvider):
            # A missing validation or score program would fail each candidate only after its agent
            # had done (and paid for) its work.
            own_path = any("PATH" in candidate.env for candidate in spec.candidates)
            for what, command in (("validate.command", spec.validate.command),
                                  ("score.command", spec.score.command if spec.score else None),
                                  ("setup.command", spec.setup.command)):
                program = command[0] if command else None
                if program and os.sep not in program and not own_path and not shutil.which(program):
                    raise RaceError(f"{what}: program {program!r} not found on PATH")
        # where every attempt writes: its worktree, its flight log
        for directory in (outpost_dir / git.WORKSPACES, runs_directory(outpost_dir)):
            try:
                await anyio.to_thread.run_sync(make_private_directory, directory)
            except OSError as error:
                raise RaceError(f"cannot use {directory}: {error.strerror or error}") from None

    def _add_attempt(self, candidate, index: int, number: int) -> Attempt:
        branch = git.branch_name(self.id, candidate.key, number)
        record = CandidateRecord(key=candidate.key, attempt=number, agent=candidate.agent)
        attempt = Attempt(candidate=candidate, index=index, number=number, branch=branch, record=record)
        self.attempts[candidate.key] = attempt
        return attempt

    def _stopping(self) -> bool:
        return (self._admissions_closed or self._aborted or self.accounting.stops_race
                or (self._winner is not None and self.spec.select == "first"))

    async def _worker(self) -> None:
        while self._pending and not self._stopping():
            attempt = self._pending.popleft()
            if attempt.cancel_reason is not None:
                attempt.record.error = attempt.cancel_reason + " before it started"
                attempt.phase = Phase.SETTLED
                self.bus.emit(EventKind.SETTLED, attempt.key, attempt.number, status="skipped",
                              reason=attempt.record.error, commit=None)
                continue
            reason = self.accounting.admit()
            if reason is not None:
                if self.previous and reason.startswith("attempt budget exhausted"):
                    # a replay or quota rerun: the attempts of earlier calls count, and raising the
                    # budget changes the run's identity
                    explained = (f"{reason} (attempts count across every call of run "
                                 f"{self.spec.run_id}, interrupted ones included; to go on, start "
                                 "the race under a new run_id with a larger [budget] attempts)")
                    if self.accounting.exhausted == reason:
                        self.accounting.exhausted = explained
                    reason = explained
                self._pending.appendleft(attempt)
                self._admissions_closed = True
                self.bus.emit(EventKind.BUDGET_EXHAUSTED, reason=reason, stops_race=False)
                return
            await self._run_attempt(attempt)

    async def _run_attempt(self, attempt: Attempt) -> None:
        attempt.phase = Phase.RUNNING
        attempt.cleanup = "pending"
        attempt.record.started_at = time.time()
        attempt.record.branch = attempt.branch
        await self._save()  # saved before anything is allocated
        self.bus.emit(EventKind.ADMITTED, attempt.key, attempt.number, branch=attempt.branch,
                      agent=attempt.candidate.agent, attempts=self.accounting.attempts)
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

    async def _execute(self, attempt: Attempt) -> None:
        spec, candidate, record = self.spec, attempt.candidate, attempt.record
        assert self.repository is not None and self.baseline is not None
        directory = git.worktree_directory(self.repository, candidate.key, attempt.branch)
        register = self._registrar(attempt)

        def allocating(pid: int) -> None:
            # git and the user's post-checkout hook: a successor must be able to stop them
            if self._durable is not None:
                anyio.from_thread.run(register, resource_id_for(pid))

        env = {"TZ": "UTC", "OUTPOST_CANDIDATE": candidate.key, "OUTPOST_ATTEMPT": str(attempt.number),
               "OUTPOST_RACE_ID": self.id, **candidate.env}
        if spec.setup.enabled or self._copy_paths:
            attempt.setup = setups.SetupState()
            record.setup = attempt.setup.to_json()
        if spec.setup.ports:
            attempt.ports, attempt.setup.ports = await self._take_ports()
            env.update(setups.port_environment(attempt.setup.ports))
        context = SandboxContext(repository=self.repository, directory=directory,
                                 git_common_dir=self._git_common_dir, race_id=self.id,
                                 key=candidate.key, attempt=attempt.number, env=env,
                                 register_resource=register)
        # A sandbox that takes a while to start (a container) starts while git checks the
        # worktree out, in the empty directory made for it (a fresh attempt's only: a replay's
        # worktree may be found, or a stray moved aside, at that path).
        ahead = not isinstance(self._provider, LocalProvider)
        made_empty = ahead and await anyio.to_thread.run_sync(git.make_worktree_directory,
                                                               self.repository, directory)
        started = self._start_sandbox(attempt, context) if made_empty else None
        try:
            await anyio.to_thread.run_sync(lambda: git.add_worktree(
                self.repository, attempt.branch, directory, self.baseline, allocating,
                made_empty=made_empty))
        finally:
            if started is not None:
                with anyio.CancelScope(shield=True):  # its sandbox is the attempt's to close
                    await started.wait()
        attempt.directory = directory
        record.directory = str(directory)
        await self._save()
        self.bus.emit(EventKind.WORKTREE_READY, candidate.key, attempt.number, directory=str(directory))
        if started is None:
            attempt.sandbox = await self._provider.acquire(context)
        elif attempt.sandbox is None:
            raise attempt.sandbox_error or SandboxError("the sandbox did not start")
        # The grading checkout's sandbox starts while the agent works (a fresh one of its own:
        # nothing runs in it before validation), or with its checkout when that is cheap.
        checkout = Checkout(self.repository, directory.name, None, self._provider,
                            replace(context, register_resource=register, role="grading"),
                            spec.cleanup_timeout,
                            self._grading_setup(candidate.key, attempt.number,
                                                attempt.setup.ports if attempt.setup else []))
        if ahead:
            self._background.start_soon(checkout.start_sandbox)
        try:
            await self._work_and_grade(attempt, directory, checkout)
        finally:
            await checkout.discard()
            if checkout.cleanup_error is not None and not attempt.cleanup_failed:
                attempt.cleanup_failed = True
                record.error = record.error or f"cleanup failed: {checkout.cleanup_error}"

    def _start_sandbox(self, attempt: Attempt, context: SandboxContext) -> anyio.Event:
        """Acquire the attempt's sandbox beside the caller; the event is set once that is over
        (attempt.sandbox, or attempt.sandbox_error, says how)."""
        started = anyio.Event()

        async def start() -> None:
            try:
                attempt.sandbox = await self._provider.acquire(context)
            except Exception as error:  # raised by the attempt once its worktree is there
                attempt.sandbox_error = error
            finally:
                started.set()

        self._background.start_soon(start)
        return started

    async def _work_and_grade(self, attempt: Attempt, directory: Path, checkout: Checkout) -> None:
        """The agent's run, its result fixed as one commit, and that commit graded."""
        spec, candidate, record = self.spec, attempt.candidate, attempt.record
        assert self.repository is not None and self.baseline is not None
        if attempt.setup is not None and not await self._set_up(attempt, directory):
            return

        # The brief by file too (OUTPOST_BRIEF_FILE): a large one fits no argv or environment.
        # In the worktree's own git directory: outside its tree, mounted in a container, and
        # removed with the worktree.
        brief_file = await anyio.to_thread.run_sync(git.worktree_git_dir, directory) / "outpost-brief.md"
        await anyio.to_thread.run_sync(brief_file.write_text, candidate.brief, "utf-8")
        adapter = adapter_for(candidate.agent)
        launch = adapter.launch(candidate, candidate.brief, LaunchContext(
            directory=directory, git_common_dir=self._git_common_dir,
            race_file_dir=spec.path.parent if spec.path else None, brief_file=brief_file))
        decoder = adapter.decoder(candidate, spec.prices)
        timeout = candidate.timeout or spec.budget.candidate_timeout
        program = Path(launch.argv[0]).name if candidate.agent != "demo" else f"demo {candidate.script.name}"
        self.bus.emit(EventKind.AGENT_STARTED, candidate.key, attempt.number,
                      program=program, timeout=timeout)

        quota_reported = False
        reachability = Reachability(spec.budget.unreachable_timeout)
        # Once the sandbox TERMs the agent: what was counted then, and how many lines came after
        # (its output is read until it is gone, and what it reports meanwhile is counted).
        stopping: Stop | None = None
        counted_at_term = Usage()
        lines_after_term = 0

        def on_stop(report: Stop) -> None:
            nonlocal stopping, counted_at_term
            if stopping is None:
                stopping, counted_at_term = report, attempt.usage_seen

        def note_stop() -> None:
            """Say in the record (and, when it ignored TERM, loudly) how the agent was stopped."""
            if stopping is None or stopping.ended_by is None:
                return
            after = attempt.usage_seen - counted_at_term
            record.stop = {**stopping.to_json(), "lines_after_term": lines_after_term,
                           "usage_after_term": after.to_json()}
            if stopping.ignored_term:
                spent = f"{after.tokens:,} tokens" + (f", {after.cost_text()}" if after.cost_usd else "")
                self.bus.emit(EventKind.WARNING, candidate.key, attempt.number, message=(
                    f"{program} ignored TERM and was killed {stopping.grace:g}s later; "
                    f"{lines_after_term} lines it printed meanwhile were read "
                    f"({spent} reported then, counted)"))

        def on_output(stream: str, lines: list[str]) -> None:
            nonlocal quota_reported, lines_after_term
            if stopping is not None:
                lines_after_term += len(lines)
            for event in decoder.decode(lines, stream):
                quota_reported = quota_reported or event.kind is EventKind.QUOTA
                reachability.observe(event.kind, event.data)
                self.bus.publish(Event(event.kind, candidate.key, attempt.number, event.data))
            if decoder.usage != attempt.usage_seen:
                reachability.answered()
                self._take_usage(attempt, decoder)
            if decoder.stop is not None and running is not None:
                running.cancel()  # the sandbox stops the agent (TERM, then KILL) on the way out

        done = None
        running: anyio.CancelScope | None = None
        unreachable: str | None = None
        start_error: SandboxError | None = None

        async def watch_reachability(group: anyio.abc.CancelScope) -> None:
            nonlocal unreachable
            unreachable = await reachability.unreachable()
            group.cancel()

        try:
            await anyio.to_thread.run_sync(_write_agent_files, launch.files)
            async with anyio.create_task_group() as group:
                running = group.cancel_scope
                group.start_soon(watch_reachability, group.cancel_scope)
                try:
                    done = await attempt.sandbox.run(launch.argv, env=launch.env, stdin=launch.stdin,
                                                     on_output=on_output, timeout=timeout,
                                                     grace=adapter.term_grace, on_stop=on_stop)
                except SandboxError as error:
                    start_error = error
                group.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            # Cancelled (a winner, the operator, a budget): what it spent so far still counts,
            # up to what it printed while it was being stopped.
            decoder.interrupted()
            self._take_usage(attempt, decoder, final=True)
            note_stop()
            raise
        except OSError as error:
            raise SandboxError(f"cannot write {error.filename}: {error.strerror}") from error
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(_remove_agent_files, launch.files)
        if start_error is not None:
            # the sandbox names a missing program neutrally (validation uses it too)
            message = str(start_error)
            if message.startswith("program "):
                message = f"agent {message}"
            raise SandboxError(adapter.start_failure(message)) from start_error
        if done is None and decoder.stop is not None:
            # the decoder gave up on the agent (a browser sign-in, a quota reset hours away):
            # stopped, and the decoder's outcome says why
            done = Completed(exit_code=-signal.SIGTERM, timed_out=False,
                             duration=time.time() - record.started_at)
        if done is None:
            decoder.interrupted()
            self._take_usage(attempt, decoder, final=True)
            note_stop()
            record.error = unreachable
            self.bus.emit(EventKind.AGENT_EXITED, candidate.key, attempt.number, exit_code=None,
                          reason=unreachable, duration=round(time.time() - record.started_at, 3),
                          result=None)
            return
        outcome = decoder.finish(done.exit_code, done.stderr_tail)
        if done.timed_out or decoder.stop is not None:
            decoder.interrupted()
        self._take_usage(attempt, decoder, final=True)
        note_stop()
        reason = outcome.reason
        # an agent that timed out while waiting for a quota to reset ends on the quota
        if done.timed_out and outcome.quota is None:
            reason = f"agent timed out after {timeout:g}s"
            if reachability.since is not None:
                reason += f" (cannot reach the model API: {reachability.message})"
        record.result = outcome.result
        self.bus.emit(EventKind.AGENT_EXITED, candidate.key, attempt.number,
                      exit_code=done.exit_code, reason=reason, duration=round(done.duration, 3),
                      result=outcome.result)
        if outcome.quota is not None:
            record.quota = outcome.quota.to_json()
            if not quota_reported:
                self.bus.emit(EventKind.QUOTA, candidate.key, attempt.number, **record.quota)
        if done.timed_out or not outcome.ok:
            record.error = reason
            return

        leave_out = attempt.setup.leave_out if attempt.setup is not None else []
        if adapter.commits_on_behalf and await anyio.to_thread.run_sync(git.has_changes, directory,
                                                                        leave_out):
            message = on_behalf_message(candidate.agent, candidate.key, candidate.brief,
                                        decoder.commit_message, outcome.result)
            commit = await anyio.to_thread.run_sync(git.commit_all, directory, message, leave_out)
            if commit:
                record.committed_on_behalf = True
                self.bus.emit(EventKind.COMMITTED_ON_BEHALF, candidate.key, attempt.number,
                              commit=commit, message=message, agent=candidate.agent)
        # The result is fixed here, as one commit: what is graded, and the only commit that can win.
        # Uncommitted edits stay in the worktree, kept, but are not part of it.
        record.commit, commits = await anyio.to_thread.run_sync(git.head_and_commits, directory,
                                                                self.baseline)
        record.commits = [c.to_json() for c in commits]
        attempt.result_fixed = True
        await anyio.to_thread.run_sync(git.pin_validated, self.repository, self.id, candidate.key,
                                       attempt.number, record.commit)
        # Nothing the agent left running may touch the grading: its sandbox goes first.
        if not await self._close_sandbox(attempt):
            return

        def on_check_output(stream: str, lines: list[str]) -> None:
            self.bus.emit(EventKind.LOG, candidate.key, attempt.number, stream="validation", lines=lines)

        self.bus.emit(EventKind.VALIDATION_STARTED, candidate.key, attempt.number, commits=len(commits),
                      commit=record.commit)
        checkout.commit = record.commit
        # what the record says if the attempt is cancelled before validation returns
        record.validation = Validation("cancelled", reason="cancelled while validating")
        accepted = False
        try:
            async with checkout:
                check_context = ValidationContext(key=candidate.key, attempt=attempt.number,
                                                  directory=checkout.directory, branch=attempt.branch,
                                                  baseline=self.baseline, commits=commits,
                                                  sandbox=checkout.sandbox)
                record.validation, verdict = await grade(
                    spec.validate, checkout, check_context, baseline=self.baseline,
                    wait_baseline=self._wait_baseline, on_output=on_check_output)
                record.verdict = verdict.to_json()
                accepted = verdict.accepted
                if accepted and spec.select == "first":
                    # Registered as soon as validation passes, so a tie with an earlier slot whose
                    # result became acceptable at the same moment is seen when the winner is chosen.
                    self._accepted_pending.append(attempt)
                self.bus.emit(EventKind.VALIDATION_FINISHED, candidate.key, attempt.number,
                              status=record.validation.status, exit_code=record.validation.exit_code,
                              reason=record.validation.reason, verdict=record.verdict)
                if accepted and spec.select == "best":
                    assert spec.score is not None
                    try:
                        record.score = await score(spec.score, check_context, on_check_output)
                    except (ValueError, SandboxError) as error:
                        record.error = _one_line(error)
                        accepted = False
                    else:
                        self.bus.emit(EventKind.SCORED, candidate.key, attempt.number,
                                      score=record.score)
        finally:
            if checkout.cleanup_error is not None:
                attempt.cleanup_failed = True
                record.error = f"cleanup failed: {checkout.cleanup_error}"
        attempt.accepted = accepted
        attempt.phase = Phase.VALIDATED
        await self._save()
        if accepted and spec.select == "first":
            await self._claim_victory(attempt)

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
        failure = await self.prepare_directory(attempt.key, attempt.number, directory,
                                               attempt.sandbox, state)
        record.setup = state.to_json()
        if failure is not None:
            record.setup["output"] = failure[1]
            record.error = failure[0]
        return failure is None

    async def prepare_directory(self, key: str, number: int, directory: Path, sandbox: Sandbox,
                                state: setups.SetupState) -> tuple[str, str] | None:
        """Give one checkout what [setup] promises, in its sandbox: the user's files copied in,
        the cache, then the setup command. A candidate's worktree gets it before its agent starts;
        any other checkout of the baseline or a result (where validation runs) can get the same.
        Returns (reason, output tail) when it failed. Ports are the caller's: they are in the
        environment the sandbox was acquired with."""
        setup = self.spec.setup
        assert self.repository is not None and self._outpost_dir is not None
        self.bus.emit(EventKind.SETUP_STARTED, key, number,
                      command=list(setup.command) if setup.command else None, ports=state.ports)
        started = time.monotonic()
        state.copied = await anyio.to_thread.run_sync(setups.copy_files, self.repository,
                                                      directory, self._copy_paths)
        failure: tuple[str, str] | None = None
        if setup.command and self._cache_key is not None:
            cache_key, built = self._cache_key, False
            # Only a checkout of the baseline builds the cache: a checkout of a candidate's result
            # runs its build files, which must never reach another candidate through the cache.
            on_baseline = await anyio.to_thread.run_sync(git.head, directory) == self.baseline
            # one checkout builds the cache on the baseline while the others wait, then copy it
            async with self._cache_locks.setdefault(cache_key, anyio.Lock()):
                if not setups.cache_entry(self._outpost_dir, cache_key).exists():
                    built = True
                    state.cache = "miss"
                    failure = await self._setup_command(key, number, sandbox, state)
                    if failure is None and on_baseline:
                        stored = await anyio.to_thread.run_sync(
                            setups.store_cache, self._outpost_dir, cache_key, directory, setup.cache)
                        state.cache = "built" if stored else "miss"
            if not built:
                hit = await anyio.to_thread.run_sync(setups.restore_cache, self._outpost_dir,
                                                     cache_key, directory)
                state.cache = "hit" if hit else "miss"
                failure = await self._setup_command(key, number, sandbox, state)
        elif setup.command:
            failure = await self._setup_command(key, number, sandbox, state)
        state.duration = round(time.monotonic() - started, 3)
        if failure is None:
            state.top_level, state.products = await anyio.to_thread.run_sync(setups.snapshot,
                                                                              directory)
        self.bus.emit(EventKind.SETUP_FINISHED, key, number, status=state.status,
                      exit_code=state.exit_code, duration=state.duration, cache=state.cache,
                      copied=sorted(state.copied), reason=failure[0] if failure else None)
        return failure

    async def _setup_command(self, key: str, number: int, sandbox: Sandbox,
                             state: setups.SetupState) -> tuple[str, str] | None:
        """Run [setup] command in the sandbox; (reason, output tail) when it failed."""
        setup = self.spec.setup
        assert setup.command

        def on_output(stream: str, lines: list[str]) -> None:
            self.bus.emit(EventKind.LOG, key, number, stream="setup", lines=lines)

        try:
            done = await sandbox.run(setup.command, on_output=on_output, timeout=setup.timeout,
                                     tail_bytes=4000)
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

    async def _close_sandbox(self, attempt: Attempt) -> bool:
        """Close the attempt's sandbox; False (and the record says why) when it did not close."""
        sandbox, attempt.sandbox = attempt.sandbox, None
        if sandbox is None:
            return True
        record = attempt.record
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(self.spec.cleanup_timeout) as deadline:
                try:
                    await sandbox.close()
                except EngineGone as error:
                    attempt.cleanup_failed = True
                    # why the attempt ended, if that was already the engine, stays its reason
                    if not (record.error or "").startswith("the container engine at "):
                        record.error = _one_line(error)
                    self._engine_gone(error)
                except Exception as error:  # a provider failing to close: the attempt cannot win
                    attempt.cleanup_failed = True
                    record.error = f"cleanup failed: {_one_line(error)}"
            if deadline.cancelled_caught:
                attempt.cleanup_failed = True
                record.error = f"cleanup did not finish within {self.spec.cleanup_timeout:g}s"
        return not attempt.cleanup_failed

    async def _validate_baseline(self) -> None:
        """The baseline's own validation, once, in its own checkout and sandbox."""
        assert self._baseline_done is not None and self.repository is not None
        validate = self.spec.validate
        try:
            if validate.command is None or validate.gate != "strict":
                return  # nothing to run, or nothing would read it
            outcome = BaselineOutcome("cancelled", reason="cancelled before it finished")
            self.baseline_outcome = outcome
            started = time.monotonic()
            async def register(resource_id: str) -> None:
                self.baseline_resources.append(resource_id)
                await self._save()

            # attempt 0 names no candidate's attempt (they count from 1): its container's name
            # cannot be one of theirs
            env = {"TZ": "UTC", "OUTPOST_RACE_ID": self.id, "OUTPOST_ATTEMPT": "0",
                   "OUTPOST_BASELINE": "1"}
            ports: list[int] = []
            reservation = None
            if self.spec.setup.ports:
                reservation, ports = await self._take_ports()
                env.update(setups.port_environment(ports))
            context = SandboxContext(repository=self.repository, directory=self.repository,
                                     git_common_dir=self._git_common_dir, race_id=self.id,
                                     key="baseline", attempt=0, register_resource=register, env=env)
            checkout = Checkout(self.repository, f"baseline-{self.id}", self.baseline,
                                self._provider, context, self.spec.cleanup_timeout,
                                self._grading_setup("baseline", 0, ports))
            def decided(outcome: BaselineOutcome) -> None:
                outcome.duration = round(time.monotonic() - started, 3)
                self.baseline_outcome = outcome
                self.bus.emit(EventKind.BASELINE_VALIDATED, **outcome.to_json())
                assert self._baseline_done is not None
                self._baseline_done.set()

            try:
                async with checkout:
                    check_context = ValidationContext(key="baseline", attempt=0,
                                                      directory=checkout.directory, branch="",
                                                      baseline=self.baseline, commits=[],
                                                      sandbox=checkout.sandbox)
                    # Its command and everything it started are gone once it returns: the gates
                    # waiting on it go on while its checkout and sandbox are removed.
                    decided(await grade_baseline(self.spec.validate, checkout, check_context,
                                                 lambda stream, lines: None))
            except (SandboxError, git.GitError, OSError) as error:
                if not self._baseline_done.is_set():
                    decided(BaselineOutcome("error", reason=_one_line(error)))
            finally:
                if reservation is not None:
                    reservation.release()
        finally:
            self._baseline_done.set()

    def _grading_setup(self, key: str, number: int, ports: list[int]):
        """[setup] for a grading checkout, as its worktree had it (None: the race has none)."""
        if not (self.spec.setup.enabled or self._copy_paths):
            return None

        async def prepare(directory: Path, sandbox: Sandbox) -> str | None:
            failure = await self.prepare_directory(key, number, directory, sandbox,
                                                   setups.SetupState(ports=list(ports)))
            return failure[0] if failure else None

        return prepare

    async def _wait_baseline(self) -> BaselineOutcome | None:
        if self._baseline_done is not None:
            await self._baseline_done.wait()
        return self.baseline_outcome

    async def _claim_victory(self, attempt: Attempt) -> None:
        # Let results that became acceptable in the same instant arrive before the choice.
        await anyio.lowlevel.checkpoint()
        # one that passed and then failed (reading its HEAD) or was cancelled is out of the running
        eligible = [a for a in self._accepted_pending if a.record.error is None
                    and a.cancel_reason is None and a.phase is not Phase.SETTLED]
        if self._winner is None and eligible:
            self._set_winner(min(eligible, key=lambda a: a.index), "validation")

    async def _accept_by_operator(self, attempt: Attempt) -> None:
        directory = attempt.directory
        if directory is None:
            return
        record = attempt.record
        if not attempt.result_fixed:
            record.commit, commits = await anyio.to_thread.run_sync(git.head_and_commits, directory,
                                                                    self.baseline)
            record.commits = [c.to_json() for c in commits]
        attempt.accepted = True
        self._set_winner(attempt, "operator")

    def _set_winner(self, attempt: Attempt, decided_by: str) -> None:
        self._winner = attempt
        attempt.record.decided_by = decided_by
        self._admissions_closed = True
        for other in self.attempts.values():
            # A validated attempt has finished its work and is only closing: it keeps its outcome.
            if other is not attempt and other.scope is not None and other.phase is not Phase.VALIDATED:
                other.cancel_reason = other.cancel_reason or CANCELLED_BY_WINNER
                other.scope.cancel()

    def _registrar(self, attempt: Attempt):
        async def register(resource_id: str) -> None:
            attempt.record.resources.append(resource_id)
            await self._save()

        return register

    def _take_usage(self, attempt: Attempt, decoder, *, final: bool = False) -> None:
        """Count the decoder's total, unless it or the race's sum with it is not a finite,
        non-negative number: then it is refused with a warning and the last sound total stands."""
        total = decoder.usage
        problem = total.problem()
        if problem is None:
            _, problem = self.accounting.usage.plus(total - attempt.usage_seen)
        if problem is not None:
            self.bus.emit(EventKind.WARNING, attempt.key, attempt.number,
                          message=f"refused a usage report: {problem}")
            decoder.usage = total = attempt.usage_seen
            if not final:
                return
        self._report_usage(attempt, total, final=final)

    def _report_usage(self, attempt: Attempt, total: Usage, *, final: bool = False) -> None:
        delta = total - attempt.usage_seen
        attempt.usage_seen = total if not final else attempt.usage_seen + delta
        attempt.record.usage = total
        if delta.is_zero() and not final:
            return
        reason = self.accounting.report(delta)
        if not delta.is_zero():
            self.bus.emit(EventKind.USAGE, attempt.key, attempt.number, delta=delta.to_json(),
                          total=total.to_json(), race_total=self.accounting.usage.to_json())
        if self._durable is not None:
            self._durable.usage_changed()
        if reason is not None:
            self._admissions_closed = True
            self.bus.emit(EventKind.BUDGET_EXHAUSTED, reason=reason, stops_race=True)
            for other in self.attempts.values():
                if other.scope is not None:
                    other.cancel_reason = other.cancel_reason or f"cancelled: {reason}"
                    other.scope.cancel()

    def _engine_gone(self, error: EngineGone) -> None:
        """Say once, for the race, that its container engine went away and what is left to do."""
        if self._engine_gone_said:
            return
        self._engine_gone_said = True
        what = str(error).split(": container ", 1)[0]
        command = f"outpost-tui worktrees {shlex.quote(str(self.repository))} --remove-containers"
        if self.spec.sandbox.endpoint:
            command += f" --endpoint {shlex.quote(self.spec.sandbox.endpoint)}"
        self.bus.emit(EventKind.WARNING, message=(
            f"{what}: the candidates running on it are settled as failed; their containers are left "
            f"until `{command}` removes them once the engine is back"))

    async def _settle_attempt(self, attempt: Attempt, *, cancelled: bool) -> None:
        record = attempt.record
        await self._close_sandbox(attempt)
        if attempt.ports is not None:
            attempt.ports.release()  # only now: validation may start the candidate's server too
        attempt.cleanup = "pending" if attempt.cleanup_failed else "done"
        record.cleanup = attempt.cleanup

        if attempt.cleanup_failed:
            record.status = CandidateStatus.FAILED
        elif attempt is self._winner and record.error is None:
            record.status = CandidateStatus.WINNER
        elif attempt.phase is Phase.VALIDATED and record.error is None and not attempt.operator_accept:
            record.status = CandidateStatus.REJECTED
            if attempt.accepted and self.spec.select == "first" and self._winner is not None:
                record.error = f"validation passed, but {self._winner.key} won first"
            elif not attempt.accepted:
                record.error = record.error or record.validation.reason
        elif cancelled or attempt.cancel_reason is not None:
            record.status = CandidateStatus.CANCELLED
            record.error = record.error or attempt.cancel_reason or "cancelled"
        elif record.quota is not None:
            record.status = CandidateStatus.QUOTA
        elif record.error is not None:
            record.status = CandidateStatus.FAILED
        else:
            record.status = CandidateStatus.REJECTED
            if not attempt.accepted:
                record.error = record.validation.reason
        # its processes are gone: what it changed in the user's repository is known now, and the
        # settings it wrote are put back before any more git runs there
        await self._check_repository(attempt)
        await self._retain(attempt)
        record.finished_at = time.time()
        attempt.phase = Phase.SETTLED
        await self._save()
        shown, why = str(record.status), record.error
        if self._awaits_decision(attempt):
            # Best of N: it passed and waits for the others' scores; the decision settles it.
            shown, why = "passed", f"score {record.score:g}, waiting for the decision"
        self.bus.emit(EventKind.SETTLED, attempt.key, attempt.number, status=shown,
                      reason=why, commit=record.commit,
                      retained_directory=record.retained_directory)
        attempt.settled.set()

    async def _check_repository(self, attempt: Attempt | None) -> None:
        """Compare the user's repository with the record; report (and undo) what changed.

        A change found when an attempt ends is laid to it, naming the others that were running
        then; one found at the end of the race is nobody's in particular."""
        if self._record is None:
            return
        who = f"{attempt.key}-{attempt.number}" if attempt is not None else "race"
        async with self._record_lock:
            try:
                changes = await anyio.to_thread.run_sync(guard.compare, self._record, who)
            except git.GitError as error:
                self.bus.emit(EventKind.WARNING, attempt.key if attempt else None,
                              attempt.number if attempt else None,
                              message=f"could not check your repository for changes: {_one_line(error)}")
                return
        if not changes:
            return
        running = sorted(a.key for a in self.attempts.values()
                         if a is not attempt and a.scope is not None)
        entries = [{"candidate": attempt.key if attempt else None,
                    "attempt": attempt.number if attempt else None,
                    "running": running, **change.to_json()} for change in changes]
        self.tampering += entries
        self.bus.emit(EventKind.TAMPERING, attempt.key if attempt else None,
                      attempt.number if attempt else None, changes=entries)

    async def _retain(self, attempt: Attempt) -> None:
        """Remove the worktree only when it is fully clean; the branch always stays."""
        record, directory = attempt.record, attempt.directory
        if directory is None or not directory.exists():
            return
        keep = (self.spec.durability.enabled or attempt.cleanup_failed
                or record.status is CandidateStatus.FAILED)
        if not keep:
            try:
                await anyio.to_thread.run_sync(self._clear_setup, attempt, directory)
                removed = await anyio.to_thread.run_sync(git.remove_worktree, self.repository, directory)
            except git.GitError:
                removed = False
            if removed:
                return
        record.retained_directory = str(directory)

    @staticmethod
    def _clear_setup(attempt: Attempt, directory: Path) -> None:
        # Setup's files would keep every worktree; they go only when they are exactly what setup
        # left and the candidate left nothing else uncommitted.
        state = attempt.setup
        if state is None or state.products is None:
            return
        try:
            if not git.has_changes(directory, state.leave_out):
                setups.remove_products(directory, state)
        except OSError:
            pass  # what cannot be removed keeps the worktree, which is then retained

    # ------------------------------------------------------------------ end of the race

    def _awaits_decision(self, attempt: Attempt) -> bool:
        record = attempt.record
        return (self.spec.select == "best" and attempt.accepted and record.score is not None
                and record.status is CandidateStatus.REJECTED and record.error is None)

    def _select_best(self) -> None:
        if self.spec.select != "best":
            return
        waiting = [a for a in sorted(self.attempts.values(), key=lambda a: a.index)
                   if self._awaits_decision(a)]
        best: Attempt | None = None
        if self._winner is None and not self._aborted and not self.accounting.stops_race:
            for attempt in waiting:
                if attempt.record.cleanup == "done" and (best is None or attempt.record.score > best.record.score):
                    best = attempt
        if best is not None:
            self._set_winner(best, "score")
            best.record.status = CandidateStatus.WINNER
            self.bus.emit(EventKind.SETTLED, best.key, best.number, status="winner",
                          reason=f"highest score {best.record.score:g}", commit=best.record.commit)
        for attempt in waiting:
            if attempt is best:
                continue
            record = attempt.record
            if best is not None:
                record.error = f"passed with score {record.score:g}; {best.key} scored {best.record.score:g}"
            else:
                record.error = f"passed with score {record.score:g}, but no winner was chosen"
            self.bus.emit(EventKind.SETTLED, attempt.key, attempt.number, status=str(record.status),
                          reason=record.error, commit=record.commit)

    def _race_status(self) -> RaceStatus:
        records = [a.record for a in self.attempts.values()]
        if any(r.status is CandidateStatus.WINNER for r in records):
            return RaceStatus.WINNER
        if self._aborted:
            return RaceStatus.ABORTED
        if self.accounting.exhausted is not None:
            return RaceStatus.BUDGET_EXHAUSTED
        if any(r.status is CandidateStatus.QUOTA for r in records):
            return RaceStatus.QUOTA
        return RaceStatus.NO_WINNER

    async def _settle_race(self) -> RaceResult:
        # From here the outcome is being written: a hand accept would contradict it.
        self._settling = True
        self._select_best()
        for attempt in self._pending:
            if attempt.record.status is CandidateStatus.SKIPPED and attempt.record.error is None:
                attempt.record.error = self._skip_reason()
                # its phase stays waiting (it never took an attempt), but watchers see it end
                self.bus.emit(EventKind.SETTLED, attempt.key, attempt.number, status="skipped",
                              reason=attempt.record.error, commit=None)
        self._pending.clear()
        status = self._race_status()
        records = [self.attempts[c.key].record for c in self.spec.candidates]
        await self._check_repository(None)
        # the check has just taken the checkout's snapshot (when the race recorded one)
        host_after = self._record.latest_host if self._record is not None else None
        host_error = None
        if host_after is None:
            try:
                host_after = await anyio.to_thread.run_sync(git.host_snapshot, self.repository)
            except git.GitError as error:
                host_error = _one_line(error)
        winner = next((r for r in records if r.status is CandidateStatus.WINNER), None)
        await self._note_branches_moved(records)
        integration = None
        if winner is not None:
            # the validated commit is what merges, wherever its branch went since
            check = await anyio.to_thread.run_sync(
                lambda: git.integration_check(self.repository, winner.commit or winner.branch,
                                              winner.commit, host=host_after))
            integration = check.to_json()
            checkout = [t for t in self.tampering if t["checkout"]]
            if checkout and integration["status"] != "blocked":
                # merge-tree compared against a HEAD or checkout that changed during the race:
                # a candidate's doing, or the user's own (the record cannot tell which)
                who = sorted({t["candidate"] or "no candidate" for t in checkout})
                integration.update(status="blocked", conflicts=[], reason=(
                    f"your checkout was changed during the race (while {', '.join(who)} ran): "
                    f"{checkout[0]['description']}; if that was you, check again with "
                    f"`git merge-tree --write-tree HEAD {winner.branch}`"))
            if winner.commit and self.baseline:
                try:
                    setup = self.attempts[winner.key].setup
                    winner.review = await anyio.to_thread.run_sync(
                        review, self.repository, self.baseline, winner.commit,
                        setup.leave_out if setup is not None else ())
                except git.GitError as error:
                    winner.review = [f"could not be reviewed: {_one_line(error)}"]
                verdict = Verdict.from_json(winner.verdict)
                if verdict is not None:
                    winner.review.extend(verdict.review_flags())
        result = RaceResult(
            id=self.id, status=status, baseline=self.baseline, name=self.spec.name,
            mode=self.spec.mode, select=self.spec.select, candidates=records,
            previous_attempts=[a.record for a in self.previous],
            attempts=self.accounting.attempts, usage=self._total_usage(),
            integration=integration, host=self._host_json(host_after, host_error),
            error=self.accounting.exhausted if status is RaceStatus.BUDGET_EXHAUSTED else None,
            quota=self._race_quota(records) if status is RaceStatus.QUOTA else None,
            run_id=self.spec.run_id, repository=str(self.repository),
            started_at=self._started_at, finished_at=time.time(), tampering=list(self.tampering),
            baseline_validation=self.baseline_outcome.to_json() if self.baseline_outcome else None,
        )
        self._finished = True
        if self._durable is not None:
            await self._durable.finish(result)
        self.bus.emit(EventKind.RACE_FINISHED, status=str(status),
                      winner=winner.key if winner else None, result=result.to_json())
        return result

    async def _note_branches_moved(self, records: list[CandidateRecord]) -> None:
        """A branch moved after its commit was graded is reported; the graded commit still wins."""
        graded = [(record, verdict) for record in records
                  if (verdict := Verdict.from_json(record.verdict)) is not None and record.branch]
        if not graded:
            return
        try:
            tips = await anyio.to_thread.run_sync(git.branch_tips, self.repository,
                                                  [record.branch for record, _ in graded])
        except git.GitError as error:
            self.bus.emit(EventKind.WARNING, message=f"could not read the candidates' branches: "
                                                     f"{_one_line(error)}")
            return
        for record, verdict in graded:
            tip = tips.get(record.branch)
            if tip != verdict.commit:
                verdict.branch_moved_to = tip or "(deleted)"
                record.verdict = verdict.to_json()

    def _skip_reason(self) -> str:
        if self._winner is not None:
            return f"not started: {self._winner.key} won"
        if self._aborted:
            return "not started: race aborted"
        if self.accounting.exhausted:
            return f"not started: {self.accounting.exhausted}"
        return "not started"

    def _total_usage(self) -> Usage:
        total = Usage()
        for attempt in [*self.previous, *self.attempts.values()]:
            total, _ = total.plus(attempt.record.usage)  # refused (and warned about) when taken
        return total

    @staticmethod
    def _race_quota(records: list[CandidateRecord]) -> dict | None:
        quotas = [r.quota for r in records if r.quota]
        timed = sorted((q for q in quotas if q.get("reset_at")), key=lambda q: q["reset_at"])
        return timed[0] if timed else (quotas[0] if quotas else None)

    def _host_json(self, after: git.HostSnapshot | None, error: str | None) -> dict:
        before = self._host_before
        changed = after is None or before is None or after != before
        return {"before": before.to_json() if before else None,
                "after": after.to_json() if after else None, "changed": changed, "error": error}

    # ----------------------------------------------------------------------- durability

    async def _save(self) -> None:
        if self._durable is not None:
            await self._durable.save()

    def state(self) -> dict:
        return {
            "id": self.id,
            "baseline": self.baseline,
            "attempts": [a.to_state() for a in [*self.previous, *self.attempts.values()]],
            "usage": {"attempts": self.accounting.attempts, **self._total_usage().to_json()},
            "baseline_resources": list(self.baseline_resources),
        }



def on_behalf_message(agent: str, key: str, brief: str, own: str | None, result: str | None) -> str:
    """The message of a commit made for an agent: its own message when it tried to commit, else
    what it was asked; the body says who committed and carries the agent's final words."""
    first = next((line.strip() for line in brief.splitlines() if line.strip()), "")
    subject = own.strip() if own and own.strip() else f"{agent} ({key}): {first}"
    body = [f"Committed by outpost-tui on behalf of {agent} ({key}): its sandbox could not commit."]
    if result and result.strip() and result.strip() != subject:
        body += ["", result.strip()]
    return subject + "\n\n" + "\n".join(body)
