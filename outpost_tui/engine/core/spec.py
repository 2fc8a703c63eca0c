"""The race specification: what the race file (or the Python API) asks for, immutable.

Each field a race file can set is declared here once, with its rules: `setting()` and `table()`
(`declaration`) attach a `Key` (how the value is checked, what docs/race-file.md says about it) to
the dataclass field, its rule beyond the value's kind taken from `rules`. The race-file reader, its
unknown-key errors, the writer and the docs' key tables are all derived from these declarations
(`racefile/schema.py`); the Python API builds a RaceSpec directly.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from . import rules
from .declaration import Key, Refused, setting, table

KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
MAX_CANDIDATES = 64
MAX_CONCURRENCY = 64
MAX_PORTS = 16
MAX_REPEAT = 20

Mode = Literal["race", "fallback"]
Select = Literal["first", "best"]
Provider = Literal["local", "docker", "podman"]
Gate = Literal["strict", "exit-code"]
ProtectMode = Literal["restore", "reject", "flag"]
Isolation = Literal["auto", "bubblewrap", "none"]
Resume = Literal["retry-incomplete"]

# A validation or score callable receives a ValidationContext (see validation.py) and returns a bool
# (validate) or a number (score), directly or as an awaitable.
Check = Callable[[Any], "bool | float | Awaitable[bool | float]"]


# The candidate-key rule, said the same way wherever a key is refused.
KEY_RULE = "use letters, digits, '_' and '-', starting with a letter or digit (at most 64 characters)"


def valid_key(key: object) -> bool:
    """The candidate-key rule: a key names a branch component and a directory, so it is kept to
    characters that are safe in both (see KEY_RULE)."""
    return isinstance(key, str) and bool(KEY_PATTERN.fullmatch(key))


def frozen_map(data: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(data or {}))


def _key_rule(key: str) -> None:
    if not valid_key(key):
        raise Refused(f"invalid key {json.dumps(key)}: {KEY_RULE}")


_BRIEF_FILE = Key(
    kind="file", rules="a regular, non-empty UTF-8 file holding the brief; not together with `brief`"
)


# --- the specification ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenLimits:
    input: int | None = setting(None, minimum=0)
    cached: int | None = setting(None, minimum=0)
    cache_write: int | None = setting(None, minimum=0)
    output: int | None = setting(None, minimum=0)

    def items(self) -> list[tuple[str, int]]:
        return [
            (name, limit)
            for name, limit in (
                ("input", self.input),
                ("cached", self.cached),
                ("cache_write", self.cache_write),
                ("output", self.output),
            )
            if limit is not None
        ]


@dataclass(frozen=True)
class BudgetSpec:
    attempts: int | None = setting(
        None,
        type="integer ≥ 1",
        default_text="unlimited",
        check=rules.attempts_rule,
        rules="attempts started across the race; admissions stop when used up",
    )
    tokens: TokenLimits = setting(
        default_factory=TokenLimits,
        type="inline table",
        default_text="no limits",
        expected="a table like { input = 100000, output = 20000 }",
        rules="keys `input`, `cached`, `cache_write`, `output`, each an integer ≥ 0; reaching a limit "
        "exactly exhausts it and cancels every running candidate",
    )
    cost_usd: float | None = setting(
        None,
        default_text="unlimited",
        rules="the race's total cost; reaching it cancels every running candidate",
    )
    # Seconds an agent may run before it is stopped and its attempt fails.
    candidate_timeout: float | None = setting(
        None,
        positive=True,
        rules="seconds an agent may run before it is stopped and its attempt fails; a candidate's own "
        "`timeout` takes precedence",
    )
    # None waits for ever (the Python API only: a race file cannot say it).
    unreachable_timeout: float | None = setting(
        120.0,
        positive=True,
        rules="seconds an agent may keep failing to reach its model API (network retries, nothing "
        'answered) before it fails with "cannot reach the model API"',
    )


@dataclass(frozen=True)
class ValidateSpec:
    command: tuple[str, ...] | None = setting(
        None,
        kind="argv",
        rules="runs on a clean checkout of the candidate's result commit, in a fresh sandbox of the "
        "race's kind; its exit code and the gate decide. Without a command the agent's success "
        "is accepted",
    )
    timeout: float | None = setting(
        600.0, positive=True, rules="seconds; a validation that runs longer is `timeout`"
    )
    require_commits: bool = setting(
        True, rules="a candidate that committed nothing fails before the command runs"
    )
    # Python API only: a callable used instead of (or when there is no) command.
    check: Check | None = None
    # The verdict (engine/verdict/): how the results are judged against the baseline's.
    junit: str | None = setting(
        None,
        check=rules.junit_rule,
        rules="where the command writes a JUnit XML report, relative to the checkout (not absolute, "
        "no `..`). Not needed for `pytest`, `python -m pytest` and `python -m unittest`: the "
        "engine asks them for one",
    )
    gate: Gate = setting(
        "strict",
        rules="strict: also refused when no test ran, every test was skipped, fewer tests ran than on "
        "the baseline, or a test that passed on the baseline fails or did not run; exit-code: "
        "the exit code alone (the baseline is then not run)",
    )
    allow_baseline_failures: bool = setting(
        False,
        rules="with a report, a non-zero exit is accepted when every failing test already failed on "
        "the baseline and the candidate fixes one or adds a passing test",
    )
    repeat: int = setting(
        0,
        minimum=0,
        maximum=MAX_REPEAT,
        rules="reruns a failing validation up to this many times on a fresh checkout; tests that "
        "passed and failed are reported flaky (on the baseline too)",
    )
    # None: the default test and runner paths.
    protect: tuple[str, ...] | None = setting(
        None,
        type="list of globs",
        check=rules.protect_rule,
        expected='a list of globs, e.g. ["tests/**", "pytest.ini"]',
        default_text="the test files and directories, runner configurations, the test sections of "
        "`setup.cfg`, `pyproject.toml` and `package.json`, and the repository files the "
        "command names",
        rules="paths graded as the baseline has them; relative to the repository, no `..`; replaces "
        "the default list (files the command names stay protected)",
    )
    protect_mode: ProtectMode = setting(
        "restore",
        rules="a change to a protected path: graded with the baseline's version and reported; fails "
        "the candidate, naming the paths; graded as written and flagged",
    )


@dataclass(frozen=True)
class ScoreSpec:
    command: tuple[str, ...] | None = setting(
        None,
        kind="argv",
        default_text="required",
        rules="runs after a candidate passes validation, in the clean checkout its validation ran in; "
        "the last line of its stdout must be a finite number; the highest wins, a tie goes to "
        "the earlier declared candidate",
    )
    timeout: float | None = setting(600.0, positive=True, rules="seconds")
    check: Check | None = None


# The sample image `outpost-tui image build` makes; a container sandbox uses it when [sandbox] names
# none. Here, not in sandbox/images.py: the command line shows it without loading the sandboxes.
DEFAULT_IMAGE = "local/outpost-sample:latest"


@dataclass(frozen=True)
class SandboxSpec:
    provider: Provider = setting("local", rules="a container provider needs `image`")
    image: str | None = setting(None, rules="the container image for every attempt")
    network: str = setting(
        "none",
        rules='a network the engine has (e.g. `"bridge"`); refused at the start if the engine lacks it',
    )
    endpoint: str | None = setting(
        None,
        default_text="`DOCKER_HOST`, the Docker context, then the usual sockets",
        rules="the Docker API endpoint (`unix://`, `tcp://`, `ssh://`)",
    )
    memory: str | None = setting(
        None,
        default_text="no limit",
        check=rules.memory_rule,
        rules='a number with an optional unit `b`, `k`, `m`, `g`, e.g. `"2g"`',
    )
    cpus: float | None = setting(None, positive=True, default_text="no limit")
    pids: int | None = setting(None, minimum=1, default_text="no limit")
    isolation: Isolation = setting(
        "auto",
        rules="the local sandbox: bubblewrap when it works on this machine, else unisolated with a "
        "warning in the result and the log; bubblewrap or the race does not start; unisolated, "
        "warned (see docs/threat-model.md)",
    )
    writable: tuple[str, ...] = setting(
        (),
        type="list of paths",
        expected='a list of absolute paths, e.g. ["/var/cache/ccache"]',
        check=rules.absolute_paths_rule,
        rules="what a bubblewrap-isolated candidate may write besides its worktree, its own git "
        "repository, its private /tmp and its agent's own state directory: shared caches; never "
        "the repository or `.outpost/`",
    )


@dataclass(frozen=True)
class SetupSpec:
    """What each attempt's worktree gets before its agent starts ([setup])."""

    command: tuple[str, ...] | None = setting(None, kind="argv", rules="the setup command")
    timeout: float | None = setting(600.0, positive=True, rules="seconds")
    # Built once per cache key, then copied into each worktree before the command runs.
    cache: tuple[str, ...] = setting(
        (),
        type="list of paths",
        check=rules.setup_paths_rule(glob=False),
        expected='a list of paths or globs, e.g. [".venv"]',
        rules="what the command builds (`.venv`, `node_modules`), kept under `.outpost/cache/` per "
        "cache key and copied into each worktree before the command runs; needs `cache_key` "
        "and `command`; paths, not globs",
    )
    cache_key: tuple[str, ...] = setting(
        (),
        type="list of globs",
        check=rules.setup_paths_rule(glob=True),
        expected='a list of paths or globs, e.g. ["requirements*.txt"]',
        rules="the baseline's files whose content (with the command and sandbox) keys the cache; only "
        "with `cache`",
    )
    copy: tuple[str, ...] = setting(
        (),
        type="list of globs",
        check=rules.setup_paths_rule(glob=True),
        expected='a list of paths or globs, e.g. [".env"]',
        rules="untracked or ignored files copied from the user's checkout (a `.worktreeinclude` at the "
        "repository root adds more, in gitignore syntax)",
    )
    ports: int = setting(
        0, minimum=0, maximum=MAX_PORTS, rules="free ports per attempt: `OUTPOST_PORT`, `OUTPOST_PORT_1`, …"
    )

    @property
    def enabled(self) -> bool:
        return bool(self.command or self.cache or self.copy or self.ports)

    def describe(self) -> str:
        """One line for people: `check` and the configure screen show it."""
        parts = []
        if self.command:
            parts.append(shlex.join(self.command) + (f" (timeout {self.timeout:g}s)" if self.timeout else ""))
        if self.cache:
            parts.append(f"cache {', '.join(self.cache)} keyed on {', '.join(self.cache_key)}")
        if self.copy:
            parts.append(f"copy {', '.join(self.copy)}")
        if self.ports:
            parts.append(f"{self.ports} port(s) each")
        return "; ".join(parts)


