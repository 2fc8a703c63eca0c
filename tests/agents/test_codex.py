"""Codex CLI: command line, exec --json decoding, cumulative usage, quota and failure reasons."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from outpost_tui.engine.agents import LaunchContext, adapter_for
from outpost_tui.engine.core.spec import Price
from outpost_tui.engine.core.usage import Usage
from tests.agents.replay import candidate, decoder_for, feed, kinds, of_kind, transcript

CONTEXT = LaunchContext(directory=Path("/wt/fix"), git_common_dir=Path("/repo/.git"))
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def no_codex_config(tmp_path, monkeypatch):
    """The model Codex uses comes from its config when the race names none: not the user's."""
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))


def codex(**options):
    decoder = decoder_for("codex", **options)
    decoder.clock = lambda: NOW
    return decoder


def test_command_line_reads_the_brief_from_stdin_and_adds_the_git_dir():
    adapter = adapter_for("codex")
    launch = adapter.launch(
        candidate("codex", model="gpt-5-codex", args=("-c", "sandbox_workspace_write.network_access=true")),
        "resume the work on add()",
        CONTEXT,
    )
    assert launch.argv == (
        "codex",
        "exec",
        "--json",
        "--sandbox",
        "workspace-write",
        "--add-dir",
        "/repo/.git",
        "-m",
        "gpt-5-codex",
        "-c",
        "sandbox_workspace_write.network_access=true",
        "-",
    )
    assert launch.stdin == b"resume the work on add()"
    assert launch.env == {"TZ": "UTC"}
    assert adapter.commits_on_behalf is True


def test_fenced_its_own_sandbox_is_off_and_the_fence_is_its_sandbox():
    # nested in the engine's fence, Codex's bubblewrap cannot start and every edit would fail
    launch = adapter_for("codex").launch(candidate("codex"), "fix it", replace(CONTEXT, fenced=True))
    assert launch.argv[:4] == ("codex", "exec", "--json", "--sandbox")
    assert launch.argv[4] == "danger-full-access"
    assert "--add-dir" not in launch.argv and "workspace-write" not in launch.argv


def test_options_codex_does_not_have_are_refused_clearly():
    adapter = adapter_for("codex")
    with pytest.raises(ValueError, match="codex has no max-turns limit"):
        adapter.launch(candidate("codex", max_turns=5), "x", CONTEXT)
    with pytest.raises(ValueError, match="codex has no tool allow-list"):
        adapter.launch(candidate("codex", allowed_tools=("Read",)), "x", CONTEXT)


def test_a_fix_decodes_to_tools_results_file_changes_and_estimated_usage():
    decoder = codex()
    events = feed(decoder, transcript("codex_fix.jsonl"))
    # the thread line names the model; this version's default is priced by its family
    assert of_kind(events, "log")[:2] == [
        {
            "stream": "stdout",
            "lines": ["codex thread 0199b1c2-7d3e-7a10-9c41-5e2f8a6b0c11, model gpt-6.1-sol"],
        },
        {
            "stream": "stdout",
            "lines": ["model gpt-6.1-sol is not in the price table: priced as gpt-5 (estimated)"],
        },
    ]
    assert kinds(events) == [
        "log",
        "log",
        "text",
        "tool",
        "tool-result",
        "file-change",
        "log",
        "tool",
        "tool-result",
        "text",
    ]
    assert of_kind(events, "text")[0] == {"text": "**Locating failing test**", "reasoning": True}
    assert of_kind(events, "tool")[0] == {"name": "shell", "input": "bash -lc 'python3 -m unittest -q'"}
    first, second = of_kind(events, "tool-result")
    assert first == {
        "name": "shell",
        "output": "FAIL: test_adds_integers\nFAILED (failures=3)\n",
        "error": True,
    }
    assert second["error"] is False
    assert of_kind(events, "file-change") == [{"path": "calc.py", "change": "update"}]
    assert "plan: [x] fix add(); [x] run the tests" in of_kind(events, "log")[2]["lines"]
    # input_tokens includes the cached ones.
    expected_cost = (7250 * 1.25 + 40960 * 0.125 + 1312 * 10) / 1e6
    assert decoder.usage == Usage(
        input=7250, cached=40960, output=1312, cost_usd=round(expected_cost, 6), estimated=True
    )
    outcome = decoder.finish(0, "")
    assert outcome.ok and outcome.result == "Fixed the sign in add(); tests pass."
    assert decoder.thread_id == "0199b1c2-7d3e-7a10-9c41-5e2f8a6b0c11"


