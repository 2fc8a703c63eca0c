"""An attempt stopped before its agent finished (cancelled, timed out, unreachable API) keeps every
figure its decoder saw, marked incomplete; every adapter, through the one Decoder.interrupted()."""

from __future__ import annotations

import pytest

from tests.agents.replay import decoder_for, feed, transcript


@pytest.mark.parametrize(
    "agent, name, stop_before",
    [
        ("claude", "claude_fix.jsonl", '"type":"result"'),  # the authoritative line never came
        ("codex", "codex_cumulative.jsonl", None),  # stopped after its last turn total
        ("opencode", "opencode_fix.jsonl", '"text"'),
        ("aider", "aider_fix.txt", "Applied edit"),
    ],
)
def test_an_interrupted_attempt_keeps_what_it_saw_marked_incomplete(agent, name, stop_before):
    lines = transcript(name)
    if stop_before is not None:
        lines = lines[: next(i for i, line in enumerate(lines) if stop_before in line)]
    decoder = decoder_for(agent, model="claude-sonnet-4-5" if agent == "aider" else None)
    feed(decoder, lines)
    seen = decoder.usage
    assert seen.tokens > 0, "the transcript's first part reports usage"
    decoder.interrupted()
    kept = decoder.usage
    assert (kept.input, kept.cached, kept.cache_write, kept.output) == (
        seen.input,
        seen.cached,
        seen.cache_write,
        seen.output,
    )
    assert kept.cost_usd == seen.cost_usd and not kept.complete


def test_a_model_no_table_knows_is_priced_by_its_family_or_its_cost_is_unknown():
    family = decoder_for("codex", model="gpt-7-turbo")
    feed(family, transcript("codex_fix.jsonl"))
    assert family.usage.cost_usd > 0 and family.usage.estimated and not family.usage.cost_unknown

    unknown = decoder_for("codex", model="mystery-model-1")
    events = feed(unknown, transcript("codex_fix.jsonl"))
    assert unknown.usage.cost_usd == 0 and unknown.usage.cost_unknown
    assert unknown.usage.cost_text() == "cost unknown"
    notes = [line for e in events if e.kind.value == "log" for line in e.data["lines"]]
    assert (
        'model mystery-model-1 has no price (add [prices."mystery-model-1"] to the race file): '
        "cost unknown" in notes
    )
