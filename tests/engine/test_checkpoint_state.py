"""A saved state's shape is declared once (checkpoint_state's STATE, ATTEMPT, RECORD, USAGE, RESULT)
and every declared field is checked: a wrong value in any of them is refused, naming the field."""

from __future__ import annotations

import copy

import pytest

from outpost_tui.engine.durable import checkpoint_state
from outpost_tui.engine.durable.checkpoint_state import (
    ATTEMPT,
    RECORD,
    RESULT,
    STATE,
    USAGE,
    InvalidState,
    check_state,
)
from tests.engine.test_checkpoint import finished_state


def saved() -> dict:
    return {**finished_state(), "run_id": "parser-race", "identity": "identity-1"}


def wrong_value(rule: checkpoint_state.Field) -> object:
    """A JSON value that breaks the rule: an object where something else is due, else text."""
    value = "not-this" if rule.shape is not None or rule.expected == "an object" else {"not": "this"}
    assert not rule.test(value)
    return value


def places() -> list[tuple[str, tuple, checkpoint_state.Field]]:
    """(the field as messages name it, how to reach its parent in saved(), its rule)."""
    out = [(name, (), rule) for name, rule in STATE.items()]
    out += [(f"usage.{name}", ("usage",), rule) for name, rule in USAGE.items()]
    attempt = "attempts[0] (a#1)"
    out += [
        (f"{attempt}.{name}", ("attempts", 0), rule)
        for name, rule in ATTEMPT.items()
        if name not in ("key", "attempt", "branch")
    ]  # these three name the attempt itself
    out += [(f"{attempt}.record.{name}", ("attempts", 0, "record"), rule) for name, rule in RECORD.items()]
    out += [
        (f"{attempt}.record.usage.{name}", ("attempts", 0, "record", "usage"), rule)
        for name, rule in USAGE.items()
    ]
    out += [(f"result.{name}", ("result",), rule) for name, rule in RESULT.items()]
    return out


@pytest.mark.parametrize("name, parent, rule", places(), ids=[place[0] for place in places()])
def test_every_declared_field_is_checked(name: str, parent: tuple, rule: checkpoint_state.Field):
    state = copy.deepcopy(saved())
    check_state(state)  # the base state is valid
    target = state
    for step in parent:
        if isinstance(step, str) and target.get(step) is None:
            target[step] = {}
        target = target[step]
    target[name.rsplit(".", 1)[-1]] = wrong_value(rule)
    with pytest.raises(InvalidState) as refused:
        check_state(state)
    assert str(refused.value).startswith(f"{name} is "), str(refused.value)


@pytest.mark.parametrize(
    "name", [name for name, rule in STATE.items() if rule.default is checkpoint_state.REQUIRED]
)
def test_a_required_field_may_not_be_left_out(name: str):
    state = saved()
    del state[name]
    with pytest.raises(InvalidState, match=f"^{name} is None, expected"):
        check_state(state)
