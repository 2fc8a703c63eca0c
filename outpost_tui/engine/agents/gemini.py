"""Gemini CLI (`gemini -p … --output-format stream-json`), as of 0.61.

Launch: `--skip-trust` (and GEMINI_CLI_TRUST_WORKSPACE=true): headless 0.61 trusts no folder and
exits 55 in a fresh worktree. `--approval-mode yolo` approves every tool; with an `allowed_tools`
list the mode is `auto_edit` (edits approved) and the listed tools are allowed by a policy file
(`--policy`, which replaces the deprecated `--allowed-tools`): "run_shell_command(git)" allows
shell commands starting with `git`. Its shell runs git with GIT_CONFIG_GLOBAL=/dev/null, so an
identity kept in ~/.gitconfig is lost: the user's identity (as git reads it in the worktree) is
passed as GIT_AUTHOR_* / GIT_COMMITTER_*. Gemini has no max-turns option (its turn limit is a
settings.json entry; exit code 53 when reached).

Usage: `result.stats` is the session total, read once at the end; `input_tokens` includes cached
tokens (`input` is the uncached part when present) and `output_tokens` leaves out thinking tokens,
which are `total_tokens - input_tokens - output_tokens` and billed as output. The start event names
the model "auto": the concrete models are the keys of `stats.models`, each priced from the table
(no cost is reported; marked estimated). Also accepts the single-object `--output-format json` form.

Retries: 0.61 prints "Attempt N failed: <message>" (with "Retrying after Nms" when the server
suggests a delay) or "Attempt N failed[ with status S]. Retrying with backoff... <error>" on
stderr while it backs off by itself; those are retries, never quotas.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import git
from ..core.events import EventKind
from ..core.spec import CandidateSpec, Price
from ..core.usage import Usage
from .agentcli import CliDecoder, as_dict, count, is_login_failure, log, plain, short
from .base import (
    AgentAdapter,
    AgentEvent,
    AgentOutcome,
    Decoder,
    Launch,
    LaunchContext,
    brief_argument,
    state_paths,
)
from .prices import with_estimated_cost
from .reachability import NETWORK, RATE_LIMITED, retry_cause

_QUOTA_TEXT = re.compile(
    r"\b429\b|RESOURCE_EXHAUSTED|exceeded your current quota|Quota exceeded for quota metric"
    r"|exhausted your capacity|exhausted your (?:\w+ )?quota|TerminalQuotaError",
    re.IGNORECASE,
)
# Stderr carries stack dumps and request logs with a bare `"code": 429` in runs that failed for
# other reasons: there only the API status name or a quota phrase counts.
_STDERR_QUOTA_TEXT = re.compile(
    r"RESOURCE_EXHAUSTED|exceeded your current quota|Quota exceeded for quota metric"
    r"|exhausted your capacity|exhausted your (?:\w+ )?quota|TerminalQuotaError",
    re.IGNORECASE,
)
# Printed on stderr while the CLI backs off by itself: "Attempt 2 failed with status 503. Retrying
# with backoff..." (before 0.61 and for HTTP errors), "Attempt 1 failed: <message>" and "Attempt 3
# failed. Retrying with backoff... Error: <network error>" (0.61).
_RETRY = re.compile(r"Attempt (\d+) failed(?: with status (\d+))?(?:\.\s*Retrying|:)", re.IGNORECASE)
_RATE_LIMITED = re.compile(r"\b429\b|exhausted|quota|rate limit", re.IGNORECASE)
_NETWORK = re.compile(
    r"fetch failed|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENOTFOUND|EAI_AGAIN|socket hang up"
    r"|network",
    re.IGNORECASE,
)
_RETRY_DELAY = re.compile(r"Retrying after (\d+)\s*ms", re.IGNORECASE)
# The stack dump that follows a retry or an error report: never a quota or a reason of its own.
_STACK = re.compile(r"^\s+at \S|^\s*[}\]]|^\s+\w+: ")
# 0.61's own message when the key is set but the auth method is not one it can use, and the like:
# kept as the reason instead of the generic login hint.
_AUTH_EXIT = 41
_UNTRUSTED = re.compile(r"not running in a trusted directory", re.IGNORECASE)
_TOOL_WITH_PREFIX = re.compile(r"^(\w+)\((.*)\)$")
_REPORT = re.compile(
    r"(?:Error when talking to Gemini API\s*)?Full report available at:\s*\S+\s*", re.IGNORECASE
)
# Lines every run prints on stderr, never a reason.
_NOTICE = re.compile(
    r"^(?:YOLO mode is enabled|Warning: 256-color|Ripgrep is not available"
    r"|Approval mode overridden|Loaded cached credentials)",
    re.IGNORECASE,
)
_FILE_TOOLS = {"write_file": "write", "replace": "update", "edit": "update"}
# geminicli.com/docs/cli/headless: exit codes of fatal errors
_EXIT_REASONS = {
    42: "input error",
    44: "sandbox error",
    52: "configuration error",
    53: "max turns reached (the session turn limit in settings.json)",
    54: "tool execution error",
    55: "the worktree is not trusted",
}


class GeminiDecoder(CliDecoder):
    program = "gemini"
    login_hint = "run `gemini` once to sign in, or set GEMINI_API_KEY"
    default_model = "gemini-2.5-pro"
    quota_pattern = _QUOTA_TEXT
    stderr_quota_pattern = _STDERR_QUOTA_TEXT

    def __init__(self, candidate: CandidateSpec, prices: Mapping[str, Price] | None = None) -> None:
        super().__init__(candidate, prices)
        self._tools: dict[str, tuple[str, str | None]] = {}
        self._pending_text: list[str] = []
        self._result_seen = False
        self._in_delta = False

    def decode_line(self, line: str) -> list[AgentEvent] | None:
        self._in_delta = False
        events = super().decode_line(line)
        if self._in_delta or not self._pending_text:
            return events
        # Streamed text arrives in deltas: it becomes one TEXT event once something else follows.
        text = "".join(self._pending_text)
        self._pending_text = []
        self.result = text
        return [AgentEvent(EventKind.TEXT, {"text": text}), *(events if events is not None else [log(line)])]

    def decode_message(self, message: dict[str, Any]) -> list[AgentEvent] | None:
        kind = message.get("type")
        if kind is None and ("response" in message or "stats" in message):
            return self._single_object(message)
        if kind == "init":
            named = message.get("model")
            # "auto" (0.61's default) routes each request to a model named only in the stats
            if isinstance(named, str) and named and not named.startswith("auto"):
                self.model = named
            return [log(f"gemini session {message.get('session_id') or '?'}, model {self.model or '?'}")]
        if kind == "message":
            if message.get("role") != "assistant":
                return []  # the prompt echoed back
            text = str(message.get("content") or "")
            if message.get("delta"):
                self._pending_text.append(text)
                self._in_delta = True
                return []
            self.result = text
            return [AgentEvent(EventKind.TEXT, {"text": text})]
        if kind == "tool_use":
            name = str(message.get("tool_name") or "?")
            parameters = as_dict(message.get("parameters"))
            edited = parameters.get("file_path") or parameters.get("absolute_path")
            self._tools[str(message.get("tool_id"))] = (name, edited if name in _FILE_TOOLS else None)
            return [AgentEvent(EventKind.TOOL, {"name": name, "input": short(parameters)})]
        if kind == "tool_result":
            name, edited = self._tools.get(str(message.get("tool_id")), ("?", None))
            failed = message.get("status") == "error"
            error = message.get("error")
            output = message.get("output")
            if failed and isinstance(error, dict):
                output = error.get("message") or output
            events = [
                AgentEvent(EventKind.TOOL_RESULT, {"name": name, "output": short(output), "error": failed})
            ]
            if edited and not failed:
                events.append(
                    AgentEvent(EventKind.FILE_CHANGE, {"path": str(edited), "change": _FILE_TOOLS[name]})
                )
            return events
        if kind == "error":
            text = str(message.get("message") or "error")
            if message.get("severity") == "warning":
                return [log(f"warning: {text}")]
            return self._error(text)
        if kind == "result":
            return self._result(message)
        return None

    def _error(self, text: str) -> list[AgentEvent]:
        if self.is_quota_text(text):
            return [log(f"error: {text}"), *self.note_quota(text)]
        self.errors.append(text)
        return [log(f"error: {text}")]

    def _result(self, message: dict[str, Any]) -> list[AgentEvent]:
        self._result_seen = True
        stats = as_dict(message.get("stats"))
        models = {
            name: as_dict(figures)
            for name, figures in as_dict(stats.get("models")).items()
            if isinstance(name, str) and count(as_dict(figures).get("total_tokens"))
        }
        if models:
            # Each model at its own price: "auto" mixes a router model with the main one.
            self.usage = Usage(estimated=True)
            for name, figures in models.items():
                self.usage = self.usage + with_estimated_cost(_stream_usage(figures), name, self.prices)
            self.model = max(models, key=lambda name: count(models[name].get("total_tokens")))
        else:
            self.usage = with_estimated_cost(_stream_usage(stats), self.model, self.prices)
        if message.get("status") == "error":
            self.failed = True
            error = as_dict(message.get("error"))
            return self._error(str(error.get("message") or error.get("type") or "gemini reported an error"))
        return []

    def _single_object(self, message: dict[str, Any]) -> list[AgentEvent]:
        self._result_seen = True
        models = as_dict(as_dict(message.get("stats")).get("models"))
        tokens = Usage()
        for figures in models.values():
            counts = figures.get("tokens") if isinstance(figures, dict) else None
            if isinstance(counts, dict):
                prompt, cached = count(counts.get("prompt")), count(counts.get("cached"))
                output = count(counts.get("candidates")) + count(counts.get("thoughts"))
                tokens = tokens + Usage(input=max(0, prompt - cached), cached=cached, output=output)
        if len(models) == 1:
            self.model = next(iter(models))
        self.usage = with_estimated_cost(tokens, self.model, self.prices)
        events: list[AgentEvent] = []
        if isinstance(message.get("response"), str):
            self.result = message["response"]
            events.append(AgentEvent(EventKind.TEXT, {"text": self.result}))
        if isinstance(message.get("error"), dict):
            self.failed = True
            events.extend(self._error(str(message["error"].get("message") or "gemini reported an error")))
        return events

    def decode_stderr(self, line: str) -> list[AgentEvent] | None:
        retry = _RETRY.search(line)
        if retry:
            delay = _RETRY_DELAY.search(line)
            return [
                AgentEvent(
                    EventKind.RETRY,
                    {
                        "message": plain(line).strip()[:300],
                        "retry": int(retry.group(1)),
                        "delay_ms": int(delay.group(1)) if delay else 0,
                        "cause": _retry_cause(line, retry.group(2)),
                    },
                )
            ]
        if _STACK.search(line):
            return None
        return super().decode_stderr(line)

    def note_quota(self, message: str, reset_at: str | None = None) -> list[AgentEvent]:
        # "Error when talking to Gemini API Full report available at: /tmp/…-2026-12-01T14-09-48Z.json
        # TerminalQuotaError: …": the report's name is not part of the message.
        return super().note_quota(_REPORT.sub("", plain(message)).strip(), reset_at)

    def is_quota_text(self, text: str) -> bool:
        return super().is_quota_text(text) and not _RETRY.search(text)

    def is_stderr_quota_text(self, line: str) -> bool:
        return super().is_stderr_quota_text(line) and not _RETRY.search(line) and not _STACK.search(line)

    def finalise_usage(self, exit_code: int) -> None:
        if not self._result_seen:
            self.usage = Usage(complete=False, estimated=True)

    def finish(self, exit_code: int, stderr_tail: str) -> AgentOutcome:
        quota_on_stderr = any(self.is_stderr_quota_text(line) for line in stderr_tail.splitlines())
        if self.quota is None and not quota_on_stderr and self.failure is None:
            own = _own_message(stderr_tail)
            if exit_code == _AUTH_EXIT:
                if is_login_failure(stderr_tail) or not own:
                    self.errors.append("not authenticated")
                else:
                    # e.g. "Invalid auth method selected.": the key may well be set
                    self.failure = f"authentication failed: {own}"
            elif exit_code in _EXIT_REASONS:
                reason = _EXIT_REASONS[exit_code]
                self.failure = f"{reason}: {own}" if own else reason
        return super().finish(exit_code, stderr_tail)


def _retry_cause(line: str, status: str | None) -> str:
    if status:
        return retry_cause(int(status))
    if _RATE_LIMITED.search(line):
        return RATE_LIMITED
    return NETWORK if _NETWORK.search(line) else "API error"


def _stream_usage(figures: dict[str, Any]) -> Usage:
    """Usage from stream-json stats (the session's or one model's)."""
    total_input, cached = count(figures.get("input_tokens")), count(figures.get("cached"))
    uncached = count(figures["input"]) if "input" in figures else max(0, total_input - cached)
    output = count(figures.get("output_tokens"))
    if "total_tokens" in figures:
        # thinking tokens are in the total only, and billed as output
        output += max(0, count(figures.get("total_tokens")) - total_input - output)
    return Usage(input=uncached, cached=cached, output=output)


def _own_message(stderr_tail: str) -> str:
    """The program's last word on stderr, leaving out stack frames and its start-up notices."""
    for line in reversed(plain(stderr_tail).splitlines()):
        if line.strip() and not _STACK.search(line) and not _NOTICE.search(line.strip()):
            return line.strip()[:300]
    return ""


