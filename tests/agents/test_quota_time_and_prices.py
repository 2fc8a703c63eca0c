"""Reset times written every way the agent CLIs write them; the price table and its overrides."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from outpost_tui.engine.agents.prices import price_for, with_estimated_cost
from outpost_tui.engine.agents.quota_time import parse_reset
from outpost_tui.engine.core.spec import Price
from outpost_tui.engine.core.usage import Usage

NOW = datetime(2026, 1, 1, 4, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "text, expected",
    [
        # clock time with an IANA zone: the next occurrence after now
        ("You've hit your session limit · resets 5am (UTC)", "2026-01-01T05:00:00Z"),
        ("resets 3am (UTC)", "2026-01-02T03:00:00Z"),  # already past today: tomorrow
        ("resets 4pm (America/Recife)", "2026-01-01T19:00:00Z"),
        ("resets 6:20pm (Europe/Berlin)", "2026-01-01T17:20:00Z"),
        ("resets Feb 16, 11am (Europe/Berlin)", "2026-02-16T10:00:00Z"),
        ("resets Apr 23 at 4pm (America/New_York)", "2026-04-23T20:00:00Z"),  # EDT in April
        ("resets Dec 31, 1am (UTC)", "2026-12-31T01:00:00Z"),
        # the child's local time (TZ=UTC)
        ("You've hit your usage limit. Try again at 3:09 PM.", "2026-01-01T15:09:00Z"),
        ("or try again at Aug 20th, 2026 11:50 AM.", "2026-08-20T11:50:00Z"),
        ("Try again at 3:09:19 PM.", "2026-01-01T15:09:19Z"),
        ("resets at 15:09:19 (UTC)", "2026-01-01T15:09:19Z"),
        ("try again at 03:30", "2026-01-02T03:30:00Z"),
        # epoch seconds
        ("Claude AI usage limit reached|1767243600", "2026-01-01T05:00:00Z"),
        ("1767243600", "2026-01-01T05:00:00Z"),
        # durations
        ("Try again in ~90 min.", "2026-01-01T05:30:00Z"),
        ("try again in 2 hours 5 minutes", "2026-01-01T06:05:00Z"),
        ("Your quota will reset after 2h52m39s.", "2026-01-01T06:52:39Z"),
        # full dates
        ("You will regain access on 2026-04-01 at 00:00 UTC.", "2026-04-01T00:00:00Z"),
        ("resets at 2026-03-01T08:15:00+02:00", "2026-03-01T06:15:00Z"),
        # nothing usable
        ("Try again later.", None),
        ("resets 4pm (Mars/Olympus)", None),
        ("", None),
    ],
)
def test_reset_times(text, expected):
    assert parse_reset(text, NOW) == expected


def test_next_occurrence_of_a_date_without_year_rolls_to_next_year():
    assert parse_reset("resets Jan 1, 3am (UTC)", NOW) == "2027-01-01T03:00:00Z"


def test_a_zone_change_keeps_the_wall_clock_hour():
    # 2am in Berlin on the night clocks go forward (29 March 2026) does not exist; the day after
    # a DST change the local hour is kept, not shifted by the offset difference.
    before_change = datetime(2026, 3, 28, 23, 30, tzinfo=UTC)  # 00:30 in Berlin on the 29th
    assert parse_reset("resets 12:15am (Europe/Berlin)", before_change) == "2026-03-29T22:15:00Z"


def test_prices_by_longest_prefix_and_overrides():
    assert price_for("claude-sonnet-4-5-20250929") == price_for("claude-sonnet-4")
    assert price_for("gpt-5-mini").input == 0.25 and price_for("gpt-5").input == 1.25
    assert price_for("openai/gpt-5-codex") == price_for("gpt-5")
    assert price_for("Claude-Opus-4-5").output == 25.0
    assert price_for("unknown-model") is None and price_for(None) is None
    override = {"gpt-5": Price(input=9.0)}
    assert price_for("gpt-5-codex", override).input == 9.0


def test_estimated_cost():
    usage = Usage(input=1_000_000, cached=2_000_000, output=100_000)
    priced = with_estimated_cost(usage, "gpt-5-codex")
    assert priced.cost_usd == pytest.approx(1.25 + 0.25 + 1.0) and priced.estimated
    unknown = with_estimated_cost(usage, "mystery")
    assert unknown.cost_usd == 0.0 and unknown.estimated
