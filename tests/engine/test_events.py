"""Typed events: one frozen class per kind, and the flight log still writes the same JSON."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from outpost_tui.engine import agents
from outpost_tui.engine.core.events import (
    EVENT_TYPES,
    UNSET,
    EventKind,
    RaceStarted,
    Settled,
    Text,
    event_of,
)
from tests.agents.replay import TRANSCRIPTS, decoder_for, feed, transcript
from tests.engine.flightlog_races import run_both

RECORDED = Path(__file__).parent / "data" / "flightlog_kinds.json"


def test_every_kind_has_one_frozen_class():
    assert set(EVENT_TYPES) == set(EventKind)
    for kind, cls in EVENT_TYPES.items():
        assert cls.kind is kind and dataclasses.is_dataclass(cls)
        with pytest.raises(dataclasses.FrozenInstanceError):
            event = event_of(kind, "a", 1, dict.fromkeys(cls.fields_))
            event.key = "b"


def test_a_payload_that_breaks_its_kind_is_refused_where_it_is_made():
    """An agent's decoded event becomes typed on its way to the bus: a field its kind lacks, or one
    it needs and is not given, is a TypeError there (not a flight log with a new shape)."""
    with pytest.raises(TypeError, match="statuss"):
        event_of(EventKind.SETTLED, "a", 1, {"statuss": "winner", "reason": None, "commit": None})
    with pytest.raises(TypeError, match="commit"):
        event_of("settled", "a", 1, {"status": "winner", "reason": None})
    with pytest.raises(TypeError, match="statuss"):
        Settled(key="a", attempt=1, statuss="winner", reason=None, commit=None)  # type: ignore[call-arg]


def test_json_is_the_payload_then_the_envelope_and_leaves_out_what_the_event_does_not_carry():
    settled = Settled(key="a", attempt=2, status="winner", reason=None, commit="c" * 40, at=1.5)
    assert settled.retained_directory is UNSET and not settled.retained_directory
    assert settled.to_json() == {
        "status": "winner",
        "reason": None,
        "commit": "c" * 40,
        "at": 1.5,
        "kind": "settled",
        "key": "a",
        "attempt": 2,
    }
    assert Text(key="a", attempt=1, text="hm", reasoning=True, at=0).to_json()["reasoning"] is True
    started = RaceStarted(
        id="r",
        name="n",
        mode="race",
        select="first",
        baseline="b",
        candidates=["a"],
        run_id=None,
        host_dirty=False,
        validate=None,
        at=0,
    )
    assert "key" not in started.to_json() and started.kind == "race-started"


@pytest.mark.parametrize(
    "name",
    sorted(path.name for path in TRANSCRIPTS.iterdir() if path.name.split("_")[0] in agents.known_agents()),
)
def test_every_event_an_agent_adapter_decodes_is_a_typed_event(name: str):
    """What the adapters decode from the recorded transcripts fits the event classes (the
    coordinator publishes them typed; an adapter adding a payload key fails here, not in a race)."""
    decoder = decoder_for(name.split("_")[0])
    for event in feed(decoder, transcript(name)):
        typed = event_of(event.kind, "k", 1, event.data)
        assert typed.payload() == dict(event.data)


def test_a_race_flight_log_keeps_its_json_shape(tmp_path: Path):
    """The flight logs of two races that between them produce most kinds hold, per kind, exactly the
    keys they held when events were untyped (recorded in data/flightlog_kinds.json before the change)."""
    assert run_both(tmp_path) == json.loads(RECORDED.read_text())
