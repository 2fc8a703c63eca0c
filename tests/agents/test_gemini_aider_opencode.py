"""Gemini CLI, aider and opencode: command lines, decoding, usage, quota and failure reasons."""

from __future__ import annotations

import subprocess
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from outpost_tui.engine.agents import LaunchContext, adapter_for
from outpost_tui.engine.agents.aider import tokens
from outpost_tui.engine.core.spec import Price
from outpost_tui.engine.core.usage import Usage
from tests.agents.replay import candidate, decoder_for, feed, kinds, of_kind, transcript

CONTEXT = LaunchContext(directory=Path("/wt/fix"), git_common_dir=Path("/repo/.git"))
NOW = datetime(2026, 1, 5, 11, 0, 30, tzinfo=UTC)


def decoder(agent: str, **options):
    made = decoder_for(agent, **options)
    made.clock = lambda: NOW
    return made


# -- gemini ------------------------------------------------------------------------------------


def test_gemini_command_line(tmp_path, monkeypatch):
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(name, raising=False)
    worktree = tmp_path / "wt"
    subprocess.run(["git", "init", "-q", str(worktree)], check=True)
    subprocess.run(["git", "-C", str(worktree), "config", "user.name", "Ada Lovelace"], check=True)
    subprocess.run(["git", "-C", str(worktree), "config", "user.email", "ada@example.com"], check=True)
    context = LaunchContext(directory=worktree, git_common_dir=worktree / ".git")
    adapter = adapter_for("gemini")
    launch = adapter.launch(
        candidate("gemini", model="gemini-2.5-pro", args=("--debug",)), "Fix add().", context
    )
    # 0.61 trusts no folder in headless mode: without --skip-trust it exits 55 at once
    assert launch.argv == (
        "gemini",
        "-p",
        "Fix add().",
        "--output-format",
        "stream-json",
        "--skip-trust",
        "--approval-mode",
        "yolo",
        "-m",
        "gemini-2.5-pro",
        "--debug",
    )
    # its shell runs git with GIT_CONFIG_GLOBAL=/dev/null: the identity travels in the environment
    assert launch.env == {
        "TZ": "UTC",
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GIT_AUTHOR_NAME": "Ada Lovelace",
        "GIT_COMMITTER_NAME": "Ada Lovelace",
        "GIT_AUTHOR_EMAIL": "ada@example.com",
        "GIT_COMMITTER_EMAIL": "ada@example.com",
    }
    assert launch.stdin is None and launch.files == {}
    own = adapter.launch(candidate("gemini", env={"GIT_AUTHOR_NAME": "Bot"}), "x", context)
    assert "GIT_AUTHOR_NAME" not in own.env and own.env["GIT_COMMITTER_NAME"] == "Ada Lovelace"
    # --allowed-tools is deprecated in 0.61: a policy file allows the listed tools instead
    limited = adapter.launch(
        candidate("gemini", allowed_tools=("run_shell_command(git)", "replace")), "x", context
    )
    policy = worktree / ".git" / "outpost-gemini-policy.toml"
    assert limited.argv[5:] == ("--skip-trust", "--approval-mode", "auto_edit", "--policy", str(policy))
    rules = tomllib.loads(limited.files[str(policy)])["rule"]
    assert rules == [
        {"toolName": "run_shell_command", "commandPrefix": "git", "decision": "allow", "priority": 100},
        {"toolName": "replace", "decision": "allow", "priority": 100},
    ]
    assert not policy.exists()  # written by the engine just before the agent starts
    with pytest.raises(ValueError, match="gemini has no max-turns option"):
        adapter.launch(candidate("gemini", max_turns=3), "x", CONTEXT)


