"""The live model the app renders: what an operator reads in a candidate's panel."""

from __future__ import annotations

from outpost_tui.engine.core.events import Admitted, AgentExited, AgentStarted, Retry, Settled
from outpost_tui.engine.core.model import RaceModel


def test_an_agent_ending_shows_its_exit_and_its_final_message():
    model = RaceModel([("a", "claude")])
    model(Retry(key="a", attempt=1, message="rate limited, retrying in 4s", retry=1))
    model(
        AgentExited(
            key="a",
            attempt=1,
            exit_code=0,
            reason=None,
            duration=3.2,
            result="Fixed add() in calc.py.\nAll 12 tests pass.",
        )
    )
    candidate = model.candidates["a"]
    assert list(candidate.log)[-3:] == [
        "── agent ended (exit 0)",
        "   Fixed add() in calc.py.",
        "   All 12 tests pass.",
    ]
    assert candidate.retrying is None  # a retry notice does not outlive the agent


def test_a_failed_agent_shows_why():
    model = RaceModel([("a", "codex")])
    model(AgentExited(key="a", attempt=1, exit_code=1, reason="not logged in", duration=1.0, result=None))
    assert list(model.candidates["a"].log) == ["── agent ended (exit 1: not logged in)"]


def test_the_agent_clock_runs_from_its_start_to_its_exit_and_restarts_with_each_attempt():
    model = RaceModel([("a", "command")])
    model(Admitted(key="a", attempt=1, branch="b1", agent="command", attempts=1, at=100.0))
    candidate = model.candidates["a"]
    assert (candidate.timeout, candidate.agent_started_at) == (None, None)  # set-up is not agent time
    model(AgentStarted(key="a", attempt=1, program="fake", timeout=900, at=103.0))
    model(AgentExited(key="a", attempt=1, exit_code=0, reason=None, duration=27.0, result=None, at=130.0))
    assert (candidate.timeout, candidate.agent_started_at, candidate.agent_ended_at) == (900, 103.0, 130.0)
    assert "── attempt 1: agent started (fake, timeout 900s)" in candidate.log

    model(Admitted(key="a", attempt=2, branch="b2", agent="command", attempts=2, at=200.0))
    assert (candidate.timeout, candidate.agent_started_at, candidate.agent_ended_at) == (None, None, None)
    model(AgentStarted(key="a", attempt=2, program="fake", timeout=None, at=201.0))
    assert list(candidate.log)[-1] == "── attempt 2: agent started (fake)"


def test_settling_is_the_last_line_of_the_log_with_its_reason():
    model = RaceModel([("a", "command"), ("b", "command")])
    model(Settled(key="a", attempt=1, status="winner", reason=None, commit="c" * 40))
    model(Settled(key="b", attempt=1, status="skipped", reason="not started: a won", commit=None))
    assert list(model.candidates["a"].log) == ["── winner"]
    skipped = model.candidates["b"]
    assert (skipped.state, skipped.reason) == ("skipped", "not started: a won")
    assert list(skipped.log) == ["── skipped: not started: a won"]


def test_a_copy_holds_the_unseen_log_lines_and_the_last_and_stays_as_it_was():
    from outpost_tui.engine.core.events import Log, Tampering
    from outpost_tui.engine.core.model import LOG_RING

    model = RaceModel([("a", "command")])
    model(Log(key="a", attempt=1, stream="stdout", lines=[f"line {n}" for n in range(LOG_RING + 500)]))
    model(Tampering(key="a", attempt=1, changes=[{"description": "HEAD moved"}]))
    live = model.candidates["a"]
    with model.lock:
        copied = live.copy(live.log_count - 3)
        whole = live.copy(0)
        nothing_new = live.copy(live.log_count)
    # the lines after `seen` (3: the last two of the flood and the tampering line), the same answer
    # to new_log on the copy as on the live model, and a whole copy bounded by the ring
    assert copied.new_log(live.log_count - 3) == live.new_log(live.log_count - 3)
    assert list(copied.log) == ["line 2498", "line 2499", "⚠ changed your repository: HEAD moved"]
    assert list(whole.log) == list(live.log) and len(whole.log) == LOG_RING
    assert list(nothing_new.log) == ["⚠ changed your repository: HEAD moved"]  # the last line only
    assert nothing_new.new_log(live.log_count) == []

    # the race goes on: the copies do not move with it
    model(Log(key="a", attempt=1, stream="stdout", lines=["later"]))
    model(Tampering(key="a", attempt=1, changes=[{"description": "a tag added"}]))
    assert copied.log_count == live.log_count - 2 and copied.lines == LOG_RING + 500
    assert copied.tampering == ["HEAD moved"] and live.tampering == ["HEAD moved", "a tag added"]
    assert "later" not in copied.log