@dataclass(frozen=True)
class DurabilitySpec:
    enabled: bool = setting(
        False,
        rules="save a checkpoint at every transition under `<repo>/.outpost/storage/`; needs `[race] run_id`",
    )
    version: str = setting("1", rules="part of the run's identity: change it to start the run afresh")
    # The only resume mode: authorises replaying an interrupted race.
    resume: Resume | None = setting(
        None, rules="authorises replaying an interrupted run (what `run --resume` and `recover --replay` set)"
    )


@dataclass(frozen=True)
class Price:
    """USD per million tokens, per dimension."""

    input: float = setting(0.0)
    cached: float = setting(0.0)
    cache_write: float = setting(0.0)
    output: float = setting(0.0)


@dataclass(frozen=True)
class CandidateSpec:
    key: str = setting(
        check=_key_rule,
        rules="letters, digits, `_`, `-`, starting with a letter or digit, at most 64; unique; used in "
        "branch names and paths",
    )
    agent: str = setting(rules="`aider`, `claude`, `codex`, `command`, `demo`, `gemini`, `opencode`")
    brief: str = setting(
        default_text="`[race]`'s",
        companions=(("brief_file", _BRIEF_FILE),),
        rules="as in `[race]`; not together with `brief_file`",
    )
    model: str | None = setting(None, default_text="the agent's own default", rules="passed to the agent CLI")
    command: tuple[str, ...] | None = setting(
        None,
        kind="argv",
        default_text='required for `agent = "command"`',
        rules="the program to run; refused for any other agent",
    )
    script: Path | None = setting(
        None,
        default_text='required for `agent = "demo"`',
        rules="the scripted session a demo agent plays; a regular file",
    )
    env: Mapping[str, str] = setting(
        default_factory=frozen_map,
        check=rules.env_rule,
        rules="extra environment; names must not contain `=` or NUL; git's own variables "
        "(`GIT_DIR`, `GIT_CONFIG_*`, …) are refused, only the author/committer name and email "
        "are allowed",
    )
    timeout: float | None = setting(
        None,
        positive=True,
        default_text="`[budget] candidate_timeout`",
        rules="this candidate's agent time limit",
    )
    max_turns: int | None = setting(
        None,
        minimum=1,
        rules="Claude Code's turn limit; refused for codex, gemini, aider, opencode (the command and "
        "demo agents ignore it)",
    )
    allowed_tools: tuple[str, ...] | None = setting(
        None,
        rules="Claude Code (`--allowedTools`) and Gemini CLI (a policy file); refused for codex, "
        "aider, opencode",
    )
    # Extra arguments appended to an agent CLI's command line.
    args: tuple[str, ...] = setting((), rules="extra arguments appended to the agent CLI's command line")


