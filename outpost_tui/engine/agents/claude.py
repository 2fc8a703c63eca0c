"""Claude Code (`claude -p … --output-format stream-json --verbose`).

Launch: the brief is the argument right after `-p` (a brief over 64 KiB, too long for one argv
entry, goes on stdin instead, which `claude -p` reads when no prompt argument is given). Edits are
approved by `--permission-mode acceptEdits`; every other tool must be allow-listed, as one
comma-separated `--allowedTools` argument because the option is variadic.

Usage: live tokens are summed over distinct message ids (the lines of one API response repeat its
id and usage). Assistant lines carry a placeholder output of 1; `--include-partial-messages` adds
the API's own message_start / message_delta events with the real figures, and the highest seen is
kept, so live tokens, cost and budget stops are right during the run. Live cost is priced from the
table (by model family when the exact model is not listed) as an estimate. The `result` line is
authoritative for the whole invocation: tokens from `modelUsage` (every model, subagents
included), cost from `total_cost_usd`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from ..core.events import EventKind
from ..core.spec import CandidateSpec, Price
from ..core.usage import Usage
from .agentcli import CliDecoder, as_dict, as_list, count, first_line, log, money, short
from .base import (
    AgentAdapter,
    AgentEvent,
    Decoder,
    Launch,
    LaunchContext,
    as_argument,
    brief_fits_inline,
    state_paths,
)
from .prices import cost_of, price_for, price_note, with_estimated_cost
from .quota_time import from_epoch, iso_utc, parse_reset
from .reachability import retry_cause

# The tools a candidate may use unless its race file says otherwise: file tools that Claude Code
# 2.1.328 has (its init event lists "Read", "Edit", "Write", "NotebookEdit", ...; the older "Glob",
# "Grep", "LS", "MultiEdit" and "TodoWrite" are gone) and the shell commands a fix-and-commit needs.
# A tool the running claude lacks is named in the log from its init event.
DEFAULT_ALLOWED_TOOLS = (
    "Read",
    "Edit",
    "Write",
    "NotebookEdit",
    "Bash(git add:*)",
    "Bash(git commit:*)",
    "Bash(git status:*)",
    "Bash(git diff:*)",
    "Bash(git log:*)",
    "Bash(ls:*)",
    "Bash(grep:*)",
    "Bash(python:*)",
    "Bash(python3:*)",
    "Bash(pytest:*)",
)
# System lines that only say the CLI is working; every other kind is shown as one readable line.
_QUIET_SYSTEM = {"status", "hook_started", "hook_progress", "task_progress"}

_QUOTA_TEXT = re.compile(
    r"usage limit reached|hit your (?:\w+ )?limit|reached your specified API usage limits"
    r"|credit balance is too low|rate_limit_error",
    re.IGNORECASE,
)
_FILE_TOOLS = {"Edit": "update", "MultiEdit": "update", "NotebookEdit": "update", "Write": "write"}


class ClaudeDecoder(CliDecoder):
    program = "claude"
    login_hint = "run `claude login` or set ANTHROPIC_API_KEY"
    default_model = "claude-sonnet-4-5"
    quota_pattern = _QUOTA_TEXT

    def __init__(self, candidate: CandidateSpec, prices: Mapping[str, Price] | None = None) -> None:
        super().__init__(candidate, prices)
        self.session_id: str | None = None
        self._steps: dict[str, tuple[Usage, str | None]] = {}  # message id -> (usage, model)
        self._tools: dict[str, tuple[str, str | None]] = {}  # tool_use id -> (name, edited path)
        self._final: Usage | None = None
        self._streaming: str | None = None  # the message id partial events belong to
        self._retry_after_ms: int | None = None  # the delay of the last retry after a 429
        self.allowed_tools = (
            DEFAULT_ALLOWED_TOOLS if candidate.allowed_tools is None else candidate.allowed_tools
        )
        self.permission_denials: list[str] = []

    def decode_line(self, line: str) -> list[AgentEvent] | None:
        stripped = line.lstrip()
        if stripped.startswith("["):
            # `--output-format json` with verbose on prints every message as one JSON array.
            try:
                messages = json.loads(stripped)
            except ValueError:
                messages = None
            if isinstance(messages, list):
                events: list[AgentEvent] = []
                for message in messages:
                    if isinstance(message, dict):
                        events.extend(self.decode_message(message) or [])
                return events
        return super().decode_line(line)

    def decode_message(self, message: dict[str, Any]) -> list[AgentEvent] | None:
        kind = message.get("type")
        if isinstance(message.get("session_id"), str):
            self.session_id = message["session_id"]
        if kind == "assistant":
            return self._assistant(message)
        if kind == "user":
            return self._tool_results(message)
        if kind == "system":
            return self._system(message)
        if kind == "rate_limit_event":
            return self._rate_limit(as_dict(message.get("rate_limit_info")))
        if kind == "result":
            return self._result(message)
        if kind == "stream_event":
            return self._stream_event(message)
        return None

    # -- message kinds -------------------------------------------------------------------------
    def _system(self, message: dict[str, Any]) -> list[AgentEvent] | None:
        subtype = message.get("subtype")
        if subtype == "init":
            if isinstance(message.get("model"), str):
                self.model = message["model"]
            events = [
                log(
                    f"claude {message.get('claude_code_version') or ''} session "
                    f"{message.get('session_id') or '?'}, model {self.model or '?'}, "
                    f"permissions {message.get('permissionMode') or '?'}".replace("  ", " ")
                )
            ]
            note = price_note(self.model, self.prices)
            if note:
                events.append(log(note))
            tools = {str(tool) for tool in as_list(message.get("tools"))}
            missing = sorted({name.split("(", 1)[0] for name in self.allowed_tools} - tools) if tools else []
            if missing:
                events.append(log(f"allowed tools this claude does not have: {', '.join(missing)}"))
            return events
        if subtype == "api_retry":
            attempt = count(message.get("attempt"))
            delay_ms = count(message.get("retry_delay_ms"))
            status = message.get("error_status")
            cause = retry_cause(status)
            error = message.get("error")
            what = f"HTTP {status}" if isinstance(status, int) else "no answer"
            if error and error != "unknown":
                what += f", {error}"
            text = (
                f"{cause} ({what}); retrying in {delay_ms} ms "
                f"(attempt {attempt} of {message.get('max_retries') or '?'})"
            )
            if status == 429:
                # With an API key a 429 carries no reset time; the delay Claude waits is the
                # API's retry-after, the best reset time there is if the retries run out.
                self._retry_after_ms = delay_ms
            return [
                AgentEvent(
                    EventKind.RETRY,
                    {
                        "message": text,
                        "retry": attempt,
                        "delay_ms": delay_ms,
                        "cause": cause,
                        "status": status,
                    },
                )
            ]
        if isinstance(subtype, str) and subtype in _QUIET_SYSTEM:
            return []
        return [log(_system_line(message))]

    def _assistant(self, message: dict[str, Any]) -> list[AgentEvent]:
        body = as_dict(message.get("message"))
        content = as_list(body.get("content"))
        error = message.get("error")
        if error:
            text = " ".join(
                str(block.get("text") or "")
                for block in content
                if isinstance(block, dict) and block.get("type") == "text"
            ).strip()
            return self._assistant_error(str(error), text)
        self._record_step(body)
        events: list[AgentEvent] = []
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text" and block.get("text"):
                events.append(AgentEvent(EventKind.TEXT, {"text": block["text"]}))
            elif kind in ("tool_use", "server_tool_use"):
                name = str(block.get("name") or "?")
                tool_input = as_dict(block.get("input"))
                edited = tool_input.get("file_path") or tool_input.get("notebook_path")
                if block.get("id"):
                    self._tools[str(block["id"])] = (name, edited if name in _FILE_TOOLS else None)
                events.append(AgentEvent(EventKind.TOOL, {"name": name, "input": short(tool_input)}))
        return events

    def _assistant_error(self, error: str, text: str) -> list[AgentEvent]:
        # Synthetic messages (model "<synthetic>") that the CLI writes when an API call fails.
        if error in ("rate_limit", "billing_error"):
            return [log(text or error), *self.note_quota(text or error.replace("_", " "))]
        self.errors.append(f"{error}: {text}" if text else error)
        return [log(text or error)]

    def note_quota(self, message: str, reset_at: str | None = None) -> list[AgentEvent]:
        if (
            reset_at is None
            and self._retry_after_ms is not None
            and parse_reset(first_line(message), self.clock()) is None
        ):
            reset_at = iso_utc(self.clock() + timedelta(milliseconds=self._retry_after_ms))
        return super().note_quota(message, reset_at)

    def _stream_event(self, message: dict[str, Any]) -> list[AgentEvent]:
        # With --include-partial-messages the API's own events arrive as they stream: message_start
        # and message_delta carry the real usage of each message id (the assistant lines only a
        # placeholder output of 1), so live tokens, cost and budget stops are right during the run.
        event = as_dict(message.get("event"))
        kind = event.get("type")
        if kind == "message_start":
            body = as_dict(event.get("message"))
            if isinstance(body.get("id"), str):
                self._streaming = body["id"]
            self._record_step(body)
        elif kind == "message_delta":
            message_id = message.get("api_message_id") or self._streaming
            if isinstance(message_id, str):
                self._record_step({"id": message_id, "usage": event.get("usage")})
        return []

    def _record_step(self, body: dict[str, Any]) -> None:
        message_id, usage = body.get("id"), body.get("usage")
        if not isinstance(message_id, str) or not message_id or not isinstance(usage, dict):
            return
        step = Usage(
            input=count(usage.get("input_tokens")),
            cached=count(usage.get("cache_read_input_tokens")),
            cache_write=count(usage.get("cache_creation_input_tokens")),
            output=count(usage.get("output_tokens")),
        )
        seen = self._steps.get(message_id)
        if seen is not None:
            before = seen[0]
            step = Usage(
                input=max(before.input, step.input),
                cached=max(before.cached, step.cached),
                cache_write=max(before.cache_write, step.cache_write),
                output=max(before.output, step.output),
            )
        model = body.get("model") if isinstance(body.get("model"), str) else None
        self._steps[message_id] = (step, model or (seen[1] if seen else None) or self.model)
        if self._final is None:
            self.usage = self._live_usage()

    def _live_usage(self) -> Usage:
        total, cost, unknown = Usage(), 0.0, False
        for step, model in self._steps.values():
            total = total + step
            price = price_for(model, self.prices) or price_for(self.model, self.prices)
            cost += cost_of(step, price) if price else 0.0
            unknown = unknown or (price is None and step.tokens > 0)
        return Usage(
            input=total.input,
            cached=total.cached,
            cache_write=total.cache_write,
            output=total.output,
            cost_usd=round(cost, 6),
            estimated=True,
            cost_unknown=unknown,
        )

    def _tool_results(self, message: dict[str, Any]) -> list[AgentEvent]:
        content = as_dict(message.get("message")).get("content")
        if not isinstance(content, list):
            return []  # the prompt echoed back
        extra = as_dict(message.get("tool_use_result"))
        events: list[AgentEvent] = []
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            name, edited = self._tools.get(str(block.get("tool_use_id")), ("?", None))
            output = block.get("content")
            if isinstance(output, list):
                output = "\n".join(part.get("text", "") for part in output if isinstance(part, dict))
            failed = bool(block.get("is_error"))
            events.append(
                AgentEvent(EventKind.TOOL_RESULT, {"name": name, "output": short(output), "error": failed})
            )
            if edited and not failed:
                kind = _FILE_TOOLS[name]
                if name == "Write" and extra.get("type") in ("create", "update"):
                    kind = "add" if extra["type"] == "create" else "update"
                events.append(AgentEvent(EventKind.FILE_CHANGE, {"path": str(edited), "change": kind}))
        return events

    def _rate_limit(self, info: dict[str, Any]) -> list[AgentEvent]:
        status = info.get("status")
        window = str(info.get("rateLimitType") or "usage").replace("_", " ")
        if status == "rejected":
            resets = info.get("resetsAt")
            reset_at = from_epoch(resets) if isinstance(resets, (int, float)) else None
            return self.note_quota(f"{window} limit reached", reset_at)
        if status == "allowed_warning":
            used = info.get("utilization")
            share = f" at {round(used * 100)}%" if isinstance(used, (int, float)) else ""
            return [log(f"rate limit warning: {window} window{share}")]
        return []

    def _result(self, message: dict[str, Any]) -> list[AgentEvent]:
        text = message.get("result")
        if isinstance(text, str):
            self.result = text
        self._final = self._final_usage(message)
        self.usage = self._final
        events: list[AgentEvent] = []
        for denial in as_list(message.get("permission_denials")):
            if isinstance(denial, dict):
                described = f"{denial.get('tool_name', '?')} {short(denial.get('tool_input'), 200)}"
                self.permission_denials.append(described)
                events.append(log(f"permission denied: {described}"))
        subtype = message.get("subtype")
        if not message.get("is_error") and subtype in (None, "success"):
            return events
        self.failed = True
        errors = [str(error) for error in as_list(message.get("errors"))]
        detail = text if isinstance(text, str) and text else "; ".join(errors)
        if message.get("api_error_status") == 429 or self.is_quota_text(detail):
            events.extend(self.note_quota(detail or "rate limited (HTTP 429)"))
        elif subtype == "error_max_turns":
            # num_turns counts the turn that was refused, one more than the limit
            limit = self.candidate.max_turns
            self.failure = "max turns reached" + (f" (max_turns = {limit})" if limit else "")
        elif subtype == "error_max_budget_usd":
            self.failure = "max budget reached (--max-budget-usd)"
        else:
            status = message.get("api_error_status")
            prefix = f"API error {status}: " if status else ""
            self.errors.append(prefix + (detail or str(subtype)))
        return events

    def _final_usage(self, message: dict[str, Any]) -> Usage:
        per_model = message.get("modelUsage")
        tokens = Usage()
        if isinstance(per_model, dict) and per_model:
            for figures in per_model.values():
                if isinstance(figures, dict):
                    tokens = tokens + Usage(
                        input=count(figures.get("inputTokens")),
                        cached=count(figures.get("cacheReadInputTokens")),
                        cache_write=count(figures.get("cacheCreationInputTokens")),
                        output=count(figures.get("outputTokens")),
                    )
        elif isinstance(message.get("usage"), dict):
            usage = message["usage"]
            tokens = Usage(
                input=count(usage.get("input_tokens")),
                cached=count(usage.get("cache_read_input_tokens")),
                cache_write=count(usage.get("cache_creation_input_tokens")),
                output=count(usage.get("output_tokens")),
            )
        else:
            tokens = self._live_usage()
        cost = money(message.get("total_cost_usd"))
        if cost is None:
            models = list(per_model) if isinstance(per_model, dict) and per_model else []
            return with_estimated_cost(tokens, models[0] if len(models) == 1 else self.model, self.prices)
        return Usage(
            input=tokens.input,
            cached=tokens.cached,
            cache_write=tokens.cache_write,
            output=tokens.output,
            cost_usd=round(cost, 6),
            estimated=False,
        )

    def finalise_usage(self, exit_code: int) -> None:
        if self._final is None:
            # No result line (crash, kill): the live figures are only a lower bound.
            live = self._live_usage()
            self.usage = replace(live, complete=False)


class ClaudeAgent(AgentAdapter):
    kind = "claude"
    options = ("model", "max_turns", "allowed_tools", "args")
    program = "claude"
    install_hint = "npm install -g @anthropic-ai/claude-code"

    def launch(self, candidate: CandidateSpec, brief: str, context: LaunchContext) -> Launch:
        argv = [self.program, "-p"]
        stdin = None
        if not brief_fits_inline(brief):
            stdin = brief.encode()
        else:
            argv.append(as_argument(brief))
        argv += [
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-partial-messages",
            "--permission-mode",
            "acceptEdits",
        ]
        tools = DEFAULT_ALLOWED_TOOLS if candidate.allowed_tools is None else candidate.allowed_tools
        if tools:
            argv += ["--allowedTools", ",".join(tools)]
        if candidate.max_turns:
            argv += ["--max-turns", str(candidate.max_turns)]
        if candidate.model:
            argv += ["--model", candidate.model]
        argv += list(candidate.args)
        state = state_paths(candidate, ("CLAUDE_CONFIG_DIR", ".claude"), files=(".claude.json",))
        return Launch(argv=tuple(argv), env={"TZ": "UTC"}, stdin=stdin, state=state)

    def decoder(self, candidate: CandidateSpec, prices: Mapping[str, Price] | None = None) -> Decoder:
        return ClaudeDecoder(candidate, prices)

    def api_endpoint(self, env: Mapping[str, str], home: Path) -> str | None:
        if env.get("CLAUDE_CODE_USE_BEDROCK") or env.get("CLAUDE_CODE_USE_VERTEX"):
            return None
        return env.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"

    @staticmethod
    def auth_status(env: Mapping[str, str], home: Path) -> tuple[bool | None, str]:
        """Whether claude looks logged in, from files and variables only (spends no tokens)."""
        for name in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN"):
            if env.get(name):
                return True, f"{name} is set"
        if env.get("CLAUDE_CODE_USE_BEDROCK") or env.get("CLAUDE_CODE_USE_VERTEX"):
            return None, "uses Bedrock/Vertex credentials (not checked)"
        config = Path(env["CLAUDE_CONFIG_DIR"]) if env.get("CLAUDE_CONFIG_DIR") else home / ".claude"
        if (config / ".credentials.json").is_file():
            return True, f"credentials in {config / '.credentials.json'}"
        profile = home / ".claude.json"
        try:
            account = json.loads(profile.read_text()).get("oauthAccount")
        except (OSError, ValueError, AttributeError):
            account = None
        if account:
            if os.uname().sysname == "Darwin":
                return True, f"account in {profile} (token in the macOS keychain)"
            return None, f"account in {profile} but no {config / '.credentials.json'}"
        return False, "no ANTHROPIC_API_KEY and no ~/.claude credentials: run `claude login`"


def _system_line(message: dict[str, Any]) -> str:
    """A system line of any kind as one readable line: its subtype, then its short scalar fields."""
    subtype = str(message.get("subtype") or "system").replace("_", " ")
    details = []
    for name, value in message.items():
        if name in ("type", "subtype", "session_id", "uuid") or value in (None, "", [], {}):
            continue
        if isinstance(value, (str, int, float, bool)):
            details.append(f"{name}={short(value, 120)}")
        else:
            details.append(f"{name}={short(value, 200)}")
    return f"{subtype}: {', '.join(details)}" if details else subtype
