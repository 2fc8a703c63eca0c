"""The sandbox contract shared by every provider.

A provider acquires one sandbox per attempt around the attempt's host worktree. Commands run in it
with output streamed to the engine in batches of lines, a timeout, and cancellation through anyio:
when the calling task is cancelled, `run` stops the command (TERM to its process group, KILL after a
short grace) before it re-raises, so no process outlives the attempt. While it stops the command it
keeps reading its output to the end: what an agent prints during the grace (a usage report of a
call still in flight) still reaches the engine.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import exitcodes
from ..errors import OutpostError

# Called with ("stdout" | "stderr", [line, ...]) as output arrives, lines without their newline.
LineSink = Callable[[str, list[str]], None]


@dataclass
class Stop:
    """How a command was stopped (its timeout, or the caller's cancellation): reported once when
    TERM is sent (`ended_by` None) and again once its processes are confirmed gone."""

    why: str  # "timeout" | "cancelled"
    grace: float  # seconds allowed between TERM and KILL
    ended_by: str | None = None  # "TERM", "KILL", or "exited" (it ended before the TERM landed)
    seconds: float | None = None  # from TERM until every process was confirmed gone

    @property
    def ignored_term(self) -> bool:
        return self.ended_by == "KILL"

    def to_json(self) -> dict[str, Any]:
        return {
            "why": self.why,
            "grace": self.grace,
            "ended_by": self.ended_by,
            "seconds": None if self.seconds is None else round(self.seconds, 3),
        }


StopSink = Callable[[Stop], None]


class SandboxError(OutpostError):
    """A sandbox could not be created or used; the message is one line for the operator."""

    exit_code = exitcodes.MISSING_REQUIREMENT  # no engine, no image, no cgroup: the race cannot run


class EngineGone(SandboxError):
    """The engine the sandbox runs on went away mid-race (stopped, restarted by an upgrade): the
    attempts on it are settled with this reason; what they left there is removed once it is back."""


@dataclass(frozen=True)
class Completed:
    exit_code: int  # negative: killed by that signal
    stdout_tail: str = ""
    stderr_tail: str = ""
    timed_out: bool = False
    duration: float = 0.0


@dataclass
class SandboxContext:
    repository: Path  # the host checkout
    directory: Path  # the attempt's host worktree
    git_common_dir: Path  # the repository's .git, which a worktree's .git file points into
    race_id: str
    key: str
    attempt: int
    env: Mapping[str, str] = field(default_factory=dict)
    # Durable races: called with a resource id *before* the resource exists, so that a crash
    # between allocation and the next checkpoint still leaves a record to recover from.
    register_resource: Callable[[str], Awaitable[None]] | None = None
    # What the sandbox is for besides the attempt's agent ("grading": its grading checkout's),
    # so that both can exist at once (a grading container is started while the agent runs).
    role: str = ""
    # The attempt's grading checkout follows this sandbox: a provider may pass what this one made
    # (and emptied) on to that one's; its `drain` frees what nobody took.
    grading_follows: bool = False


class Sandbox(ABC):
    directory: Path

    @abstractmethod
    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        on_output: LineSink | None = None,
        timeout: float | None = None,
        tail_bytes: int = 64 * 1024,
        grace: float | None = None,
        on_stop: StopSink | None = None,
        writable: Sequence[str] = (),
    ) -> Completed:
        """Run argv in the worktree; a non-zero exit is returned, not raised.

        `grace`: seconds between TERM and KILL when the command is stopped (None: the provider's
        own); `on_stop` hears how it was stopped; `writable`: paths outside the worktree the
        command's program keeps its own state in (an agent's sessions), which an isolating
        sandbox lets it write. Raises SandboxError when the program cannot be started (not
        found, not executable).
        """

    @abstractmethod
    async def close(self) -> None:
        """Stop anything still running (once it returns, nothing of the sandbox runs) and free the
        sandbox; the worktree is left alone. Freeing may finish later: see `SandboxProvider.drain`."""


class SandboxProvider(ABC):
    name: str

    def warm_up(self) -> None:
        """Begin, in the background, what the first `acquire` would wait for (a container engine's
        connection); a race calls it as it starts. Its failures surface where they would have."""
        return None  # nothing to begin: a local process starts at once

    @abstractmethod
    async def acquire(self, context: SandboxContext) -> Sandbox: ...

    def isolation(self) -> tuple[str, str]:
        """How candidates are kept apart from the user's repository and from each other, for the
        result ("bubblewrap", "none", "container"), and the warning a race shows when they are not."""
        return "container", ""

    @property
    def isolates_git(self) -> bool:
        """Whether a candidate's git is a repository of its own (engine/git/private.py), which
        the engine makes before the agent starts and brings the result in from after."""
        return False

    @abstractmethod
    async def recover(self, resource_id: str) -> bool:
        """Stop and remove a resource left by a crashed coordinator; True if one was found.

        Must be idempotent and must never touch repository data.
        """

    def owns(self, resource_id: str) -> bool:
        """Whether this provider can recover that resource id."""
        return False

    async def drain(self, timeout: float | None = None) -> dict[str, str]:
        """Wait until every sandbox closed so far is freed (a container is removed after its
        close returns); returns, by resource id, what was not freed (within `timeout`) and why."""
        return {}
