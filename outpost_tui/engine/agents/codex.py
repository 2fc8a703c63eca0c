"""OpenAI Codex CLI (`codex exec --json`).

Launch: the brief goes on stdin with `-` as the prompt argument, then stdin is closed. That keeps a
brief that starts with '-' or reads like a subcommand ("resume …") from being parsed as one, and
has no argv length limit. Unfenced, `--sandbox workspace-write` lets it edit the worktree; the
repository's git dir is added as a writable root (`--add-dir`) so its own `git commit` can write a
linked worktree's index and objects. Some versions still refuse, so the engine also commits
leftover edits after it exits, recorded as done on its behalf (`commits_on_behalf`). Inside the
engine's fence its own sandbox (bubblewrap, nested) cannot start, and every file edit fails: it
runs with `--sandbox danger-full-access`, and the fence is its sandbox.

Usage: `turn.completed` carries the thread's cumulative total, so the latest replaces the previous
one; Codex counts cached tokens inside `input_tokens`, so uncached = input - cached. Codex reports
no cost: it is priced from the table and marked estimated.
"""

from __future__ import annotations

import os
import re
import shlex
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.events import EventKind
from ..core.spec import CandidateSpec, Price
from ..core.usage import Usage
from .agentcli import CliDecoder, as_dict, as_list, count, first_line, log, short
from .base import AgentAdapter, AgentEvent, Decoder, Launch, LaunchContext, state_paths
from .prices import price_note, with_estimated_cost
from .quota_time import after_minute, has_seconds, parse_reset
from .reachability import OVERLOADED, retry_cause

_QUOTA_TEXT = re.compile(
    r"hit your usage limit|out of credits|hit your spend cap|quota exceeded|insufficient_quota"
    r"|exceeded retry limit, last status: 429|unexpected status 429",
    re.IGNORECASE,
)
# Errors Codex recovers from by itself (it retries the stream or waits for capacity). Checked
# before quota: "Reconnecting... 1/1 (exceeded retry limit, last status: 429 ...)" is a retry
# that may still succeed; only a turn that fails with such a text is out of quota.
_TRANSIENT = re.compile(
    r"at capacity|reconnecting|retrying|stream disconnected|temporarily unavailable", re.IGNORECASE
)
_LAST_STATUS = re.compile(r"(?:last status|unexpected status):?\s*(\d{3})", re.IGNORECASE)
# The model this Codex version uses when neither the race file nor its config names one
# (`codex exec --json` never says which model it used, so the engine passes it explicitly).
DEFAULT_MODEL = "gpt-6.1-sol"
_CLOCK_IN_TEXT = re.compile(r"\d:\d{2}\s*(?:[ap]\.?m)?", re.IGNORECASE)
_CONFIG_MODEL = re.compile(r'^\s*model\s*=\s*"([^"]+)"', re.MULTILINE)
_RETRY_COUNT = re.compile(r"(\d+)\s*/\s*(\d+)")
_RETRY_DELAY = re.compile(r"in\s+(\d+(?:\.\d+)?)\s*(ms|s)\b", re.IGNORECASE)


def codex_model(candidate: CandidateSpec, env: Mapping[str, str] | None = None) -> str:
    """The model a Codex run uses: the race file's, else the `model` of its config.toml (the first
    top-level one), else this version's default."""
    if candidate.model:
        return candidate.model
    env = {**os.environ, **candidate.env, **(env or {})}
    home = (
        Path(env["CODEX_HOME"]) if env.get("CODEX_HOME") else Path(env.get("HOME") or Path.home()) / ".codex"
    )
    try:
        config = (home / "config.toml").read_text(errors="replace")
    except OSError:
        return DEFAULT_MODEL
    top_level = config.split("\n[", 1)[0]
    match = _CONFIG_MODEL.search(top_level)
    return match.group(1) if match else DEFAULT_MODEL


