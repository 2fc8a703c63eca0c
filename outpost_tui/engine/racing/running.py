"""Running one attempt: its worktree, `[setup]`, the agent in its sandbox (output decoded into
events, usage counted against the budget), the commit made on its behalf, then its result graded
in a clean checkout."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from .. import git
from ..agents import LaunchContext, adapter_for
from ..agents.reachability import Reachability
from ..core.events import (
    AgentExited,
    AgentStarted,
    CommittedOnBehalf,
    Log,
    Quota,
    Scored,
    ValidationFinished,
    ValidationStarted,
    Warned,
    WorktreeReady,
    event_of,
)
from ..core.result import Validation
from ..core.statuses import Phase
from ..core.text import visible, visible_value
from ..core.usage import Usage
from ..sandbox import SandboxContext, SandboxError
from ..sandbox.base import Completed, Stop
from ..sandbox.lines import LOG_LIMIT, LOG_TAIL, LogBudget
from ..sandbox.local import LocalProvider, resource_id_for
from ..verdict import BaselineOutcome, Checkout, grade, sealed_score
from ..verdict.validation import ValidationContext
from . import setup as setups
from .attempt import Attempt
from .briefing import GitPlace, remove_agent_files, write_agent_files, write_brief
from .metering import Metering
from .state import _one_line


class Running(Metering):
    """Running one attempt from its worktree to its graded result."""

    async def _execute(self, attempt: Attempt) -> None:
        spec, candidate, record = self.spec, attempt.candidate, attempt.record
        assert self.repository is not None and self.baseline is not None
        assert self.id is not None and self._provider is not None, "set when the race starts"
        repository, baseline, provider = self.repository, self.baseline, self._provider
        directory = git.worktree_directory(self.repository, candidate.key, attempt.branch)
        register = self._registrar(attempt)

        def allocating(pid: int) -> None:
            # git and the user's post-checkout hook: a successor must be able to stop them
            if self._durable is not None:
                anyio.from_thread.run(register, resource_id_for(pid))

        env = {
            "TZ": "UTC",
            "OUTPOST_CANDIDATE": candidate.key,
            "OUTPOST_ATTEMPT": str(attempt.number),
            "OUTPOST_RACE_ID": self.id,
            **candidate.env,
        }
        if spec.setup.enabled or self._copy_paths:
            attempt.setup = setups.SetupState()
            record.setup = attempt.setup.to_json()
        if spec.setup.ports:
            assert attempt.setup is not None  # ports are part of [setup]
            attempt.ports, attempt.setup.ports = await self._take_ports()
            env.update(setups.port_environment(attempt.setup.ports))
        context = SandboxContext(
            repository=self.repository,
            directory=directory,
            git_common_dir=self._git_common_dir,
            race_id=self.id,
            key=candidate.key,
            attempt=attempt.number,
            env=env,
            register_resource=register,
            grading_follows=True,
        )
        # A sandbox that takes a while to start (a container) starts while git checks the
        # worktree out, in the empty directory made for it (a fresh attempt's only: a replay's
        # worktree may be found, or a stray moved aside, at that path).
        ahead = not isinstance(self._provider, LocalProvider)
        made_empty = ahead and await anyio.to_thread.run_sync(
            git.make_worktree_directory, self.repository, directory
        )
        started = self._start_sandbox(attempt, context) if made_empty else None
        # the (sealed) checkpoint of a replayed attempt names its directory: its branch is its own
        resumed = attempt.directory is not None
        try:
            await anyio.to_thread.run_sync(
                lambda: git.add_worktree(
                    repository,
                    attempt.branch,
                    directory,
                    baseline,
                    allocating,
                    made_empty=made_empty,
                    resumed=resumed,
                )
            )
        finally:
            if started is not None:
                with anyio.CancelScope(shield=True):  # its sandbox is the attempt's to close
                    await started.wait()
        attempt.directory = directory
        record.directory = str(directory)
        await self._save()
        if self._private is not None:
            # A fenced candidate's git writes a repository of its own, never the user's: made
            # before anything runs in its sandbox, its result brought in once its agent is done.
            # Its branch starts at the baseline (a replay's may be ahead: read again then).
            head = None if resumed else baseline
            await anyio.to_thread.run_sync(git.make_private, self._private, directory, head)
        self.bus.publish(WorktreeReady(key=candidate.key, attempt=attempt.number, directory=str(directory)))
        if started is None:
            attempt.sandbox = await provider.acquire(context)
        elif attempt.sandbox is None:
            raise attempt.sandbox_error or SandboxError("the sandbox did not start")
        # The grading checkout's sandbox starts while the agent works (a fresh one of its own:
        # nothing runs in it before validation), or with its checkout when that is cheap.
        checkout = Checkout(
            self.repository,
            directory.name,
            None,
            provider,
            replace(context, register_resource=register, role="grading", grading_follows=False),
            spec.cleanup_timeout,
            self._grading_setup(candidate.key, attempt.number, attempt.setup.ports if attempt.setup else []),
            self._private,
        )
        if ahead:
            checkout.start_sandbox(self._background)
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
        provider = self._provider
        assert provider is not None, "set when the race starts"

        async def start() -> None:
            try:
                attempt.sandbox = await provider.acquire(context)
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
        assert self.id is not None and record.started_at is not None, (
            "set when the race and the attempt start"
        )
        assert attempt.sandbox is not None, "acquired before the work"
        assert self._provider is not None, "set when the race starts"
        private = self._private is not None  # made with the worktree, brought in below
        if attempt.setup is not None and not await self._set_up(attempt, directory):
            return

        # The brief by file too (OUTPOST_BRIEF_FILE): a large one fits no argv or environment.
        # In the worktree's own git directory: outside its tree, mounted in a container, and
        # removed with the worktree.
        place = await anyio.to_thread.run_sync(GitPlace.of, directory, private)
        brief_file = await anyio.to_thread.run_sync(write_brief, place, candidate.brief)
        adapter = adapter_for(candidate.agent)
        launch = adapter.launch(
            candidate,
            candidate.brief,
            LaunchContext(
                directory=directory,
                # the git directory its git writes: its own repository when fenced (the user's
                # is not there, and an agent's own sandbox cannot make it writable again)
                git_common_dir=place.seen if private else self._git_common_dir,
                race_file_dir=spec.path.parent if spec.path else None,
                brief_file=brief_file,
                fenced=private,
            ),
        )
        decoder = adapter.decoder(candidate, spec.prices)
        timeout = candidate.timeout or spec.budget.candidate_timeout
        program = Path(launch.argv[0]).name
        if candidate.agent == "demo" and candidate.script is not None:
            program = f"demo {candidate.script.name}"
        self.bus.publish(
            AgentStarted(key=candidate.key, attempt=attempt.number, program=program, timeout=timeout)
        )

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
            record.stop = {
                **stopping.to_json(),
                "lines_after_term": lines_after_term,
                "usage_after_term": after.to_json(),
            }
            if stopping.ignored_term:
                spent = f"{after.tokens:,} tokens" + (f", {after.cost_text()}" if after.cost_usd else "")
                self.bus.publish(
                    Warned(
                        key=candidate.key,
                        attempt=attempt.number,
                        message=(
                            f"{program} ignored TERM and was killed {stopping.grace:g}s later; "
                            f"{lines_after_term} lines it printed meanwhile were read "
                            f"({spent} reported then, counted)"
                        ),
                    )
                )

        # What the agent prints is the agent's to decide and the engine's to bound: its text made
        # safe for a terminal, and its log within LogBudget whatever it prints.
        budget = _AttemptLog(self.bus.publish, candidate.key, attempt.number, program)

        def on_output(stream: str, lines: list[str]) -> None:
            nonlocal quota_reported, lines_after_term
            if stopping is not None:
                lines_after_term += len(lines)
            for decoded in decoder.decode(lines, stream):
                data = visible_value(decoded.data)
                assert isinstance(data, dict)
                event = event_of(decoded.kind, candidate.key, attempt.number, data)
                quota_reported = quota_reported or isinstance(event, Quota)
                reachability.observe(event)
                budget(event)
            if decoder.usage != attempt.usage_seen:
                reachability.answered()
                self._take_usage(attempt, decoder)
            if decoder.stop is not None and running is not None:
                running.cancel()  # the sandbox stops the agent (TERM, then KILL) on the way out

        done = None
        running: anyio.CancelScope | None = None
        unreachable: str | None = None
        start_error: SandboxError | None = None
        not_brought: str | None = None

        async def watch_reachability(group: anyio.CancelScope) -> None:
            nonlocal unreachable
            unreachable = await reachability.unreachable()
            group.cancel()

        try:
            if launch.files:  # (a plain command has none: no trip to a worker thread)
                await anyio.to_thread.run_sync(write_agent_files, place, launch.files)
            async with anyio.create_task_group() as group:
                running = group.cancel_scope
                group.start_soon(watch_reachability, group.cancel_scope)
                try:
                    done = await attempt.sandbox.run(
                        launch.argv,
                        env=launch.env,
                        stdin=launch.stdin,
                        on_output=on_output,
                        timeout=timeout,
                        grace=adapter.term_grace,
                        on_stop=on_stop,
                        writable=launch.state,
                    )
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
            budget.release()
            with anyio.CancelScope(shield=True):
                if launch.files:
                    await anyio.to_thread.run_sync(remove_agent_files, place, launch.files)
                if private:
                    # on every way out, cancelled too: the branch holds what the candidate committed
                    not_brought = await self._bring_in(attempt, directory)
        if private and not_brought is not None:
            record.error = not_brought
            return
        if start_error is not None:
            # the sandbox names a missing program neutrally (validation uses it too)
            message = str(start_error)
            if message.startswith("program "):
                message = f"agent {message}"
            raise SandboxError(adapter.start_failure(message)) from start_error
        if done is None and decoder.stop is not None:
            # the decoder gave up on the agent (a browser sign-in, a quota reset hours away):
            # stopped, and the decoder's outcome says why
            done = Completed(
                exit_code=-signal.SIGTERM, timed_out=False, duration=time.time() - record.started_at
            )
        if done is None:
            decoder.interrupted()
            self._take_usage(attempt, decoder, final=True)
            note_stop()
            record.error = unreachable
            self.bus.publish(
                AgentExited(
                    key=candidate.key,
                    attempt=attempt.number,
                    exit_code=None,
                    reason=unreachable,
                    duration=round(time.time() - record.started_at, 3),
                    result=None,
                )
            )
            return
        outcome = decoder.finish(done.exit_code, done.stderr_tail)
        # the agent's last words and its stderr's, shown in the result and on the screen
        outcome = replace(
            outcome,
            reason=visible(outcome.reason) if outcome.reason else outcome.reason,
            result=visible(outcome.result, lines=True) if outcome.result else outcome.result,
        )
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
        self.bus.publish(
            AgentExited(
                key=candidate.key,
                attempt=attempt.number,
                exit_code=done.exit_code,
                reason=reason,
                duration=round(done.duration, 3),
                result=outcome.result,
            )
        )
        if outcome.quota is not None:
            record.quota = outcome.quota.to_json()
            if not quota_reported:
                self.bus.publish(Quota(key=candidate.key, attempt=attempt.number, **record.quota))
        if done.timed_out or not outcome.ok:
            record.error = reason
            return

        leave_out = attempt.setup.leave_out if attempt.setup is not None else []
        if adapter.commits_on_behalf and await anyio.to_thread.run_sync(
            git.has_changes, directory, leave_out
        ):
            message = on_behalf_message(
                candidate.agent, candidate.key, candidate.brief, decoder.commit_message, outcome.result
            )
            commit = await anyio.to_thread.run_sync(git.commit_all, directory, message, leave_out)
            if commit:
                record.committed_on_behalf = True
                self.bus.publish(
                    CommittedOnBehalf(
                        key=candidate.key,
                        attempt=attempt.number,
                        commit=commit,
                        message=message,
                        agent=candidate.agent,
                    )
                )
        # The result is fixed here, as one commit: what is graded, and the only commit that can win.
        # Uncommitted edits stay in the worktree, kept, but are not part of it.
        race_id, repository, baseline = self.id, self.repository, self.baseline

        def fix_result() -> tuple[str, list[git.Commit], git.GitError | None]:
            # one trip to a worker thread: the result read, then pinned
            result_commit, commits = git.head_and_commits(directory, baseline)
            try:
                git.pin_validated(repository, race_id, candidate.key, attempt.number, result_commit)
            except git.GitError as error:
                return result_commit, commits, error
            return result_commit, commits, None

        result_commit, commits, not_pinned = await anyio.to_thread.run_sync(fix_result)
        record.commit = result_commit
        record.commits = [c.to_json() for c in commits]
        attempt.result_fixed = True
        if not_pinned is not None:
            raise not_pinned
        copied = self._copied(attempt, commits)
        if copied is not None:
            record.error = copied
            self.bus.publish(Warned(key=candidate.key, attempt=attempt.number, message=copied))
            return
        # Nothing the agent left running may touch the grading: its sandbox goes first.
        if not await self._close_sandbox(attempt):
            return

        def on_check_output(stream: str, lines: list[str]) -> None:
            # the candidate's code prints here too
            shown = [visible(line) for line in lines]
            budget(Log(key=candidate.key, attempt=attempt.number, stream="validation", lines=shown))

        self.bus.publish(
            ValidationStarted(
                key=candidate.key, attempt=attempt.number, commits=len(commits), commit=record.commit
            )
        )
        checkout.commit = record.commit
        # what the record says if the attempt is cancelled before validation returns
        record.validation = Validation("cancelled", reason="cancelled while validating")
        accepted = False
        try:
            async with checkout:
                assert checkout.sandbox is not None, "an entered checkout has its sandbox"
                check_context = ValidationContext(
                    key=candidate.key,
                    attempt=attempt.number,
                    directory=checkout.directory,
                    branch=attempt.branch,
                    baseline=self.baseline,
                    commits=commits,
                    sandbox=checkout.sandbox,
                )
                record.validation, verdict = await grade(
                    spec.validate,
                    checkout,
                    check_context,
                    baseline=self.baseline,
                    wait_baseline=self._wait_baseline,
                    on_output=on_check_output,
                    score=spec.score,
                )
                record.verdict = verdict.to_json()
                accepted = verdict.accepted
                if accepted and spec.select == "first":
                    # Registered as soon as validation passes, so a tie with an earlier slot whose
                    # result became acceptable at the same moment is seen when the winner is chosen.
                    self._accepted_pending.append(attempt)
                self.bus.publish(
                    ValidationFinished(
                        key=candidate.key,
                        attempt=attempt.number,
                        status=record.validation.status,
                        exit_code=record.validation.exit_code,
                        reason=record.validation.reason,
                        verdict=record.verdict,
                    )
                )
                if accepted and spec.select == "best":
                    assert spec.score is not None
                    try:
                        record.score = await sealed_score(
                            spec.score, checkout, check_context, on_check_output
                        )
                    except (ValueError, SandboxError) as error:
                        record.error = _one_line(error)
                        accepted = False
                    else:
                        self.bus.publish(
                            Scored(key=candidate.key, attempt=attempt.number, score=record.score)
                        )
        finally:
            budget.release()
            if checkout.cleanup_error is not None:
                attempt.cleanup_failed = True
                record.error = f"cleanup failed: {checkout.cleanup_error}"
        attempt.accepted = accepted
        attempt.phase = Phase.VALIDATED
        await self._save()
        if accepted and spec.select == "first":
            await self._claim_victory(attempt)

    def _copied(self, attempt: Attempt, commits: list[git.Commit]) -> str | None:
        """Why the result is not the candidate's own work: it is built on a rival's commits (read
        from the objects every candidate shares, or from a branch an unisolated one can see). Not
        when two programs did the same work in the same second and wrote the same commit, byte for
        byte: the very same commits as a rival's, or (fenced) ones its own repository wrote."""
        own = {commit.oid for commit in commits}
        for other in (*self.previous, *self.attempts.values()):
            if other.candidate.key == attempt.candidate.key:
                continue
            theirs = {commit["oid"] for commit in other.record.commits}
            taken = own & theirs
            if taken and self._private is not None and attempt.directory is not None:
                directory = attempt.directory
                taken = {oid for oid in taken if not git.wrote(directory, oid)}
            if taken and own != theirs:
                oid = next(commit.oid for commit in commits if commit.oid in taken)
                return (
                    f"its result is built on {other.candidate.key}#{other.number}'s commit {oid[:12]}, "
                    "not work of its own: not graded"
                )
        return None

    async def _bring_in(self, attempt: Attempt, directory: Path) -> str | None:
        """The candidate's result commit onto its branch, from its own repository; why not (one
        line, also a warning) when what it left cannot be taken."""
        assert self.repository is not None, "set when the race starts"
        try:
            await anyio.to_thread.run_sync(git.import_result, self.repository, directory, attempt.branch)
        except git.GitError as error:
            reason = _one_line(error)
            self.bus.publish(Warned(key=attempt.candidate.key, attempt=attempt.number, message=reason))
            return reason
        return None

    async def _wait_baseline(self) -> BaselineOutcome | None:
        if self._baseline_done is not None:
            await self._baseline_done.wait()
        return self.baseline_outcome

    def _registrar(self, attempt: Attempt) -> Callable[[str], Coroutine[Any, Any, None]]:
        async def register(resource_id: str) -> None:
            attempt.record.resources.append(resource_id)
            await self._save()

        return register


