"""What the real agent CLIs (claude, codex, gemini, aider, opencode) have in common.

Each prints one JSON object per line (aider prints text). A CliDecoder turns a parsed object into
events, keeps the attempt's cumulative usage, and explains the usual failures in one line: not
logged in, permission denied, a quota with its reset time, the agent's own error.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from ..core.events import EventKind
from ..core.spec import CandidateSpec, Price
from .base import AgentEvent, AgentOutcome, Decoder, Quota, parse_json_object
from .quota_time import parse_reset

# Lines above this are never kept whole in the log; JSON lines of any size are still decoded.
HUGE_LINE = 1024 * 1024
LOG_KEEP = 4000
OUTPUT_KEEP = 2000

# Matched only in error-bearing text (error events, failed results, stderr of a failed run):
# agents write about logins and permissions in ordinary prose too.
_NOT_LOGGED_IN = re.compile(
    r"not logged in|log ?in required|please run /login|invalid (?:x-)?api[ _-]?key|incorrect api key"
    r"|authentication[ _](?:failed|error|required)|authenticationerror|\bunauthori[sz]ed\b|\b401\b"
    r"|oauth token (?:has )?expired|(?:missing|no) (?:\w+ )?api[ _-]?key|api[ _-]?key (?:is )?"
    r"(?:missing|not (?:set|found|provided))|must specify the \w+ environment variable"
    r"|missing these environment variables|providerautherror|not authenticated",
    re.IGNORECASE,
)
_PERMISSION_DENIED = re.compile(
    r"permission denied|\beacces\b|operation not permitted|cannot be used with root/sudo privileges",
    re.IGNORECASE,
)


def is_login_failure(text: str) -> bool:
    """Whether error-bearing text says the agent is not signed in or has no usable key."""
    return bool(text and _NOT_LOGGED_IN.search(text))


def short(value: Any, limit: int = OUTPUT_KEEP) -> str:
    """A value as display text, cut to `limit` characters."""
    if value is None:
        text = ""
    elif isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError):
            text = str(value)
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more chars]"


def log(text: str, stream: str = "stdout") -> AgentEvent:
    return AgentEvent(EventKind.LOG, {"stream": stream, "lines": [text]})


def as_dict(value: Any) -> dict[str, Any]:
    """The value if it is a JSON object, else an empty one: every field of every line is optional."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    try:
        return max(0, int(value))
    except (OverflowError, ValueError):
        return 0


