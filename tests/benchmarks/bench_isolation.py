"""What isolating a local candidate costs per attempt, measured against the unisolated sandbox in
the same run.

Run on its own:  python -m tests.benchmarks.bench_isolation  (from the repository root).

The same race (8 `sh` candidates each committing one file, validated by `true`, two at a time)
runs with `[sandbox] isolation = "none"` and `"bubblewrap"`, alternately, `rounds` times each;
the figure is the difference of the medians, per attempt. Its parts are timed directly beside it:
bubblewrap around `true` against `true` alone (an attempt here runs three fenced commands: its
agent, its validation and its score), a race's template of private repositories (once per race),
making a checkout's private repository from it (two per attempt: its worktree's and its grading
checkout's) against `git init`, and bringing its commit in against the same processes run
directly.
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


def _private_ms(root: Path, rounds: int) -> dict[str, float]:
    """Median ms of a race's private_template, of make_private and of import_result, on a
    worktree with one new commit; and, as ratios round by round, the same two against the raw
    work beside them: `git init` (the cheapest way git makes a repository) and the processes an
    import runs, run directly (pack-objects into index-pack --strict, read-tree, update-ref)."""
    templated, made, imported, made_vs_init, imported_vs_raw = [], [], [], [], []
    baseline = g.resolve_commit(root)

    def committed(n: int, private: Path, directory: Path) -> None:
        env = {**os.environ, "GIT_DIR": str(private), "GIT_WORK_TREE": str(directory)}
        (directory / "new.txt").write_text(f"{n}\n")
        for argv in (["add", "new.txt"], ["-c", "user.name=c", "-c", "user.email=c@x", "commit", "-qm", "n"]):
            subprocess.run(["git", *argv], cwd=directory, env=env, check=True)

    for n in range(rounds):
        started = time.perf_counter()
        template = g.private_template(root, g.listed_refs(root))
        templated.append(time.perf_counter() - started)
        ours, raw = (g.branch_name("bench", key, n + 1) for key in ("p", "r"))
        directories = {
            branch: g.worktree_directory(root, key, branch) for key, branch in (("p", ours), ("r", raw))
        }
        privates = {}
        for branch, directory in directories.items():
            g.add_worktree(root, branch, directory, baseline)
            started = time.perf_counter()
            privates[branch] = g.make_private(template, directory, baseline)
            if branch == ours:
                made.append(time.perf_counter() - started)
            committed(n, privates[branch], directory)
        started = time.perf_counter()
        subprocess.run(["git", "init", "-q", "--bare", str(root / ".git" / f"bench-init-{n}")], check=True)
        made_vs_init.append(made[-1] / (time.perf_counter() - started))

        started = time.perf_counter()
        g.import_result(root, directories[ours], ours)
        imported.append(time.perf_counter() - started)
        started = time.perf_counter()
        _raw_import(root, privates[raw], directories[raw], raw, baseline)
        imported_vs_raw.append(imported[-1] / (time.perf_counter() - started))
    g.close_sessions(str(root))
    return {
        "private_template_ms_per_race": statistics.median(templated) * 1000,
        "make_private_ms": statistics.median(made) * 1000,
        "make_private_vs_git_init": statistics.median(made_vs_init),
        "import_result_ms": statistics.median(imported) * 1000,
        "import_vs_raw_processes": statistics.median(imported_vs_raw),
    }


def _raw_import(root: Path, private: Path, directory: Path, branch: str, baseline: str) -> None:
    """What import_result runs, run directly: the private repository's new objects packed into
    the repository (verified), the checkout's index read from its commit, the branch moved. Its
    tip read from the file the commit wrote, as the engine reads it (no process)."""
    head = (private / "HEAD").read_text().removeprefix("ref:").strip()
    tip = (private / head).read_text().strip()
    packer = subprocess.Popen(
        ["git", "--git-dir", str(private), "pack-objects", "--revs", "--stdout", "-q"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    indexer = subprocess.Popen(
        ["git", "-C", str(root), "index-pack", "--strict", "--stdin"],
        stdin=packer.stdout,
        stdout=subprocess.DEVNULL,
    )
    assert packer.stdin is not None and packer.stdout is not None
    packer.stdout.close()
    packer.stdin.write(f"{tip}\n^{baseline}\n".encode())
    packer.stdin.close()
    assert packer.wait() == 0 and indexer.wait() == 0
    subprocess.run(["git", "update-ref", f"refs/heads/{branch}", tip, baseline], cwd=root, check=True)
    subprocess.run(["git", "read-tree", "--reset", "HEAD"], cwd=directory, check=True)


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
        fence = [*isolation.launcher(program), "--unshare-ipc", "--tmpfs", "/tmp", "true"]
        raw_spawn = _spawn_ms(["true"], rounds * 6)
        fenced_spawn = _spawn_ms(fence, rounds * 6)
        parts = _private_ms(make_repo(base / "parts"), rounds * 2)
    return {
        "attempt_ms_none": round(none_ms, 1),
        "attempt_ms_bubblewrap": round(fenced_ms, 1),
        "added_ms_per_attempt": round(fenced_ms - none_ms, 1),
        "ratio": round(fenced_ms / none_ms, 3),
        "bwrap_spawn_added_ms": round(fenced_spawn - raw_spawn, 2),
        **{name: round(value, 2) for name, value in parts.items()},
        "rounds": rounds,
        "load": round(os.getloadavg()[0], 2),
    }


if __name__ == "__main__":
    print(json.dumps(isolation_cost(), indent=2))
