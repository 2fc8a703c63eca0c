"""One race run inside the app: the engine's Race, in the app's own event loop.

The screen never reacts to events; it reads `race.model` on a timer. The session only owns the
Race's lifetime and its outcome.
"""

from __future__ import annotations

from ..engine.racing.coordinator import Race, RaceError
from ..engine.core.events import EventBus
from ..engine.core.result import RaceResult
from ..engine.core.spec import RaceSpec


class RaceSession:
    def __init__(self, spec: RaceSpec) -> None:
        self.spec = spec
        self.bus = EventBus()
        self.race = Race(spec, bus=self.bus)
        if spec.durability.enabled and spec.run_id and spec.durability.resume == "retry-incomplete":
            from ..engine.durable.recovery import restore_model

            restore_model(self.race.model, spec.repository, spec.run_id)
        self.result: RaceResult | None = None
        self.error: str | None = None
        self.started = False

    @property
    def model(self):
        return self.race.model

    @property
    def running(self) -> bool:
        return self.started and self.result is None and self.error is None

    async def run(self) -> RaceResult | None:
        self.started = True
        try:
            self.result = await self.race.run()
        except RaceError as error:
            self.error = str(error)
        except Exception as error:  # durable-run errors carry an exit code and a one-line message
            if getattr(error, "exit_code", None) is None:
                raise
            self.error = str(error)
        return self.result
