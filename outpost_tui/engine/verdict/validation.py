"""Validation and scoring: the project's own tests decide, run in the candidate's sandbox."""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.result import Validation
from ..core.spec import ScoreSpec, ValidateSpec
from ..git import Commit
from ..sandbox import Completed, Sandbox, SandboxError
from ..sandbox.base import LineSink

OUTPUT_TAIL = 4000


@dataclass
class ValidationContext:
    """What a Python validation or score callable receives."""

    key: str
    attempt: int
    directory: Path
    branch: str
    baseline: str
    commits: list[Commit]
    sandbox: Sandbox

    async def run(self, argv: Sequence[str], *, timeout: float | None = None) -> Completed:
        """Run a command in the candidate's sandbox (non-zero exits are returned, not raised)."""
        return await self.sandbox.run(argv, timeout=timeout)


async def _call(check: Any, context: ValidationContext) -> Any:
    value = check(context)
    if inspect.isawaitable(value):
        value = await value
    return value


async def validate(
    spec: ValidateSpec, context: ValidationContext, on_output: LineSink, *, argv: Sequence[str] | None = None
) -> Validation:
    """Run the race's validation; exit 0 (or a callable returning True) is acceptable.

    `argv` replaces the command as written (the verdict adds a report option to it)."""
    if spec.require_commits and not context.commits:
        return Validation("failed", None, "", "no commits: the candidate committed nothing")
    if spec.command:
        try:
            done = await context.sandbox.run(
                argv or spec.command, on_output=on_output, timeout=spec.timeout, tail_bytes=OUTPUT_TAIL
            )
        except SandboxError as error:
            return Validation("error", None, "", f"validation could not start: {error}")
        output = _tail(done.stdout_tail, done.stderr_tail)
        if done.timed_out:
            return Validation(
                "timeout", done.exit_code, output, f"validation timed out after {spec.timeout:g}s"
            )
        if done.exit_code != 0:
            return Validation(
                "failed", done.exit_code, output, f"validation failed (exit code {done.exit_code})"
            )
        if spec.check is None:
            return Validation("passed", 0, output)
    if spec.check is not None:
        try:
            accepted = await _call(spec.check, context)
        except Exception as error:  # the user's callable; its failure fails this candidate only
            return Validation("error", None, "", f"validation raised {type(error).__name__}: {error}")
        return Validation(
            "passed" if accepted else "failed", None, "", None if accepted else "validation returned false"
        )
    return Validation("passed", None, "", "no validation configured: the agent's success is accepted")


async def score(spec: ScoreSpec, context: ValidationContext, on_output: LineSink) -> float:
    """The candidate's score; raises ValueError with a one-line reason when it has none."""
    if spec.check is not None:
        try:
            value = await _call(spec.check, context)
        except Exception as error:  # the user's callable; its failure fails this candidate only
            raise ValueError(f"score raised {type(error).__name__}: {error}") from None
    else:
        assert spec.command
        done = await context.sandbox.run(spec.command, on_output=on_output, timeout=spec.timeout)
        if done.timed_out:
            raise ValueError(f"score timed out after {spec.timeout:g}s")
        if done.exit_code != 0:
            raise ValueError(f"score command failed (exit code {done.exit_code})")
        text = done.stdout_tail.strip().splitlines()
        if not text:
            raise ValueError("score command printed nothing")
        value = text[-1].strip()
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"score must be a number, got {str(value)[:60]!r}") from None
    if not math.isfinite(number) or isinstance(value, bool):
        raise ValueError(f"score must be a finite number, got {value!r}")
    return number


def _tail(stdout: str, stderr: str) -> str:
    text = (stdout + ("\n" if stdout and stderr else "") + stderr).strip()
    return text[-OUTPUT_TAIL:]
