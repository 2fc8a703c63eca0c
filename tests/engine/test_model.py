"""The live model the app renders: what an operator reads in a candidate's panel."""

from __future__ import annotations

from outpost_tui.engine.events import Event, EventKind
from outpost_tui.engine.model import RaceModel


def test_an_agent_ending_shows_its_exit_and_its_final_message():
    model = RaceModel([("a", "claude")])
    model(Event(EventKind.RETRY, "a", 1, {"message": "rate limited, retrying in 4s"}))
    model(Event(EventKind.AGENT_EXITED, "a", 1, {
        "exit_code": 0, "reason": None, "duration": 3.2,
        "result": "Fixed add() in calc.py.\nAll 12 tests pass."}))
    candidate = model.candidates["a"]
    assert list(candidate.log)[-3:] == ["── agent ended (exit 0)", "   Fixed add() in calc.py.",
                                        "   All 12 tests pass."]
    assert candidate.retrying is None  # a retry notice does not outlive the agent


def test_a_failed_agent_shows_why():
    model = RaceModel([("a", "codex")])
    model(Event(EventKind.AGENT_EXITED, "a", 1, {"exit_code": 1, "reason": "not logged in",
                                                 "result": None}))
    assert list(model.candidates["a"].log) == ["── agent ended (exit 1: not logged in)"]
