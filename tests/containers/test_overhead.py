"""A container attempt's cost over a local one, in a race of 4 (see bench_containers.py)."""

from __future__ import annotations

import os

import anyio
import pytest

from outpost_tui.engine.sandbox.container_engine import engine_kind
from tests.benchmarks import bench_containers

from .conftest import IMAGE

pytestmark = [pytest.mark.container, pytest.mark.benchmark, pytest.mark.alone]

TARGET_S = 0.3  # the target: a container attempt within 0.3 s of a local one
# Measured in a race of 4 on this 2-core machine (race_overhead: 2 rounds, local and containers
# alternating; medians of the attempts' admitted-to-settled times).
# Before issue 13's container work: Podman 1.22-1.69 s, Docker Engine 2.74-3.05 s (quiet stretch).
# After it (the connection made while the race reads its repository, no probe command and no upload
# per container, agents' containers started before grading and baseline ones), side by side with
# the code before it in one run, on a machine shared with other work: Podman 0.83-1.64 s against
# 0.88-2.54 s at load 6-9, 1.97-2.10 s against 2.18-2.47 s at load 10-15; Docker Engine 3.50-4.55 s
# against 5.09-6.40 s at load 6-11. Later (with one connection pool per engine, since reverted: a
# connection an exec's stream had taken over could be handed to another request): Podman
# 0.74-2.31 s at load 2-4 (five runs), 2.35-2.60 s at load 4-8; Docker Engine
# 1.80 s at load 3.6 (one run), 3.16-3.51 s at load 6-11, and side by side with the code before
# issue 13's container work (909ac29^), six pairs at load 9-12: 2.32-3.24 s against 2.88-3.89 s,
# lower in each pair (Podman, three pairs at load 9-10: 1.57-2.17 s against 1.02-2.37 s).
# Not reached, and out of reach on two cores: the engine's own CPU per attempt, read from /proc
# and Podman's conmon cgroup (bench_containers, engine_cpu.py), is 0.20-0.33 s of the Podman
# service and 0.15-0.37 s of conmon and what it runs (the lower ends at load 2-4, the upper at
# 6-11: the same work costs more CPU on a busy machine), plus ~0.07 s per container of runc's init
# inside it (more than half of it compiling the seccomp profile, once for the container and once
# for its command); Docker Engine 0.29-0.32 s of dockerd and 0.11-0.13 s of containerd, its shims
# not counted. Every attempt needs two containers (its agent's and a fresh one to grade in) and a
# command in each; four attempts share that with their own work.
# The floor, read by the benchmark since (race_overhead's least_race_overhead_s): a race cannot end
# before the CPU the whole machine spent on it is spent on the cores. Quiet, 2 cores, 4 candidates,
# four runs on Podman: the machine spent 0.36-0.40 s of CPU per local attempt and 0.71-0.87 s per
# container attempt, so 0.31-0.48 s more, 0.035-0.05 s of it this process's; its races ended
# 0.86-1.55 s after local's, against a least of 0.27-0.94 s. Docker Engine, one run: 0.68 s more
# per attempt, the race 1.49 s over local's against a least of 1.31 s. The attempts start together
# and each spans most of its race, so four of them on two cores add at least twice the extra CPU
# of one to each: 0.62-0.96 s on Podman here. One container per attempt instead of two (half that
# CPU) would still leave 0.31-0.48 s.
# Asserted: a regression bound per engine with headroom over those figures (the test runs only at a
# load of at most 2 per core). Both stay where they were: Podman's 2.31 s at load 2.8 leaves no room
# to tighten 2.5 s, and Docker Engine measured 4.96 s in a fresh CI run at the end of the earlier
# work (within the loaded figures of the code before it).
BOUND_S = {"podman": 2.5, "docker": 6.0}
# This process's own CPU per container attempt (the SDK's requests, the output pumps, the engine's
# Python): 0.053-0.063 s on Podman and 0.055 s on Docker Engine at load 2-4, 0.057-0.105 s on
# Podman and 0.059-0.093 s on Docker Engine at load 4-11 with the shared pool; 0.065 s on Podman at
# load 1 without it; against 0.025-0.037 s for a local attempt. It depends far less on the
# machine's load than wall time does: the tighter guard against a regression of this project's own
# code.
OWN_CPU_BOUND_S = 0.15


def test_a_container_attempt_costs_little_more_than_a_local_one(engine):
    load = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    if load > 2 * cores:
        # Podman serializes much of its work: on a machine this busy the figure measures the load
        # (seconds per attempt), not the engine. Honest skip, with the figure left to the benchmark.
        pytest.skip(f"load average {load:.1f} on {cores} cores: container timings measure the load")
    client, endpoint = engine
    kind = engine_kind(client, endpoint)["name"]
    figures = anyio.run(bench_containers.race_overhead, IMAGE)
    print(kind, figures)
    assert figures["overhead_per_attempt_s"] <= BOUND_S[kind], {
        **figures,
        "engine": kind,
        "target_s": TARGET_S,
    }
    assert figures["container_cpu_per_attempt_s"]["this process"] <= OWN_CPU_BOUND_S, figures