def test_gemini_stream_decodes_deltas_tools_and_session_usage():
    gemini = decoder("gemini")
    events = feed(gemini, transcript("gemini_fix.jsonl"))
    assert kinds(events) == [
        "log",
        "text",
        "tool",
        "tool-result",
        "tool",
        "tool-result",
        "file-change",
        "tool",
        "tool-result",
        "log",
        "text",
    ]
    texts = of_kind(events, "text")
    assert texts == [{"text": "I'll read calc.py first."}, {"text": "Fixed add()."}]
    assert of_kind(events, "file-change") == [{"path": "/wt/g/calc.py", "change": "update"}]
    failed = of_kind(events, "tool-result")[2]
    assert failed == {
        "name": "run_shell_command",
        "output": "fatal: unable to auto-detect email address",
        "error": True,
    }
    expected = (17900 * 1.25 + 41000 * 0.125 + 2300 * 10) / 1e6
    assert gemini.usage == Usage(
        input=17900, cached=41000, output=2300, cost_usd=round(expected, 6), estimated=True
    )
    outcome = gemini.finish(0, "")
    assert outcome.ok and outcome.result == "Fixed add()."


def test_gemini_quota_with_a_reset_duration_and_a_quota_metric():
    gemini = decoder("gemini")
    feed(gemini, transcript("gemini_quota.jsonl"))
    outcome = gemini.finish(1, "")
    assert outcome.quota is not None and outcome.quota.reset_at == "2026-01-05T13:53:09Z"
    metric = decoder("gemini")
    feed(metric, transcript("gemini_quota_metric.jsonl"))
    outcome = metric.finish(1, "")
    assert outcome.quota is not None and outcome.quota.reset_at is None
    assert "Quota exceeded for quota metric" in outcome.quota.message
    assert metric.usage.input == 1000 and metric.usage.estimated


def test_gemini_backoff_on_stderr_is_a_retry_not_a_quota():
    gemini = decoder("gemini")
    events = gemini.decode(transcript("gemini_retry.stderr"), "stderr")
    assert kinds(events) == ["log", "retry", "retry"]
    assert [r["retry"] for r in of_kind(events, "retry")] == [1, 2]
    feed(gemini, transcript("gemini_fix.jsonl"))
    assert gemini.finish(0, "").ok and gemini.quota is None


def test_gemini_single_object_json_form():
    gemini = decoder("gemini")
    [line] = transcript("gemini_json.json")
    events = gemini.decode([line])
    assert of_kind(events, "text") == [{"text": "Fixed add() in calc.py."}]
    assert (gemini.usage.input, gemini.usage.cached, gemini.usage.output) == (4000, 8000, 900)
    assert gemini.model == "gemini-2.5-flash"


@pytest.mark.parametrize(
    "code, reason",
    [
        (41, "not logged in: run `gemini` once to sign in, or set GEMINI_API_KEY"),
        (53, "max turns reached (the session turn limit in settings.json)"),
    ],
)
def test_gemini_exit_codes(code, reason):
    assert decoder("gemini").finish(code, "").reason == reason


# A run that failed for another reason (a bad request), with a bare 429 from an earlier call in
# the stack dump it printed on stderr.
GEMINI_STACK_DUMP = [
    "Error when talking to Gemini API Full report available at: /tmp/gemini-client-error-Turn.run.json",
    "GaxiosError: [{",
    '  "error": {',
    '    "code": 429,',
    '    "message": "Request failed with status code 429"',
    "  }",
    "}]",
    "    at Gaxios._request (/usr/lib/node_modules/gaxios/build/src/gaxios.js:142:23)",
    'Error: Invalid JSON payload received. Unknown name "thinkingBudget": Cannot find field.',
]