@dataclass(frozen=True)
class RaceSpec:
    repository: Path = setting(rules="a directory inside a git work tree; resolved relative to the race file")
    candidates: tuple[CandidateSpec, ...] = table(array=True)
    name: str = setting("race", rules="shown in the app, the result and the history")
    base: str = setting(
        "HEAD",
        check=rules.base_rule,
        rules="the baseline commit (any revision); must resolve to a commit, must not start with `-`",
    )
    mode: Mode = setting(
        "race", rules="fallback runs one candidate at a time, in order, and stops at the first success"
    )
    select: Select = setting(
        "first", rules='`best` needs `[score]` and runs every candidate; refused with `mode = "fallback"`'
    )
    concurrency: int | None = setting(
        None,
        minimum=1,
        maximum=MAX_CONCURRENCY,
        default_text="every candidate at once (fallback: 1)",
        rules='candidates are admitted in declared order; above 1 refused with `mode = "fallback"`',
    )
    run_id: str | None = setting(
        None,
        check=rules.run_id_rule,
        rules="letters, digits, `.`, `_`, `-`, starting with a letter or digit, at most 128; needed "
        "by `[durability]`",
    )
    budget: BudgetSpec = table(default_factory=BudgetSpec)
    validate: ValidateSpec = table(default_factory=ValidateSpec)
    score: ScoreSpec | None = table(None)
    sandbox: SandboxSpec = table(default_factory=SandboxSpec)
    setup: SetupSpec = table(default_factory=SetupSpec)
    durability: DurabilitySpec = table(default_factory=DurabilitySpec)
    prices: Mapping[str, Price] = table(default_factory=frozen_map)
    cleanup_timeout: float = setting(
        30.0,
        positive=True,
        rules="seconds to wait for a sandbox to close before the candidate's cleanup is reported `pending`",
    )
    path: Path | None = None  # the race file, when there is one
    # The race file's shared brief ([race] brief or brief_file). Every candidate's own `brief` is
    # already resolved (its own, else this one); this is kept so the file can be written back.
    brief: str | None = setting(
        None, companions=(("brief_file", _BRIEF_FILE),), rules="the task for every candidate without its own"
    )

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

    def replay_authorised(self) -> RaceSpec:
        """The same race with replaying its interrupted run authorised (`run --resume`, `recover
        --replay`, the app opened with `run RACE.toml --resume`)."""
        return replace(self, durability=replace(self.durability, resume="retry-incomplete"))