class CodexDecoder(CliDecoder):
    program = "codex"
    login_hint = "run `codex login` or set OPENAI_API_KEY (or CODEX_API_KEY)"
    default_model = DEFAULT_MODEL
    quota_pattern = _QUOTA_TEXT

    def __init__(self, candidate: CandidateSpec, prices: Mapping[str, Price] | None = None) -> None:
        super().__init__(candidate, prices)
        self.model = codex_model(candidate)
        self.thread_id: str | None = None
        self.turn_completed = False
        self._items_seen = 0
        self._announced: set[str] = set()  # item ids whose TOOL event was already emitted

    def decode_message(self, message: dict[str, Any]) -> list[AgentEvent] | None:
        kind = message.get("type")
        if kind == "thread.started":
            self.thread_id = str(message.get("thread_id") or "") or None
            events = [log(f"codex thread {self.thread_id or '?'}, model {self.model}")]
            note = price_note(self.model, self.prices)
            return events + [log(note)] if note else events
        if kind == "turn.started":
            return []
        if kind in ("item.started", "item.updated", "item.completed"):
            item = message.get("item")
            if not isinstance(item, dict):
                return None
            self._items_seen += 1
            return self._item(kind.split(".", 1)[1], item)
        if kind == "turn.completed":
            return self._turn_completed(message.get("usage"))
        if kind == "turn.failed":
            error = as_dict(message.get("error"))
            self.failed = True
            return self._error(str(error.get("message") or "turn failed"), final=True)
        if kind == "error":
            return self._error(str(message.get("message") or "error"), final=False)
        return None

    def _item(self, stage: str, item: dict[str, Any]) -> list[AgentEvent]:
        kind, item_id = item.get("type"), str(item.get("id") or "")
        if kind == "command_execution":
            return self._tool_item(stage, item_id, "shell", item.get("command"), item)
        if kind == "mcp_tool_call":
            name = f"{item.get('server') or 'mcp'}.{item.get('tool') or '?'}"
            return self._tool_item(stage, item_id, name, item.get("arguments"), item)
        if stage != "completed":
            return []
        if kind == "agent_message":
            text = str(item.get("text") or "")
            self.result = text
            return [AgentEvent(EventKind.TEXT, {"text": text})]
        if kind == "reasoning":
            return [AgentEvent(EventKind.TEXT, {"text": str(item.get("text") or ""), "reasoning": True})]
        if kind == "file_change":
            if item.get("status") == "failed":
                return [log(f"file change failed: {short(item.get('changes'), 300)}")]
            return [
                AgentEvent(
                    EventKind.FILE_CHANGE,
                    {"path": str(change.get("path")), "change": str(change.get("kind") or "update")},
                )
                for change in as_list(item.get("changes"))
                if isinstance(change, dict)
            ]
        if kind == "web_search":
            return [AgentEvent(EventKind.TOOL, {"name": "web_search", "input": short(item.get("query"))})]
        if kind == "todo_list":
            steps = [
                f"[{'x' if step.get('completed') else ' '}] {step.get('text', '')}"
                for step in as_list(item.get("items"))
                if isinstance(step, dict)
            ]
            return [log("plan: " + "; ".join(steps))]
        if kind == "error":
            return [log(f"warning: {item.get('message') or ''}")]
        return []

    def _tool_item(
        self, stage: str, item_id: str, name: str, tool_input: object, item: dict[str, Any]
    ) -> list[AgentEvent]:
        events: list[AgentEvent] = []
        if item_id not in self._announced:
            self._announced.add(item_id)
            events.append(AgentEvent(EventKind.TOOL, {"name": name, "input": short(tool_input)}))
        if stage == "completed":
            if name == "shell" and isinstance(tool_input, str):
                self.commit_message = commit_message_of(tool_input) or self.commit_message
            if "aggregated_output" in item:
                output = item.get("aggregated_output")
                exit_code = item.get("exit_code")
                failed = item.get("status") in ("failed", "declined") or (
                    isinstance(exit_code, int) and exit_code != 0
                )
            else:
                output = item.get("error") or item.get("result")
                failed = bool(item.get("error")) or item.get("status") == "failed"
            events.append(
                AgentEvent(EventKind.TOOL_RESULT, {"name": name, "output": short(output), "error": failed})
            )
        return events

    def _turn_completed(self, usage: object) -> list[AgentEvent]:
        self.turn_completed = True
        if isinstance(usage, dict):
            # input_tokens counts every prompt token: cached reads and cache writes are inside it.
            total_input, cached = count(usage.get("input_tokens")), count(usage.get("cached_input_tokens"))
            cached = min(cached, total_input)
            written = min(count(usage.get("cache_write_input_tokens")), total_input - cached)
            tokens = Usage(
                input=total_input - cached - written,
                cached=cached,
                cache_write=written,
                output=count(usage.get("output_tokens")),
            )
            self.usage = with_estimated_cost(tokens, self.model, self.prices)
        return []

    def _error(self, message: str, final: bool) -> list[AgentEvent]:
        if not final and _TRANSIENT.search(message):
            attempt = _RETRY_COUNT.search(message)
            delay = _RETRY_DELAY.search(message)
            delay_ms = 0
            if delay:
                delay_ms = int(float(delay.group(1)) * (1 if delay.group(2).lower() == "ms" else 1000))
            status = _LAST_STATUS.search(message)
            cause = retry_cause(int(status.group(1)) if status else None)
            if status is None and re.search(r"at capacity|overloaded", message, re.IGNORECASE):
                cause = OVERLOADED
            return [
                AgentEvent(
                    EventKind.RETRY,
                    {
                        "message": message,
                        "retry": int(attempt.group(1)) if attempt else 0,
                        "delay_ms": delay_ms,
                        "cause": cause,
                    },
                )
            ]
        if self.is_quota_text(message):
            return [log(f"error: {message}"), *self.note_quota(message)]
        self.errors.append(message)
        return [log(f"error: {message}")]

    def note_quota(self, message: str, reset_at: str | None = None) -> list[AgentEvent]:
        if reset_at is None:
            # Codex prints its reset time cut to the minute ("try again at 3:09 PM" for 3:09:19):
            # taken as the end of that minute, so a rerun is never started early. Seconds, when
            # the message gives them, are kept as they are.
            reset_at = parse_reset(first_line(message), self.clock())
            if reset_at is not None and _CLOCK_IN_TEXT.search(message) and not has_seconds(message):
                reset_at = after_minute(reset_at)
        return super().note_quota(message, reset_at)

    def finalise_usage(self, exit_code: int) -> None:
        if not self.turn_completed and self._items_seen:
            # The turn did work but never reported its tokens: what we show is a lower bound.
            usage = self.usage
            self.usage = Usage(
                input=usage.input,
                cached=usage.cached,
                cache_write=usage.cache_write,
                output=usage.output,
                cost_usd=usage.cost_usd,
                complete=False,
                estimated=True,
            )


