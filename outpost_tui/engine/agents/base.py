"""The agent contract: how to launch an agent CLI and how to read what it prints.

An adapter is stateless and builds a Launch (argv, environment, stdin) for one attempt. A Decoder,
one per attempt, turns the agent's stdout lines into AgentEvents and keeps the attempt's cumulative
usage; the engine diffs successive totals for budgets, so adapters never have to produce deltas.
"""

from __future__ import annotations

import contextlib
import json
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core.events import EventKind
from ..core.spec import CandidateSpec, Price
from ..core.usage import Usage


@dataclass(frozen=True)
class Launch:
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    # Bytes written to the agent's stdin before it is closed; None closes stdin at once
    # (Codex blocks on an open, empty stdin).
    stdin: bytes | None = None
    # Files the agent reads outside its worktree (absolute path -> text), written before it starts
    # and removed after it ends; they live in the repository's git directory, which containers mount.
    files: Mapping[str, str] = field(default_factory=dict)
    # Where the agent program keeps its own state outside the worktree (sessions, logs): what an
    # isolating sandbox lets it write besides the worktree.
    state: tuple[str, ...] = ()


@dataclass(frozen=True)
class LaunchContext:
    directory: Path  # the worktree the agent runs in
    # the git directory the agent's git writes (some agents need it writable to commit): the
    # repository's .git, or the candidate's own repository when it is isolated
    git_common_dir: Path
    race_file_dir: Path | None = None  # resolves relative paths given in the race file
    # Where the engine wrote the brief for this attempt (outside the worktree, visible inside a
    # container); None when a race file is only being checked.
    brief_file: Path | None = None
    # The engine's fence (bubblewrap, a container) confines the agent: a sandbox of the agent's
    # own would be nested in it, where it cannot start (no capabilities, no fresh /proc), and
    # guards nothing the fence does not.
    fenced: bool = False


def state_paths(
    candidate: CandidateSpec, *places: tuple[str | None, str], files: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """Where an agent keeps its state: its directories, made to exist (a sandbox binds only what
    exists), and `files` under HOME it writes in place. Each place is (the variable that moves
    it, or None; where it is otherwise, under HOME, `$XDG_...` standing for that XDG directory).
    The agent's environment is the process's with the candidate's `env` over it."""
    env = {**os.environ, **candidate.env}
    home = env.get("HOME") or os.path.expanduser("~")
    xdg = {
        "$XDG_CONFIG_HOME": env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"),
        "$XDG_DATA_HOME": env.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share"),
        "$XDG_STATE_HOME": env.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state"),
        "$XDG_CACHE_HOME": env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"),
    }
    paths = []
    for variable, default in places:
        moved = env.get(variable) if variable else None
        if moved and os.path.isabs(moved):
            path = moved
        else:
            first, _, rest = default.partition("/")
            path = os.path.join(xdg[first], rest) if first in xdg else os.path.join(home, default)
        paths.append(os.path.normpath(path))
    for path in paths:
        # not made: not bound, and the agent says what it could not write
        with contextlib.suppress(OSError):
            os.makedirs(path, mode=0o700, exist_ok=True)
    return (*paths, *(os.path.join(home, name) for name in files))


# Briefs up to this size (UTF-8 bytes) are also passed inline (OUTPOST_BRIEF, an argv entry);
# larger ones only by file or stdin: Linux refuses any single argv or environment string over
# 128 KiB ("Argument list too long"), and all of them together over a quarter of the stack limit.
MAX_BRIEF_INLINE = 64 * 1024


def brief_fits_inline(brief: str) -> bool:
    return len(brief.encode()) <= MAX_BRIEF_INLINE


def brief_env(brief: str, context: LaunchContext) -> dict[str, str]:
    """OUTPOST_BRIEF_FILE always (during a race), OUTPOST_BRIEF too when the brief is small."""
    env = {"OUTPOST_BRIEF_FILE": str(context.brief_file)} if context.brief_file is not None else {}
    if brief_fits_inline(brief):
        env["OUTPOST_BRIEF"] = brief
    return env


def as_argument(text: str) -> str:
    """A brief that starts with '-' would be read as an option; a leading space prevents it."""
    return " " + text if text.startswith("-") else text


def brief_argument(brief: str, context: LaunchContext) -> str:
    """The brief as a prompt argument; a large one becomes a pointer to its file (agents that
    take the prompt on argv can read files)."""
    if brief_fits_inline(brief) or context.brief_file is None:
        return as_argument(brief)
    return (
        f"Your task is written in the file {context.brief_file} ({len(brief.encode())} bytes): "
        "read all of it first, then carry it out."
    )


def refused_usage(problem: str) -> AgentEvent:
    """The warning for a usage report that is not counted."""
    return AgentEvent(EventKind.WARNING, {"message": f"refused a usage report: {problem}"})


@dataclass(frozen=True)
class AgentEvent:
    kind: EventKind
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Quota:
    message: str
    reset_at: str | None = None  # ISO-8601, UTC

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "reset_at": self.reset_at}

    def reason(self) -> str:
        """One line for the candidate's error: "quota: <message> (resets <when>)", the word said once
        ("Quota exceeded. ..." reads "quota: exceeded. ...")."""
        message = self.message
        if message[:5].lower() == "quota":
            message = message[5:].lstrip(" :") or "reached"
        return f"quota: {message}" + (f" (resets {self.reset_at})" if self.reset_at else "")


