"""The headless progress printer: one line per state change on stderr, usage every few seconds."""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Mapping
from typing import IO, Any

from .engine.core.events import (
    Admitted,
    AgentExited,
    AgentStarted,
    BaselineValidated,
    BudgetExhausted,
    CommittedOnBehalf,
    Event,
    Operator,
    Quota,
    RaceFinished,
    RaceStarted,
    Retry,
    Scored,
    Settled,
    SetupFinished,
    Tampering,
    Tool,
    ValidationFinished,
    ValidationStarted,
    Warned,
)
from .engine.core.model import RaceModel
from .engine.core.text import visible
from .engine.core.usage import cost_text
from .engine.verdict.record import describe_tests


def _tokens(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


def usage_line(model: RaceModel) -> str:
    u = model.usage
    parts = [
        f"usage: {_tokens(u.input)} in, {_tokens(u.cached)} cached, "
        f"{_tokens(u.cache_write)} cache-write, {_tokens(u.output)} out, {u.cost_text()}"
    ]
    running = [c for c in model.candidates.values() if c.state in ("starting", "running", "validating")]
    if running:
        parts.append(" · ".join(f"{c.key} {_tokens(c.usage.tokens)}" for c in running))
    return " | ".join(parts)


class ProgressPrinter:
    def __init__(self, model: RaceModel, stream: IO[str] | None = None, verbose: bool = False) -> None:
        self.model = model
        self.stream = stream or sys.stderr
        self.verbose = verbose
        self._usage_said: str | None = None

    def _say(self, text: str, at: float | None = None) -> None:
        stamp = time.strftime("%H:%M:%S", time.localtime(at or time.time()))
        # every line may carry a candidate's words (a reason, a message, a file name): shown as one
        # line of plain text, never a command to the terminal
        self.stream.write(f"[{stamp}] {visible(text)}\n")
        self.stream.flush()

    def __call__(self, event: Event) -> None:
        who = f"{event.key}#{event.attempt}" if event.key else "race"

        def say(text: str) -> None:
            self._say(text, event.at)

        match event:
            case RaceStarted():
                say(
                    f"race {event.id} ({event.mode}, select {event.select}) from "
                    f"{str(event.baseline)[:12]}: {', '.join(event.candidates)}"
                )
                if event.host_dirty:
                    say(
                        "note: your checkout has uncommitted changes; candidates start from the "
                        "baseline commit without them"
                    )
            case Admitted():
                say(f"{who} admitted ({event.agent}) on {event.branch}")
            case SetupFinished():
                took = f" in {event.duration:.1f}s" if event.duration is not None else ""
                cache = f", cache {event.cache}" if event.cache != "off" else ""
                copied = f", copied {len(event.copied)} file(s)" if event.copied else ""
                say(
                    f"{who} setup {event.status}{took}{cache}{copied}"
                    + (f": {event.reason}" if event.reason else "")
                )
            case AgentStarted():
                say(
                    f"{who} agent running: {event.program}"
                    + (f" (timeout {event.timeout:g}s)" if event.timeout else "")
                )
            case AgentExited():
                reason = f": {event.reason}" if event.reason else ""
                how = (
                    "agent stopped"
                    if event.exit_code is None
                    else f"agent exited with code {event.exit_code}"
                )
                say(f"{who} {how} after {event.duration:.1f}s{reason}")
            case CommittedOnBehalf():
                subject = str(event.message or "").split("\n", 1)[0]
                say(
                    f"{who} committed on its behalf ({event.agent or 'the agent'} could not "
                    f"commit in its sandbox): {str(event.commit)[:12]} {subject}"
                )
            case Quota():
                say(f"{who} quota: {event.message} (resets {event.reset_at or 'unknown'})")
            case Retry():
                say(f"{who} {event.cause or 'API error'}, the agent is retrying: {event.message or ''}")
            case ValidationStarted():
                say(f"{who} validating ({event.commits} commit(s))")
            case ValidationFinished():
                counts = describe_tests((event.verdict or {}).get("tests"))
                say(
                    f"{who} {event.reason or 'validation ' + event.status}"
                    + (f" [{counts}]" if counts else "")
                )
            case BaselineValidated():
                say(baseline_line(event.payload()))
            case Scored():
                say(f"{who} scored {event.score:g}")
            case Settled():
                detail = event.reason or (f"commit {str(event.commit)[:12]}" if event.commit else "")
                detail = detail.removeprefix(f"{event.status}: ")
                kept = f" (worktree kept: {event.retained_directory})" if event.retained_directory else ""
                say(f"{who} {event.status}{': ' + detail if detail else ''}{kept}")
            case BudgetExhausted():
                say(f"race {event.reason}")
            case Warned():
                say(f"{who} warning: {event.message}")
            case Tampering():
                for change in event.changes or []:
                    say(f"{who} CHANGED YOUR REPOSITORY: {change['description']}")
            case Operator():
                say(f"{who} operator: {event.action}")
            case RaceFinished():
                if event.saved:
                    result = event.result
                    say(
                        f"run {result.get('run_id')} had already finished: its saved result "
                        f"(race {result.get('id')}), nothing ran"
                    )
                for line in finish_lines(event.result):
                    say(line)
            case Tool() if self.verbose:
                say(f"{who} ▸ {event.name} {str(event.input)[:120]}")

    def tick(self) -> None:
        """Called every few seconds: print usage if its figures changed (log lines also bump the
        model's version, and a repeated identical line tells the reader nothing)."""
        if not self.model.usage.tokens:
            return
        line = usage_line(self.model)
        if line != self._usage_said:
            self._usage_said = line
            self._say(line)


REASON_WIDTH = 100


def finish_lines(result: dict) -> list[str]:
    """The end of a headless race: status, time and spend; then how to merge the winner, or why
    each candidate did not win."""
    lines = [finish_line(result)]
    for change in result.get("tampering") or []:
        who = f"{change['candidate']}#{change['attempt']}" if change.get("candidate") else "during the race"
        lines.append(f"your repository was changed ({who}): {change['description']}")
    winner = result.get("winner")
    for candidate in result.get("candidates", []):
        counts = describe_tests((candidate.get("verdict") or {}).get("tests"))
        reason = "" if candidate["status"] == "winner" else _short(candidate_reason(candidate))
        lines.append(
            f"  {candidate['key']}#{candidate['attempt']} {candidate['status']}"
            + (f" [{counts}]" if counts else "")
            + (f": {reason}" if reason else "")
        )
    if winner and winner.get("branch"):
        record: dict[str, Any] = next(
            (c for c in result.get("candidates", []) if c["key"] == winner["key"]), {}
        )
        for flag in record.get("review") or []:
            lines.append(f"review before merging: {flag}")
        repository = result.get("repository") or "."
        # the commit that was graded, not the branch, which may have moved since
        lines.append(
            f"merge it with: git -C {shlex.quote(str(repository))} merge "
            f"{shlex.quote(winner.get('commit') or winner['branch'])}"
        )
    return lines


def baseline_line(outcome: Mapping[str, Any]) -> str:
    """What the baseline's own validation found, which strict verdicts are measured against."""
    counts = describe_tests(outcome.get("tests"))
    text = f"baseline validated ({outcome.get('status')}"
    text += f", exit code {outcome['exit_code']})" if outcome.get("exit_code") is not None else ")"
    if counts:
        text += f": {counts}"
    elif outcome.get("reason"):
        text += f": {outcome['reason']}"
    else:
        text += ": no test results (strict verdicts fall back to exit codes)"
    failing = outcome.get("failing") or []
    if failing:
        text += f" · failing before any change: {len(failing)}"
    if outcome.get("flaky"):
        text += f" · flaky: {', '.join(outcome['flaky'][:5])}"
    return text


def finish_line(result: dict) -> str:
    winner = result.get("winner")
    text = f"race {result['status']}"
    if winner:
        text += f": {winner['key']} on {winner['branch']} at {str(winner['commit'])[:12]}"
    if result.get("duration") is not None:
        text += f" in {result['duration']:.1f}s"
    text += f" · {spend(result.get('usage') or {})}"
    integration = result.get("integration")
    if integration:
        text += f" · integration {integration['status']}"
        if integration.get("reason"):
            text += f" ({integration['reason']})"
    if result.get("error"):
        text += f" · {result['error']}"
    return text


def spend(usage: dict) -> str:
    """Total tokens and cost, saying when the cost is estimated or the figures are a lower bound."""
    tokens = sum(int(usage.get(name) or 0) for name in ("input", "cached", "cache_write", "output"))
    cost = float(usage.get("cost_usd") or 0)
    if not tokens and not cost:
        return "no usage reported" + ("" if usage.get("complete", True) else " (incomplete)")
    text = f"{_tokens(tokens)} tokens, {cost_text(cost, bool(usage.get('cost_unknown')))}"
    marks = []
    if usage.get("estimated"):
        marks.append("estimated")
    if usage.get("complete") is False:
        marks.append("incomplete: at least this much")
    return text + (f" ({', '.join(marks)})" if marks else "")


def candidate_reason(candidate: dict) -> str:
    validation = candidate.get("validation") or {}
    quota = candidate.get("quota") or {}
    reason = candidate.get("error") or validation.get("reason") or quota.get("message") or ""
    # records often repeat their status as a prefix ("rejected: tests failed")
    return str(reason).removeprefix(f"{candidate.get('status')}: ")


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= REASON_WIDTH else text[: REASON_WIDTH - 1] + "…"
