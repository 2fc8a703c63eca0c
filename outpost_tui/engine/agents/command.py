"""The generic command agent: any program speaking the command-agent protocol
(docs/architecture.md, "Agents").

The brief arrives on stdin (then EOF) and in OUTPOST_BRIEF. Stdout lines that are JSON objects with
a known `kind` are events; usage lines are deltas. Every other line is log text.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..core.events import EventKind
from ..core.spec import CandidateSpec, Price
from ..core.usage import FIGURES, Usage, figure_problem
from .base import (
    AgentAdapter,
    AgentEvent,
    Decoder,
    Launch,
    LaunchContext,
    Quota,
    brief_env,
    parse_json_object,
    refused_usage,
)
from .quota_time import from_epoch, parse_reset


class ProtocolDecoder(Decoder):
    def decode_line(self, line: str) -> list[AgentEvent] | None:
        message = parse_json_object(line)
        if message is None:
            return None
        kind = message.get("kind")
        if kind == "usage":
            figures = {name: message[name] for name in FIGURES if message.get(name) is not None}
            problem = next(
                filter(None, (figure_problem(name, value) for name, value in figures.items())), None
            )
            if problem is None:
                reported: dict[str, Any] = {
                    name: float(value) if name == "cost_usd" else int(value)
                    for name, value in figures.items()
                }
                self.usage, problem = self.usage.plus(Usage(**reported))
            if problem is not None:
                return [refused_usage(problem)]
            return []  # the engine emits USAGE from the changed total
        if kind == "text":
            text = str(message.get("text", ""))
            self.result = text
            return [AgentEvent(EventKind.TEXT, {"text": text})]
        if kind == "tool":
            return [
                AgentEvent(
                    EventKind.TOOL,
                    {"name": str(message.get("name", "?")), "input": _short(message.get("input", ""))},
                )
            ]
        if kind == "quota":
            text = str(message.get("message") or "quota reached")
            reset_at, unreadable = _reset_time(message.get("reset_at"))
            if unreadable is not None:
                text += f" (reset time not understood: {unreadable})"
            self.quota = Quota(text, reset_at)
            return [AgentEvent(EventKind.QUOTA, self.quota.to_json())]
        return None


def _reset_time(value: object) -> tuple[str | None, str | None]:
    """A quota's reset time as ISO-8601 UTC, and the raw value when it cannot be read as one.

    Whatever reads a quota relies on reset_at being absolute UTC, so a value that does not parse
    is dropped rather than passed on; its text is kept for the operator."""
    if value is None or value == "":
        return None, None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        parsed = from_epoch(value)
    elif isinstance(value, str):
        parsed = parse_reset(value)
    else:
        parsed = None
    return (parsed, None) if parsed is not None else (None, _short(value, 200))


def _short(value: object, limit: int = 2000) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[:limit] + "…"


class CommandAgent(AgentAdapter):
    kind = "command"
    options = ("command",)

    def launch(self, candidate: CandidateSpec, brief: str, context: LaunchContext) -> Launch:
        if not candidate.command:
            raise ValueError(f"candidate {candidate.key!r}: agent 'command' needs a command")
        return Launch(argv=tuple(candidate.command), env=brief_env(brief, context), stdin=brief.encode())

    def decoder(self, candidate: CandidateSpec, prices: Mapping[str, Price] | None = None) -> Decoder:
        return ProtocolDecoder(candidate, prices)
