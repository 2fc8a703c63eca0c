"""Claude Code: command line, stream-json decoding, usage, quota and failure reasons."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from outpost_tui.engine.agents import LaunchContext, adapter_for
from outpost_tui.engine.agents.base import MAX_BRIEF_INLINE
from outpost_tui.engine.agents.claude import DEFAULT_ALLOWED_TOOLS
from outpost_tui.engine.core.spec import Price
from outpost_tui.engine.core.usage import Usage
from tests.agents.replay import candidate, decoder_for, feed, kinds, of_kind, transcript

CONTEXT = LaunchContext(directory=Path("/wt/fix"), git_common_dir=Path("/repo/.git"))
NOW = datetime(2026, 1, 1, 4, 0, tzinfo=UTC)


def claude(**options):
    decoder = decoder_for("claude", **options)
    decoder.clock = lambda: NOW
    return decoder


def test_command_line_puts_the_brief_after_p_and_the_tools_in_one_argument():
    launch = adapter_for("claude").launch(
        candidate("claude", model="sonnet", max_turns=60, args=("--max-budget-usd", "5")),
        "Fix add().",
        CONTEXT,
    )
    assert launch.argv == (
        "claude",
        "-p",
        "Fix add().",
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
        "--permission-mode",
        "acceptEdits",
        "--allowedTools",
        ",".join(DEFAULT_ALLOWED_TOOLS),
        "--max-turns",
        "60",
        "--model",
        "sonnet",
        "--max-budget-usd",
        "5",
    )
    assert launch.env == {"TZ": "UTC"}
    assert launch.stdin is None


def test_command_line_with_explicit_tools_and_awkward_briefs():
    adapter = adapter_for("claude")
    launch = adapter.launch(candidate("claude", allowed_tools=("Read", "Bash(make:*)")), "--help me", CONTEXT)
    # A brief starting with '-' must not be read as an option.
    assert launch.argv[:3] == ("claude", "-p", " --help me")
    assert launch.argv[launch.argv.index("--allowedTools") + 1] == "Read,Bash(make:*)"
    assert "--max-turns" not in launch.argv and "--model" not in launch.argv
    no_tools = adapter.launch(candidate("claude", allowed_tools=()), "x", CONTEXT)
    assert "--allowedTools" not in no_tools.argv
    # Too long for one argv entry: the brief goes on stdin and no prompt argument is given.
    long_brief = "y" * (MAX_BRIEF_INLINE + 1)
    long = adapter.launch(candidate("claude"), long_brief, CONTEXT)
    assert long.argv[:3] == ("claude", "-p", "--output-format")
    assert long.stdin == long_brief.encode()


def test_repeated_message_ids_are_counted_once_and_the_result_line_is_authoritative():
    decoder = claude()
    lines = transcript("claude_fix.jsonl")
    totals = []
    events = []
    for line in lines:
        events.extend(decoder.decode([line]))
        totals.append(decoder.usage)
    # After the two lines sharing msg_01A: counted once, with the higher output count.
    third = totals[2]
    assert (third.input, third.cached, third.cache_write, third.output) == (3, 14200, 1800, 96)
    live = totals[-2]
    assert (live.input, live.cached, live.cache_write, live.output) == (21, 79800, 2650, 486)
    assert live.estimated and live.cost_usd == pytest.approx(0.0412305, abs=1e-6)
    final = totals[-1]
    # modelUsage covers every model (the haiku subagent too); the cost is the CLI's own.
    assert final == Usage(
        input=921, cached=79800, cache_write=2650, output=546, cost_usd=0.1843, complete=True, estimated=False
    )
    outcome = decoder.finish(0, "")
    assert outcome.ok and outcome.reason is None
    assert outcome.result == "Fixed add() to return a + b and committed."
    assert decoder.usage == final

    # the init line, then: this transcript's claude lists none of the default Write, NotebookEdit
    assert kinds(events) == [
        "log",
        "log",
        "text",
        "tool",
        "tool-result",
        "tool",
        "tool-result",
        "file-change",
        "tool",
        "tool-result",
        "text",
        "tool",
        "tool-result",
        "text",
    ]
    assert of_kind(events, "tool")[1] == {
        "name": "Edit",
        "input": json.dumps(
            {"file_path": "calc.py", "new_string": "return a + b", "old_string": "return a - b"},
            sort_keys=True,
        ),
    }
    assert of_kind(events, "file-change") == [{"path": "calc.py", "change": "update"}]
    results = of_kind(events, "tool-result")
    assert results[0] == {"name": "Read", "output": "def add(a, b):\n    return a - b\n", "error": False}
    assert results[2]["name"] == "Bash" and results[2]["error"] is True
    assert of_kind(events, "text")[0] == {"text": "Let me look at calc.py."}


def test_json_array_output_is_decoded_like_the_stream():
    decoder = claude()
    [line] = transcript("claude_verbose_array.json")
    events = decoder.decode([line])
    assert kinds(events) == ["log", "tool", "tool-result", "file-change", "text"]
    assert of_kind(events, "file-change") == [{"path": "NOTES.md", "change": "add"}]
    assert decoder.usage == Usage(input=6, cached=6900, cache_write=1000, output=62, cost_usd=0.0123)
    outcome = decoder.finish(0, "")
    assert outcome.ok and outcome.result == "Wrote NOTES.md."


def test_single_result_object_of_json_output():
    decoder = claude()
    decoder.decode(
        [
            '{"type":"result","subtype":"success","is_error":false,"result":"ok",'
            '"total_cost_usd":0.5,"usage":{"input_tokens":10,"output_tokens":20}}'
        ]
    )
    assert decoder.usage == Usage(input=10, output=20, cost_usd=0.5)
    assert decoder.finish(0, "").ok


def test_api_retry_is_a_transient_retry_and_the_run_still_succeeds():
    decoder = claude()
    events = feed(decoder, transcript("claude_retry.jsonl"))
    retries = of_kind(events, "retry")
    assert [(r["retry"], r["delay_ms"]) for r in retries] == [(1, 600), (2, 1200)]
    assert "529" in retries[0]["message"] and "retrying in 600 ms" in retries[0]["message"]
    # An allowed_warning is only a warning: no quota.
    assert "quota" not in kinds(events)
    assert any(
        "rate limit warning: five hour window at 91%" in line
        for e in of_kind(events, "log")
        for line in e["lines"]
    )
    outcome = decoder.finish(0, "")
    assert outcome.ok and decoder.quota is None
    assert decoder.usage.cost_usd == 0.0291 and not decoder.usage.estimated


def test_max_turns_gives_a_clear_reason_and_lists_denied_tools():
    decoder = claude()
    events = feed(decoder, transcript("claude_max_turns.jsonl"))
    assert any("permission denied: Bash" in line for e in of_kind(events, "log") for line in e["lines"])
    outcome = decoder.finish(1, "")
    assert not outcome.ok
    assert outcome.reason == "max turns reached"
    assert decoder.usage.cost_usd == 1.02


@pytest.mark.parametrize(
    "name, message, reset_at",
    [
        ("claude_quota_event.jsonl", "five hour limit reached", "2026-01-01T05:00:00Z"),
        (
            "claude_quota_synthetic.jsonl",
            "You've hit your limit · resets Feb 16, 11am (Europe/Berlin)",
            "2026-02-16T10:00:00Z",
        ),
        (
            "claude_quota_zone.jsonl",
            "You've hit your weekly limit · resets 4pm (America/Recife)",
            "2026-01-01T19:00:00Z",
        ),
        (
            "claude_quota_date_at.jsonl",
            "You've hit your Opus limit · resets Apr 23 at 4pm (America/New_York)",
            "2026-04-23T20:00:00Z",
        ),
        ("claude_quota_legacy.jsonl", "Claude AI usage limit reached|1767243600", "2026-01-01T05:00:00Z"),
        (
            "claude_quota_spend_cap.jsonl",
            "API Error: 400 You have reached your specified API usage limits. You will regain access on "
            "2026-04-01 at 00:00 UTC.",
            "2026-04-01T00:00:00Z",
        ),
    ],
)
def test_every_quota_form_gives_a_quota_with_its_reset_time(name, message, reset_at):
    decoder = claude()
    events = feed(decoder, transcript(name))
    quotas = of_kind(events, "quota")
    assert quotas and quotas[0] == {"message": message, "reset_at": reset_at}
    outcome = decoder.finish(1, "")
    assert not outcome.ok
    assert outcome.quota is not None and outcome.quota.reset_at == reset_at
    assert outcome.reason == f"quota: {message} (resets {reset_at})"


def test_a_rejected_rate_limit_during_a_run_that_still_succeeds_is_not_a_failure():
    decoder = claude()
    feed(
        decoder,
        [
            '{"type":"rate_limit_event","rate_limit_info":{"status":"rejected",'
            '"resetsAt":1767243600,"rateLimitType":"seven_day"}}',
            '{"type":"result","subtype":"success","is_error":false,"result":"done","total_cost_usd":0.2}',
        ],
    )
    assert decoder.finish(0, "").ok


def test_quota_phrases_in_ordinary_prose_are_not_a_quota():
    decoder = claude()
    prose = "You've hit your usage limit · resets 4pm is what the tool prints"
    events = feed(
        decoder,
        [
            json.dumps(
                {"type": "assistant", "message": {"id": "m1", "content": [{"type": "text", "text": prose}]}}
            )
        ],
    )
    assert "quota" not in kinds(events) and decoder.quota is None


def test_not_logged_in():
    decoder = claude()
    feed(decoder, transcript("claude_not_logged_in.jsonl"))
    outcome = decoder.finish(1, "")
    assert outcome.reason == "not logged in: run `claude login` or set ANTHROPIC_API_KEY"
    plain = claude()
    assert (
        plain.finish(1, "Error: Invalid API key · Please run /login\n").reason
        == "not logged in: run `claude login` or set ANTHROPIC_API_KEY"
    )


def test_permission_denied_and_other_exits():
    decoder = claude()
    reason = decoder.finish(1, "node: /usr/lib/claude/cli.js: Permission denied\n")
    assert reason.reason == "permission denied: node: /usr/lib/claude/cli.js: Permission denied"
    root = claude()
    root_reason = root.finish(
        1, "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons\n"
    ).reason
    assert root_reason.startswith("permission denied: --dangerously-skip-permissions")
    crashed = claude()
    assert (
        crashed.finish(3, "boom\nSegmentation fault\n").reason
        == "claude exited with code 3: Segmentation fault"
    )
    assert claude().finish(-9, "").reason == "claude was killed by signal 9"


def test_a_run_without_a_result_line_keeps_live_usage_as_a_lower_bound():
    decoder = claude()
    feed(decoder, transcript("claude_fix.jsonl")[:5])
    decoder.finish(-15, "")
    assert decoder.usage.complete is False and decoder.usage.estimated is True
    assert (decoder.usage.input, decoder.usage.output) == (8, 216)


def test_race_file_prices_override_the_table_for_live_estimates():
    decoder = claude(prices={"claude-sonnet-4-5": Price(input=1000, cached=0, cache_write=0, output=0)})
    feed(decoder, transcript("claude_fix.jsonl")[:3])
    assert decoder.usage.cost_usd == pytest.approx(3 * 1000 / 1e6)


def test_huge_lines_are_decoded_or_cut_without_breaking_the_stream():
    decoder = claude()
    lines = transcript("claude_fix.jsonl")
    payload = "x" * (2 * 1024 * 1024)
    huge_json = json.dumps(
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_01R", "content": payload}],
            },
        }
    )
    events = feed(decoder, lines[:3] + [huge_json, "plain " + payload] + lines[3:])
    result = of_kind(events, "tool-result")[0]
    assert result["name"] == "Read" and len(result["output"]) < 2100
    cut = [line for e in of_kind(events, "log") for line in e["lines"] if line.startswith("plain ")]
    assert len(cut) == 1 and len(cut[0]) < 4100 and cut[0].endswith("chars cut]")
    assert decoder.finish(0, "").ok and decoder.usage.cost_usd == 0.1843


def test_system_lines_of_every_kind_read_as_one_line_and_retries_name_their_cause():
    decoder = claude()
    events = feed(
        decoder,
        [
            '{"type":"system","subtype":"status","status":"requesting","session_id":"s","uuid":"u"}',
            '{"type":"system","subtype":"permission_denied","tool_name":"Bash",'
            '"tool_input":{"command":"rm -rf /"},'
            '"reason":"not allowed","session_id":"s","uuid":"u"}',
            '{"type":"system","subtype":"compact_boundary","compact_metadata":{"trigger":"auto","pre_tokens":9000}}',
            '{"type":"system","subtype":"api_retry","attempt":2,"max_retries":10,"retry_delay_ms":1200,'
            '"error_status":null,"error":"unknown"}',
            '{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":600,'
            '"error_status":529,"error":"overloaded_error"}',
        ],
    )
    lines = [line for e in of_kind(events, "log") for line in e["lines"]]
    assert lines == [
        'permission denied: tool_name=Bash, tool_input={"command": "rm -rf /"}, reason=not allowed',
        'compact boundary: compact_metadata={"pre_tokens": 9000, "trigger": "auto"}',
    ]
    assert not any(line.lstrip().startswith("{") for line in lines)  # never raw JSON
    network, overloaded = of_kind(events, "retry")
    assert (
        network["cause"] == "network"
        and network["message"] == "network (no answer); retrying in 1200 ms (attempt 2 of 10)"
    )
    assert (
        overloaded["cause"] == "overloaded"
        and overloaded["message"]
        == "overloaded (HTTP 529, overloaded_error); retrying in 600 ms (attempt 1 of 10)"
    )


def test_max_turns_names_the_limit_the_race_file_set():
    decoder = claude(max_turns=2)
    feed(
        decoder,
        ['{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":3,"total_cost_usd":0.01}'],
    )
    assert decoder.finish(1, "").reason == "max turns reached (max_turns = 2)"


def test_live_usage_comes_from_the_partial_message_events():
    decoder = claude()
    feed(
        decoder,
        [
            '{"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_1","model":'
            '"claude-sonnet-5-5","usage":{"input_tokens":11,"cache_read_input_tokens":22,'
            '"cache_creation_input_tokens":33,"output_tokens":1}}}}',
            '{"type":"assistant","message":{"id":"msg_1","model":"claude-sonnet-5-5","content":[{"type":"text",'
            '"text":"hi"}],"usage":{"input_tokens":11,"cache_read_input_tokens":22,'
            '"cache_creation_input_tokens":33,"output_tokens":1}}}',
            '{"type":"stream_event","event":{"type":"message_delta","delta":{"stop_reason":"end_turn"},'
            '"usage":{"input_tokens":11,"cache_read_input_tokens":22,"cache_creation_input_tokens":33,'
            '"output_tokens":44}},"api_message_id":"msg_1"}',
        ],
    )
    live = decoder.usage
    assert (live.input, live.cached, live.cache_write, live.output) == (11, 22, 33, 44)
    # claude-sonnet-5-5 is in no table: priced as its family, an estimate, never $0
    assert live.estimated and live.cost_usd == round((11 * 3 + 22 * 0.3 + 33 * 3.75 + 44 * 15) / 1e6, 6)


def test_what_claude_2_1_328_really_prints_decodes_to_the_usage_the_server_billed():
    # Captured from the real Claude Code 2.1.328 against tests/agents/real/model_server.py with
    # tests/agents/real/test_claude_real.py's fix_and_commit() script (paths replaced).
    billed = [(1101, 2203, 3307, 41), (13, 5003, 211, 97), (17, 5309, 149, 53), (19, 5501, 61, 29)]
    lines = transcript("claude_2_1_328_fix.jsonl")
    decoder = claude(model="sonnet")
    events, live = [], []
    for line in lines:
        events.extend(decoder.decode([line]))
        if '"type":"result"' not in line:
            live.append(decoder.usage)
    expected = tuple(sum(step[i] for step in billed) for i in range(4))
    # Before the result line the live figures are already exact (partial-message usage), priced
    # by the sonnet family because claude-sonnet-5-5 is in no table.
    last_live = live[-1]
    assert (last_live.input, last_live.cached, last_live.cache_write, last_live.output) == expected
    assert last_live.estimated and last_live.cost_usd > 0 and not last_live.cost_unknown
    final = decoder.usage
    assert (final.input, final.cached, final.cache_write, final.output) == expected
    assert not final.estimated and final.cost_usd > 0
    assert decoder.finish(0, "").result == "Fixed add() and committed."
    assert [e["name"] for e in of_kind(events, "tool")] == ["Read", "Edit", "Bash"]
    assert of_kind(events, "file-change") == [{"path": "/wt/fix/calc.py", "change": "update"}]
    logs = [line for e in of_kind(events, "log") for line in e["lines"]]
    assert (
        logs[1] == "model claude-sonnet-5-5 is not in the price table: priced as claude-sonnet-4 (estimated)"
    )
    assert not any(line.lstrip().startswith("{") for line in logs)  # every line understood
