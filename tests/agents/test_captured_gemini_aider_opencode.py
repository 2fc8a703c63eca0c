"""Gemini CLI 0.61.0, opencode 1.18.33 and aider 0.86.2 as they really print: every transcript here
was captured from the real program run against a stand-in model server on 127.0.0.1 (the server's
figures are the ones asserted), with only the install path in stack traces shortened."""

from __future__ import annotations

from datetime import UTC, datetime

from outpost_tui.engine.agents import adapter_for
from outpost_tui.engine.agents.aider import APPROXIMATE, COLUMNS
from outpost_tui.engine.core.usage import Usage
from tests.agents.replay import candidate, decoder_for, feed, kinds, of_kind, transcript
from tests.agents.test_gemini_aider_opencode import CONTEXT

NOW = datetime(2026, 12, 1, 14, 10, tzinfo=UTC)


def decoder(agent: str, **options):
    made = decoder_for(agent, **options)
    made.clock = lambda: NOW
    return made


def stderr_tail(name: str) -> str:
    return "\n".join(transcript(name))


# -- Gemini CLI 0.61.0 --------------------------------------------------------------------------


def test_gemini_usage_counts_thinking_tokens_and_prices_the_model_named_in_the_stats():
    gemini = decoder("gemini")
    events = feed(gemini, transcript("gemini_061_fix.jsonl"))
    # the start event says "auto"; the model that answered is the key of stats.models
    assert "model auto" not in " ".join(str(e.data) for e in events)
    assert gemini.model == "gemini-2.5-pro"
    # server: 3 turns + the router call = 3910 prompt (200 cached), 75 output, 40 thinking tokens
    thinking = 4025 - 3910 - 75
    assert thinking == 40
    cost = (3710 * 1.25 + 200 * 0.125 + (75 + thinking) * 10.0) / 1e6
    assert gemini.usage == Usage(input=3710, cached=200, output=115, cost_usd=round(cost, 6), estimated=True)
    assert gemini.usage.cost_usd > 0
    assert gemini.finish(0, "").ok


def test_gemini_untrusted_folder_reason_is_one_plain_line():
    gemini = decoder("gemini")
    outcome = gemini.finish(55, stderr_tail("gemini_061_untrusted.stderr"))
    assert "\x1b" in stderr_tail("gemini_061_untrusted.stderr")  # the raw colour escape
    assert outcome.reason.startswith(
        "the worktree is not trusted: Gemini CLI is not running in a trusted directory"
    )
    assert "\x1b" not in outcome.reason and "[31m" not in outcome.reason


def test_gemini_exit_41_keeps_the_programs_own_message():
    invalid = decoder("gemini").finish(41, stderr_tail("gemini_061_invalid_auth.stderr"))
    assert invalid.reason == "authentication failed: Invalid auth method selected."
    missing = decoder("gemini").finish(41, stderr_tail("gemini_061_no_key.stderr"))
    assert missing.reason == "not logged in: run `gemini` once to sign in, or set GEMINI_API_KEY"


def test_gemini_per_minute_limit_and_overload_are_retries_not_quotas():
    for name in ("gemini_061_rate_limit_retry.stderr", "gemini_061_overloaded_retry.stderr"):
        gemini = decoder("gemini")
        events = feed(gemini, transcript(name), "stderr")
        [retry] = of_kind(events, "retry")
        assert retry["retry"] == 1
        assert gemini.quota is None and "quota" not in kinds(events)
    gemini = decoder("gemini")
    feed(gemini, transcript("gemini_061_rate_limit_retry.stderr"), "stderr")
    feed(gemini, transcript("gemini_061_rate_limit_retry.jsonl"))
    outcome = gemini.finish(0, stderr_tail("gemini_061_rate_limit_retry.stderr"))
    assert outcome.ok and outcome.quota is None
    assert gemini.usage.input == 510 and gemini.usage.output == 15


def test_gemini_network_errors_show_as_retries():
    gemini = decoder("gemini")
    events = feed(gemini, transcript("gemini_061_offline.stderr"), "stderr")
    retries = of_kind(events, "retry")
    assert len(retries) == 7 and all("fetch failed" in r["message"] for r in retries)
    assert gemini.quota is None


def test_gemini_daily_quota_has_no_midnight_reset_from_the_report_file_name():
    gemini = decoder("gemini")
    events = feed(gemini, transcript("gemini_061_daily_quota.stderr"), "stderr")
    feed(gemini, transcript("gemini_061_daily_quota.jsonl"))
    outcome = gemini.finish(1, stderr_tail("gemini_061_daily_quota.stderr"))
    assert not outcome.ok and outcome.quota is not None
    # the report is named …-2026-12-01T14-09-48-435Z.json: that is not a reset time
    assert outcome.quota.reset_at is None
    assert outcome.quota.message == "TerminalQuotaError: You have exhausted your daily quota on this model."
    assert outcome.reason == f"quota: {outcome.quota.message}"
    assert len(of_kind(events, "quota")) == 1


# -- opencode 1.18.33 ---------------------------------------------------------------------------


def test_opencode_launch_prints_its_error_logs_on_stderr():
    launch = adapter_for("opencode").launch(candidate("opencode", model="stand/gpt-4o"), "Fix it.", CONTEXT)
    assert launch.argv == (
        "opencode",
        "run",
        "--format",
        "json",
        "-m",
        "stand/gpt-4o",
        "--auto",
        "--print-logs",
        "--log-level",
        "ERROR",
        "Fix it.",
    )