@pytest.mark.parametrize(
    "stderr, quota",
    [
        (GEMINI_STACK_DUMP, False),
        (["Request failed with status code 429"], False),
        (GEMINI_STACK_DUMP + ['    "status": "RESOURCE_EXHAUSTED"'], True),
        (["Error: You exceeded your current quota, please check your plan and billing details."], True),
        (["[API Error: Quota exceeded for quota metric 'Requests' and limit 'Requests per day']"], True),
    ],
)
def test_gemini_stderr_is_quota_only_with_the_status_name_or_a_quota_phrase(stderr, quota):
    live = decoder("gemini")
    events = live.decode(stderr, "stderr")
    assert ("quota" in kinds(events)) is quota
    outcome = live.finish(1, "\n".join(stderr))
    assert (outcome.quota is not None) is quota and not outcome.ok
    if not quota:
        assert outcome.reason == f"gemini exited with code 1: {stderr[-1].strip()}"
    # Lines the decoder never saw (only the tail survived) are judged the same way.
    assert (decoder("gemini").finish(1, "\n".join(stderr)).quota is not None) is quota


def test_gemini_bare_429_in_its_own_error_result_is_still_a_quota():
    gemini = decoder("gemini")
    feed(
        gemini,
        [
            '{"type":"result","status":"error","error":{"type":"ApiError",'
            '"message":"Request failed with status code 429"},"stats":{}}'
        ],
    )
    outcome = gemini.finish(1, "")
    assert outcome.quota is not None and outcome.quota.message == "Request failed with status code 429"


@pytest.mark.parametrize(
    "agent, name, message",
    [
        ("gemini", "gemini_quota_current.jsonl", "You exceeded your current quota"),
        ("gemini", "gemini_quota_metric.jsonl", "Quota exceeded for quota metric"),
        # No statusCode and no retry-after header: the phrase alone says quota, with no reset time.
        ("opencode", "opencode_quota_phrase.jsonl", "You exceeded your current quota"),
    ],
)
def test_quota_phrases_without_a_reset_time(agent, name, message):
    made = decoder(agent)
    events = feed(made, transcript(name))
    assert len(of_kind(events, "quota")) == 1
    outcome = made.finish(1, "")
    assert not outcome.ok and outcome.quota is not None and outcome.quota.reset_at is None
    assert message in outcome.quota.message
    assert outcome.reason == f"quota: {outcome.quota.message}"


# -- aider -------------------------------------------------------------------------------------


def test_aider_command_line():
    adapter = adapter_for("aider")
    launch = adapter.launch(
        candidate("aider", model="sonnet", args=("--edit-format", "diff")), "Fix add().", CONTEXT
    )
    assert launch.argv == (
        "aider",
        "--message",
        "Fix add().",
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
        "sonnet",
        "--edit-format",
        "diff",
    )
    assert launch.env == {"TZ": "UTC", "COLUMNS": "10000"} and launch.stdin is None
    with pytest.raises(ValueError, match="aider takes no tool list"):
        adapter.launch(candidate("aider", allowed_tools=("x",)), "x", CONTEXT)


@pytest.mark.parametrize("text, count", [("512", 512), ("4.2k", 4200), ("12k", 12000), ("1.5M", 1500000)])
def test_aider_token_counts(text, count):
    assert tokens(text) == count


def test_aider_text_gives_usage_edits_and_a_retry():
    aider = decoder("aider")
    events = feed(aider, transcript("aider_fix.txt"))
    assert of_kind(events, "file-change") == [{"path": "calc.py", "change": "update"}]
    [retry] = of_kind(events, "retry")
    assert retry["delay_ms"] == 200 and "rate limited you" in retry["message"]
    # The tokens of both calls, the session cost from the last line (rounded: estimated).
    assert aider.usage == Usage(
        input=3200, cached=12000, cache_write=3000, output=599, cost_usd=0.04, estimated=True
    )
    assert aider.finish(0, "").ok and aider.quota is None


def test_aider_quota_and_unpriced_model():
    aider = decoder("aider")
    feed(aider, transcript("aider_quota.txt"))
    outcome = aider.finish(0, "")
    assert not outcome.ok and outcome.quota is not None and "exceeded your current quota" in outcome.reason
    unpriced = decoder("aider")
    feed(unpriced, transcript("aider_unpriced.txt"))
    assert unpriced.usage == Usage(input=12000, output=850, cost_usd=0.0047, estimated=True)