def money(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return max(0.0, float(value))


# Colour and cursor escapes (CSI sequences): a reason is one plain line.
_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


def plain(text: str) -> str:
    """The text without terminal escape sequences."""
    return _ESCAPE.sub("", text)


def first_line(text: str, limit: int = 300) -> str:
    text = plain(text)
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


def last_line(text: str, limit: int = 300) -> str:
    text = plain(text)
    for line in reversed(text.strip().splitlines()):
        if line.strip():
            return line.strip()[:limit]
    return ""


class CliDecoder(Decoder):
    """Shared reading: JSON lines, oversized lines, quota and failure reasons."""

    program = ""
    login_hint = ""  # what to do when not logged in, e.g. "run `claude login` or set ANTHROPIC_API_KEY"
    default_model: str | None = None  # the CLI's own default, used to price its tokens
    quota_pattern: re.Pattern[str] | None = None
    # Stricter pattern for stderr, where stack dumps and debug logs print bare status codes;
    # None uses quota_pattern.
    stderr_quota_pattern: re.Pattern[str] | None = None

    def __init__(self, candidate: CandidateSpec, prices: Mapping[str, Price] | None = None) -> None:
        super().__init__(candidate, prices)
        self.model = candidate.model or self.default_model
        # Error texts seen in error-bearing events, for the failure reason.
        self.errors: list[str] = []
        # The agent said its run failed (failed result, turn.failed, error event), whatever its exit code.
        self.failed = False
        # "Now" for reset times written relative to it ("resets 4pm"); replaceable in tests.
        self.clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    # -- lines ---------------------------------------------------------------------------------
    def decode_line(self, line: str) -> list[AgentEvent] | None:
        message = parse_json_object(line)
        if message is None:
            if len(line) > HUGE_LINE:
                return [log(line[:LOG_KEEP] + f" … [line of {len(line)} chars cut]")]
            return self.decode_text(line)
        return self.decode_message(message)

    def decode_message(self, message: dict[str, Any]) -> list[AgentEvent] | None:
        """Events for one JSON object; None keeps the raw line as log text."""
        return None

    def decode_text(self, line: str) -> list[AgentEvent] | None:
        """Events for a line that is not JSON; None keeps it as log text."""
        return None

    def decode_stderr(self, line: str) -> list[AgentEvent] | None:
        if len(line) > HUGE_LINE:
            line = line[:LOG_KEEP] + f" … [line of {len(line)} chars cut]"
            return [log(line, "stderr")]
        if self.is_stderr_quota_text(line):
            events = [log(line, "stderr")]
            events.extend(self.note_quota(line))
            return events
        return None

    # -- quota ---------------------------------------------------------------------------------
    def note_quota(self, message: str, reset_at: str | None = None) -> list[AgentEvent]:
        """Record a quota; a later report replaces an earlier one only if it adds a reset time."""
        message = first_line(message) or "quota reached"
        if reset_at is None:
            reset_at = parse_reset(message, self.clock())
        if self.quota is not None and (self.quota.reset_at is not None or reset_at is None):
            return []
        self.quota = Quota(message, reset_at)
        return [AgentEvent(EventKind.QUOTA, self.quota.to_json())]

    def is_quota_text(self, text: str) -> bool:
        return bool(self.quota_pattern is not None and text and self.quota_pattern.search(text))

    def is_stderr_quota_text(self, line: str) -> bool:
        """Whether one stderr line reports a quota."""
        pattern = self.stderr_quota_pattern or self.quota_pattern
        return bool(pattern is not None and line and pattern.search(line))

    # -- end -----------------------------------------------------------------------------------
    def finalise_usage(self, exit_code: int) -> None:
        """Install the final, authoritative usage (subclasses)."""

    def interrupted(self) -> None:
        self.finalise_usage(-1)
        super().interrupted()

    def succeeded(self, exit_code: int) -> bool:
        return exit_code == 0 and not self.failed

    def finish(self, exit_code: int, stderr_tail: str) -> AgentOutcome:
        self.finalise_usage(exit_code)
        if self.stop is not None and self.quota is None:
            return AgentOutcome(False, self.stop, None, self.result)
        if self.succeeded(exit_code):
            # A quota warning during a run that still finished is not a failure.
            return AgentOutcome(True, None, None, self.result)
        if self.quota is None:
            for line in reversed(stderr_tail.splitlines()):
                if self.is_stderr_quota_text(line):
                    self.note_quota(line)
                    break
        if self.quota is not None:
            return AgentOutcome(False, self.quota.reason(), self.quota, self.result)
        return AgentOutcome(False, self.failure_reason(exit_code, stderr_tail), None, self.result)

    def failure_reason(self, exit_code: int, stderr_tail: str) -> str:
        if self.failure:
            return self.failure
        texts = [*self.errors, stderr_tail]
        if any(is_login_failure(text) for text in texts):
            return f"not logged in: {self.login_hint}"
        for text in texts:
            match = _PERMISSION_DENIED.search(text or "")
            if match:
                return f"permission denied: {_line_around(text, match.start())}"
        detail = first_line(self.errors[-1]) if self.errors else last_line(stderr_tail)
        if exit_code < 0:
            head = f"{self.program} was killed by signal {-exit_code}"
        elif exit_code == 0:
            head = f"{self.program} reported a failure"
        else:
            head = f"{self.program} exited with code {exit_code}"
        return head + (f": {detail}" if detail else "")


def _line_around(text: str, index: int) -> str:
    start = text.rfind("\n", 0, index) + 1
    end = text.find("\n", index)
    return text[start : end if end >= 0 else None].strip()[:300]
