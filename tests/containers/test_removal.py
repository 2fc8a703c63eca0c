"""A race's containers are halted where the attempt needs them gone and removed off its path: the
agent's is frozen before grading starts, the grading one before the attempt settles, and none
outlives the race, whether it ends, is cancelled from outside, or fails on its way."""

from __future__ import annotations

import anyio
import pytest

from outpost_tui.engine import CandidateSpec, EventKind, build_spec
from outpost_tui.engine.core.events import EventBus
from outpost_tui.engine.core.spec import SandboxSpec, ValidateSpec
from outpost_tui.engine.racing.coordinator import Race
from outpost_tui.engine.sandbox.container import ContainerProvider
from outpost_tui.engine.sandbox.container_engine import LABEL_RACE, container_name, list_containers

from .conftest import IMAGE

pytestmark = [pytest.mark.container, pytest.mark.anyio]

VALIDATE = ValidateSpec(command=("python3", "-m", "unittest", "-q"), timeout=120)


def wrong(*keys: str) -> list[CandidateSpec]:
    """Candidates that all fix the bug wrongly: every attempt runs to its verdict (no winner
    cancels another)."""
    return [
        CandidateSpec(
            key, "command", "fix add", command=("python3", "agents/fix.py"), env={"FIX": "return a * b"}
        )
        for key in keys
    ]


async def test_containers_are_halted_before_what_follows_and_gone_when_the_race_returns(engine, calc_repo):
    client, _ = engine
    provider = ContainerProvider(SandboxSpec(provider="podman", image=IMAGE))
    spec = build_spec(
        repository=calc_repo, candidates=wrong("a", "b"), validate=VALIDATE, sandbox=provider.spec
    )
    bus = EventBus()
    race_id: list[str] = []
    seen: dict[tuple[str, str], str] = {}

    def state(name: str) -> str:
        found = client.api.containers(all=True, filters={"name": f"^{name}$"})
        return found[0]["State"] if found else "removed"

    def on_event(event) -> None:
        if event.kind is EventKind.RACE_STARTED:
            race_id.append(event.id)
        elif event.kind is EventKind.VALIDATION_STARTED:
            # the agent's container: nothing of it may run while its result is graded
            seen[(event.key, "agent")] = state(container_name(race_id[0], event.key, event.attempt))
        elif event.kind is EventKind.SETTLED:
            seen[(event.key, "grading")] = state(
                container_name(race_id[0], event.key, event.attempt, "grading")
            )

    bus.subscribe(on_event)
    result = await Race(spec, bus=bus, provider=provider).run()

    assert {c.key: c.status.value for c in result.candidates} == {"a": "rejected", "b": "rejected"}, [
        c.error for c in result.candidates
    ]
    assert set(seen) == {("a", "agent"), ("b", "agent"), ("a", "grading"), ("b", "grading")}
    # (Docker says "removing" of a paused container whose removal is under way)
    assert set(seen.values()) <= {"paused", "removing", "removed"}, seen
    assert all(c.cleanup == "done" for c in result.candidates)
    assert client.api.containers(all=True, filters={"label": f"{LABEL_RACE}={result.id}"}) == []
    assert await provider.drain() == {}


async def test_a_race_cancelled_from_outside_leaves_no_container(engine, calc_repo):
    """The caller cancels the race (the app quitting) while agents work: the attempts close their
    sandboxes on the way out and the race waits for the removals before it lets go."""
    provider = ContainerProvider(SandboxSpec(provider="podman", image=IMAGE))
    spec = build_spec(
        repository=calc_repo,
        candidates=[
            CandidateSpec(key, "command", "hang", command=("python3", "agents/hang.py")) for key in ("x", "y")
        ],
        validate=VALIDATE,
        sandbox=provider.spec,
    )
    bus = EventBus()
    race_id: list[str] = []
    running: set[str] = set()
    with anyio.CancelScope() as scope:

        def on_event(event) -> None:
            if event.kind is EventKind.RACE_STARTED:
                race_id.append(event.id)
            elif event.kind is EventKind.TEXT and "ready in" in event.text:
                running.add(event.key)
                if running == {"x", "y"}:
                    scope.cancel()

        bus.subscribe(on_event)
        with anyio.fail_after(120):
            await Race(spec, bus=bus, provider=provider).run()
    assert scope.cancelled_caught
    assert running == {"x", "y"}
    assert list_containers(race_id[0]) == []
    assert await provider.drain() == {}
