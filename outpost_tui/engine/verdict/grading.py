"""Sealed grading: a result commit graded in a clean checkout of exactly that commit.

The checkout is a detached worktree of its own, in a sandbox of its own, made after the agent's
sandbox is closed: nothing the agent left running, nothing uncommitted or ignored in its worktree,
and nothing validation itself commits can change what is graded or which commit wins. The baseline
is graded the same way, once, at race start.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import anyio
import anyio.abc

from .. import git
from ..core.result import Validation
from ..core.spec import ScoreSpec, ValidateSpec
from ..sandbox import Sandbox, SandboxContext, SandboxError, SandboxProvider
from ..sandbox.base import LineSink
from . import protect
from .gate import BaselineOutcome, decide
from .record import Verdict
from .reports import (
    ERROR,
    FAILED,
    NO_RESULTS,
    PASSED,
    SKIPPED,
    Runs,
    TestResults,
    read_junit,
    read_summary,
    with_report,
)
from .validation import ValidationContext, score, validate

# Gives a fresh grading checkout what the race's [setup] gives every worktree (files copied in,
# the cache, the setup command), in its sandbox; returns why it failed, or None.
Prepare = Callable[[Path, Sandbox], Awaitable["str | None"]]


class Checkout:
    """`async with Checkout(...) as checkout`: a grading checkout of `commit` and its sandbox.

    The sandbox is started while git checks the commit out, or earlier still with `start_sandbox`
    (while the agent runs, before the commit is known: `commit` is set before entering). Either
    way it is a fresh one of its own that nothing has run in before its first command; a
    sandbox started but never entered goes with `discard`."""

    def __init__(
        self,
        repository: Path,
        name: str,
        commit: str | None,
        provider: SandboxProvider,
        context: SandboxContext,
        cleanup_timeout: float,
        prepare: Prepare | None = None,
        private: git.PrivateTemplate | None = None,
    ) -> None:
        """`private`: the race's template of private repositories, when its sandboxes fence
        what runs in them (the checkout's git is then one of its own, made fresh for each run)."""
        self.repository = repository
        self._private = private
        self.commit = commit
        self.directory = git.grading_directory(repository, name)
        self._provider = provider
        self._context = replace(context, directory=self.directory)
        self._cleanup_timeout = cleanup_timeout
        self.sandbox: Sandbox | None = None
        self.cleanup_error: str | None = None
        self._prepare = prepare
        self.setup_failure: str | None = None  # [setup] failed in this checkout: nothing is graded
        self._started: anyio.Event | None = None  # set once start_sandbox is over
        self.seal: Seal | None = None  # what grading restored, for the score run after it
        self._start_error: BaseException | None = None
        self._entered = False

    def start_sandbox(self, group: anyio.abc.TaskGroup) -> None:
        """Make the (empty) checkout directory and start its sandbox in `group`; errors wait for
        entering. Entering or `discard` waits for it, whichever comes first."""
        started = self._started = anyio.Event()  # before the task runs: discard must wait for it

        async def start() -> None:
            try:
                await anyio.to_thread.run_sync(git.make_grading_directory, self.repository, self.directory)
            except BaseException as error:
                self._start_error = error if isinstance(error, Exception) else None
                started.set()
                raise
            await self._acquire(started)

        group.start_soon(start)

    async def __aenter__(self) -> Checkout:
        assert self.commit is not None
        self._entered = True
        try:
            if self._started is None:
                await anyio.to_thread.run_sync(git.make_grading_directory, self.repository, self.directory)
                self._started = anyio.Event()
                added: Exception | None = None
                async with anyio.create_task_group() as both:
                    both.start_soon(self._acquire, self._started)
                    try:
                        await anyio.to_thread.run_sync(self._add)
                    except Exception as error:  # after the sandbox's start, which it waits for
                        added = error
                if added is not None:
                    raise added
                if self._start_error is not None:
                    raise self._start_error
            else:
                await self._started.wait()
                if self.sandbox is None:
                    raise self._start_error or SandboxError("the grading sandbox did not start")
                await anyio.to_thread.run_sync(self._add)
            # inside: a checkout whose setup is cancelled (the race ended meanwhile) or fails is
            # never exited, so its sandbox and directory are removed here or by nobody
            await self._set_up()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._close_and_remove()
            raise
        return self

    async def _acquire(self, started: anyio.Event) -> None:
        try:
            self.sandbox = await self._provider.acquire(self._context)
        except Exception as error:  # raised where the checkout is entered
            self._start_error = error
        finally:
            started.set()

    def _add(self) -> None:
        assert self.commit is not None
        git.add_grading_checkout(self.repository, self.directory, self.commit, made_empty=True)
        self._make_private()

    def _make_private(self) -> None:
        # what a check commits or breaks in its git is its checkout's own, and the next run's
        # starts again from the graded commit
        if self._private is not None:
            git.make_private(self._private, self.directory, fresh=True)

    async def discard(self) -> None:
        """Close and remove what `start_sandbox` made when the checkout is not entered after all."""
        if self._started is None or self._entered:
            return
        self._entered = True
        with anyio.CancelScope(shield=True):
            await self._started.wait()
            await self._close_and_remove()

    async def _set_up(self) -> None:
        if self._prepare is not None and self.sandbox is not None:
            failure = await self._prepare(self.directory, self.sandbox)
            self.setup_failure = f"setup failed in the grading checkout: {failure}" if failure else None

    async def __aexit__(self, *exc: object) -> None:
        await self._close_and_remove()

    async def _close_and_remove(self) -> None:
        with anyio.CancelScope(shield=True):
            if self.sandbox is not None:
                with anyio.move_on_after(self._cleanup_timeout) as deadline:
                    try:
                        await self.sandbox.close()
                    except Exception as error:
                        self.cleanup_error = f"closing the grading sandbox failed: {error}"
                if deadline.cancelled_caught:
                    self.cleanup_error = (
                        f"the grading sandbox did not close within {self._cleanup_timeout:g}s"
                    )
            await self._remove()

    async def _remove(self) -> None:
        try:
            await anyio.to_thread.run_sync(git.remove_grading_checkout, self.repository, self.directory)
        except (git.GitError, OSError) as error:
            self.cleanup_error = self.cleanup_error or f"removing {self.directory} failed: {error}"

    async def reset(self) -> None:
        """Back to a fresh checkout of the commit (set up again), for another run."""
        assert self.commit is not None, "an entered checkout has its commit"
        commit = self.commit

        def reset() -> None:
            git.reset_grading_checkout(self.directory, commit)
            self._make_private()

        await anyio.to_thread.run_sync(reset)
        await self._set_up()


def _report(spec: ValidateSpec, directory: Path) -> tuple[Path | None, tuple[str, ...] | None]:
    """Where this run's JUnit report will be, and the command that writes it."""
    if not spec.command:
        return None, None
    if spec.junit:
        return directory / spec.junit, spec.command
    report = directory / f".outpost-junit-{secrets.token_hex(6)}.xml"
    argv = with_report(spec.command, str(report))
    return (report, argv) if argv else (None, spec.command)


async def _run_once(
    spec: ValidateSpec,
    context: ValidationContext,
    on_output: LineSink,
    report: Path | None,
    argv: Sequence[str] | None,
) -> tuple[Validation, TestResults]:
    if report is not None:
        # a report committed at that path must not stand in for the run's own
        await anyio.to_thread.run_sync(_unlink, report)
    validation = await validate(spec, context, on_output, argv=argv)
    results = None
    if report is not None:
        results = await anyio.to_thread.run_sync(read_junit, report)
    if results is None:
        results = (
            read_summary(validation.output)
            if spec.command and validation.exit_code is not None
            else NO_RESULTS
        )
    return validation, results


def _unlink(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()


def _trees(repository: Path, baseline: str, commit: str) -> tuple[protect.Tree, protect.Tree]:
    def entries(rev: str) -> protect.Tree:
        return {path: protect.Entry(mode, oid) for path, (mode, oid) in git.tree(repository, rev).items()}

    return entries(baseline), entries(commit)


@dataclass
class Seal:
    """What grading puts into a checkout before a run: the protected paths the candidate changed
    (restored from the baseline unless graded as written) and the files the commands name."""

    plan: protect.Plan
    baseline: protect.Tree
    tree: protect.Tree
    read: Callable[[str], bytes]
    restore: bool  # protect_mode "restore": the baseline's versions
    python: bool  # the commit has Python files (pytest has something to run)

    def apply(self, directory: Path) -> None:
        if self.restore:
            protect.restore(self.plan, directory, self.baseline, self.tree, self.read)

    def reapply(self, directory: Path, named: Sequence[str]) -> None:
        """Again, after a run of the candidate's code in the checkout: what it wrote over a
        protected or named file is not what the next command reads."""
        self.apply(directory)
        restored = {change.path for change in self.plan.changes} if self.restore else set()
        protect.put([path for path in named if path not in restored], directory, self.tree, self.read)


def steered(argv: Sequence[str], checkout: Checkout, python: bool) -> tuple[tuple[str, ...], str | None]:
    """The command as it runs (pytest pinned to the checkout), and why it must not run: files above
    the checkout that would steer it (a candidate can put them there without isolation)."""
    run, contained = protect.pinned(argv, checkout.directory)
    found = protect.outside_configuration(
        checkout.directory, checkout.repository, contained=contained, python=python
    )
    if not found:
        return run, None
    return run, (
        f"pytest would read files outside the grading checkout: {protect.names(found)} "
        "(a commit is graded on its own files: remove them, or give the repository a pytest "
        "configuration of its own)"
    )


async def _prepared(
    spec: ValidateSpec, argv: Sequence[str] | None, checkout: Checkout, python: bool
) -> tuple[tuple[str, ...] | None, str | None]:
    """`steered` for the validation command (with its report option), when it has one."""
    if not spec.command:
        return None, None
    return await anyio.to_thread.run_sync(steered, argv or spec.command, checkout, python)


async def grade(
    spec: ValidateSpec,
    checkout: Checkout,
    context: ValidationContext,
    *,
    baseline: str,
    wait_baseline: Callable[[], Awaitable[BaselineOutcome | None]],
    on_output: LineSink,
    score: ScoreSpec | None = None,
) -> tuple[Validation, Verdict]:
    """Grade the checkout's commit: protected paths, shadowing modules, the runs and the gate.

    `score`: the race's [score], run afterwards in this checkout by `sealed_score`; the files its
    command names are protected like the validation command's."""
    repository, commit = checkout.repository, checkout.commit
    assert commit is not None, "an entered checkout has its commit"
    strict = spec.gate == "strict" and spec.command is not None
    verdict = Verdict(commit=commit, gate="strict" if strict else "exit-code")

    def read(oid: str) -> bytes:
        return git.blob(repository, oid)

    def planned() -> tuple[protect.Tree, protect.Tree, protect.Plan]:
        base_tree, tree = _trees(repository, baseline, commit)
        found = protect.plan(base_tree, tree, spec.protect, spec.command, score.command if score else None)
        protect.settle_sections(found, base_tree, tree, read)
        return base_tree, tree, found

    base_tree, tree, plan = await anyio.to_thread.run_sync(planned)
    verdict.shadows = protect.shadows(base_tree, tree, checkout.directory)
    if plan.changes:
        if spec.protect_mode == "reject":
            verdict.rejected = plan.paths
            return _refused(verdict, f"changed protected paths: {protect.names(plan.paths)}")
        if spec.protect_mode == "flag":
            verdict.flagged = plan.paths
        else:
            verdict.restored = plan.paths
    if verdict.shadows and strict:
        return _refused(
            verdict,
            f"new modules shadow the test runner or the standard library: {protect.names(verdict.shadows)}",
        )

    sealed = checkout.seal = Seal(
        plan, base_tree, tree, read, bool(verdict.restored), any(path.endswith(".py") for path in tree)
    )

    async def seal() -> None:
        # after [setup], which runs the candidate's build files: the last word before the tests
        await anyio.to_thread.run_sync(sealed.apply, checkout.directory)

    assert checkout.sandbox is not None
    context = replace(context, directory=checkout.directory, sandbox=checkout.sandbox)
    report, argv = _report(spec, checkout.directory)
    runs = Runs()
    validation = Validation()
    for number in range(1 + spec.repeat):
        if number:
            await checkout.reset()  # what the previous run changed must not grade this one
        if checkout.setup_failure:
            validation = Validation("error", None, "", checkout.setup_failure)
            verdict.accepted, verdict.reason = False, checkout.setup_failure
            break
        await seal()
        run, steering = await _prepared(spec, argv, checkout, sealed.python)
        if steering is None:
            validation, results = await _run_once(spec, context, on_output, report, run)
            # again after: a rival running unisolated may put them there meanwhile
            steering = (await _prepared(spec, argv, checkout, sealed.python))[1]
        if steering is not None:
            return _refused(verdict, steering)
        runs.add(results)
        verdict.runs = number + 1
        verdict.source = results.source
        verdict.tests = results.counts() if results.known else None
        if spec.command is None or (validation.exit_code is None and validation.status != "timeout"):
            # no command ran (no commits, the program could not start, a Python check): as is
            verdict.accepted = validation.status == "passed"
            verdict.reason = validation.reason
            break
        outcome = await wait_baseline() if strict else None
        decision = decide(
            exit_code=validation.exit_code,
            timed_out=validation.status == "timeout",
            results=results,
            baseline=outcome,
            strict=strict,
            allow_baseline_failures=spec.allow_baseline_failures,
        )
        if validation.status == "timeout":
            decision.reason = validation.reason  # it says after how long
        verdict.accepted, verdict.reason = decision.accepted, decision.reason
        verdict.new_failures, verdict.missing = decision.new_failures, decision.missing
        if decision.accepted:
            validation = replace(validation, status="passed", reason=decision.reason)
            break
        validation = replace(
            validation,
            status="timeout" if validation.status == "timeout" else "failed",
            reason=decision.reason,
        )
    verdict.flaky = runs.flaky()
    return validation, verdict


async def sealed_score(
    spec: ScoreSpec, checkout: Checkout, context: ValidationContext, on_output: LineSink
) -> float:
    """The [score] of a graded checkout, on the files grading sealed: the validation run that came
    before executed the candidate's code, which may have rewritten the score's own script."""
    if checkout.seal is not None and spec.command:
        named = protect.command_files(spec.command, checkout.seal.baseline)
        await anyio.to_thread.run_sync(checkout.seal.reapply, checkout.directory, named)
        argv, steering = await anyio.to_thread.run_sync(steered, spec.command, checkout, checkout.seal.python)
        if steering is not None:
            raise ValueError(steering)
        spec = replace(spec, command=argv)
    return await score(spec, context, on_output)


def _refused(verdict: Verdict, reason: str) -> tuple[Validation, Verdict]:
    verdict.accepted, verdict.reason = False, reason
    return Validation("failed", None, "", reason), verdict


async def grade_baseline(
    spec: ValidateSpec, checkout: Checkout, context: ValidationContext, on_output: LineSink
) -> BaselineOutcome:
    """The baseline's own validation (rerun while it fails, up to `repeat` times)."""
    spec = replace(spec, require_commits=False, check=None)
    assert checkout.sandbox is not None
    context = replace(context, directory=checkout.directory, sandbox=checkout.sandbox)
    report, argv = _report(spec, checkout.directory)
    assert checkout.commit is not None, "an entered checkout has its commit"
    tree = await anyio.to_thread.run_sync(git.tree, checkout.repository, checkout.commit)
    python = any(path.endswith(".py") for path in tree)
    runs = Runs()
    merged: dict[str, str] = {}
    last = TestResults("none")
    validation = Validation()
    for number in range(1 + spec.repeat):
        if number:
            await checkout.reset()
        if checkout.setup_failure:
            return BaselineOutcome("error", reason=checkout.setup_failure, runs=number)
        run, steering = await _prepared(spec, argv, checkout, python)
        if steering is not None:
            return BaselineOutcome("error", reason=steering, runs=number)
        validation, results = await _run_once(spec, context, on_output, report, run)
        runs.add(results)
        last = results
        for name, status in (results.cases or {}).items():
            if merged.get(name) in (None, PASSED, SKIPPED) or status in (FAILED, ERROR):
                merged[name] = status
        if validation.status == "passed" or validation.exit_code is None:
            break
    if last.cases is not None:
        last = TestResults.from_cases(merged)
    return BaselineOutcome(
        validation.status,
        validation.exit_code,
        last if last.known else None,
        runs.flaky(),
        len(runs.results),
        validation.reason,
    )
