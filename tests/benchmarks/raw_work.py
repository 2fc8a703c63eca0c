"""The raw work the engine's benchmarks compare a race with: the same git and processes, run
directly from threads, 8 attempts at once.

`attempts` is the work any way of racing agents must do: a worktree per attempt, the agent in it,
its commit graded in a clean checkout of its own, both removed. With `checks`, it also does the
checks the engine makes for the two rules it keeps (a candidate is untrusted; nothing is lost),
each once and at its cheapest, so that a race's fixed cost can be split into what those checks
cost as processes and what the engine's own machinery adds:

- at the start: the repository's root and the baseline, the configured drivers that could run a
  program (switched off on every engine git call), the checkout's status and every ref (the
  guard's record);
- the baseline graded once in a checkout of its own, beside the attempts (the strict gate
  compares each result with it);
- each attempt's worktree checked clean, ignored files too, before it is removed;
- at the end: the results pinned (one `update-ref --stdin`), the refs and the checkout's status
  compared again (the guard, once: the engine checks after every attempt that ends alone), and
  the winner's integration check (ancestry, merge, changed files).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from outpost_tui.engine.git.runner import _DRIVERS  # the engine's own lookup of planted drivers


def _git(repo: Path, *args: str, check: bool = True, input: bytes | None = None) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, input=input)
    if check and done.returncode != 0:
        raise RuntimeError(f"git {args[0]} failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout.decode()


def attempts(
    repo: Path,
    candidates: int,
    agent: Callable[[Path, int], None],
    grade: Callable[[Path], None],
    *,
    remove_worktree: bool,
    checks: bool = False,
) -> float:
    """Seconds for `candidates` raw attempts at once in `repo` (and, with `checks`, the engine's
    checks done directly)."""

    def worktree(*args: str) -> None:
        # All at once, as the engine runs them (no lock: one made every attempt wait for the
        # others' worktree commands, a cost the engine does not pay). A worktree command that
        # reads another's metadata half-written fails now and then: retried as the engine's
        # are, with the branch a failed `add -b` may have made already taken as it is.
        for pause in (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3):
            time.sleep(pause)
            done = subprocess.run(["git", "worktree", *args], cwd=repo, capture_output=True)
            if done.returncode == 0:
                return
            if args[:3] == ("add", "-q", "-b") and b"already exists" in done.stderr:
                args = ("add", "-q", args[4], args[3])
        raise RuntimeError(f"git worktree {args[0]} failed: {done.stderr.decode(errors='replace').strip()}")

    def graded(commit: str, name: str) -> None:
        grading = repo / ".raw" / f"{name}.grading"
        worktree("add", "-q", "--detach", str(grading), commit)
        try:
            grade(grading)
        finally:
            worktree("remove", "--force", str(grading))

    def raw_attempt(n: int) -> None:
        directory = repo / ".raw" / f"c{n}"
        worktree("add", "-q", "-b", f"raw/c{n}", str(directory), baseline)
        agent(directory, n)
        graded(f"raw/c{n}", f"c{n}")
        if checks:
            _git(directory, "status", "--porcelain=v2", "--branch", "--untracked-files=normal", "--ignored")
        if remove_worktree:
            worktree("remove", str(directory))

    def baseline_graded() -> None:
        # the baseline failing its validation is a figure for the gate, not an error
        with contextlib.suppress(AssertionError):
            graded(baseline, "baseline")

    if not checks:  # read before the clock starts, as it always was: the cheapest raw work
        baseline = _git(repo, "rev-parse", "HEAD").strip()
    started = time.perf_counter()
    if checks:
        reads = [
            ("rev-parse", "--show-toplevel", "--verify", "HEAD^{commit}"),
            ("config", "--null", "--show-scope", "--show-origin", "--get-regexp", _DRIVERS),
            ("status", "--porcelain=v2", "--branch", "--untracked-files=all", "-z"),
            ("for-each-ref", "--format=%(objectname) %(refname)"),
        ]
        with ThreadPoolExecutor(len(reads)) as pool:
            answers = list(pool.map(lambda args: _git(repo, *args, check=args[0] != "config"), reads))
        baseline = answers[0].split()[-1]
    with ThreadPoolExecutor(candidates + 1) as pool:
        graded_baseline = pool.submit(baseline_graded) if checks else None
        list(pool.map(raw_attempt, range(candidates)))
        if graded_baseline is not None:
            graded_baseline.result()
    if checks:
        pins = "".join(f"update refs/raw-validated/c{n} raw/c{n}\n" for n in range(candidates))
        _git(repo, "update-ref", "--stdin", input=pins.encode())
        _git(repo, "for-each-ref", "--format=%(objectname) %(refname)")
        _git(repo, "status", "--porcelain=v2", "--branch", "--untracked-files=all", "-z")
        _git(repo, "merge-base", "--is-ancestor", baseline, "raw/c0")
        _git(repo, "merge-tree", "--write-tree", baseline, "raw/c0")
        _git(repo, "diff", "--raw", "--no-renames", baseline, "raw/c0")
    return time.perf_counter() - started