def on_behalf_message(agent: str, key: str, brief: str, own: str | None, result: str | None) -> str:
    """The message of a commit made for an agent: its own message when it tried to commit, else
    what it was asked; the body says who committed and carries the agent's final words."""
    first = next((line.strip() for line in brief.splitlines() if line.strip()), "")
    subject = own.strip() if own and own.strip() else f"{agent} ({key}): {first}"
    body = [f"Committed by outpost-tui on behalf of {agent} ({key}): its sandbox could not commit."]
    if result and result.strip() and result.strip() != subject:
        body += ["", result.strip()]
    return subject + "\n\n" + "\n".join(body)


class _AttemptLog:
    """The attempt's sink for log text: through its LogBudget to the bus, warning once when the
    budget is spent (so a panel whose log stops says why), its tail handed on at `release`."""

    def __init__(self, publish: Callable[[Any], None], key: str, attempt: int, program: str) -> None:
        self.publish, self.key, self.attempt, self.program = publish, key, attempt, program
        self.budget = LogBudget()
        self.warned = False

    def __call__(self, event: Any) -> None:
        shown = self.budget.admit(event)
        if shown is not None:
            self.publish(shown)
            return
        if self.budget.over and not self.warned:
            self.warned = True
            self.publish(
                Warned(
                    key=self.key,
                    attempt=self.attempt,
                    message=(
                        f"{self.program} printed more than {LOG_LIMIT >> 20} MiB of log: the rest is "
                        f"cut from the middle, its last {LOG_TAIL >> 20} MiB kept"
                    ),
                )
            )

    def release(self) -> None:
        for event in self.budget.release(self.key, self.attempt):
            self.publish(event)
