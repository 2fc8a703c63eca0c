"""aider (`aider --message … --yes-always`), which prints text only.

Launch: one message, every confirmation answered yes, no pretty output, no update check, no
analytics sent anywhere, no .gitignore edit. aider commits its own edits (auto-commits stay on),
which is what a race needs. It has no max-turns option and no tool list. `--yes-always` never
approves shell commands, so aider does not run the tests itself (validation still decides).
COLUMNS is set wide: aider wraps even `--no-pretty` output at the terminal width (80 without a
terminal), which would split quota messages and its Tokens/Cost lines.

Usage: its analytics log, written to stderr (`--analytics-log /dev/stderr`, nothing is sent),
has one `message_send` event per LLM call with the exact prompt and completion tokens and aider's
own cost figures; the "Tokens: … sent, … cache write, … cache hit, … received. Cost: $x message,
$y session." lines round tokens ("5.7k") and cost (two decimals) but split out cache writes and
hits, so the split comes from them and the totals from the log. Always marked estimated: aider's
cost is its own computation from litellm's prices, its commit-message calls are counted nowhere,
and OpenAI's cached tokens are not reported (they are counted as uncached input). Without the
log (an older aider) the rounded lines are used.

Failures: with no model and no key, aider starts a browser sign-in (OpenRouter) and waits five
minutes: it is stopped at once, and so is an exhausted quota (credit, not a rate limit), which it
would retry for a minute. API errors it retries ("litellm.…Error" then "Retrying in N
seconds...") are retries; a run that ends after one without a successful call failed for that
reason (a rate limit is a quota), even though aider exits 0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from ..core.events import EventKind
from ..core.spec import CandidateSpec, Price
from ..core.usage import Usage
from .agentcli import CliDecoder, as_dict, count, log, money
from .base import (
    AgentAdapter,
    AgentEvent,
    Decoder,
    Launch,
    LaunchContext,
    as_argument,
    brief_fits_inline,
    parse_json_object,
    state_paths,
)
from .prices import with_estimated_cost
from .reachability import NETWORK, RATE_LIMITED, SERVER_ERROR

_TOKENS = re.compile(
    r"Tokens: ([\d.]+[kKmM]?) sent(?:, ([\d.]+[kKmM]?) cache write)?(?:, ([\d.]+[kKmM]?) cache hit)?,"
    r" ([\d.]+[kKmM]?) received\.\s*(?:Cost: \$([\d.]+) message, \$([\d.]+) session\.)?"
)
_COST_ONLY = re.compile(r"^\s*Cost: \$([\d.]+) message, \$([\d.]+) session\.")
_MODEL = re.compile(r"^(?:Main model|Model): (\S+)")
_APPLIED = re.compile(r"^Applied edit to (.+?)\s*$")
_RATE_LIMITED = re.compile(r"rate limited you|RateLimitError", re.IGNORECASE)
# litellm's exception line, printed before aider's explanation and its "Retrying in" line.
_API_ERROR = re.compile(r"^litellm\.(\w+): (.*)")
_BROWSER_SIGN_IN = re.compile(
    r"No LLM model was specified and no API keys were provided"
    r"|Waiting up to \d+ minutes for you to finish in the browser"
    r"|connect Aider with OpenRouter",
    re.IGNORECASE,
)
_CONNECTION = re.compile(
    r"APIConnectionError|Connection error|connect(?:ion)? (?:refused|timed out)"
    r"|Name or service not known|Temporary failure in name resolution",
    re.IGNORECASE,
)
# Wide enough that no line aider prints is wrapped.
COLUMNS = "10000"
APPROXIMATE = (
    "aider usage is estimated: cost is aider's own figure, its commit-message calls "
    "are not counted and cached tokens of OpenAI models are not reported"
)
_RETRYING = re.compile(r"^Retrying in ([\d.]+) seconds", re.IGNORECASE)
_QUOTA_TEXT = re.compile(
    r"exceeded your current quota|insufficient_quota|credit balance is too low"
    r"|quota exceeded|usage limit",
    re.IGNORECASE,
)
# aider prints the model's prose on stdout too: quota phrases count only on error lines.
_ERROR_LINE = re.compile(r"litellm\.\w+|\w+(?:Exception|Error)\b")
_FATAL = re.compile(
    r"AuthenticationError|Missing these environment variables|has hit a token limit"
    r"|NotFoundError|BadRequestError|PermissionDeniedError",
    re.IGNORECASE,
)
_API_KEYS = (
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "DEEPSEEK_API_KEY",
    "OPENROUTER_API_KEY",
    "GROQ_API_KEY",
    "MISTRAL_API_KEY",
    "XAI_API_KEY",
)


def tokens(text: str | None) -> int:
    """aider's format_tokens in reverse: "512", "4.2k", "12k"."""
    if not text:
        return 0
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1].lower(), 1)
    number = text[:-1] if scale > 1 else text
    try:
        return round(float(number) * scale)
    except ValueError:
        return 0


