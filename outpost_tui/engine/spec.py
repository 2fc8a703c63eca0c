"""The race specification: what the race file (or the Python API) asks for, immutable.

`load_race()` in `racefile.py` builds a RaceSpec from TOML with precise errors; the Python API builds
one directly. Everything the engine reads about a race comes from here.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Awaitable, Callable, Literal, Mapping

KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
MAX_CANDIDATES = 64

Mode = Literal["race", "fallback"]
Select = Literal["first", "best"]
Provider = Literal["local", "docker", "podman"]
Gate = Literal["strict", "exit-code"]
ProtectMode = Literal["restore", "reject", "flag"]

# A validation or score callable receives a ValidationContext (see validation.py) and returns a bool
# (validate) or a number (score), directly or as an awaitable.
Check = Callable[[Any], "bool | float | Awaitable[bool | float]"]


def valid_key(key: str) -> bool:
    return bool(KEY_PATTERN.fullmatch(key))


def frozen_map(data: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(data or {}))


@dataclass(frozen=True)
class TokenLimits:
    input: int | None = None
    cached: int | None = None
    cache_write: int | None = None
    output: int | None = None

    def items(self) -> list[tuple[str, int]]:
        return [(name, limit) for name, limit in
                (("input", self.input), ("cached", self.cached),
                 ("cache_write", self.cache_write), ("output", self.output)) if limit is not None]


@dataclass(frozen=True)
class BudgetSpec:
    attempts: int | None = None
    tokens: TokenLimits = field(default_factory=TokenLimits)
    cost_usd: float | None = None
    # Seconds an agent may run before it is stopped and its attempt fails.
    candidate_timeout: float | None = None
    # Seconds an agent may keep failing to reach its model API (network retries, nothing answered)
    # before it is stopped and fails with "cannot reach the model API"; None waits for ever.
    unreachable_timeout: float | None = 120.0


@dataclass(frozen=True)
class ValidateSpec:
    command: tuple[str, ...] | None = None
    timeout: float | None = 600.0
    require_commits: bool = True
    # Python API only: a callable used instead of (or when there is no) command.
    check: Check | None = None
    # The verdict (engine/verdict/): where the command writes a JUnit XML report (relative to the
    # checkout; pytest and `python -m unittest` commands get one without it), how strictly the
    # results are judged against the baseline's, how often a failing validation is rerun, and which
    # paths a candidate may not change for grading (None: the default test and runner paths).
    junit: str | None = None
    gate: Gate = "strict"
    allow_baseline_failures: bool = False
    repeat: int = 0
    protect: tuple[str, ...] | None = None
    protect_mode: ProtectMode = "restore"


@dataclass(frozen=True)
class ScoreSpec:
    command: tuple[str, ...] | None = None
    timeout: float | None = 600.0
    check: Check | None = None


@dataclass(frozen=True)
class SandboxSpec:
    provider: Provider = "local"
    image: str | None = None
    network: str = "none"
    # Docker API endpoint (unix://, tcp://, ssh://); default: DOCKER_HOST, then the usual sockets.
    endpoint: str | None = None
    memory: str | None = None  # e.g. "2g"
    cpus: float | None = None
    pids: int | None = None


@dataclass(frozen=True)
class SetupSpec:
    """What each attempt's worktree gets before its agent starts ([setup])."""

    command: tuple[str, ...] | None = None  # runs in the worktree, in the attempt's sandbox
    timeout: float | None = 600.0
    # Paths the setup produces (".venv", "node_modules"): built once per cache key, then copied
    # into each worktree before the command runs.
    cache: tuple[str, ...] = ()
    cache_key: tuple[str, ...] = ()  # globs of the baseline's files whose content keys the cache
    copy: tuple[str, ...] = ()  # untracked or ignored files copied from the user's checkout
    ports: int = 0  # free ports per attempt: OUTPOST_PORT, OUTPOST_PORT_1, ...

    @property
    def enabled(self) -> bool:
        return bool(self.command or self.cache or self.copy or self.ports)

    def describe(self) -> str:
        """One line for people: `check` and the configure screen show it."""
        parts = []
        if self.command:
            parts.append(shlex.join(self.command)
                         + (f" (timeout {self.timeout:g}s)" if self.timeout else ""))
        if self.cache:
            parts.append(f"cache {', '.join(self.cache)} keyed on {', '.join(self.cache_key)}")
        if self.copy:
            parts.append(f"copy {', '.join(self.copy)}")
        if self.ports:
            parts.append(f"{self.ports} port(s) each")
        return "; ".join(parts)


@dataclass(frozen=True)
class DurabilitySpec:
    enabled: bool = False
    version: str = "1"
    # The only resume mode: authorises replaying an interrupted race.
    resume: Literal["retry-incomplete"] | None = None


@dataclass(frozen=True)
class Price:
    """USD per million tokens, per dimension."""

    input: float = 0.0
    cached: float = 0.0
    cache_write: float = 0.0
    output: float = 0.0


@dataclass(frozen=True)
class CandidateSpec:
    key: str
    agent: str
    brief: str
    model: str | None = None
    command: tuple[str, ...] | None = None  # agent = "command"
    script: Path | None = None  # agent = "demo": the scripted session it plays
    env: Mapping[str, str] = field(default_factory=frozen_map)
    timeout: float | None = None
    max_turns: int | None = None
    allowed_tools: tuple[str, ...] | None = None
    args: tuple[str, ...] = ()  # extra arguments appended to an agent CLI's command line


@dataclass(frozen=True)
class RaceSpec:
    repository: Path
    candidates: tuple[CandidateSpec, ...]
    name: str = "race"
    base: str = "HEAD"
    mode: Mode = "race"
    select: Select = "first"
    concurrency: int | None = None  # None: every candidate at once (race), 1 (fallback)
    run_id: str | None = None
    budget: BudgetSpec = field(default_factory=BudgetSpec)
    validate: ValidateSpec = field(default_factory=ValidateSpec)
    score: ScoreSpec | None = None
    sandbox: SandboxSpec = field(default_factory=SandboxSpec)
    setup: SetupSpec = field(default_factory=SetupSpec)
    durability: DurabilitySpec = field(default_factory=DurabilitySpec)
    prices: Mapping[str, Price] = field(default_factory=frozen_map)
    # Seconds to wait for a sandbox to close before reporting cleanup "pending".
    cleanup_timeout: float = 30.0
    path: Path | None = None  # the race file, when there is one
    # The race file's shared brief ([race] brief or brief_file). Every candidate's own `brief` is
    # already resolved (its own, else this one); this is kept so the file can be written back.
    brief: str | None = None

    @property
    def effective_concurrency(self) -> int:
        if self.mode == "fallback":
            return 1
        limit = self.concurrency or len(self.candidates)
        return max(1, min(limit, len(self.candidates)))

    def candidate(self, key: str) -> CandidateSpec:
        for candidate in self.candidates:
            if candidate.key == key:
                return candidate
        raise KeyError(key)
