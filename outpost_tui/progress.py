"""The headless progress printer: one line per state change on stderr, usage every few seconds."""

from __future__ import annotations

import sys
import time
from typing import IO

from .engine.events import Event, EventKind
from .engine.model import RaceModel


def _tokens(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


def usage_line(model: RaceModel) -> str:
    u = model.usage
    parts = [f"usage: {_tokens(u.input)} in, {_tokens(u.cached)} cached, "
             f"{_tokens(u.cache_write)} cache-write, {_tokens(u.output)} out, ${u.cost_usd:.4f}"]
    running = [c for c in model.candidates.values() if c.state in ("starting", "running", "validating")]
    if running:
        parts.append(" · ".join(f"{c.key} {_tokens(c.usage.tokens)}" for c in running))
    return " | ".join(parts)


class ProgressPrinter:
    def __init__(self, model: RaceModel, stream: IO[str] | None = None, verbose: bool = False) -> None:
        self.model = model
        self.stream = stream or sys.stderr
        self.verbose = verbose
        self._usage_version = -1

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
        elif kind is EventKind.AGENT_STARTED:
            self._say(f"{who} agent running: {data['program']}"
                      + (f" (timeout {data['timeout']:g}s)" if data.get("timeout") else ""), event.at)
        elif kind is EventKind.AGENT_EXITED:
            reason = f": {data['reason']}" if data.get("reason") else ""
            self._say(f"{who} agent exited with code {data['exit_code']} after "
                      f"{data['duration']:.1f}s{reason}", event.at)
        elif kind is EventKind.QUOTA:
            self._say(f"{who} quota: {data.get('message')} (resets {data.get('reset_at') or 'unknown'})",
                      event.at)
        elif kind is EventKind.RETRY:
            self._say(f"{who} rate limited, the agent is retrying: {data.get('message', '')}", event.at)
        elif kind is EventKind.VALIDATION_STARTED:
            self._say(f"{who} validating ({data['commits']} commit(s))", event.at)
        elif kind is EventKind.VALIDATION_FINISHED:
            self._say(f"{who} {data.get('reason') or 'validation ' + data['status']}", event.at)
        elif kind is EventKind.SCORED:
            self._say(f"{who} scored {data['score']:g}", event.at)
        elif kind is EventKind.SETTLED:
            detail = data.get("reason") or (f"commit {str(data['commit'])[:12]}" if data.get("commit") else "")
            detail = detail.removeprefix(f"{data['status']}: ")
            kept = f" (worktree kept: {data['retained_directory']})" if data.get("retained_directory") else ""
            self._say(f"{who} {data['status']}{': ' + detail if detail else ''}{kept}", event.at)
        elif kind is EventKind.BUDGET_EXHAUSTED:
            self._say(f"race {data['reason']}", event.at)
        elif kind is EventKind.OPERATOR:
            self._say(f"{who} operator: {data['action']}", event.at)
        elif kind is EventKind.RACE_FINISHED:
            self._say(finish_line(data["result"]), event.at)
        elif self.verbose and kind is EventKind.TOOL:
            self._say(f"{who} ▸ {data.get('name')} {str(data.get('input', ''))[:120]}", event.at)

    def tick(self) -> None:
        """Called every few seconds: print usage if it changed."""
        if self.model.version != self._usage_version and self.model.usage.tokens:
            self._usage_version = self.model.version
            self._say(usage_line(self.model))


def finish_line(result: dict) -> str:
    winner = result.get("winner")
    text = f"race {result['status']}"
    if winner:
        text += f": {winner['key']} on {winner['branch']} at {str(winner['commit'])[:12]}"
    if result.get("duration") is not None:
        text += f" in {result['duration']:.1f}s"
    integration = result.get("integration")
    if integration:
        text += f" · integration {integration['status']}"
        if integration.get("reason"):
            text += f" ({integration['reason']})"
    if result.get("error"):
        text += f" · {result['error']}"
    return text
