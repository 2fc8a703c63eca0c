"""Engine overhead against the raw work it wraps, measured in the same run.

Run on its own:  python -m tests.benchmarks.bench_engine [overhead|cancel|throughput|durable ...]
(from the repository root). Each benchmark prints its figures and returns them as a dict; the
pytest wrapper in test_benchmarks.py asserts the targets.

1. overhead: a race of 8 candidates whose agent commits one file and exits (every attempt runs to
   the end: validation rejects them all), against the same raw work (git worktree add, the same
   agent process, the same validation command) done directly, 8 at once, in threads. Wall time,
   and CPU time (this process's and its children's), which a loaded machine does not inflate the
   way it does wall time: on a shared machine the wall ratio says little, the CPU ratio holds.
   overhead_sh: the same with the cheapest agent there is (`sh -c "echo > out.txt && git add &&
   git commit"`), validated and scored (best of N), so the engine's own fixed cost per attempt is
   not hidden by an agent's start-up; it also counts the engine's git processes per attempt, and
   runs a third baseline: the raw work with the engine's checks done directly (raw_work.py), which
   splits the fixed cost into what the checks cost as processes and what the engine adds. Also
   per attempt: worker-thread hops, flight-log events, and the time waited for each lock.
2. cancel: from the winner's acceptance to every loser's process group gone (7 losers), 20 runs.
3. throughput: one candidate printing 200,000 lines, against a plain read loop over the same
   program's pipe; and the engine's peak memory for 50,000 lines against 200,000.
4. durable: a race whose agents report usage 1,000 times, durable against non-durable: checkpoint
   writes, the time spent in them, and the wall-time ratio.
"""

from __future__ import annotations

import contextlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from outpost_tui.engine import (
    CandidateSpec,
    EventKind,
    build_spec,
    new_race,
    run_race,
)
from outpost_tui.engine.core.spec import DurabilitySpec, SandboxSpec, ValidateSpec
from outpost_tui.engine.sandbox import isolation
from tests.benchmarks import raw_work
from tests.benchmarks.lock_waits import LOCKS, lock_waits
from tests.conftest import FAKE_AGENT, make_repo
from tests.fixtures import host_pids

AGENT = (sys.executable, str(FAKE_AGENT))
# The overhead benchmarks measure the engine's machinery against the same raw work, both as the
# user: what the fence around a candidate adds (bubblewrap, its own repository, the result
# brought in) is bench_isolation's, against this same unisolated engine in one run.
UNFENCED = SandboxSpec(isolation="none")
VALIDATION = ("git", "diff", "--quiet", "HEAD~1")  # exits 1 (a commit exists): every attempt is rejected


def _repo() -> Path:
    return make_repo(Path(tempfile.mkdtemp(prefix="outpost-bench-")) / "repo")


def _cpu() -> float:
    """CPU seconds of this process and of the children it has waited for: what a loaded machine
    cannot inflate the way it does wall time (the other processes' share is not in it)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _cpu_own() -> float:
    """CPU seconds of this process alone."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def overhead(candidates: int = 8, rounds: int = 3) -> dict:
    engine_times, raw_times = [], []
    engine_cpu, raw_cpu = [], []
    for _ in range(rounds):
        repo = _repo()
        spec = build_spec(
            repository=repo,
            candidates=[
                CandidateSpec(
                    f"c{n}",
                    "command",
                    "commit one file",
                    command=(*AGENT, "--write", f"f{n}.txt", "--commit"),
                )
                for n in range(candidates)
            ],
            validate=ValidateSpec(command=VALIDATION),
            sandbox=UNFENCED,
        )
        cpu = _cpu()
        started = time.perf_counter()
        result = run_race(spec)
        engine_times.append(time.perf_counter() - started)
        engine_cpu.append(_cpu() - cpu)
        assert result.status.value == "no-winner" and all(c.commits for c in result.candidates)

        cpu = _cpu()
        raw_times.append(_raw_round(candidates))
        raw_cpu.append(_cpu() - cpu)
    engine, raw = statistics.median(engine_times), statistics.median(raw_times)
    return {
        "candidates": candidates,
        "engine_s": round(engine, 3),
        "raw_s": round(raw, 3),
        "ratio": round(engine / raw, 2),
        "cpu_ratio": round(statistics.median(engine_cpu) / statistics.median(raw_cpu), 2),
    }


