"""Gemini CLI (`gemini -p … --output-format stream-json`).

Launch: `--approval-mode yolo` approves every tool; with an `allowed_tools` list the mode is
`auto_edit` (edits approved) and only the listed tools may run. Gemini has no max-turns option
(its turn limit is a settings.json entry; exit code 53 when reached).

Usage: `result.stats` is the session total, read once at the end; `input_tokens` includes cached
tokens (`input` is the uncached part when present). No cost is reported: it is priced from the
table and marked estimated. Also accepts the single-object `--output-format json` form.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

from ..events import EventKind
from ..spec import CandidateSpec, Price
from ..usage import Usage
from .agentcli import CliDecoder, as_dict, count, log, short
from .base import (AgentAdapter, AgentEvent, AgentOutcome, Decoder, Launch, LaunchContext,
                   brief_argument)
from .prices import with_estimated_cost

_QUOTA_TEXT = re.compile(
    r"\b429\b|RESOURCE_EXHAUSTED|exceeded your current quota|Quota exceeded for quota metric"
    r"|exhausted your capacity|TerminalQuotaError",
    re.IGNORECASE,
)
# Stderr carries stack dumps and request logs with a bare `"code": 429` in runs that failed for
# other reasons: there only the API status name or a quota phrase counts.
_STDERR_QUOTA_TEXT = re.compile(
    r"RESOURCE_EXHAUSTED|exceeded your current quota|Quota exceeded for quota metric"
    r"|exhausted your capacity|TerminalQuotaError",
    re.IGNORECASE,
)
# Printed on stderr while the CLI backs off by itself.
_RETRY = re.compile(r"Attempt (\d+) failed with status (\d+)\. Retrying", re.IGNORECASE)
_FILE_TOOLS = {"write_file": "write", "replace": "update", "edit": "update"}
# geminicli.com/docs/cli/headless: exit codes of fatal errors
_EXIT_REASONS = {
    41: None,  # authentication: explained by the login hint
    42: "input error",
    44: "sandbox error",
    52: "configuration error",
    53: "max turns reached (the session turn limit in settings.json)",
    54: "tool execution error",
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

    def decode_message(self, message: dict) -> list[AgentEvent] | None:
        kind = message.get("type")
        if kind is None and ("response" in message or "stats" in message):
            return self._single_object(message)
        if kind == "init":
            if isinstance(message.get("model"), str):
                self.model = message["model"]
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
            parameters = message.get("parameters") if isinstance(message.get("parameters"), dict) else {}
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
            events = [AgentEvent(EventKind.TOOL_RESULT, {"name": name, "output": short(output),
                                                         "error": failed})]
            if edited and not failed:
                events.append(AgentEvent(EventKind.FILE_CHANGE, {"path": str(edited),
                                                                 "change": _FILE_TOOLS[name]}))
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

    def _result(self, message: dict) -> list[AgentEvent]:
        self._result_seen = True
        stats = message.get("stats") if isinstance(message.get("stats"), dict) else {}
        total_input, cached = count(stats.get("input_tokens")), count(stats.get("cached"))
        uncached = count(stats["input"]) if "input" in stats else max(0, total_input - cached)
        self.usage = with_estimated_cost(
            Usage(input=uncached, cached=cached, output=count(stats.get("output_tokens"))),
            self.model, self.prices)
        if message.get("status") == "error":
            self.failed = True
            error = message.get("error") if isinstance(message.get("error"), dict) else {}
            return self._error(str(error.get("message") or error.get("type") or "gemini reported an error"))
        return []

    def _single_object(self, message: dict) -> list[AgentEvent]:
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
            return [AgentEvent(EventKind.RETRY, {"message": line.strip()[:300],
                                                 "retry": int(retry.group(1)), "delay_ms": 0})]
        return super().decode_stderr(line)

    def is_quota_text(self, text: str) -> bool:
        return super().is_quota_text(text) and not _RETRY.search(text)

    def is_stderr_quota_text(self, line: str) -> bool:
        return super().is_stderr_quota_text(line) and not _RETRY.search(line)

    def finalise_usage(self, exit_code: int) -> None:
        if not self._result_seen:
            self.usage = Usage(complete=False, estimated=True)

    def finish(self, exit_code: int, stderr_tail: str) -> AgentOutcome:
        quota_on_stderr = any(self.is_stderr_quota_text(line) for line in stderr_tail.splitlines())
        if exit_code in _EXIT_REASONS and self.quota is None and not quota_on_stderr:
            reason = _EXIT_REASONS[exit_code]
            if reason:
                self.failure = reason
            else:
                self.errors.append("not authenticated")
        return super().finish(exit_code, stderr_tail)


class GeminiAgent(AgentAdapter):
    kind = "gemini"
    program = "gemini"
    install_hint = "npm install -g @google/gemini-cli"

    def launch(self, candidate: CandidateSpec, brief: str, context: LaunchContext) -> Launch:
        if candidate.max_turns:
            raise ValueError(f"candidate {candidate.key!r}: gemini has no max-turns option "
                             f"(set model.maxSessionTurns in its settings.json); remove max_turns")
        argv = [self.program, "-p", brief_argument(brief, context), "--output-format", "stream-json"]
        if candidate.allowed_tools is None:
            argv += ["--approval-mode", "yolo"]
        else:
            argv += ["--approval-mode", "auto_edit"]
            if candidate.allowed_tools:
                argv += ["--allowed-tools", ",".join(candidate.allowed_tools)]
        if candidate.model:
            argv += ["-m", candidate.model]
        argv += list(candidate.args)
        return Launch(argv=tuple(argv), env={"TZ": "UTC"}, stdin=None)

    def decoder(self, candidate: CandidateSpec, prices: Mapping[str, Price] | None = None) -> Decoder:
        return GeminiDecoder(candidate, prices)

    @staticmethod
    def auth_status(env: Mapping[str, str], home: Path) -> tuple[bool | None, str]:
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
