"""Revalidating a kept attempt of a container race runs the race's validation in a container again."""

from __future__ import annotations

from pathlib import Path

import pytest

from outpost_tui.engine import CandidateSpec, build_spec, run_race
from outpost_tui.engine.core.spec import SandboxSpec, ValidateSpec
from outpost_tui.engine.kept.revalidation import revalidate

from .conftest import IMAGE

pytestmark = pytest.mark.container

VALIDATE = ("sh", "-c", "echo \"pid1: $(tr '\\0' ' ' < /proc/1/cmdline)\"; exec python3 -m unittest -q")
INITS = ("pid1: /run/podman-init", "pid1: /sbin/docker-init", "pid1: /dev/init")


def test_revalidation_runs_in_a_container_on_the_worktree_as_it_is_now(engine, calc_repo):
    spec = build_spec(
        repository=calc_repo,
        candidates=[
            # the untracked note keeps the worktree (validation runs in a checkout of its own, so it
            # no longer leaves caches behind that would keep it)
            CandidateSpec(
                "right",
                "command",
                "fix add",
                command=("sh", "-c", "python3 agents/fix.py && echo n > notes.txt"),
            ),
        ],
        validate=ValidateSpec(command=VALIDATE, timeout=120),
        sandbox=SandboxSpec(provider="podman", image=IMAGE),
        name="revalidate",
    )
    result = run_race(spec)
    assert result.status.value == "winner", result.to_json()
    right = result.candidates[0]
    directory = Path(right.retained_directory or right.directory)
    assert directory.is_dir()

    again = revalidate(calc_repo, result.id, "right", 1, directory)
    assert again.status == "passed", again.output
    assert again.output.startswith(INITS), again.output  # PID 1 is a container's init, not the host's

    (directory / "calc.py").write_text((directory / "calc.py").read_text().replace("a + b", "a - b"))
    broken = revalidate(calc_repo, result.id, "right", 1, directory)
    assert broken.status == "failed" and broken.output.startswith(INITS), broken.output