def _raw_round(candidates: int) -> float:
    """The raw work of one round: worktree, agent, a clean checkout graded, 8 at once."""

    def agent(directory: Path, n: int) -> None:
        subprocess.run(
            [*AGENT, "--write", f"f{n}.txt", "--commit"],
            cwd=directory,
            input=b"commit one file",
            check=True,
            capture_output=True,
        )

    def grade(grading: Path) -> None:
        subprocess.run(list(VALIDATION), cwd=grading, capture_output=True)

    return raw_work.attempts(_repo(), candidates, agent, grade, remove_worktree=False)


SH_AGENT = ("sh", "-c", 'echo "$OUTPOST_CANDIDATE" > out.txt && git add out.txt && git commit -qm out')
SH_VALIDATION = ("test", "-s", "out.txt")
SH_SCORE = ("sh", "-c", "wc -c < out.txt")


def overhead_sh(candidates: int = 8, rounds: int = 5) -> dict:
    from outpost_tui.engine.core.spec import ScoreSpec
    from outpost_tui.engine.git import runner as git_runner
    from outpost_tui.engine.records.flightlog import FlightLog

    engine_times, raw_times, checked_times, counts = [], [], [], []
    waits: list[dict[str, float]] = []
    engine_cpu, raw_cpu, checked_cpu, engine_own, raw_own = [], [], [], [], []
    for _ in range(rounds):
        spec = build_spec(
            repository=_repo(),
            candidates=[
                CandidateSpec(f"c{n}", "command", "commit one file", command=SH_AGENT)
                for n in range(candidates)
            ],
            validate=ValidateSpec(command=SH_VALIDATION),
            score=ScoreSpec(command=SH_SCORE),
            sandbox=UNFENCED,
        )
        tally: dict[str, int] = {}
        with (
            _counted(git_runner, "_popen", tally, "git"),  # every git process, a session's too
            _counted(anyio.to_thread, "run_sync", tally, "hops"),
            _counted(FlightLog, "__call__", tally, "events"),
            lock_waits() as waited,
        ):
            cpu, own = _cpu(), _cpu_own()
            started = time.perf_counter()
            result = run_race(spec)
            engine_times.append(time.perf_counter() - started)
            engine_cpu.append(_cpu() - cpu)
            engine_own.append(_cpu_own() - own)
        counts.append(tally)
        waits.append(waited)
        assert result.status.value == "winner", result.status
        assert all(c.score is not None for c in result.candidates), result.to_json()

        cpu, own = _cpu(), _cpu_own()
        raw_times.append(_raw_sh_round(candidates))
        raw_cpu.append(_cpu() - cpu)
        raw_own.append(_cpu_own() - own)

        cpu = _cpu()
        checked_times.append(_raw_sh_round(candidates, checks=True))
        checked_cpu.append(_cpu() - cpu)
    engine, raw = statistics.median(engine_times), statistics.median(raw_times)
    checked, cpu_checked = statistics.median(checked_times), statistics.median(checked_cpu)
    cpu_engine, cpu_raw = statistics.median(engine_cpu), statistics.median(raw_cpu)
    own_engine, own_raw = statistics.median(engine_own), statistics.median(raw_own)

    def per_attempt(what: str) -> float:
        return round(statistics.median(tally.get(what, 0) for tally in counts) / candidates, 1)

    return {
        "candidates": candidates,
        "engine_s": round(engine, 3),
        "raw_s": round(raw, 3),
        "ratio": round(engine / raw, 2),
        # what the engine adds per attempt, with 8 at once on this machine's cores
        "fixed_ms_per_attempt": round((engine - raw) / candidates * 1000, 1),
        # the same in CPU time (the engine's own and its git's, the agents' and checks' alike)
        "cpu_ratio": round(cpu_engine / cpu_raw, 2),
        "fixed_cpu_ms_per_attempt": round((cpu_engine - cpu_raw) / candidates * 1000, 1),
        # where it goes: this process's own CPU (Python: the event loop, threads, spawning) and
        # what it starts (git, the cgroup shim), per attempt, over the raw work's
        "own_cpu_ms_per_attempt": round((own_engine - own_raw) / candidates * 1000, 1),
        "children_cpu_ms_per_attempt": round(
            ((cpu_engine - own_engine) - (cpu_raw - own_raw)) / candidates * 1000, 1
        ),
        # The fixed cost split in two: the engine's checks as processes run directly (the raw
        # work with them, raw_work.attempts(checks=True)), and what the engine adds to that.
        "checked_s": round(checked, 3),
        "checks_ms_per_attempt": round((checked - raw) / candidates * 1000, 1),
        "checks_cpu_ms_per_attempt": round((cpu_checked - cpu_raw) / candidates * 1000, 1),
        "ratio_to_checked": round(engine / checked, 2),
        "cpu_ratio_to_checked": round(cpu_engine / cpu_checked, 2),
        "git_calls_per_attempt": per_attempt("git"),
        "worker_thread_hops_per_attempt": per_attempt("hops"),
        "flight_log_events_per_attempt": per_attempt("events"),
        # from asking for a lock to holding it (lock_waits.py says which locks)
        "lock_wait_ms_per_attempt": {
            lock: round(statistics.median(w[lock] for w in waits) / candidates * 1000, 2) for lock in LOCKS
        },
    }


