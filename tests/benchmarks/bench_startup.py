"""Start-up of the command line against the interpreter's own, measured in the same run.

Run on its own:  python -m tests.benchmarks.bench_startup  (from the repository root).

`outpost-tui --version`, `--help` and `check RACE.toml` (a sample race) against `python -c pass`,
each a fresh process, interleaved round by round so that a load spike hits them alike. Bytecode is
allowed to be cached (as in any installed copy): a first unmeasured round writes it. Figures are the
median wall time, the median difference to `python -c pass`, and their ratio; CPU time (user + sys
of the child) is printed too, being the part a loaded machine cannot inflate.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _command() -> list[str]:
    """The installed console script when there is one (what a user runs), else `python -m`."""
    script = Path(sys.executable).parent / "outpost-tui"
    return [str(script)] if script.exists() else [sys.executable, "-m", "outpost_tui.cli"]


def _timed(argv: list[str], env: dict) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def startup(rounds: int = 15) -> dict:
    from outpost_tui.samples import materialise

    race = materialise("race", Path(tempfile.mkdtemp(prefix="outpost-bench-startup-")) / "demo")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    cli = _command()
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "--version": [*cli, "--version"],
        "--help": [*cli, "--help"],
        "check": [*cli, "check", str(race)],
    }
    walls: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    for round_ in range(rounds + 1):
        for name, argv in commands.items():
            wall, cpu = _timed(argv, env)
            if round_:  # round 0 writes the bytecode caches
                walls[name].append(wall)
                cpus[name].append(cpu)
    base = statistics.median(walls["python -c pass"])
    base_cpu = statistics.median(cpus["python -c pass"])
    figures: dict = {
        "rounds": rounds,
        "python_ms": round(base * 1000, 1),
        "python_cpu_ms": round(base_cpu * 1000, 1),
    }
    for name in ("--version", "--help", "check"):
        median = statistics.median(walls[name])
        figures[name] = {
            "ms": round(median * 1000, 1),
            "over_python_ms": round((median - base) * 1000, 1),
            "ratio": round(median / base, 2),
            "cpu_ms": round(statistics.median(cpus[name]) * 1000, 1),
            "cpu_over_python_ms": round((statistics.median(cpus[name]) - base_cpu) * 1000, 1),
        }
    return figures


if __name__ == "__main__":
    print(startup())