class AiderDecoder(CliDecoder):
    program = "aider"
    login_hint = "set the model provider's API key (e.g. ANTHROPIC_API_KEY or OPENAI_API_KEY)"
    quota_pattern = _QUOTA_TEXT

    def __init__(self, candidate: CandidateSpec, prices: Mapping[str, Price] | None = None) -> None:
        super().__init__(candidate, prices)
        self._tokens = Usage()  # from the Tokens lines: rounded, with the cache split
        self._session_cost: float | None = None
        self._logged = Usage()  # from the analytics log: exact sent/received totals
        self._logged_cost: float | None = None
        self._log_seen = False
        self._rate_limited: str | None = None  # a rate limit not yet followed by a good call
        self._api_error: str | None = None  # another API error not yet followed by a good call
        self._retries = 0

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
        if _BROWSER_SIGN_IN.search(line) and self.stop is None:
            self.stop = (
                "not logged in: aider found no model and no API key and started a browser "
                f"sign-in (OpenRouter), which a race cannot finish; {self.login_hint} "
                "or give the candidate a model"
            )
            return [log(line)]
        retrying = _RETRYING.match(line)
        pending = self._rate_limited or self._api_error
        if retrying and pending:
            self._retries += 1
            cause = (
                RATE_LIMITED
                if self._rate_limited
                else NETWORK
                if _CONNECTION.search(pending)
                else SERVER_ERROR
            )
            return [
                AgentEvent(
                    EventKind.RETRY,
                    {
                        "message": f"{pending}; {line.strip()}",
                        "retry": self._retries,
                        "cause": cause,
                        "delay_ms": int(float(retrying.group(1)) * 1000),
                    },
                )
            ]
        if self.is_quota_text(line) and _ERROR_LINE.search(line):
            # out of credit: aider would retry it for a minute, to no avail
            self.failed = True
            events = [log(line), *self.note_quota(line)]
            self.stop = self.stop or f"quota: {line.strip()[:300]}"
            return events
        if _RATE_LIMITED.search(line):
            self._rate_limited = line.strip()[:300]
            return None
        if _FATAL.search(line):
            self.failed = True
            self.errors.append(line.strip())
            return None
        api_error = _API_ERROR.match(line)
        if api_error:
            self._api_error = line.strip()[:300]
        return None

    def decode_stderr(self, line: str) -> list[AgentEvent] | None:
        entry = parse_json_object(line)
        if entry is None or "event" not in entry:
            return super().decode_stderr(line)
        if entry.get("event") != "message_send":
            return []  # analytics bookkeeping (launched, repo, exit …)
        figures = as_dict(entry.get("properties"))
        first = not self._log_seen
        self._log_seen = True
        self._logged = self._logged + Usage(
            input=count(figures.get("prompt_tokens")), output=count(figures.get("completion_tokens"))
        )
        total = money(figures.get("total_cost"))
        if total is not None:
            self._logged_cost = total
        self._good_call()
        return [log(APPROXIMATE, "stderr")] if first else []

    def _count(self, match: re.Match[str]) -> None:
        sent, write, hit, received = (tokens(match.group(index)) for index in (1, 2, 3, 4))
        self._tokens = self._tokens + Usage(
            input=max(0, sent - write - hit), cached=hit, cache_write=write, output=received
        )
        if match.group(6):
            self._session_cost = float(match.group(6))
        self._good_call()

    def _good_call(self) -> None:
        self._rate_limited = None
        self._api_error = None
        self._refresh()

    def _refresh(self) -> None:
        if self._log_seen:
            # exact totals from the log, the cache split from the (rounded) Tokens lines
            split = self._tokens
            sent = self._logged.input
            cached = min(split.cached, sent)
            write = min(split.cache_write, sent - cached)
            tallied = Usage(
                input=sent - cached - write, cached=cached, cache_write=write, output=self._logged.output
            )
            cost = self._logged_cost if self._logged_cost is not None else self._session_cost
        else:
            tallied, cost = self._tokens, self._session_cost
        if cost is None or (cost == 0 and tallied.tokens):
            self.usage = with_estimated_cost(tallied, self.model, self.prices)
        else:
            self.usage = Usage(
                input=tallied.input,
                cached=tallied.cached,
                cache_write=tallied.cache_write,
                output=tallied.output,
                cost_usd=round(cost, 6),
                estimated=True,
            )

    def finalise_usage(self, exit_code: int) -> None:
        if self._rate_limited and self.quota is None:
            # aider gave up retrying and ended without another successful call.
            self.failed = True
            self.note_quota(self._rate_limited)
        elif self._api_error and self.failure is None:
            self.failed = True
            cause = (
                "cannot reach the model API"
                if _CONNECTION.search(self._api_error)
                else "the model API call failed"
            )
            self.failure = f"{cause} (aider gave up retrying): {self._api_error}"


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
        message = (
            ["--message", as_argument(brief)]
            if brief_fits_inline(brief) or context.brief_file is None
            else ["--message-file", str(context.brief_file)]
        )
        argv = [
            self.program,
            *message,
            "--yes-always",
            "--no-pretty",
            "--no-stream",
            "--no-check-update",
            "--no-show-model-warnings",
            "--no-gitignore",
            "--no-analytics",
            "--analytics-log",
            "/dev/stderr",
        ]
        if candidate.model:
            argv += ["--model", candidate.model]
        argv += list(candidate.args)
        state = state_paths(candidate, (None, ".aider"))
        return Launch(argv=tuple(argv), env={"TZ": "UTC", "COLUMNS": COLUMNS}, stdin=None, state=state)

    def decoder(self, candidate: CandidateSpec, prices: Mapping[str, Price] | None = None) -> Decoder:
        return AiderDecoder(candidate, prices)

    def api_endpoint(self, env: Mapping[str, str], home: Path) -> str | None:
        # only when it is set: otherwise the provider follows from the model, decided by litellm
        return env.get("OPENAI_API_BASE") or None

    @staticmethod
    def auth_status(env: Mapping[str, str], home: Path) -> tuple[bool | None, str]:
        present = [name for name in _API_KEYS if env.get(name)]
        if present:
            return True, f"{', '.join(present)} set"
        # Keys can also live in .aider.conf.yml or a .env file, which are not read here.
        return None, "no provider API key in the environment (aider may read one from .env)"
