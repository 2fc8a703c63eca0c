"""The headless progress printer: one line per state change on stderr, usage every few seconds."""

from __future__ import annotations

import shlex
import sys
import time
from typing import IO

from .engine.core.events import Event, EventKind
from .engine.core.model import RaceModel
from .engine.core.usage import cost_text
from .engine.verdict.record import describe_tests


def _tokens(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


def usage_line(model: RaceModel) -> str:
    u = model.usage
    parts = [f"usage: {_tokens(u.input)} in, {_tokens(u.cached)} cached, "
             f"{_tokens(u.cache_write)} cache-write, {_tokens(u.output)} out, {u.cost_text()}"]
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
        self.stream.write(f"[{stamp}] {text}\n")
        self.stream.flush()

    def __call__(self, event: Event) -> None:
        who = f"{event.key}#{event.attempt}" if event.key else "race"
        data = event.data
        kind = event.kind
        if kind is EventKind.RACE_STARTED:
            self._say(f"race {data['id']} ({data['mode']}, select {data['select']}) from "
                      f"{str(data['baseline'])[:12]}: {', '.join(data['candidates'])}", event.at)
            if data.get("host_dirty"):
                self._say("note: your checkout has uncommitted changes; candidates start from the "
                          "baseline commit without them", event.at)
        elif kind is EventKind.ADMITTED:
            self._say(f"{who} admitted ({data['agent']}) on {data['branch']}", event.at)
        elif kind is EventKind.SETUP_FINISHED:
            took = f" in {data['duration']:.1f}s" if data.get("duration") is not None else ""
            cache = f", cache {data['cache']}" if data.get("cache") != "off" else ""
            copied = f", copied {len(data['copied'])} file(s)" if data.get("copied") else ""
            self._say(f"{who} setup {data['status']}{took}{cache}{copied}"
                      + (f": {data['reason']}" if data.get("reason") else ""), event.at)
        elif kind is EventKind.AGENT_STARTED:
            self._say(f"{who} agent running: {data['program']}"
                      + (f" (timeout {data['timeout']:g}s)" if data.get("timeout") else ""), event.at)
        elif kind is EventKind.AGENT_EXITED:
            reason = f": {data['reason']}" if data.get("reason") else ""
            how = ("agent stopped" if data.get("exit_code") is None
                   else f"agent exited with code {data['exit_code']}")
            self._say(f"{who} {how} after {data['duration']:.1f}s{reason}", event.at)
        elif kind is EventKind.COMMITTED_ON_BEHALF:
            subject = str(data.get("message") or "").split("\n", 1)[0]
            self._say(f"{who} committed on its behalf ({data.get('agent') or 'the agent'} could not "
                      f"commit in its sandbox): {str(data.get('commit'))[:12]} {subject}", event.at)
        elif kind is EventKind.QUOTA:
            self._say(f"{who} quota: {data.get('message')} (resets {data.get('reset_at') or 'unknown'})",
                      event.at)
        elif kind is EventKind.RETRY:
            self._say(f"{who} {data.get('cause') or 'API error'}, the agent is retrying: "
                      f"{data.get('message', '')}", event.at)
        elif kind is EventKind.VALIDATION_STARTED:
            self._say(f"{who} validating ({data['commits']} commit(s))", event.at)
        elif kind is EventKind.VALIDATION_FINISHED:
            counts = describe_tests((data.get("verdict") or {}).get("tests"))
            self._say(f"{who} {data.get('reason') or 'validation ' + data['status']}"
                      + (f" [{counts}]" if counts else ""), event.at)
        elif kind is EventKind.BASELINE_VALIDATED:
            self._say(baseline_line(data), event.at)
        elif kind is EventKind.SCORED:
            self._say(f"{who} scored {data['score']:g}", event.at)
        elif kind is EventKind.SETTLED:
            detail = data.get("reason") or (f"commit {str(data['commit'])[:12]}" if data.get("commit") else "")
            detail = detail.removeprefix(f"{data['status']}: ")
            kept = f" (worktree kept: {data['retained_directory']})" if data.get("retained_directory") else ""
            self._say(f"{who} {data['status']}{': ' + detail if detail else ''}{kept}", event.at)
        elif kind is EventKind.BUDGET_EXHAUSTED:
            self._say(f"race {data['reason']}", event.at)
        elif kind is EventKind.WARNING:
            self._say(f"{who} warning: {data['message']}", event.at)
        elif kind is EventKind.TAMPERING:
            for change in data.get("changes", []):
                self._say(f"{who} CHANGED YOUR REPOSITORY: {change['description']}", event.at)
        elif kind is EventKind.OPERATOR:
            self._say(f"{who} operator: {data['action']}", event.at)
        elif kind is EventKind.RACE_FINISHED:
            if data.get("saved"):
                result = data["result"]
                self._say(f"run {result.get('run_id')} had already finished: its saved result "
                          f"(race {result.get('id')}), nothing ran", event.at)
            for line in finish_lines(data["result"]):
                self._say(line, event.at)
        elif self.verbose and kind is EventKind.TOOL:
            self._say(f"{who} ▸ {data.get('name')} {str(data.get('input', ''))[:120]}", event.at)

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
        who = (f"{change['candidate']}#{change['attempt']}" if change.get("candidate")
               else "during the race")
        lines.append(f"your repository was changed ({who}): {change['description']}")
    winner = result.get("winner")
    for candidate in result.get("candidates", []):
        counts = describe_tests((candidate.get("verdict") or {}).get("tests"))
        reason = "" if candidate["status"] == "winner" else _short(candidate_reason(candidate))
        lines.append(f"  {candidate['key']}#{candidate['attempt']} {candidate['status']}"
                     + (f" [{counts}]" if counts else "") + (f": {reason}" if reason else ""))
    if winner and winner.get("branch"):
        record = next((c for c in result.get("candidates", []) if c["key"] == winner["key"]), {})
        for flag in record.get("review") or []:
            lines.append(f"review before merging: {flag}")
        repository = result.get("repository") or "."
        # the commit that was graded, not the branch, which may have moved since
        lines.append(f"merge it with: git -C {shlex.quote(str(repository))} merge "
                     f"{shlex.quote(winner.get('commit') or winner['branch'])}")
    return lines


def baseline_line(outcome: dict) -> str:
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
    return text if len(text) <= REASON_WIDTH else text[:REASON_WIDTH - 1] + "…"
