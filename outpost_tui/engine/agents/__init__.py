"""Agent adapters, by the `agent` name used in race files."""

from __future__ import annotations

from .aider import AiderAgent
from .base import AgentAdapter, AgentEvent, AgentOutcome, Decoder, Launch, LaunchContext, Quota
from .claude import ClaudeAgent
from .codex import CodexAgent
from .command import CommandAgent
from .demo import DemoAgent
from .gemini import GeminiAgent
from .opencode import OpencodeAgent

_ADAPTERS: dict[str, type[AgentAdapter]] = {
    CommandAgent.kind: CommandAgent,
    DemoAgent.kind: DemoAgent,
    ClaudeAgent.kind: ClaudeAgent,
    CodexAgent.kind: CodexAgent,
    GeminiAgent.kind: GeminiAgent,
    AiderAgent.kind: AiderAgent,
    OpencodeAgent.kind: OpencodeAgent,
}


def register(adapter: type[AgentAdapter]) -> None:
    _ADAPTERS[adapter.kind] = adapter


def known_agents() -> list[str]:
    return sorted(_ADAPTERS)


def adapter_for(kind: str) -> AgentAdapter:
    try:
        return _ADAPTERS[kind]()
    except KeyError:
        raise ValueError(f"unknown agent {kind!r} (known: {', '.join(known_agents())})") from None


__all__ = [
    "AgentAdapter",
    "AgentEvent",
    "AgentOutcome",
    "Decoder",
    "Launch",
    "LaunchContext",
    "Quota",
    "adapter_for",
    "known_agents",
    "register",
]