class CodexAgent(AgentAdapter):
    kind = "codex"
    program = "codex"
    install_hint = "npm install -g @openai/codex"
    commits_on_behalf = True

    def launch(self, candidate: CandidateSpec, brief: str, context: LaunchContext) -> Launch:
        if candidate.max_turns:
            raise ValueError(f"candidate {candidate.key!r}: codex has no max-turns limit; remove max_turns")
        if candidate.allowed_tools is not None:
            raise ValueError(
                f"candidate {candidate.key!r}: codex has no tool allow-list (its --sandbox "
                f"decides); remove allowed_tools"
            )
        argv = [self.program, "exec", "--json", "--sandbox"]
        if context.fenced:
            argv.append("danger-full-access")
        else:
            argv += ["workspace-write", "--add-dir", str(context.git_common_dir)]
        # Always named: `--json` never says which model ran, and its price depends on it.
        argv += ["-m", codex_model(candidate)]
        argv += list(candidate.args)
        argv.append("-")  # read the prompt from stdin
        state = state_paths(candidate, ("CODEX_HOME", ".codex"))
        return Launch(argv=tuple(argv), env={"TZ": "UTC"}, stdin=brief.encode(), state=state)

    def decoder(self, candidate: CandidateSpec, prices: Mapping[str, Price] | None = None) -> Decoder:
        return CodexDecoder(candidate, prices)

    def api_endpoint(self, env: Mapping[str, str], home: Path) -> str | None:
        """The configured provider's base_url (this version ignores OPENAI_BASE_URL), else OpenAI's
        API with an API key, else the ChatGPT backend a `codex login` uses."""
        codex_home = Path(env["CODEX_HOME"]) if env.get("CODEX_HOME") else home / ".codex"
        try:
            config = tomllib.loads((codex_home / "config.toml").read_text(errors="replace"))
        except (OSError, tomllib.TOMLDecodeError):
            config = {}
        provider = config.get("model_provider")
        providers = as_dict(config.get("model_providers"))
        chosen = providers.get(provider) if isinstance(provider, str) else None
        if isinstance(chosen, dict) and isinstance(base_url := chosen.get("base_url"), str):
            return base_url
        if provider not in (None, "openai"):
            return None  # a built-in provider other than OpenAI (e.g. a local one): not known here
        if env.get("CODEX_API_KEY") or env.get("OPENAI_API_KEY"):
            return "https://api.openai.com/v1"
        return "https://chatgpt.com/backend-api/codex"

    @staticmethod
    def auth_status(env: Mapping[str, str], home: Path) -> tuple[bool | None, str]:
        for name in ("CODEX_API_KEY", "OPENAI_API_KEY"):
            if env.get(name):
                return True, f"{name} is set"
        codex_home = Path(env["CODEX_HOME"]) if env.get("CODEX_HOME") else home / ".codex"
        if (codex_home / "auth.json").is_file():
            return True, f"credentials in {codex_home / 'auth.json'}"
        return False, "no OPENAI_API_KEY and no ~/.codex/auth.json: run `codex login`"


_SHELLS = {"bash", "sh", "zsh", "/bin/bash", "/bin/sh", "/usr/bin/bash", "/bin/zsh"}
_SEPARATORS = {"&&", "||", ";", "|", "&", "\n", "(", ")"}


def commit_message_of(command: str) -> str | None:
    """The message of a `git commit -m ...` inside a shell command Codex ran, or None."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if len(words) >= 3 and words[0] in _SHELLS and words[-2].startswith("-") and "c" in words[-2]:
        try:  # `bash -lc '<script>'`: the script, split at its operators
            lexer = shlex.shlex(words[-1], posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            words = list(lexer)
        except ValueError:
            return None
    for start in range(len(words) - 1):
        if words[start] != "git" or words[start + 1] != "commit":
            continue
        messages: list[str] = []
        rest = words[start + 2 :]
        for index, word in enumerate(rest):
            if word in _SEPARATORS:
                break
            following = rest[index + 1] if index + 1 < len(rest) else None
            if word.startswith("--message="):
                messages.append(word.split("=", 1)[1])
            elif (
                word == "--message"
                or (word.startswith("-") and not word.startswith("--") and word.endswith("m"))
            ) and following is not None:
                messages.append(following)
        if messages:
            return "\n\n".join(messages)
    return None
