"""What isolating a local candidate costs per attempt, measured against the unisolated sandbox in
the same run.

Run on its own:  python -m tests.benchmarks.bench_isolation  (from the repository root).

The same race (8 `sh` candidates each committing one file, validated by `true`, two at a time)
runs with `[sandbox] isolation = "none"` and `"bubblewrap"`, alternately, `rounds` times each;
the figure is the difference of the medians, per attempt. Its parts are timed directly beside it:
bubblewrap around `true` against `true` alone (an attempt here runs three fenced commands: its
agent, its validation and its score), a race's template of private repositories (once per race),
making a checkout's private repository from it (two per attempt: its worktree's and its grading
checkout's), and bringing its commit in.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from outpost_tui.engine import CandidateSpec, build_spec, run_race
from outpost_tui.engine import git as g
from outpost_tui.engine.core.spec import SandboxSpec
from outpost_tui.engine.sandbox import isolation
from tests.conftest import make_repo

CANDIDATES = 8
COMMIT = "echo {key} > {key}.txt && git add -A && git -c user.name=c -c user.email=c@x commit -qm {key}"


def _race(repo: Path, mode: str) -> float:
    spec = build_spec(
        repository=repo,
        candidates=[
            CandidateSpec(f"c{n}", "command", "b", command=("sh", "-c", COMMIT.format(key=f"c{n}")))
            for n in range(CANDIDATES)
        ],
        validate=["true"],
        select="best",
        score=["echo", "1"],
        concurrency=2,
        sandbox=SandboxSpec(isolation=mode),  # type: ignore[arg-type]
    )
    started = time.perf_counter()
    result = run_race(spec)
    elapsed = time.perf_counter() - started
    assert all(c.commit for c in result.candidates), [c.error for c in result.candidates]
    return elapsed


def _spawn_ms(argv: list[str], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run(argv, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def _private_ms(root: Path, rounds: int) -> tuple[float, float, float]:
    """Median ms of a race's private_template, of make_private and of import_result, on a
    worktree with one new commit."""
    templated, made, imported = [], [], []
    baseline = g.resolve_commit(root)
    for n in range(rounds):
        started = time.perf_counter()
        template = g.private_template(root, g.listed_refs(root))
        templated.append(time.perf_counter() - started)
        branch = g.branch_name("bench", "p", n + 1)
        directory = g.worktree_directory(root, "p", branch)
        g.add_worktree(root, branch, directory, baseline)
        started = time.perf_counter()
        private = g.make_private(template, directory, baseline)
        made.append(time.perf_counter() - started)
        env = {**os.environ, "GIT_DIR": str(private), "GIT_WORK_TREE": str(directory)}
        (directory / "new.txt").write_text(f"{n}\n")
        for argv in (["add", "new.txt"], ["-c", "user.name=c", "-c", "user.email=c@x", "commit", "-qm", "n"]):
            subprocess.run(["git", *argv], cwd=directory, env=env, check=True)
        started = time.perf_counter()
        g.import_result(root, directory, branch)
        imported.append(time.perf_counter() - started)
    g.close_sessions(str(root))
    return tuple(statistics.median(times) * 1000 for times in (templated, made, imported))  # type: ignore[return-value]


def isolation_cost(rounds: int = 5) -> dict[str, object]:
    program = isolation.probe().program
    if program is None:
        return {"skipped": isolation.probe().why}
    with tempfile.TemporaryDirectory(prefix="outpost-bench-isolation-") as scratch:
        base = Path(scratch)
        repo = make_repo(base / "repo")
        for n in range(50):  # a repository with some history and branches to copy refs from
            git_args = ["git", "-C", str(repo)]
            subprocess.run([*git_args, "branch", f"topic-{n}"], check=True)
        _race(repo, "none")  # warm: imports, the probe, the page cache
        times: dict[str, list[float]] = {"none": [], "bubblewrap": []}
        for _ in range(rounds):
            for mode in ("none", "bubblewrap"):
                times[mode].append(_race(repo, mode))
        none_ms = statistics.median(times["none"]) * 1000 / CANDIDATES
        fenced_ms = statistics.median(times["bubblewrap"]) * 1000 / CANDIDATES
        fence = [program, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid"]
        fence += ["--unshare-ipc", "--tmpfs", "/tmp", "true"]
        raw_spawn = _spawn_ms(["true"], rounds * 6)
        fenced_spawn = _spawn_ms(fence, rounds * 6)
        template_ms, make_ms, import_ms = _private_ms(make_repo(base / "parts"), rounds * 2)
    return {
        "attempt_ms_none": round(none_ms, 1),
        "attempt_ms_bubblewrap": round(fenced_ms, 1),
        "added_ms_per_attempt": round(fenced_ms - none_ms, 1),
        "ratio": round(fenced_ms / none_ms, 3),
        "bwrap_spawn_added_ms": round(fenced_spawn - raw_spawn, 2),
        "private_template_ms_per_race": round(template_ms, 2),
        "make_private_ms": round(make_ms, 2),
        "import_result_ms": round(import_ms, 2),
        "rounds": rounds,
        "load": round(os.getloadavg()[0], 2),
    }


if __name__ == "__main__":
    print(json.dumps(isolation_cost(), indent=2))
