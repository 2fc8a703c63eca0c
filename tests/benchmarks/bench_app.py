"""The app under heavy logs, and its first frame, measured in the same run as their baselines.

Run on its own:  python -m tests.benchmarks.bench_app [load|first_frame]  (from the repository root).

1. load: the app (Pilot, headless, 200x60: every panel on screen) on a race of 8 command agents each
   printing 5,000 lines a second. While they print, a digit is pressed every 0.25 s (focus panel N)
   and the time from the press to the screen's focus changing is taken; a probe sleeping 10 ms at a
   time in the app's event loop takes the loop's lag. After the race: every line each agent printed
   is in the model, and the process's memory (RSS) at the end against early in the flood.
   The baseline is the same probe and the same presses on the same app before the race starts.
2. first_frame: from a fresh process's launch to the app's first frame painted (a headless run that
   exits on its first paint), against a bare Textual app doing the same in the same run.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.conftest import make_repo

# An agent printing `rate` lines a second for `seconds`, in 10 ms slices on an absolute schedule (a
# slow slice is caught up, never dropped), then exiting: exactly rate * seconds lines.
FLOOD = r"""
import sys, time
key, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
total, per_slice = int(rate * seconds), max(1, rate // 100)
start, written, out = time.monotonic(), 0, sys.stdout
while written < total:
    due = min(total, int((time.monotonic() - start) * rate) + per_slice)
    if due > written:
        out.write("".join(f"{key} line {n:07d}: compiling module {n % 97} of the project, all fine\n"
                          for n in range(written, due)))
        out.flush()
        written = due
    time.sleep(0.01)
"""


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def _race_file(directory: Path, candidates: int, rate: int, seconds: float) -> Path:
    repo = make_repo(directory / "repo")
    text = (
        f'[race]\nname = "flood"\nrepository = "{repo}"\nconcurrency = {candidates}\n\n'
        # every candidate is rejected: all of them print to their end, none is cancelled
        '[validate]\ncommand = ["false"]\nrequire_commits = false\n'
    )
    for n in range(1, candidates + 1):
        argv = json.dumps([sys.executable, "-c", FLOOD, f"c{n}", str(rate), str(seconds)])
        text += f'\n[[candidates]]\nkey = "c{n}"\nagent = "command"\nbrief = "print"\ncommand = {argv}\n'
    path = directory / "race.toml"
    path.write_text(text)
    return path


async def _measure(app, panels: list, stop: asyncio.Event, press_every: float = 0.25):
    """Key-to-focus latencies and loop lags until `stop` is set."""
    from textual import events

    screen = app.screen
    changed: dict[str, float] = {}
    screen.watch(
        screen,
        "focused",
        lambda widget: widget is not None and changed.setdefault(widget.id, time.perf_counter()),
        init=False,
    )
    lags: list[float] = []

    async def probe() -> None:
        while not stop.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            lags.append(time.perf_counter() - before - 0.01)

    prober = asyncio.create_task(probe())
    keys: list[float] = []
    index = 0
    try:
        while not stop.is_set():
            index += 1
            # the next panel but one, so the focus always changes
            panel = panels[(index * 3) % len(panels)]
            if screen.focused is panel:
                panel = panels[(index * 3 + 1) % len(panels)]
            changed.pop(panel.id, None)
            digit = str(panels.index(panel) + 1)
            pressed = time.perf_counter()
            # As a terminal's key arrives: the driver hands it to the app's queue. (Pilot's press
            # then waits for the whole process to go idle, which it never does under this load.)
            app._driver.send_message(events.Key(digit, digit))
            deadline = pressed + 5
            while panel.id not in changed and time.perf_counter() < deadline:
                await asyncio.sleep(0.001)
            keys.append(changed.get(panel.id, time.perf_counter()) - pressed)
            await asyncio.sleep(max(0.0, press_every - (time.perf_counter() - pressed)))
    finally:
        stop.set()
        await prober
    return keys, lags


class TimedLock:
    """The model's lock, timed: how long each holder keeps it and how long each waits for it, by
    the app's thread ("app") and the race's ("race"). The race's thread waits while the app holds
    it, and the other way round."""

    def __init__(self, lock) -> None:
        self.lock = lock
        self.held: dict[str, list[float]] = {"app": [], "race": []}
        self.waited: dict[str, list[float]] = {"app": [], "race": []}
        self._local = threading.local()

    def __enter__(self) -> None:
        asked = time.perf_counter()
        self.lock.acquire()
        local = self._local
        local.depth = getattr(local, "depth", 0) + 1
        if local.depth == 1:  # reentered: timed once, from the outermost
            local.got = time.perf_counter()
            self.waited[_who()].append(local.got - asked)

    def __exit__(self, *exc) -> None:
        local = self._local
        local.depth -= 1
        if local.depth == 0:
            self.held[_who()].append(time.perf_counter() - local.got)
        self.lock.release()

    def clear(self) -> None:
        for times in (*self.held.values(), *self.waited.values()):
            times.clear()


def _who() -> str:
    return "app" if threading.current_thread() is threading.main_thread() else "race"


def _ms(values: list[float]) -> dict:
    return {
        "n": len(values),
        "p50": round(_percentile(values, 0.5) * 1000, 2),
        "p95": round(_percentile(values, 0.95) * 1000, 2),
        "max": round(max(values, default=float("nan")) * 1000, 2),
    }


def _thread_cpu(process: psutil.Process) -> dict[int, float]:
    return {thread.id: thread.user_time + thread.system_time for thread in process.threads()}


def _figures(keys: list[float], lags: list[float]) -> dict:
    return {
        "keys": len(keys),
        "key_p50_ms": round(_percentile(keys, 0.5) * 1000, 1),
        "key_p95_ms": round(_percentile(keys, 0.95) * 1000, 1),
        "key_max_ms": round(max(keys, default=float("nan")) * 1000, 1),
        "lag_p50_ms": round(_percentile(lags, 0.5) * 1000, 1),
        "lag_p95_ms": round(_percentile(lags, 0.95) * 1000, 1),
        "lag_max_ms": round(max(lags, default=float("nan")) * 1000, 1),
    }


def load(candidates: int = 8, rate: int = 5000, seconds: float = 10.0, idle_seconds: float = 3.0) -> dict:
    os.environ.setdefault("OUTPOST_TUI_CONFIG_DIR", tempfile.mkdtemp(prefix="outpost-bench-config-"))
    return asyncio.run(_load(candidates, rate, seconds, idle_seconds))


async def _load(candidates: int, rate: int, seconds: float, idle_seconds: float) -> dict:
    from outpost_tui.ui.app import OutpostApp
    from outpost_tui.ui.widgets.candidate_panel import CandidatePanel

    race_file = _race_file(Path(tempfile.mkdtemp(prefix="outpost-bench-app-")), candidates, rate, seconds)
    app = OutpostApp(race_file, testing=True)
    me = psutil.Process()
    async with app.run_test(size=(200, 60)) as pilot:
        screen = app.screen
        panels = list(screen.query(CandidatePanel))
        assert len(panels) == candidates and not screen.table_view
        while not app.session.ready:  # the screen paints before its race is built
            assert app.session.error is None, app.session.error
            await asyncio.sleep(0.02)
        # Timed where the app spends its time per tick and where the race's thread may wait on it.
        lock = app.session.model.lock = TimedLock(app.session.model.lock)
        ticks: list[float] = []
        refresh_panels = screen.refresh_panels

        def timed_refresh(rotate: bool = False) -> None:
            started = time.thread_time()
            refresh_panels(rotate)
            ticks.append(time.thread_time() - started)

        screen.refresh_panels = timed_refresh

        # Baseline: the same presses and probe on the same app, no race running.
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(idle_seconds, stop.set)
        idle_keys, idle_lags = await _measure(app, panels, stop)

        await pilot.press("s")
        model = app.session.model
        while not all(c.state == "running" for c in model.candidates.values()):
            assert app.session.error is None, app.session.error
            await asyncio.sleep(0.02)
        flood_started = time.perf_counter()
        rss: list[tuple[float, float]] = []

        async def sample_memory() -> None:
            while not stop.is_set():
                rss.append((time.perf_counter() - flood_started, me.memory_info().rss / 2**20))
                await asyncio.sleep(0.25)

        stop = asyncio.Event()
        # measured while every agent prints (its last 0.5 s left out: the first ones may end)
        asyncio.get_running_loop().call_later(max(0.5, seconds - 0.5), stop.set)
        sampler = asyncio.create_task(sample_memory())
        lock.clear()
        ticks.clear()
        cpu_before, threads_before, wall_before = me.cpu_times(), _thread_cpu(me), time.perf_counter()
        keys, lags = await _measure(app, panels, stop)
        cpu_after, threads_after, wall_after = me.cpu_times(), _thread_cpu(me), time.perf_counter()
        tick_cpu, held, waited = _ms(ticks), _ms(lock.held["app"]), _ms(lock.waited["race"])
        ui = threading.main_thread().native_id
        spent = {tid: cpu - threads_before.get(tid, 0.0) for tid, cpu in threads_after.items()}
        await sampler
        while app.session.result is None and app.session.error is None:
            await asyncio.sleep(0.05)
        assert app.session.error is None, app.session.error
        expected = int(rate * seconds)
        lines = {key: c.lines for key, c in model.candidates.items()}
        # in the first second, the growth of logs filling their rings is expected; then it is flat
        early = [mib for at, mib in rss if 1.0 <= at <= 2.0] or [rss[0][1]]
        late = [mib for at, mib in rss if at >= seconds - 2.0] or [rss[-1][1]]
        figures = {
            "candidates": candidates,
            "lines_per_s_each": rate,
            "seconds": seconds,
            "idle": _figures(idle_keys, idle_lags),
            "flood": _figures(keys, lags),
            "lines_expected_each": expected,
            "lines_in_model": lines,
            "every_line": all(count == expected for count in lines.values()),
            # the app's own CPU (engine and UI) per second of flood: 1.0 is a whole core
            "cpu_per_s": round(
                ((cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system))
                / (wall_after - wall_before),
                2,
            ),
            # of which the app's loop (the main thread) and every other thread (the race's)
            "ui_thread_cpu_per_s": round(spent.get(ui, 0.0) / (wall_after - wall_before), 2),
            "other_threads_cpu_per_s": round(
                sum(v for tid, v in spent.items() if tid != ui) / (wall_after - wall_before), 2
            ),
            # CPU the app's thread spends in one redraw of the panels (a tick), not counting the
            # compositor's paint after it; how long a tick holds the model's lock, and how long the
            # race's thread waits for it (each Log event it applies takes the lock)
            "tick_cpu_ms": tick_cpu,
            "lock_held_by_app_ms": held,
            "lock_waited_by_race_ms": waited,
            "rss_mib_early": round(max(early), 1),
            "rss_mib_late": round(max(late), 1),
        }
    return figures


# ------------------------------------------------------------------------------ first frame

# Both programs print the time from their launch to their first frame painted, and the CPU time the
# process had used by then, then exit. The frame painted is the one Textual hands to the terminal
# (App._display) for the screen the app opens on; what runs after it (the race screen builds its race
# once it has painted) is not counted. The launch is the parent's clock just before it starts the
# process, passed as the first argument (psutil's create_time counts from the boot time in whole
# seconds: up to a second off).
_TIMED_PAINT = r"""
    timed = None

    def _display(self, screen, renderable):
        super()._display(screen, renderable)
        if renderable is not None and self.timed is None and type(screen).__name__ in SCREENS:
            self.timed = (time.time() - started, time.process_time())
            self.call_later(self.exit, self.timed)
"""

_FIRST_FRAME_OUTPOST = (
    r"""
import sys, time
started = float(sys.argv[1])
from outpost_tui.ui import collector
collector.hold_off()  # as the command line's launch does
from outpost_tui.ui.app import OutpostApp
SCREENS = ("HomeScreen", "RaceScreen")

class Timed(OutpostApp):
    # Textual finds CSS_PATH beside the file of the class's module; this script has none
    __module__ = OutpostApp.__module__
"""
    + _TIMED_PAINT
    + r"""
app = Timed(sys.argv[2] if len(sys.argv) > 2 else None)
print(*app.run(headless=True, size=(200, 60)))
"""
)

_FIRST_FRAME_BARE = (
    r"""
import sys, time
started = float(sys.argv[1])
from textual.app import App
from textual.widgets import Footer, Header, Static
SCREENS = ("Screen",)

class Bare(App):
    def compose(self):
        yield Header()
        yield Static("hello")
        yield Footer()
"""
    + _TIMED_PAINT
    + r"""
print(*Bare().run(headless=True, size=(200, 60)))
"""
)


def first_frame(rounds: int = 7) -> dict:
    directory = Path(tempfile.mkdtemp(prefix="outpost-bench-frame-"))
    race_file = _race_file(directory, 8, 10, 1.0)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["OUTPOST_TUI_CONFIG_DIR"] = str(directory / "config")
    programs = {
        "bare_textual": ([sys.executable, "-c", _FIRST_FRAME_BARE], []),
        "home": ([sys.executable, "-c", _FIRST_FRAME_OUTPOST], []),
        "race": ([sys.executable, "-c", _FIRST_FRAME_OUTPOST], [str(race_file)]),
    }
    times: dict[str, list[float]] = {name: [] for name in programs}
    cpus: dict[str, list[float]] = {name: [] for name in programs}
    for round_ in range(rounds + 1):
        for name, (program, args) in programs.items():
            argv = [*program, repr(time.time()), *args]
            done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=directory, timeout=120)
            if done.returncode != 0:
                raise RuntimeError(f"{name}: {done.stderr[-1000:]}")
            if round_:  # round 0 writes the bytecode caches
                wall, cpu = map(float, done.stdout.strip().splitlines()[-1].split())
                times[name].append(wall)
                cpus[name].append(cpu)
    base, base_cpu = statistics.median(times["bare_textual"]), statistics.median(cpus["bare_textual"])
    figures: dict = {
        "rounds": rounds,
        "bare_textual_ms": round(base * 1000, 1),
        "bare_textual_cpu_ms": round(base_cpu * 1000, 1),
    }
    for name in ("home", "race"):
        median, cpu = statistics.median(times[name]), statistics.median(cpus[name])
        figures[name] = {
            "ms": round(median * 1000, 1),
            "over_bare_ms": round((median - base) * 1000, 1),
            "ratio": round(median / base, 2),
            "cpu_ms": round(cpu * 1000, 1),
            "cpu_ratio": round(cpu / base_cpu, 2),
        }
    return figures


if __name__ == "__main__":
    which = sys.argv[1:] or ["load", "first_frame"]
    if "load" in which:
        print(load())
    if "first_frame" in which:
        print(first_frame())
