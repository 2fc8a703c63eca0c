"""A container attempt's cost over a local one, in a race of 4 (see bench_containers.py)."""

from __future__ import annotations

import os

import anyio
import pytest

from tests.benchmarks import bench_containers

from .conftest import IMAGE

pytestmark = [pytest.mark.container, pytest.mark.benchmark, pytest.mark.alone]

TARGET_S = 0.3  # the target: a container attempt within 0.3 s of a local one
# Before issue 13's container work, alone on a quiet 2-core machine: 0.71-1.01 s with Podman, 1.8 s
# with Docker Engine, against a bound of 3.0 s. Since, an attempt's two containers are closed by a
# pause (Podman 29-46 ms, Docker 23-27 ms, where their removal took 174-226 ms; measured one at a
# time by bench_containers.py's lifecycle, load 10) and removed off its path, and the path probe runs
# beside git's checkout: about 0.4 s less per attempt, so the bound moves down by as much. Inside a
# race the figure could only be measured under load 10-20 this time (2.6-2.9 s, and 2.2-3.6 s
# before: the engine's own CPU time decides it there), which this test skips.
BOUND_S = 2.5


def test_a_container_attempt_costs_little_more_than_a_local_one(engine):
    load = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    if load > 2 * cores:
        # Podman serializes much of its work: on a machine this busy the figure measures the load
        # (seconds per attempt), not the engine. Honest skip, with the figure left to the benchmark.
        pytest.skip(f"load average {load:.1f} on {cores} cores: container timings measure the load")
    figures = anyio.run(bench_containers.race_overhead, IMAGE)
    print(figures)
    assert figures["overhead_per_attempt_s"] <= BOUND_S, {**figures, "target_s": TARGET_S}
