"""What the setup cache saves on a real small project, offline.

Run on its own:  python -m tests.benchmarks.bench_setup [CANDIDATES]   (from the repository root)

The project's setup is what users run: `python -m venv .venv` (with pip, from ensurepip) and
`.venv/bin/pip install -r requirements.txt`, whose requirements are setuptools (the real wheel this
Python ships in ensurepip, ~1,000 files) and a small local wheel, both from a wheel directory in the
repository, no index. Three races of N candidates whose agents commit one file: without a cache
(every worktree builds its venv), with a cold cache (one builds it, the others copy it, then run
the same command, which finds everything installed) and with a warm cache (every worktree copies).
Figures: wall time of each race, each candidate's setup time, the venv's size, and how it was copied.
"""

from __future__ import annotations

import ensurepip
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from outpost_tui.engine import build_spec, run_race
from outpost_tui.engine.core.spec import (
    SetupSpec,
    ValidateSpec,
)
from outpost_tui.engine.racing import setup as setups
from tests.conftest import cmd, git
from tests.projects import python_project

BUNDLED = Path(ensurepip.__file__).parent / "_bundled"


def project(path: Path) -> Path:
    repo = python_project(path)
    for wheel in BUNDLED.glob("setuptools-*.whl"):
        shutil.copy(wheel, repo / "wheels" / wheel.name)
    (repo / "requirements.txt").write_text("demo-lib==1.0\nsetuptools\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "setuptools too")
    return repo


# Idempotent, as a cached setup should be: a venv copied in is kept, pip finds what is installed.
SETUP = SetupSpec(
    command=(
        "sh",
        "-c",
        f"[ -x .venv/bin/python ] || {sys.executable} -m venv .venv; "
        ".venv/bin/pip install --quiet --no-index "
        "--disable-pip-version-check --find-links wheels "
        "-r requirements.txt",
    ),
    timeout=600,
)
CACHED = replace(SETUP, cache=(".venv",), cache_key=("requirements.txt", "wheels/*.whl"))


def _race(repo: Path, setup: SetupSpec, candidates: int) -> dict:
    # gate "exit-code": no baseline run, so each figure is the candidates' own setup
    spec = build_spec(
        repository=repo,
        validate=ValidateSpec(command=(".venv/bin/python", "check.py"), gate="exit-code"),
        score=["echo", "1"],
        candidates=[cmd(f"c{n}", "--write", f"c{n}.txt", "--commit") for n in range(candidates)],
        setup=setup,
    )
    started = time.monotonic()
    result = run_race(spec)
    wall = time.monotonic() - started
    failed = [(c.key, c.error) for c in result.candidates if c.validation.status != "passed"]
    if failed:
        raise AssertionError(f"candidates failed: {failed}")
    setups_done = [c.setup for c in result.candidates]
    return {
        "wall_s": round(wall, 2),
        "setup_s": [s["duration"] for s in setups_done],
        "setup_median_s": round(statistics.median(s["duration"] for s in setups_done), 2),
        "cache": [s["cache"] for s in setups_done],
    }


def _venv_size(repo: Path) -> dict:
    cache = repo / ".outpost" / "cache"
    entry = next(p for p in cache.iterdir() if not p.name.startswith("."))
    files = size = 0
    for directory, _, names in os.walk(entry / ".venv"):
        for name in names:
            files += 1
            size += os.lstat(os.path.join(directory, name)).st_size
    target = Path(tempfile.mkdtemp()) / "copy"
    started = time.monotonic()
    setups.clone_tree(entry / ".venv", target)
    copy_s = time.monotonic() - started
    shutil.rmtree(target.parent)
    return {
        "venv_files": files,
        "venv_mib": round(size / 2**20, 1),
        "copy_s": round(copy_s, 3),
        "reflink": bool(setups._reflink_works),
    }


def setup_cache(candidates: int = 3) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        repo = project(Path(tmp) / "project")
        figures = {
            "candidates": candidates,
            "no_cache": _race(repo, SETUP, candidates),
            "cold_cache": _race(repo, CACHED, candidates),
            "warm_cache": _race(repo, CACHED, candidates),
        }
        figures.update(_venv_size(repo))
    figures["warm_vs_no_cache"] = round(
        figures["warm_cache"]["setup_median_s"] / figures["no_cache"]["setup_median_s"], 3
    )
    return figures


if __name__ == "__main__":
    print(setup_cache(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