def policy_for(tools: tuple[str, ...]) -> str:
    """A policy-engine file allowing `tools`: "replace", or "run_shell_command(git)" for shell
    commands that start with `git` (the forms `--allowed-tools` took)."""
    rules = []
    for tool in tools:
        shaped = _TOOL_WITH_PREFIX.match(tool.strip())
        rule = [f"toolName = {_toml_string(shaped.group(1) if shaped else tool.strip())}"]
        if shaped and shaped.group(2).strip():
            rule.append(f"commandPrefix = {_toml_string(shaped.group(2).strip())}")
        rules.append("[[rule]]\n" + "\n".join(rule) + '\ndecision = "allow"\npriority = 100\n')
    return "# written by outpost for one attempt: the race file's allowed_tools\n\n" + "\n".join(rules)


def _toml_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid TOML basic string


_IDENTITY_VARIABLES = {
    "name": ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"),
    "email": ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"),
}


def _identity_env(directory: Path, candidate_env: Mapping[str, str]) -> dict[str, str]:
    """The user's git identity as GIT_AUTHOR_* / GIT_COMMITTER_*, for a shell that hides
    ~/.gitconfig; variables the user or the race file already set are left alone."""
    try:
        found = git.identity(directory)
    except git.GitError:
        return {}
    env: dict[str, str] = {}
    for key, names in _IDENTITY_VARIABLES.items():
        for name in names:
            if key in found and name not in candidate_env and name not in os.environ:
                env[name] = found[key]
    return env