def test_turn_usage_is_cumulative_so_the_latest_replaces_the_previous():
    decoder = codex(model="o4-mini")
    totals = []
    for line in transcript("codex_cumulative.jsonl"):
        decoder.decode([line])
        totals.append(decoder.usage)
    assert (totals[3].input, totals[3].cached, totals[3].output) == (5000, 15000, 500)
    assert (totals[-1].input, totals[-1].cached, totals[-1].output) == (12000, 40000, 1800)
    assert totals[-1].cost_usd == pytest.approx((12000 * 1.10 + 40000 * 0.275 + 1800 * 4.40) / 1e6)


def test_mcp_calls_and_several_file_changes():
    events = feed(codex(), transcript("codex_cumulative.jsonl"))
    assert of_kind(events, "tool") == [
        {"name": "docs.search", "input": '{"query": "unittest assertAlmostEqual"}'}
    ]
    assert of_kind(events, "tool-result")[0]["error"] is False
    assert "assertAlmostEqual(first, second, places=7)" in of_kind(events, "tool-result")[0]["output"]
    assert of_kind(events, "file-change") == [
        {"path": "calc.py", "change": "update"},
        {"path": "tests/test_more.py", "change": "add"},
    ]


def test_race_file_price_overrides_the_table():
    decoder = codex(model="gpt-5-codex", prices={"gpt-5-codex": Price(input=2.0, cached=0.0, output=0.0)})
    feed(decoder, transcript("codex_fix.jsonl"))
    assert decoder.usage.cost_usd == pytest.approx(7250 * 2.0 / 1e6)
    assert decoder.usage.estimated


@pytest.mark.parametrize(
    "name, reset_at, message",
    [
        # The error line has the time, the turn.failed after it does not: the time is kept. Codex cuts
        # it to the minute ("3:09 PM" for 3:09:19), so the end of that minute is taken: never early.
        ("codex_quota_time.jsonl", "2026-01-01T15:10:00Z", "You've hit your usage limit. Upgrade to Pro"),
        ("codex_quota_date.jsonl", "2026-08-20T11:51:00Z", "You've hit your usage limit. Upgrade to Plus"),
        # No time first, then a duration: the report with a time replaces the one without.
        (
            "codex_quota_duration.jsonl",
            "2026-01-01T14:05:00Z",
            "You've hit your usage limit. Please try again in 2 hours 5 minutes.",
        ),
        (
            "codex_quota_minutes.jsonl",
            "2026-01-01T13:30:00Z",
            "You've hit your usage limit. Try again in ~90 min.",
        ),
        ("codex_quota_api_key.jsonl", None, "exceeded retry limit, last status: 429 Too Many Requests"),
        # The forms without a reset time: a workspace without credits, a bare 429, an API key's quota.
        ("codex_quota_credits.jsonl", None, "Your workspace is out of credits. Ask your workspace owner"),
        ("codex_quota_status.jsonl", None, "unexpected status 429 Too Many Requests: Rate limit reached"),
        ("codex_quota_exceeded.jsonl", None, "Quota exceeded. Check your plan and billing details."),
    ],
)
def test_every_quota_form(name, reset_at, message):
    decoder = codex()
    events = feed(decoder, transcript(name))
    assert of_kind(events, "quota")[-1]["reset_at"] == reset_at
    outcome = decoder.finish(1, "")
    assert not outcome.ok and outcome.quota is not None
    assert outcome.quota.reset_at == reset_at
    assert outcome.quota.message.startswith(message)
    assert outcome.reason.startswith("quota: ") and not outcome.reason.lower().startswith("quota: quota")


def test_quota_message_only_on_stderr():
    decoder = codex()
    feed(decoder, ['{"type":"turn.started"}'])
    events = decoder.decode(["Error: You've hit your spend cap. Try again at 3:09 PM."], "stderr")
    assert kinds(events) == ["log", "quota"]
    outcome = decoder.finish(1, "Error: You've hit your spend cap. Try again at 3:09 PM.\n")
    assert outcome.quota.reset_at == "2026-01-01T15:10:00Z"


def test_a_reset_time_with_seconds_keeps_them():
    decoder = codex()
    feed(
        decoder,
        [
            '{"type":"turn.failed","error":{"message":"You\'ve hit your usage limit. '
            'Try again at 3:09:19 PM."}}'
        ],
    )
    assert decoder.finish(1, "").quota.reset_at == "2026-01-01T15:09:19Z"


def test_capacity_and_reconnect_errors_are_retries_and_the_run_succeeds():
    decoder = codex()
    events = feed(decoder, transcript("codex_retry.jsonl"))
    retries = of_kind(events, "retry")
    assert [(r["retry"], r["delay_ms"]) for r in retries] == [(0, 0), (2, 400)]
    assert "quota" not in kinds(events)
    assert decoder.finish(0, "").ok


