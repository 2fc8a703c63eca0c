"""One race run inside the app: the engine's Race, on an event loop of its own in a worker thread.

The Race is built off the app's loop too (`prepare`): the race file's check, the race machinery's
imports and the Race itself cost more than the race screen's first frame, which shows the
candidates' panels from a sketch of the file (race_sketch.py) and fills them in once the Race
exists. The engine's work (reading every agent's pipe, decoding its lines, the flight log) never
runs on the app's event loop: with eight agents printing thousands of lines a second, it would sit
between a key press and its answer. The screen never
reacts to events; it reads `race.model` on a timer, under the model's lock. The operator's
controls (cancel, accept, abort, stop) are handed to the race's own loop. The session owns the
Race's lifetime and its outcome.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from . import collector
from .race_sketch import RaceSketch

if TYPE_CHECKING:
    from ..engine.core.events import EventBus
    from ..engine.core.model import RaceModel
    from ..engine.core.result import RaceResult
    from ..engine.core.spec import RaceSpec
    from ..engine.racing.coordinator import Race

# How long the app waits for the race's loop to take an operator's control (it answers within
# one callback of the engine; this only bounds a loop that is stuck).
CONTROL_TIMEOUT = 30.0


class RaceSession:
    def __init__(self, spec: RaceSpec | RaceSketch, *, replay: bool = False) -> None:
        """A checked race's spec, or the sketch of a race file still to be checked (by prepare);
        `replay`: replaying the file's interrupted run is authorised (`run RACE.toml --resume`)."""
        self.replay = replay
        if isinstance(spec, RaceSketch):
            self.sketch, self._spec = spec, None
        else:
            self.sketch, self._spec = RaceSketch.of(spec), spec.replay_authorised() if replay else spec
        self.race: Race | None = None  # built by prepare()
        self.result: RaceResult | None = None
        self.error: str | None = None  # why the race could not be built, or could not run
        self.started = False
        self._preparing: asyncio.Future[tuple[RaceSpec, Race] | str] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the race's own, while it runs
        self._loop_lock = threading.Lock()

    @property
    def checked(self) -> bool:
        """Whether the race file was checked (the spec exists)."""
        return self._spec is not None

    @property
    def spec(self) -> RaceSpec:
        assert self._spec is not None, "a race file's spec exists once it is checked (prepare)"
        return self._spec

    @property
    def ready(self) -> bool:
        """Whether the Race is built (its model and bus exist)."""
        return self.race is not None

    @property
    def model(self) -> RaceModel:
        assert self.race is not None, "the race's model exists once it is prepared"
        return self.race.model

    @property
    def bus(self) -> EventBus:
        assert self.race is not None, "the race's event bus exists once it is prepared"
        return self.race.bus

    async def prepare(self) -> bool:
        """Check the race file (for a sketch) and build the Race in a thread, once however often
        it is awaited; False when it cannot be built (`error` says why, in one line: for a bad
        race file, as `check` says it)."""
        if self._preparing is None:
            self._preparing = asyncio.get_running_loop().run_in_executor(
                None, _build, self._spec or self.sketch, self.replay
            )
        built = await asyncio.shield(self._preparing)
        if isinstance(built, str):
            self.error = built
            return False
        self._spec, self.race = built
        collector.race_built()
        return True

    @property
    def running(self) -> bool:
        return self.started and self.result is None and self.error is None

    # ----------------------------------------------------------------------------- running

    async def run(self) -> RaceResult | None:
        """Run the race in a thread on its own event loop; returns when it has ended (every
        candidate's processes stopped). Cancelled (the app going away), it aborts the race and
        still waits for that end. A race that cannot be built does not start (`error` says why)."""
        if not await self.prepare():
            return None
        from ..engine.core.result import RaceResult

        self.started = True
        done: asyncio.Future = asyncio.get_running_loop().run_in_executor(None, self._run_in_thread)
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            self.abort()
            await done
            raise
        outcome = done.result()
        if isinstance(outcome, RaceResult):
            self.result = outcome
        else:
            self.error = outcome
        return self.result

    def _run_in_thread(self) -> RaceResult | str:
        from ..engine.errors import OutpostError

        race = self.race
        assert race is not None, "run() prepares the race first"

        async def main() -> RaceResult:
            with self._loop_lock:
                self._loop = asyncio.get_running_loop()
            try:
                return await race.run()
            finally:
                with self._loop_lock:
                    self._loop = None
                await asyncio.sleep(0)  # a control handed over just before runs now, not never

        try:
            return asyncio.run(main())
        except OutpostError as error:  # the race could not start, or its durable run failed
            return str(error)

    # ---------------------------------------------------------------------------- controls

    def _on_race_loop(self, control: Callable[..., Any], *args: Any) -> Any:
        """Call `control` where the race runs (its loop's thread) and return what it returns.
        Before the race's loop exists, or after it ended, there is nothing running to race with."""
        with self._loop_lock:
            loop = self._loop
            if loop is None:
                return control(*args)
            answer: Future = Future()

            def call() -> None:
                try:
                    answer.set_result(control(*args))
                except BaseException as error:  # handed back to the caller
                    answer.set_exception(error)

            loop.call_soon_threadsafe(call)
        return answer.result(timeout=CONTROL_TIMEOUT)

    def cancel(self, key: str) -> bool:
        return self.race is not None and self._on_race_loop(self.race.cancel, key)

    def abort(self) -> None:
        if self.race is not None:
            self._on_race_loop(self.race.abort)

    def stop_resumable(self) -> None:
        if self.race is not None:
            self._on_race_loop(self.race.stop_resumable)

    async def accept(self, key: str) -> str | None:
        """Make `key` the winner by hand; returns why not, or None when done."""
        with self._loop_lock:
            loop = self._loop
        if loop is None or self.race is None:
            return "the race is not running"
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.race.accept(key), loop))


def _build(spec: RaceSpec | RaceSketch, replay: bool = False) -> tuple[RaceSpec, Race] | str:
    """The spec (a sketch's file checked; its interrupted run's replay authorised when `replay`)
    and the Race for it (a replay's model filled from its saved run), or why it cannot be built in
    one line: the operator reads it on the race screen, never as a traceback."""
    from ..engine.errors import OutpostError

    try:
        if isinstance(spec, RaceSketch):
            try:
                spec = _check(spec)
            except OutpostError as error:  # the race file's RaceFileError: file, line, key, what
                return str(error)
            if replay:
                spec = spec.replay_authorised()
        from ..engine.api import new_race
        from ..engine.core.events import EventBus

        race = new_race(spec, bus=EventBus())
        if spec.durability.enabled and spec.run_id and spec.durability.resume == "retry-incomplete":
            from ..engine.durable.recovery import restore_model

            restore_model(race.model, spec.repository, spec.run_id)
    except Exception as error:
        return f"cannot prepare the race: {type(error).__name__}: {error}"
    return spec, race


def _check(sketch: RaceSketch) -> RaceSpec:
    """The sketched file's spec, checked from the bytes the sketch was read from."""
    from ..engine.racefile import load_race_text

    assert sketch.path is not None and sketch.source is not None, "a sketch read from a file"
    # decoded by the sketch already: UTF-8
    text = sketch.source.decode("utf-8")
    return load_race_text(text, sketch.path.expanduser().resolve(), shown=str(sketch.path))