# The agent's final message is kept on the agent-exited event and in the result JSON: enough to
# read what it says it did, without an essay-length message swelling every saved result.
RESULT_KEEP = 4096


def clip_result(text: str | None, limit: int = RESULT_KEEP) -> str | None:
    """The agent's final text cut to `limit` characters; None when it said nothing."""
    if text is None or not text.strip():
        return None
    text = text.strip()
    if len(text) <= limit:
        return text
    keep = limit - 32  # room for the marker, so a clipped text stays within the limit
    return text[:keep] + f"… [{len(text) - keep} more chars]"


@dataclass(frozen=True)
class AgentOutcome:
    ok: bool
    reason: str | None = None  # why it failed, one line
    quota: Quota | None = None
    result: str | None = None  # the agent's final text, when it gives one (clipped to RESULT_KEEP)

    def __post_init__(self) -> None:
        object.__setattr__(self, "result", clip_result(self.result))


class Decoder:
    """Per-attempt reader of an agent's output. Subclasses override decode_line()."""

    def __init__(self, candidate: CandidateSpec, prices: Mapping[str, Price] | None = None) -> None:
        self.candidate = candidate
        self.prices = prices or {}
        self.usage = Usage()
        self.quota: Quota | None = None
        self.result: str | None = None
        self.failure: str | None = None
        # The message of a commit the agent tried to make itself (used when the engine commits
        # on its behalf, so its own words are kept).
        self.commit_message: str | None = None
        # Set when the agent is waiting for something that will not come in time (a browser
        # sign-in, a quota reset hours away): the engine stops it at once and this is the reason.
        self.stop: str | None = None

    def decode_line(self, line: str) -> list[AgentEvent] | None:
        """Events for one stdout line, or None when the line is plain log text."""
        return None

    def decode_stderr(self, line: str) -> list[AgentEvent] | None:
        """Stderr is log text; adapters may also read quota messages from it."""
        return None

    def decode(self, lines: list[str], stream: str = "stdout") -> list[AgentEvent]:
        """Events for a batch of lines; runs of plain lines become one LOG event."""
        events: list[AgentEvent] = []
        plain: list[str] = []
        decode_one = self.decode_line if stream == "stdout" else self.decode_stderr
        for line in lines:
            decoded = decode_one(line)
            if decoded is None:
                plain.append(line)
                continue
            if plain:
                events.append(AgentEvent(EventKind.LOG, {"stream": stream, "lines": plain}))
                plain = []
            events.extend(decoded)
        if plain:
            events.append(AgentEvent(EventKind.LOG, {"stream": stream, "lines": plain}))
        return events

    def interrupted(self) -> None:
        """The agent was stopped before it finished (cancelled, timed out, unreachable API): keep
        every figure seen so far, marked incomplete (at least this much was spent)."""
        self.usage = replace(self.usage, complete=False)

    def finish(self, exit_code: int, stderr_tail: str) -> AgentOutcome:
        """The outcome once the process has exited; may replace self.usage with final figures."""
        if self.quota is not None:
            return AgentOutcome(False, self.quota.reason(), self.quota, self.result)
        if exit_code != 0:
            detail = self.failure or _last_line(stderr_tail)
            reason = f"agent exited with code {exit_code}" + (f": {detail}" if detail else "")
            return AgentOutcome(False, reason, None, self.result)
        return AgentOutcome(True, None, None, self.result)


class AgentAdapter(ABC):
    kind: str
    program: str | None = None  # the executable looked up on PATH (doctor, clear errors)
    install_hint: str | None = None  # how to install `program`, for doctor and failure reasons
    # Commit the agent's uncommitted edits after it exits, recorded as done on its behalf
    # (agents whose own sandbox cannot write a linked worktree's git metadata).
    commits_on_behalf: bool = False
    # Seconds between TERM and KILL when the agent is stopped (None: the sandbox's own grace).
    # Short for agents known to ignore TERM: their grace buys nothing but more model calls.
    term_grace: float | None = None
    # The [[candidates]] options this agent uses besides key, agent, brief, env and timeout
    # (the configure screen offers these; launch refuses the ones it cannot honour).
    options: tuple[str, ...] = ("model", "args")

    @abstractmethod
    def launch(self, candidate: CandidateSpec, brief: str, context: LaunchContext) -> Launch: ...

    def decoder(self, candidate: CandidateSpec, prices: Mapping[str, Price] | None = None) -> Decoder:
        return Decoder(candidate, prices)

    def start_failure(self, message: str) -> str:
        """The reason for a run that could not start: a missing program says how to install it."""
        if self.program and self.install_hint and f"agent program {self.program!r} not found" in message:
            where = " in the image" if " in image " in message else ""
            return f"{message} (install{where}: {self.install_hint})"
        return message

    def api_endpoint(self, env: Mapping[str, str], home: Path) -> str | None:
        """The model API this agent would call with this environment, for `doctor` to see that it
        answers; None when it cannot be told (or the agent has no fixed API)."""
        return None

    def version_argv(self) -> tuple[str, ...] | None:
        """Command printing the program's version, for `doctor`."""
        return (self.program, "--version") if self.program else None


def parse_json_object(line: str) -> dict[str, Any] | None:
    """The line as a JSON object, or None if it is not one (cheap for plain text)."""
    stripped = line.lstrip()
    if not stripped.startswith("{"):
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _last_line(text: str) -> str:
    for line in reversed(text.strip().splitlines()):
        if line.strip():
            return line.strip()[:300]
    return ""
