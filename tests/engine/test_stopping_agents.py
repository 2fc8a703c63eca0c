"""A stopped agent's output is read until it is gone: what it reports between TERM and its end (the
usage of a call in flight) is counted, marked incomplete, in the race's totals too, and the result
says how it was stopped. Real processes, real signals, a real race (local sandbox)."""

from __future__ import annotations

import sys

from outpost_tui.engine.sandbox.local import TERM_GRACE
from tests.stubborn import BEFORE, IN_GRACE, calc_repo, figures, plus, race, stubborn_record


def test_a_cancelled_agent_that_ignores_term_has_what_it_printed_in_the_grace_counted(tmp_path):
    result, warnings = race(calc_repo(tmp_path), "ignore", python=sys.executable)

    assert result["winner"]["key"] == "fixer"
    stubborn = stubborn_record(result)
    assert stubborn["status"] == "cancelled"
    assert figures(stubborn["usage"]) == plus(BEFORE, IN_GRACE)
    assert stubborn["usage"]["cost_usd"] == 0.103 and stubborn["usage"]["complete"] is False
    assert figures(result["usage"]) == plus(BEFORE, IN_GRACE)  # the fixer reported nothing
    assert result["usage"]["complete"] is False
    stop = stubborn["stop"]
    assert (stop["why"], stop["ended_by"], stop["grace"]) == ("cancelled", "KILL", TERM_GRACE)
    assert TERM_GRACE <= stop["seconds"] < TERM_GRACE + 5
    assert stop["lines_after_term"] == 4
    assert figures(stop["usage_after_term"]) == IN_GRACE
    assert warnings == [
        f"{sys.executable.rsplit('/', 1)[1]} ignored TERM and was killed "
        f"{TERM_GRACE:g}s later; 4 lines it printed meanwhile were read "
        "(45 tokens, $0.0030 reported then, counted)"
    ]


def test_an_agent_that_exits_on_term_has_its_last_report_counted_and_no_warning(tmp_path):
    result, warnings = race(calc_repo(tmp_path), "exit", python=sys.executable)

    stubborn = stubborn_record(result)
    assert stubborn["status"] == "cancelled"
    assert figures(stubborn["usage"]) == plus(BEFORE, IN_GRACE)
    stop = stubborn["stop"]
    assert (stop["why"], stop["ended_by"]) == ("cancelled", "TERM")
    assert stop["seconds"] < TERM_GRACE
    assert warnings == []


def test_a_timed_out_agent_has_what_it_printed_in_the_grace_counted(tmp_path):
    result, warnings = race(calc_repo(tmp_path), "ignore", python=sys.executable, timeout=5)

    stubborn = stubborn_record(result)
    assert stubborn["status"] == "failed" and stubborn["error"] == "agent timed out after 5s"
    assert figures(stubborn["usage"]) == plus(BEFORE, IN_GRACE)
    assert stubborn["usage"]["complete"] is False
    assert (stubborn["stop"]["why"], stubborn["stop"]["ended_by"]) == ("timeout", "KILL")
    assert figures(result["usage"]) == plus(BEFORE, IN_GRACE)
    assert len(warnings) == 1 and "ignored TERM" in warnings[0]


def test_term_reaches_a_tool_the_agent_started_in_a_session_of_its_own(tmp_path):
    """opencode runs its shell commands in process groups of their own: a TERM to the agent's group
    alone would leave them working (committing) through the grace."""
    mark = tmp_path / "stray-mark"
    result, _ = race(calc_repo(tmp_path), "exit", python=sys.executable, env={"STRAY_MARK": str(mark)})

    assert stubborn_record(result)["status"] == "cancelled"
    assert mark.read_text() == "TERM"
