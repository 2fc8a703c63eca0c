"""aider (`aider --message … --yes-always`), which prints text only.

Launch: one message, every confirmation answered yes, no pretty output, no update check, no
analytics, no .gitignore edit. aider commits its own edits (auto-commits stay on), which is what
a race needs. It has no max-turns option and no tool list.

Usage: one "Tokens: … sent, … received. Cost: $x message, $y session." line per LLM call. Tokens
are added up per call; "sent" counts the whole prompt including cache hits and writes, so
uncached input = sent - cache write - cache hit. The session cost is already cumulative, so the
last one wins; without a Cost part (unpriced model) the table prices it and marks it estimated.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

from ..events import EventKind
from ..spec import CandidateSpec, Price
from ..usage import Usage
from .agentcli import CliDecoder, as_argument, log
from .base import AgentAdapter, AgentEvent, Decoder, Launch, LaunchContext, brief_fits_inline
from .prices import with_estimated_cost

_TOKENS = re.compile(
    r"Tokens: ([\d.]+[kKmM]?) sent(?:, ([\d.]+[kKmM]?) cache write)?(?:, ([\d.]+[kKmM]?) cache hit)?,"
    r" ([\d.]+[kKmM]?) received\.\s*(?:Cost: \$([\d.]+) message, \$([\d.]+) session\.)?"
)
_COST_ONLY = re.compile(r"^\s*Cost: \$([\d.]+) message, \$([\d.]+) session\.")
_MODEL = re.compile(r"^(?:Main model|Model): (\S+)")
_APPLIED = re.compile(r"^Applied edit to (.+?)\s*$")
_RATE_LIMITED = re.compile(r"rate limited you|RateLimitError", re.IGNORECASE)
_RETRYING = re.compile(r"^Retrying in ([\d.]+) seconds", re.IGNORECASE)
_QUOTA_TEXT = re.compile(r"exceeded your current quota|insufficient_quota|credit balance is too low"
                         r"|quota exceeded|usage limit", re.IGNORECASE)
# aider prints the model's prose on stdout too: quota phrases count only on error lines.
_ERROR_LINE = re.compile(r"litellm\.\w+|\w+(?:Exception|Error)\b")
_FATAL = re.compile(r"AuthenticationError|Missing these environment variables|has hit a token limit"
                    r"|NotFoundError|BadRequestError|PermissionDeniedError", re.IGNORECASE)
_API_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "DEEPSEEK_API_KEY",
             "OPENROUTER_API_KEY", "GROQ_API_KEY", "MISTRAL_API_KEY", "XAI_API_KEY")


def tokens(text: str | None) -> int:
    """aider's format_tokens in reverse: "512", "4.2k", "12k"."""
    if not text:
        return 0
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1].lower(), 1)
    number = text[:-1] if scale > 1 else text
    try:
        return int(round(float(number) * scale))
    except ValueError:
        return 0


class AiderDecoder(CliDecoder):
    program = "aider"
    login_hint = "set the model provider's API key (e.g. ANTHROPIC_API_KEY or OPENAI_API_KEY)"
    quota_pattern = _QUOTA_TEXT

    def __init__(self, candidate: CandidateSpec, prices: Mapping[str, Price] | None = None) -> None:
        super().__init__(candidate, prices)
        self._tokens = Usage()
        self._session_cost: float | None = None
        self._rate_limited: str | None = None  # a rate limit not yet followed by a good call

    def decode_text(self, line: str) -> list[AgentEvent] | None:
        usage = _TOKENS.search(line)
        if usage:
            self._count(usage)
            return None
        cost = _COST_ONLY.match(line)  # the Cost part on its own line when both cache parts appear
        if cost:
            self._session_cost = float(cost.group(2))
            self._refresh()
            return None
        model = _MODEL.match(line)
        if model and not self.candidate.model:
            self.model = model.group(1)
            return None
        applied = _APPLIED.match(line)
        if applied:
            change = {"path": applied.group(1), "change": "update"}
            return [log(line), AgentEvent(EventKind.FILE_CHANGE, change)]
        retrying = _RETRYING.match(line)
        if retrying and self._rate_limited:
            return [AgentEvent(EventKind.RETRY, {"message": f"{self._rate_limited}; {line.strip()}",
                                                 "retry": 0,
                                                 "delay_ms": int(float(retrying.group(1)) * 1000)})]
        if self.is_quota_text(line) and _ERROR_LINE.search(line):
            self.failed = True
            return [log(line), *self.note_quota(line)]
        if _RATE_LIMITED.search(line):
            self._rate_limited = line.strip()[:300]
            return None
        if _FATAL.search(line):
            self.failed = True
            self.errors.append(line.strip())
        return None

    def _count(self, match: re.Match) -> None:
        sent, write, hit, received = (tokens(match.group(index)) for index in (1, 2, 3, 4))
        self._tokens = self._tokens + Usage(input=max(0, sent - write - hit), cached=hit,
                                            cache_write=write, output=received)
        if match.group(6):
            self._session_cost = float(match.group(6))
        self._rate_limited = None
        self._refresh()

    def _refresh(self) -> None:
        if self._session_cost is None:
            self.usage = with_estimated_cost(self._tokens, self.model, self.prices)
        else:
            self.usage = Usage(input=self._tokens.input, cached=self._tokens.cached,
                               cache_write=self._tokens.cache_write, output=self._tokens.output,
                               cost_usd=round(self._session_cost, 6), estimated=False)

    def finalise_usage(self, exit_code: int) -> None:
        if self._rate_limited and self.quota is None:
            # aider gave up retrying and ended without another successful call.
            self.failed = True
            self.note_quota(self._rate_limited)


class AiderAgent(AgentAdapter):
    kind = "aider"
    program = "aider"
    install_hint = "python -m pip install aider-install && aider-install"

    def launch(self, candidate: CandidateSpec, brief: str, context: LaunchContext) -> Launch:
        if candidate.max_turns:
            raise ValueError(f"candidate {candidate.key!r}: aider has no max-turns option; remove max_turns")
        if candidate.allowed_tools is not None:
            raise ValueError(f"candidate {candidate.key!r}: aider takes no tool list; remove allowed_tools")
        # aider reads a large brief from its file (--message-file) rather than from argv
        message = (["--message", as_argument(brief)]
                   if brief_fits_inline(brief) or context.brief_file is None
                   else ["--message-file", str(context.brief_file)])
        argv = [self.program, *message, "--yes-always", "--no-pretty",
                "--no-stream", "--no-check-update", "--no-show-model-warnings", "--no-gitignore",
                "--no-analytics"]
        if candidate.model:
            argv += ["--model", candidate.model]
        argv += list(candidate.args)
        return Launch(argv=tuple(argv), env={"TZ": "UTC"}, stdin=None)

    def decoder(self, candidate: CandidateSpec, prices: Mapping[str, Price] | None = None) -> Decoder:
        return AiderDecoder(candidate, prices)

    @staticmethod
    def auth_status(env: Mapping[str, str], home: Path) -> tuple[bool | None, str]:
        present = [name for name in _API_KEYS if env.get(name)]
        if present:
            return True, f"{', '.join(present)} set"
        # Keys can also live in .aider.conf.yml or a .env file, which are not read here.
        return None, "no provider API key in the environment (aider may read one from .env)"
