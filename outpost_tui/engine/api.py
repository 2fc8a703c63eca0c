"""The public Python API: run a race from a spec, a race file or keyword arguments.

from outpost_tui.engine import race, CandidateSpec

result = race(repository=".", candidates=[CandidateSpec("a", "command", "fix it",
              command=("my-agent",))], validate=lambda ctx: ctx.commits != [])
print(result.status, result.winner and result.winner.branch)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from .core.events import Event, EventBus
from .core.result import RaceResult
from .core.spec import BudgetSpec, CandidateSpec, RaceSpec, ScoreSpec, ValidateSpec
from .durable.run import DurableRun
from .racing.coordinator import Race
from .sandbox import SandboxProvider


def new_race(spec: RaceSpec, *, bus: EventBus | None = None, provider: SandboxProvider | None = None) -> Race:
    """A Race for `spec`, checkpointed at every transition when its [durability] is enabled."""
    return Race(
        spec, bus=bus, provider=provider, checkpointing=DurableRun if spec.durability.enabled else None
    )


async def run_race_async(
    spec: RaceSpec,
    *,
    on_event: Callable[[Event], None] | None = None,
    on_start: Callable[[Race], None] | None = None,
) -> RaceResult:
    """Run a race in the current event loop; `on_start` receives the Race (for its controls)."""
    bus = EventBus()
    if on_event is not None:
        bus.subscribe(on_event)
    race_ = new_race(spec, bus=bus)
    if on_start is not None:
        on_start(race_)
    return await race_.run()


def run_race(spec: RaceSpec | str | Path, *, on_event: Callable[[Event], None] | None = None) -> RaceResult:
    """Run a race to the end and return its result (the same result the CLI prints)."""
    if not isinstance(spec, RaceSpec):
        from .racefile import load_race

        spec = load_race(spec)
    return anyio.run(lambda: run_race_async(spec, on_event=on_event))


def build_spec(
    *,
    repository: str | Path,
    candidates: Iterable[CandidateSpec],
    validate: Callable[[Any], Any] | ValidateSpec | Iterable[str] | None = None,
    score: Callable[[Any], Any] | ScoreSpec | Iterable[str] | None = None,
    budget: BudgetSpec | None = None,
    **options: Any,
) -> RaceSpec:
    """A RaceSpec from keyword arguments; validate/score may be callables or argv lists."""
    if validate is None or isinstance(validate, ValidateSpec):
        validate_spec = validate or ValidateSpec()
    elif callable(validate):
        validate_spec = ValidateSpec(check=validate)
    else:
        validate_spec = ValidateSpec(command=tuple(validate))
    score_spec: ScoreSpec | None
    if score is None or isinstance(score, ScoreSpec):
        score_spec = score
    elif callable(score):
        score_spec = ScoreSpec(check=score)
    else:
        score_spec = ScoreSpec(command=tuple(score))
    if score_spec is not None:
        options.setdefault("select", "best")
    spec = RaceSpec(
        repository=Path(repository).resolve(),
        candidates=tuple(candidates),
        validate=validate_spec,
        score=score_spec,
        budget=budget or BudgetSpec(),
    )
    return replace(spec, **options)


def race(**kwargs: Any) -> RaceResult:
    """Build a spec from keyword arguments (see build_spec) and run it."""
    on_event = kwargs.pop("on_event", None)
    return run_race(build_spec(**kwargs), on_event=on_event)
