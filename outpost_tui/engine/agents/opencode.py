"""opencode (`opencode run --format json --auto --print-logs --log-level ERROR`).

Launch: non-interactive `run` rejects permission requests unless `--auto` is given; the model is
`provider/model`. opencode has no max-turns option and no tool list on its command line. Its JSON
output says nothing while it retries a failed call (it waits as long as a 429's `retry-after`
asks, hours if need be): `--print-logs` puts its "stream error" log lines on stderr, where they
become retries; a wait that the message says runs past RETRY_PATIENCE stops it as a quota, and a
run that ends (or times out) still waiting on a rate limit ends on that quota.

Usage: each `step_finish` carries that step's tokens and cost, so they are added up. `tokens.input`
already excludes cache reads and writes; reasoning tokens are billed as output. The cost is
opencode's own (estimated=False); a step without one, or with 0 for a model the price table
knows (opencode prices only models it has a price for), is priced from the table and the total
is then marked estimated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

from ..core.events import EventKind
from ..core.spec import CandidateSpec, Price
from ..core.usage import Usage
from .agentcli import CliDecoder, as_dict, count, log, money, short
from .base import AgentAdapter, AgentEvent, Decoder, Launch, LaunchContext, brief_argument, state_paths
from .prices import price_for, with_estimated_cost
from .quota_time import iso_utc, parse_reset
from .reachability import NETWORK, RATE_LIMITED

_QUOTA_TEXT = re.compile(
    r"\b429\b|quota|rate limit|usage limit|insufficient_quota|credit balance", re.IGNORECASE
)
_FILE_TOOLS = {"edit": "update", "write": "write", "patch": "update", "multiedit": "update"}
# `--print-logs` lines: timestamp=… level=ERROR … message="stream error" … error.error="AI_APICallError: …"
_STREAM_ERROR = re.compile(r'message="stream error".*?\berror\.error="(?P<error>(?:[^"\\]|\\.)*)"')
_RATE_LIMIT = re.compile(
    r"\b429\b|rate limit|too many requests|quota|usage limit|insufficient_quota", re.IGNORECASE
)
_NETWORK = re.compile(
    r"Unable to connect|ECONNREFUSED|ECONNRESET|fetch failed|ETIMEDOUT|ENOTFOUND"
    r"|Cannot connect|socket",
    re.IGNORECASE,
)
# A retry the error message says is further away than this is not waited for: the agent is
# stopped and the candidate ends on the quota, with its reset time.
RETRY_PATIENCE = timedelta(minutes=10)


def retry_after(headers: object, now: datetime | None = None) -> str | None:
    """The reset time from a `retry-after` header: seconds or an HTTP date."""
    if not isinstance(headers, dict):
        return None
    value = next((str(v) for k, v in headers.items() if str(k).lower() == "retry-after"), None)
    if not value:
        return None
    now = now or datetime.now(UTC)
    try:
        return iso_utc(now + timedelta(seconds=float(value)))
    except ValueError:
        pass
    try:
        return iso_utc(parsedate_to_datetime(value))
    except (TypeError, ValueError):
        return None


def _after(moment: str, limit: datetime) -> bool:
    return datetime.strptime(moment, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) > limit


class OpencodeDecoder(CliDecoder):
    program = "opencode"
    login_hint = "run `opencode auth login` or set the provider's API key"
    quota_pattern = _QUOTA_TEXT

    def __init__(self, candidate: CandidateSpec, prices: Mapping[str, Price] | None = None) -> None:
        super().__init__(candidate, prices)
        self._announced: set[str] = set()
        self._retries = 0
        self._rate_limited: str | None = None  # a rate limit not yet followed by a finished step

    def decode_stderr(self, line: str) -> list[AgentEvent] | None:
        failed = _STREAM_ERROR.search(line)
        if failed is None:
            return super().decode_stderr(line)
        error = failed.group("error").replace('\\"', '"').removeprefix("AI_APICallError: ")
        self._retries += 1
        cause = (
            RATE_LIMITED if _RATE_LIMIT.search(error) else NETWORK if _NETWORK.search(error) else "API error"
        )
        events = [
            log(line, "stderr"),
            AgentEvent(
                EventKind.RETRY,
                {"message": error[:300], "retry": self._retries, "delay_ms": 0, "cause": cause},
            ),
        ]
        if _RATE_LIMIT.search(error):
            self._rate_limited = error
            reset_at = parse_reset(error, self.clock())
            if reset_at is not None and _after(reset_at, self.clock() + RETRY_PATIENCE):
                events.extend(self.note_quota(error, reset_at))
                self.stop = f"quota: {error}"
        return events

    def decode_message(self, message: dict[str, Any]) -> list[AgentEvent] | None:
        kind = message.get("type")
        part = as_dict(message.get("part"))
        if kind in ("step_start", "done"):
            return []
        if kind == "text":
            text = str(part.get("text") or "")
            self.result = text
            return [AgentEvent(EventKind.TEXT, {"text": text})]
        if kind == "reasoning":
            return [AgentEvent(EventKind.TEXT, {"text": str(part.get("text") or ""), "reasoning": True})]
        if kind == "tool_use":
            return self._tool(part)
        if kind == "step_finish":
            return self._step_finish(part)
        if kind == "error":
            return self._error(message.get("error"))
        return None

    def _tool(self, part: dict[str, Any]) -> list[AgentEvent]:
        name = str(part.get("tool") or "?")
        state = as_dict(part.get("state"))
        tool_input = as_dict(state.get("input"))
        call = str(part.get("callID") or part.get("id") or "")
        events: list[AgentEvent] = []
        if call not in self._announced:
            self._announced.add(call)
            events.append(AgentEvent(EventKind.TOOL, {"name": name, "input": short(tool_input)}))
        status = state.get("status")
        if status in ("completed", "error"):
            failed = status == "error"
            output = state.get("error") if failed else state.get("output")
            events.append(
                AgentEvent(EventKind.TOOL_RESULT, {"name": name, "output": short(output), "error": failed})
            )
            edited = tool_input.get("filePath") or tool_input.get("file_path")
            if edited and not failed and name in _FILE_TOOLS:
                events.append(
                    AgentEvent(EventKind.FILE_CHANGE, {"path": str(edited), "change": _FILE_TOOLS[name]})
                )
        return events

    def _step_finish(self, part: dict[str, Any]) -> list[AgentEvent]:
        figures = as_dict(part.get("tokens"))
        cache = as_dict(figures.get("cache"))
        step = Usage(
            input=count(figures.get("input")),
            cached=count(cache.get("read")),
            cache_write=count(cache.get("write")),
            output=count(figures.get("output")) + count(figures.get("reasoning")),
        )
        self._rate_limited = None
        cost = money(part.get("cost"))
        if cost is None or (cost == 0 and step.tokens and price_for(self.model, self.prices)):
            step = with_estimated_cost(step, self.model, self.prices)
        else:
            step = Usage(
                input=step.input,
                cached=step.cached,
                cache_write=step.cache_write,
                output=step.output,
                cost_usd=cost,
            )
        self.usage = self.usage + step
        return []

    def finalise_usage(self, exit_code: int) -> None:
        if self._rate_limited and self.quota is None and exit_code != 0:
            # it ended, or was stopped, still waiting for the rate limit to lift
            self.failed = True
            self.note_quota(self._rate_limited)

    def _error(self, error: object) -> list[AgentEvent]:
        self.failed = True
        error = error if isinstance(error, dict) else {}
        data = as_dict(error.get("data"))
        message = str(data.get("message") or error.get("message") or error.get("name") or "error")
        if error.get("name") and error.get("name") != "APIError":
            message = f"{error['name']}: {message}"
        if data.get("statusCode") == 429 or self.is_quota_text(message):
            reset_at = retry_after(data.get("responseHeaders"), self.clock())
            return [log(f"error: {message}"), *self.note_quota(message, reset_at)]
        self.errors.append(message)
        return [log(f"error: {message}")]


class OpencodeAgent(AgentAdapter):
    kind = "opencode"
    program = "opencode"
    install_hint = "npm install -g opencode-ai"
    # opencode 1.18.33 ends 0.2-0.6 s after a TERM; its shell commands run in process groups of
    # their own (the sandbox TERMs them too). A short grace: a second more of an agent that does
    # not end is a second more of model calls and commits.
    term_grace = 1.0

    def launch(self, candidate: CandidateSpec, brief: str, context: LaunchContext) -> Launch:
        if candidate.max_turns:
            raise ValueError(
                f"candidate {candidate.key!r}: opencode has no max-turns option; remove max_turns"
            )
        if candidate.allowed_tools is not None:
            raise ValueError(
                f"candidate {candidate.key!r}: opencode takes no tool list on its command "
                f"line (configure permissions in opencode.json); remove allowed_tools"
            )
        argv = [self.program, "run", "--format", "json"]
        if candidate.model:
            argv += ["-m", candidate.model]
        argv += [
            "--auto",
            "--print-logs",
            "--log-level",
            "ERROR",
            *candidate.args,
            brief_argument(brief, context),
        ]
        state = state_paths(
            candidate,
            (None, "$XDG_DATA_HOME/opencode"),
            (None, "$XDG_CONFIG_HOME/opencode"),
            (None, "$XDG_STATE_HOME/opencode"),
            (None, "$XDG_CACHE_HOME/opencode"),
        )
        return Launch(argv=tuple(argv), env={"TZ": "UTC"}, stdin=None, state=state)

    def decoder(self, candidate: CandidateSpec, prices: Mapping[str, Price] | None = None) -> Decoder:
        return OpencodeDecoder(candidate, prices)

    @staticmethod
    def auth_status(env: Mapping[str, str], home: Path) -> tuple[bool | None, str]:
        data = Path(env["XDG_DATA_HOME"]) if env.get("XDG_DATA_HOME") else home / ".local" / "share"
        if (data / "opencode" / "auth.json").is_file():
            return True, f"credentials in {data / 'opencode' / 'auth.json'}"
        present = [
            name
            for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY")
            if env.get(name)
        ]
        if present:
            return True, f"{', '.join(present)} set"
        return None, "no ~/.local/share/opencode/auth.json and no provider key (free models need none)"
