"""Whether an agent reaches its model API.

Agents retry a failing connection by themselves, some for ever (Codex reconnects about every
minute until it is killed). A retry whose cause is the network starts a clock; anything the model
answered (text, a tool call, a file change, usage) stops it. When the clock reaches the limit, the
attempt is stopped and fails with "cannot reach the model API (...)".
"""

from __future__ import annotations

import time
from typing import Any

import anyio

from ..core.events import Event, FileChange, Retry, Text, Tool, ToolResult, UsageReported

# Retry causes the agents' decoders report (RETRY events carry one as "cause").
NETWORK = "network"
RATE_LIMITED = "rate limited"
OVERLOADED = "overloaded"
SERVER_ERROR = "server error"

# What only a model that answered produces.


def retry_cause(status: Any) -> str:
    """The cause of a retry from the HTTP status the agent reports (None: no answer at all)."""
    if status == 429:
        return RATE_LIMITED
    if status in (503, 529):
        return OVERLOADED
    if isinstance(status, int) and not isinstance(status, bool) and status >= 500:
        return SERVER_ERROR
    if isinstance(status, int) and not isinstance(status, bool) and status > 0:
        return "API error"
    return NETWORK


class Reachability:
    def __init__(self, limit: float | None) -> None:
        self.limit = limit
        self.since: float | None = None  # monotonic time of the first network retry in a row
        self.message: str | None = None  # the agent's last words about it
        self._changed = anyio.Event()

    def observe(self, event: Event) -> None:
        match event:
            case Retry(cause=cause) if cause == NETWORK:
                if self.since is None:
                    self.since = time.monotonic()
                self.message = str(event.message or "") or self.message
            case Text() | Tool() | ToolResult() | FileChange() | UsageReported():
                self._answer()
            case _:
                return
        self._changed.set()

    def answered(self) -> None:
        """The model answered (usage arrived)."""
        self._answer()
        self._changed.set()

    def _answer(self) -> None:
        self.since = None
        self.message = None

    async def unreachable(self) -> str:
        """Returns, once the API has been unreachable for `limit` seconds, why (never without a limit)."""
        while True:
            self._changed = anyio.Event()
            if self.since is None or self.limit is None:
                await self._changed.wait()
                continue
            remaining = self.since + self.limit - time.monotonic()
            if remaining <= 0:
                return f"cannot reach the model API ({self.message or 'no answer'}) for {self.limit:g}s"
            with anyio.move_on_after(remaining):
                await self._changed.wait()