def test_a_reconnect_after_429s_is_a_rate_limit_retry_not_a_quota():
    # Captured from Codex 0.169.0: a 429 it recovered from.
    decoder = codex()
    events = feed(decoder, transcript("codex_reconnect_429.jsonl"))
    assert [(r["cause"], r["retry"]) for r in of_kind(events, "retry")] == [("rate limited", 1)]
    assert "quota" not in kinds(events) and decoder.quota is None
    assert decoder.finish(0, "").ok


def test_waiting_for_network_is_a_network_retry():
    # Captured from Codex 0.169.0 with no server: it reconnects for ever.
    events = feed(codex(), transcript("codex_offline.jsonl"))
    assert [r["cause"] for r in of_kind(events, "retry")] == ["network", "network"]


def test_an_own_commit_message_is_kept_for_the_commit_made_on_its_behalf():
    decoder = codex()
    feed(
        decoder,
        [
            '{"type":"item.completed","item":{"id":"item_1","type":"command_execution",'
            '"command":"/bin/bash -lc \'git add -A && git commit -qm \\"Fix add()\\" -m \\"It returned '
            'a - b.\\"\'","aggregated_output":"fatal: Unable to create \'/r/.git/index.lock\': Read-only '
            'file system\\n","exit_code":128,"status":"failed"}}'
        ],
    )
    assert decoder.commit_message == "Fix add()\n\nIt returned a - b."


def test_not_logged_in_and_other_failures():
    decoder = codex()
    feed(decoder, transcript("codex_not_logged_in.jsonl"))
    assert (
        decoder.finish(1, "").reason
        == "not logged in: run `codex login` or set OPENAI_API_KEY (or CODEX_API_KEY)"
    )
    failed = codex()
    feed(
        failed,
        [
            '{"type":"turn.started"}',
            '{"type":"item.started","item":{"id":"item_0","type":"command_execution",'
            '"command":"ls","status":"in_progress"}}',
            '{"type":"turn.failed","error":{"message":"stream disconnected before completion"}}',
        ],
    )
    outcome = failed.finish(1, "")
    assert outcome.reason == "codex exited with code 1: stream disconnected before completion"
    # The turn did work but never reported tokens: usage is a lower bound.
    assert failed.usage.complete is False


def test_cache_writes_are_read_and_taken_out_of_the_uncached_input():
    decoder = codex(model="gpt-5")
    feed(
        decoder,
        [
            '{"type":"turn.completed","usage":{"input_tokens":10000,"cached_input_tokens":6000,'
            '"cache_write_input_tokens":1500,"output_tokens":300,"reasoning_output_tokens":0}}'
        ],
    )
    usage = decoder.usage
    assert (usage.input, usage.cached, usage.cache_write, usage.output) == (2500, 6000, 1500, 300)
    assert usage.tokens == 10300  # every prompt token counted once


def test_the_model_is_always_named_on_the_command_line(tmp_path, monkeypatch):
    home = tmp_path / "codex-home"
    home.mkdir()
    monkeypatch.setenv("CODEX_HOME", str(home))
    adapter = adapter_for("codex")
    argv = adapter.launch(candidate("codex"), "x", CONTEXT).argv
    assert argv[argv.index("-m") + 1] == "gpt-6.1-sol"  # this version's default
    (home / "config.toml").write_text('model = "gpt-5.1-codex"\n\n[profiles.x]\nmodel = "other"\n')
    argv = adapter.launch(candidate("codex"), "x", CONTEXT).argv
    assert argv[argv.index("-m") + 1] == "gpt-5.1-codex"  # its own config's top-level model


def test_what_codex_0_169_0_really_prints_decodes_to_the_usage_the_server_billed():
    # Captured from the real Codex CLI 0.169.0 in code mode against tests/agents/real/model_server.py
    # with tests/agents/real/test_codex_real.py's fix_and_commit() script (paths replaced).
    decoder = codex()
    events = feed(decoder, transcript("codex_0_169_0_fix.jsonl"))
    usage = decoder.usage
    # billed: (1201 + 403) uncached, (3301 + 4507) cached, (71 + 29) output; input counts cached
    assert (usage.input, usage.cached, usage.cache_write, usage.output) == (1604, 7808, 0, 100)
    assert usage.cost_usd == round((1604 * 1.25 + 7808 * 0.125 + 100 * 10.0) / 1e6, 6)  # gpt-5 family
    assert of_kind(events, "file-change") == [{"path": "/wt/fix/calc.py", "change": "update"}]
    assert decoder.commit_message == "Fix add()"
    outcome = decoder.finish(0, "")
    assert outcome.ok and outcome.result == "Fixed add() to return the sum."
