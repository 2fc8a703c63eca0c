"""The agent's final message (kept, clipped, saved, shown) and the reason for a missing program."""

from __future__ import annotations

import json

import pytest

from outpost_tui.commands.run import final_message_line
from outpost_tui.engine.agents import adapter_for
from outpost_tui.engine.agents.base import RESULT_KEEP, AgentOutcome, clip_result
from outpost_tui.engine.core.result import CandidateRecord, RaceResult, race_result_from_json
from outpost_tui.engine.core.statuses import CandidateStatus, RaceStatus
from tests.agents.replay import decoder_for, feed


def test_short_messages_are_kept_and_empty_ones_are_none():
    assert clip_result("  Fixed add().\n") == "Fixed add()."
    assert clip_result("") is None and clip_result(" \n ") is None and clip_result(None) is None


def test_a_long_message_is_clipped_to_the_limit_with_a_marker():
    text = "word " * 5000  # 25,000 characters
    clipped = clip_result(text)
    assert len(clipped) <= RESULT_KEEP == 4096
    assert clipped.startswith("word word") and clipped.endswith(" more chars]")
    kept = int(clipped.rsplit("[", 1)[1].split()[0])
    assert clipped.index("…") + kept == len(text.strip())
    assert clip_result(clipped) == clipped  # clipping twice changes nothing


def test_every_outcome_carries_a_clipped_result():
    claude = decoder_for("claude")
    long_result = "I changed add(). " * 1000
    feed(
        claude,
        [
            json.dumps(
                {
                    "type": "result",
                    "subtype": "success",
                    "is_error": False,
                    "result": long_result,
                    "total_cost_usd": 0.01,
                }
            )
        ],
    )
    outcome = claude.finish(0, "")
    assert outcome.ok and len(outcome.result) <= RESULT_KEEP
    assert outcome.result.startswith("I changed add(). I changed add().")
    assert AgentOutcome(False, "x", None, "  ").result is None


def record(**extra) -> CandidateRecord:
    fields = {
        "key": "claude",
        "attempt": 1,
        "agent": "claude",
        "status": CandidateStatus.WINNER,
        "branch": "outpost/r/claude",
        "commit": "abc123",
        **extra,
    }
    return CandidateRecord(**fields)


def race(*candidates: CandidateRecord) -> RaceResult:
    return RaceResult(
        id="r1",
        status=RaceStatus.WINNER,
        baseline="b" * 40,
        name="race",
        mode="race",
        select="first",
        candidates=list(candidates),
    )


def test_the_result_field_round_trips_and_is_null_when_absent():
    saved = race(
        record(result="Fixed add() and committed."), record(key="codex", status=CandidateStatus.CANCELLED)
    )
    data = json.loads(json.dumps(saved.to_json()))
    assert [c["result"] for c in data["candidates"]] == ["Fixed add() and committed.", None]
    again = race_result_from_json(data)
    assert again.to_json() == saved.to_json()
    # A result saved before the field existed still loads.
    del data["candidates"][0]["result"]
    assert race_result_from_json(data).candidates[0].result is None


def test_the_headless_line_shows_what_the_winner_said_on_one_line():
    said = final_message_line(race(record(result="Fixed add().\n\nAll 3 tests pass.")))
    assert said == "claude said: Fixed add(). All 3 tests pass."
    long = final_message_line(race(record(result="x" * 500)))
    assert long == "claude said: " + "x" * 200 + "…"
    assert final_message_line(race(record())) is None
    no_winner = race(
        CandidateRecord(
            key="claude",
            attempt=1,
            agent="claude",
            status=CandidateStatus.REJECTED,
            result="I think it works.",
        )
    )
    assert final_message_line(no_winner) is None


@pytest.mark.parametrize(
    "agent, hint",
    [
        ("claude", "npm install -g @anthropic-ai/claude-code"),
        ("codex", "npm install -g @openai/codex"),
        ("gemini", "npm install -g @google/gemini-cli"),
        ("aider", "python -m pip install aider-install && aider-install"),
        ("opencode", "npm install -g opencode-ai"),
    ],
)
def test_a_missing_agent_program_says_how_to_install_it(agent, hint):
    adapter = adapter_for(agent)
    local = f"agent program {agent!r} not found on PATH"
    assert adapter.start_failure(local) == f"{local} (install: {hint})"
    image = f"agent program {agent!r} not found in image local/dev:1 (sh: 1: {agent}: not found)"
    assert adapter.start_failure(image) == f"{image} (install in the image: {hint})"
    # Other start failures, and another program's, are left as they are.
    other = f"agent program {agent!r} is not executable (permission denied)"
    assert adapter.start_failure(other) == other
    assert (
        adapter.start_failure("agent program 'python3' not found on PATH")
        == "agent program 'python3' not found on PATH"
    )


def test_the_command_agent_has_no_install_hint():
    message = "agent program 'my-agent' not found on PATH"
    assert adapter_for("command").start_failure(message) == message