@contextlib.contextmanager
def _counted(owner: object, name: str, tally: dict[str, int], label: str) -> Iterator[None]:
    """Count calls of owner.name under `label` while the block runs."""
    original = getattr(owner, name)

    def counted(*args, **options):
        tally[label] = tally.get(label, 0) + 1
        return original(*args, **options)

    setattr(owner, name, counted)
    try:
        yield
    finally:
        setattr(owner, name, original)


def _raw_sh_round(candidates: int, *, checks: bool = False) -> float:
    """overhead_sh's raw work of one round (with the engine's checks done directly: `checks`)."""

    def agent(directory: Path, n: int) -> None:
        subprocess.run(
            SH_AGENT,
            cwd=directory,
            check=True,
            capture_output=True,
            env={**os.environ, "OUTPOST_CANDIDATE": f"c{n}"},
        )

    def grade(grading: Path) -> None:
        assert subprocess.run(SH_VALIDATION, cwd=grading).returncode == 0
        float(subprocess.run(SH_SCORE, cwd=grading, check=True, capture_output=True).stdout)

    return raw_work.attempts(_repo(), candidates, agent, grade, remove_worktree=True, checks=checks)


def cancel_latency(runs: int = 20, losers: int = 7) -> dict:
    latencies = []
    for _ in range(runs):
        latency = _cancel_once(losers)
        if latency is not None:
            latencies.append(latency)
    return {
        "runs": len(latencies),
        "losers": losers,
        "median_ms": round(statistics.median(latencies), 1),
        "max_ms": round(max(latencies), 1),
    }


def _cancel_once(losers: int) -> float | None:
    """One race's cancellation latency in ms: the winner accepted to every loser's group gone."""
    repo = _repo()
    marks = Path(tempfile.mkdtemp(prefix="outpost-bench-marks-"))
    with _candidates_may_write(marks):
        return _cancel_in(repo, marks, losers)