_AUTH_TYPES = {"gemini-api-key", "oauth-personal", "vertex-ai", "cloud-shell", "compute-default-credentials"}


def _selected_auth(home: Path) -> str | None:
    """security.auth.selectedType from ~/.gemini/settings.json, if it names one."""
    try:
        settings = json.loads((home / ".gemini" / "settings.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    selected = as_dict(as_dict(as_dict(settings).get("security")).get("auth")).get("selectedType")
    return selected if isinstance(selected, str) else None


class GeminiAgent(AgentAdapter):
    kind = "gemini"
    options = ("model", "allowed_tools", "args")
    program = "gemini"
    install_hint = "npm install -g @google/gemini-cli"

    def launch(self, candidate: CandidateSpec, brief: str, context: LaunchContext) -> Launch:
        if candidate.max_turns:
            raise ValueError(
                f"candidate {candidate.key!r}: gemini has no max-turns option "
                f"(set model.maxSessionTurns in its settings.json); remove max_turns"
            )
        argv = [
            self.program,
            "-p",
            brief_argument(brief, context),
            "--output-format",
            "stream-json",
            "--skip-trust",
        ]
        files: dict[str, str] = {}
        if candidate.allowed_tools is None:
            argv += ["--approval-mode", "yolo"]
        else:
            argv += ["--approval-mode", "auto_edit"]
            if candidate.allowed_tools:
                # beside the brief, in the worktree's own git directory (mounted in containers)
                where = context.brief_file.parent if context.brief_file else context.git_common_dir
                policy = where / "outpost-gemini-policy.toml"
                files[str(policy)] = policy_for(candidate.allowed_tools)
                argv += ["--policy", str(policy)]
        if candidate.model:
            argv += ["-m", candidate.model]
        argv += list(candidate.args)
        env = {"TZ": "UTC", "GEMINI_CLI_TRUST_WORKSPACE": "true"}
        env.update(_identity_env(context.directory, candidate.env))
        state = state_paths(candidate, (None, ".gemini"))
        return Launch(argv=tuple(argv), env=env, stdin=None, files=files, state=state)

    def decoder(self, candidate: CandidateSpec, prices: Mapping[str, Price] | None = None) -> Decoder:
        return GeminiDecoder(candidate, prices)

    def api_endpoint(self, env: Mapping[str, str], home: Path) -> str | None:
        if env.get("GOOGLE_GENAI_USE_VERTEXAI"):
            return None
        return env.get("GOOGLE_GEMINI_BASE_URL") or "https://generativelanguage.googleapis.com"

    @staticmethod
    def auth_status(env: Mapping[str, str], home: Path) -> tuple[bool | None, str]:
        selected = _selected_auth(home)
        if selected is not None and selected not in _AUTH_TYPES:
            # gemini exits 41 with "Invalid auth method selected." whatever key is set
            return False, (
                f"~/.gemini/settings.json selects auth type {selected!r}, which gemini "
                f"refuses (expected one of {', '.join(sorted(_AUTH_TYPES))})"
            )
        for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
            if env.get(name):
                return True, f"{name} is set"
        if env.get("GOOGLE_GENAI_USE_VERTEXAI") or env.get("GOOGLE_APPLICATION_CREDENTIALS"):
            return None, "uses Google Cloud credentials (not checked)"
        settings = home / ".gemini"
        if (settings / "oauth_creds.json").is_file():
            return True, f"credentials in {settings / 'oauth_creds.json'}"
        try:
            if "GEMINI_API_KEY" in (settings / ".env").read_text():
                return True, f"GEMINI_API_KEY in {settings / '.env'}"
        except OSError:
            pass
        return False, "no GEMINI_API_KEY and no ~/.gemini/oauth_creds.json: run `gemini` to sign in"