def test_opencode_zero_cost_for_a_model_the_table_knows_is_priced_and_estimated():
    opencode = decoder("opencode", model="stand/gpt-4o")
    feed(opencode, transcript("opencode_11833_fix.jsonl"))
    # gpt-4o: $2.50 input, $1.25 cached, $10 output per million; opencode said 0 for each step
    cost = (3700 * 2.5 + 200 * 1.25 + 70 * 10.0) / 1e6
    assert opencode.usage == Usage(
        input=3700, cached=200, output=70, cost_usd=round(cost, 10), estimated=True
    )
    unknown = decoder("opencode", model="stand/house-model")
    feed(unknown, transcript("opencode_11833_fix.jsonl"))
    assert unknown.usage.cost_usd == 0 and not unknown.usage.estimated


def test_opencode_long_retry_after_stops_it_on_the_quota_with_its_reset_time():
    opencode = decoder("opencode", model="stand/gpt-4o")
    events = feed(opencode, transcript("opencode_11833_rate_limit.stderr"), "stderr")
    assert [r["message"] for r in of_kind(events, "retry")] == [
        "Rate limit reached for gpt-4o. Please try again in 1h."
    ]
    [quota] = of_kind(events, "quota")
    assert quota["reset_at"] == "2026-12-01T15:10:00Z"
    assert opencode.stop is not None  # the engine stops it instead of letting it wait an hour
    outcome = opencode.finish(-15, "")
    assert outcome.quota is not None and outcome.reason == (
        "quota: Rate limit reached for gpt-4o. Please try again in 1h. (resets 2026-12-01T15:10:00Z)"
    )


def test_opencode_short_rate_limit_is_a_retry_and_a_finished_step_clears_it():
    opencode = decoder("opencode", model="stand/gpt-4o")
    line = (
        'timestamp=2026-12-01T14:15:44.208Z level=ERROR run=19bfe574 message="stream error" '
        'providerID=stand modelID=gpt-4o error.error="AI_APICallError: Too Many Requests"'
    )
    events = feed(opencode, [line], "stderr")
    assert kinds(events) == ["log", "retry"] and opencode.stop is None
    # timed out still waiting: the quota, not "timed out"
    waiting = decoder("opencode", model="stand/gpt-4o")
    feed(waiting, [line], "stderr")
    assert waiting.finish(-9, "").quota.message == "Too Many Requests"
    feed(opencode, transcript("opencode_11833_fix.jsonl"))
    assert opencode.finish(0, "").ok and opencode.quota is None


# -- aider 0.86.2 -------------------------------------------------------------------------------


def test_aider_launch_sets_the_width_and_logs_analytics_to_stderr():
    launch = adapter_for("aider").launch(candidate("aider", model="gpt-4o"), "Fix it.", CONTEXT)
    assert launch.argv == (
        "aider",
        "--message",
        "Fix it.",
        "--yes-always",
        "--no-pretty",
        "--no-stream",
        "--no-check-update",
        "--no-show-model-warnings",
        "--no-gitignore",
        "--no-analytics",
        "--analytics-log",
        "/dev/stderr",
        "--model",
        "gpt-4o",
    )
    assert launch.env == {"TZ": "UTC", "COLUMNS": COLUMNS} and int(COLUMNS) >= 1000


def test_aider_usage_comes_exact_from_its_analytics_log_and_is_marked_estimated():
    aider = decoder("aider", model="gpt-4o")
    events = feed(aider, transcript("aider_0862_fix.txt"))
    # the Tokens line alone: "5.7k sent, 61 received. Cost: $0.01"
    assert aider.usage == Usage(input=5700, output=61, cost_usd=0.01, estimated=True)
    assert of_kind(events, "file-change") == [{"path": "calc.py", "change": "update"}]
    events = feed(aider, transcript("aider_0862_fix.stderr"), "stderr")
    assert aider.usage == Usage(input=5734, output=61, cost_usd=0.013665, estimated=True)
    # it says once what is approximate; the analytics bookkeeping is not shown
    assert [line for e in of_kind(events, "log") for line in e["lines"]] == [
        "Warning: Input is not a terminal (fd=0).",
        APPROXIMATE,
    ]
    assert aider.finish(0, "").ok


def test_aider_cache_split_comes_from_its_tokens_lines_the_totals_from_the_log():
    aider = decoder("aider", model="claude-sonnet-4-5")
    feed(
        aider,
        [
            "Tokens: 14k sent, 1.5k cache write, 12k cache hit, 87 received.",
            "Cost: $0.01 message, $0.04 session.",
        ],
    )
    feed(
        aider,
        [
            '{"event": "message_send", "properties": {"prompt_tokens": 14210, '
            '"completion_tokens": 87, "cost": 0.0123, "total_cost": 0.0412}}'
        ],
        "stderr",
    )
    assert aider.usage == Usage(
        input=14210 - 12000 - 1500, cached=12000, cache_write=1500, output=87, cost_usd=0.0412, estimated=True
    )


def test_aider_without_network_fails_with_the_real_cause():
    aider = decoder("aider", model="gpt-4o")
    events = feed(aider, transcript("aider_0862_offline.txt"))
    assert [r["delay_ms"] for r in of_kind(events, "retry")] == [
        200,
        500,
        1000,
        2000,
        4000,
        8000,
        16000,
        32000,
    ]
    outcome = aider.finish(0, "")  # aider exits 0 after giving up
    assert not outcome.ok and outcome.reason.startswith(
        "cannot reach the model API (aider gave up retrying): litellm.InternalServerError"
    )


def test_aider_browser_sign_in_is_stopped_at_once():
    aider = decoder("aider")
    feed(aider, transcript("aider_0862_sign_in.txt")[:2])
    assert aider.stop is not None and aider.stop.startswith("not logged in: aider found no model")
    outcome = aider.finish(-15, "")
    assert not outcome.ok and outcome.reason == aider.stop