@contextlib.contextmanager
def _candidates_may_write(marks: Path) -> Iterator[None]:
    """Isolated candidates (the default where bubblewrap works) may write `marks`, where they
    leave their pid files, and those pids are the ones this process sees: inside a pid
    namespace a process's own number is that namespace's (tests/fixtures/host_pids.py; under
    pytest the session serves it, run on its own this process does, once)."""
    if host_pids.VARIABLE not in os.environ:
        served = Path(tempfile.mkdtemp(prefix="outpost-bench-pids-"))
        host_pids.serve(served / "pids.sock")
        os.environ[host_pids.VARIABLE] = str(served / "pids.sock")
    before = os.environ.get(isolation.WRITABLE_VARIABLE)
    reachable = [before or "", str(marks), os.path.dirname(os.environ[host_pids.VARIABLE])]
    os.environ[isolation.WRITABLE_VARIABLE] = ":".join(filter(None, reachable))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(isolation.WRITABLE_VARIABLE, None)
        else:
            os.environ[isolation.WRITABLE_VARIABLE] = before


def _cancel_in(repo: Path, marks: Path, losers: int) -> float | None:
    pidfiles = [marks / f"l{n}.pid" for n in range(losers)]
    # The winner commits only once every loser is running, so each run measures 7 cancellations.
    winner_flags = []
    for pidfile in pidfiles:
        winner_flags += ["--wait-file", str(pidfile)]
    spec = build_spec(
        repository=repo,
        candidates=[
            CandidateSpec(f"l{n}", "command", "hang", command=(*AGENT, "--pidfile", str(p), "--hang"))
            for n, p in enumerate(pidfiles)
        ]
        + [
            CandidateSpec(
                "w", "command", "win", command=(*AGENT, *winner_flags, "--write", "w.txt", "--commit")
            )
        ],
        validate=ValidateSpec(command=("true",)),
        sandbox=SandboxSpec(isolation=os.environ.get("BENCH_ISOLATION", "auto")),
    )
    accepted_at: list[float] = []
    gone_at: list[float] = []
    members: list[int] = []
    done = threading.Event()

    def watch() -> None:
        # Polls the losers' processes from another thread, so the measurement does not depend on
        # the event loop that does the cancelling.
        while not accepted_at and not done.is_set():
            time.sleep(0.0005)
        # Watch until they are gone even if the race has already returned: a starved
        # watcher then reports a later time, an upper bound rather than a missing sample.
        deadline = time.perf_counter() + 30
        while accepted_at and time.perf_counter() < deadline:
            if members and not any(_running(pid) for pid in members):
                gone_at.append(time.perf_counter())
                return
            time.sleep(0.0005)

    def on_event(event) -> None:
        if event.kind is EventKind.VALIDATION_FINISHED and event.key == "w" and event.status == "passed":
            # every process of each loser's group: the agent leads its own, or (isolated)
            # bubblewrap does, its pid namespace's init and the agent below it
            for pidfile in pidfiles:
                members.extend(_group_members(os.getpgid(int(pidfile.read_text().split()[0]))))
            accepted_at.append(time.perf_counter())

    watcher = threading.Thread(target=watch)
    watcher.start()
    run_race(spec, on_event=on_event)
    done.set()
    watcher.join()
    return (gone_at[0] - accepted_at[0]) * 1000 if accepted_at and gone_at else None


def _group_members(pgid: int) -> list[int]:
    import psutil

    leader = psutil.Process(pgid)
    return [pgid, *(child.pid for child in leader.children(recursive=True))]