def test_aider_gives_up_after_rate_limits():
    aider = decoder("aider")
    feed(
        aider,
        [
            "The API provider has rate limited you. Try again later or check your quotas.",
            "Retrying in 32.0 seconds...",
        ],
    )
    outcome = aider.finish(0, "")
    assert outcome.quota is not None and not outcome.ok


# -- opencode ----------------------------------------------------------------------------------


def test_opencode_command_line():
    launch = adapter_for("opencode").launch(
        candidate("opencode", model="anthropic/claude-sonnet-4-5", args=("--agent", "build")),
        "-v means verbose: fix it",
        CONTEXT,
    )
    assert launch.argv == (
        "opencode",
        "run",
        "--format",
        "json",
        "-m",
        "anthropic/claude-sonnet-4-5",
        "--auto",
        "--print-logs",
        "--log-level",
        "ERROR",
        "--agent",
        "build",
        " -v means verbose: fix it",
    )
    assert launch.env == {"TZ": "UTC"} and launch.stdin is None


def test_opencode_steps_add_up_with_the_tools_own_cost():
    opencode = decoder("opencode")
    events = feed(opencode, transcript("opencode_fix.jsonl"))
    assert kinds(events) == [
        "tool",
        "tool-result",
        "tool",
        "tool-result",
        "file-change",
        "tool",
        "tool-result",
        "text",
    ]
    assert of_kind(events, "file-change") == [{"path": "/wt/o/calc.py", "change": "update"}]
    assert of_kind(events, "tool-result")[2] == {
        "name": "bash",
        "output": "permission rejected",
        "error": True,
    }
    assert opencode.usage == Usage(input=932, cached=31400, cache_write=400, output=330, cost_usd=0.0204)
    assert opencode.finish(0, "").ok


def test_opencode_step_without_a_cost_is_priced_from_the_table_and_marked_estimated():
    lines = transcript("opencode_fix.jsonl")
    # The last step_finish lost its cost (a provider opencode has no price for).
    assert '"cost":0.0081,' in lines[-1]
    lines[-1] = lines[-1].replace('"cost":0.0081,', "")
    opencode = decoder("opencode", model="anthropic/claude-sonnet-4-5")
    feed(opencode, lines)
    # sonnet: $3 input, $0.30 cache read, $3.75 cache write, $15 output per million tokens
    priced = (120 * 3.0 + 16100 * 0.30 + 400 * 3.75 + (60 + 30) * 15.0) / 1e6
    assert opencode.usage == Usage(
        input=932,
        cached=31400,
        cache_write=400,
        output=330,
        cost_usd=round(0.0123 + priced, 10),
        estimated=True,
    )
    assert opencode.finish(0, "").ok and opencode.usage.estimated
    # A race file's price wins over the table.
    custom = decoder(
        "opencode",
        model="anthropic/claude-sonnet-4-5",
        prices={"claude-sonnet-4-5": Price(input=1.0, cached=0.0, output=0.0)},
    )
    feed(custom, lines)
    assert custom.usage.cost_usd == pytest.approx(0.0123 + 120 * 1.0 / 1e6)
    assert custom.usage.estimated


def test_opencode_429_with_retry_after():
    opencode = decoder("opencode")
    feed(opencode, transcript("opencode_quota.jsonl"))
    outcome = opencode.finish(1, "")
    assert outcome.quota is not None and outcome.quota.reset_at == "2026-01-05T12:00:30Z"


def test_opencode_provider_auth_error():
    opencode = decoder("opencode")
    feed(
        opencode,
        [
            '{"type":"error","error":{"name":"ProviderAuthError","data":{"providerID":"anthropic",'
            '"message":"No API key found for anthropic"}}}'
        ],
    )
    assert (
        opencode.finish(1, "").reason
        == "not logged in: run `opencode auth login` or set the provider's API key"
    )