def _running(pid: int) -> bool:
    """Whether `pid` has not exited. A zombie has: bubblewrap's outer process exits without
    waiting for its pid namespace's init, which the machine's init then reaps when it will
    (up to two seconds after, on this kind of machine)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] != b"Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def throughput(lines: int = 200_000, rounds: int = 3) -> dict:
    argv = [*AGENT, "--lines", str(lines)]
    plain_times, engine_times = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        count = sum(1 for _ in process.stdout)
        process.wait()
        plain_times.append(time.perf_counter() - started)
        assert count >= lines

        engine_times.append(_engine_lines(argv, lines))
    plain, engine = statistics.median(plain_times), statistics.median(engine_times)
    # engine throughput as a share of the plain loop's, round by round (the two back to back see
    # the same machine), then the median
    shares = [p / e for p, e in zip(plain_times, engine_times, strict=True)]
    return {
        "lines": lines,
        "plain_lines_per_s": int(lines / plain),
        "engine_lines_per_s": int(lines / engine),
        "engine_vs_plain": round(statistics.median(shares), 2),
        "peak_mib_50k": _peak_memory(50_000),
        "peak_mib_200k": _peak_memory(200_000),
    }


def _engine_lines(argv: list[str], lines: int) -> float:
    """The agent's run time inside a race while the engine takes its `lines` lines."""
    seen = {"lines": 0, "duration": None}
    spec = build_spec(
        repository=_repo(),
        candidates=[CandidateSpec("spam", "command", "print", command=tuple(argv))],
        validate=ValidateSpec(command=("true",), require_commits=False),
    )

    def on_event(event) -> None:
        if event.kind is EventKind.LOG:
            seen["lines"] += len(event.lines)
        elif event.kind is EventKind.AGENT_EXITED:
            seen["duration"] = event.duration

    run_race(spec, on_event=on_event)
    assert seen["lines"] >= lines
    return seen["duration"]


def _peak_memory(lines: int) -> float:
    spec = build_spec(
        repository=_repo(),
        candidates=[CandidateSpec("spam", "command", "print", command=(*AGENT, "--lines", str(lines)))],
        validate=ValidateSpec(command=("true",), require_commits=False),
    )
    tracemalloc.start()
    try:
        run_race(spec)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return round(peak / 2**20, 2)


def durable(reports: int = 1000, candidates: int = 2) -> dict:
    def spec_for(repo: Path, enabled: bool):
        return replace(
            build_spec(
                repository=repo,
                candidates=[
                    CandidateSpec(
                        f"c{n}",
                        "command",
                        "report usage",
                        command=(
                            *AGENT,
                            "--usage",
                            "10",
                            "5",
                            "0",
                            "2",
                            "--usage-times",
                            str(reports),
                            "--write",
                            f"f{n}.txt",
                            "--commit",
                        ),
                    )
                    for n in range(candidates)
                ],
                validate=ValidateSpec(command=VALIDATION),
            ),
            run_id="bench",
            durability=DurabilitySpec(enabled=enabled),
        )

    def timed(enabled: bool) -> tuple[float, object]:
        race = new_race(spec_for(_repo(), enabled))
        started = time.perf_counter()
        anyio.run(race.run)
        return time.perf_counter() - started, race

    plain_times, durable_times, writes, write_seconds = [], [], [], []
    for _ in range(3):
        plain_times.append(timed(False)[0])
        elapsed, race = timed(True)
        durable_times.append(elapsed)
        writes.append(race.checkpointing.writes)
        write_seconds.append(race.checkpointing.write_seconds)
    plain, slow = statistics.median(plain_times), statistics.median(durable_times)
    return {
        "usage_reports_per_candidate": reports,
        "candidates": candidates,
        "checkpoint_writes": int(statistics.median(writes)),
        "checkpoint_ms_total": round(statistics.median(write_seconds) * 1000, 1),
        "plain_s": round(plain, 3),
        "durable_s": round(slow, 3),
        "ratio": round(slow / plain, 2),
    }


BENCHMARKS = {
    "overhead": overhead,
    "overhead_sh": overhead_sh,
    "cancel": cancel_latency,
    "throughput": throughput,
    "durable": durable,
}


def main(names: list[str]) -> None:
    for name in names or list(BENCHMARKS):
        print(name, BENCHMARKS[name](), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
