"""Per-attempt cost of a container sandbox against a local process, measured in one run.

Run on its own, with an engine (DOCKER_HOST) and the test image (see .ci/podman-setup.sh):
    python tests/benchmarks/bench_containers.py [--samples 5] [--candidates 4] [--image TAG]

0. One command in a fresh container, as an exec in a kept-alive container (what the sandbox does)
   and as the container's own main process: which one costs less per command on this engine.
1. Sandbox lifecycle, one attempt at a time: acquire (create + start), a first exec of `true`,
   close (remove), against the local provider doing the same (a `true` process).
2. The same race twice: N candidates that each fix the sample project wrongly (so every attempt
   runs agent, validation and cleanup to the end), once with provider "local", once in containers.
   Per-attempt wall time (admitted → settled) and the race's wall time, and the container phases of
   each attempt inside the race, where they compete for 2 cores; the CPU per attempt of this
   process, of the engine and of the whole machine (engine_cpu.py says what it counts), and from
   the machine's the least the race could last for what it cost: it cannot end before that CPU is
   spent on the cores (a lower floor needs fewer or cheaper containers, not faster Python).
"""

from __future__ import annotations

import argparse
import itertools
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from outpost_tui.engine import CandidateSpec, EventKind, build_spec
from outpost_tui.engine.core.events import EventBus
from outpost_tui.engine.core.spec import (
    DEFAULT_IMAGE,
    SandboxSpec,
    ValidateSpec,
)
from outpost_tui.engine.racing.coordinator import Race
from outpost_tui.engine.sandbox.base import SandboxContext
from outpost_tui.engine.sandbox.container import ContainerProvider
from outpost_tui.engine.sandbox.container_engine import resolve_endpoint
from outpost_tui.engine.sandbox.local import LocalProvider
from tests.benchmarks.engine_cpu import EngineCpu, machine_seconds

WRONG_FIX = """\
import subprocess
source = open("calc.py").read()
open("calc.py", "w").write(source.replace("return a - b", "return a * b", 1))
subprocess.run(["git", "commit", "-qam", "wrong fix"], check=True)
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def calc_repo(path: Path) -> Path:
    shutil.copytree(
        ROOT / "sample-races" / "projects" / "calc", path, ignore=shutil.ignore_patterns("__pycache__")
    )
    (path / "agents").mkdir()
    (path / "agents" / "wrong.py").write_text(WRONG_FIX)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Bench")
    git(path, "config", "user.email", "bench@example.invalid")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "calc")
    return path


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.0f} ms"


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def lifecycle(
    provider, context: SandboxContext, samples: int, engine: EngineCpu | None = None
) -> dict[str, list[float]]:
    """acquire, a first exec, close (what an attempt waits for), then the removal a container
    sandbox finishes off the attempt's path (the provider's drain). With `engine`, also the
    engine's CPU seconds in each (`<phase> CPU`; an exec's cleanup, which the engine runs seconds
    later, counts in whichever phase it falls)."""
    phases: dict[str, list[float]] = {
        "acquire": [],
        "first exec": [],
        "close": [],
        "total": [],
        "removal": [],
    }

    def engine_cpu() -> float:
        return sum(engine.since().values()) if engine else 0.0

    for n in range(samples):
        attempt = replace(context, attempt=n + 1)
        cpu = [engine_cpu()]
        began = time.perf_counter()
        sandbox = await provider.acquire(attempt)
        acquired = time.perf_counter()
        cpu.append(engine_cpu())
        done = await sandbox.run(["true"])
        ran = time.perf_counter()
        cpu.append(engine_cpu())
        await sandbox.close()
        closed = time.perf_counter()
        cpu.append(engine_cpu())
        assert await provider.drain() == {}
        cpu.append(engine_cpu())
        assert done.exit_code == 0
        phases["acquire"].append(acquired - began)
        phases["first exec"].append(ran - acquired)
        phases["close"].append(closed - ran)
        phases["total"].append(closed - began)
        phases["removal"].append(time.perf_counter() - closed)
        if engine:
            names = ("acquire", "first exec", "close", "removal")
            for phase, (before, after) in zip(names, itertools.pairwise(cpu), strict=True):
                phases.setdefault(f"{phase} CPU", []).append(after - before)
        for name in ("create", "start", "halt", "remove"):
            if hasattr(sandbox, "timings") and name in sandbox.timings:
                phases.setdefault(name, []).append(sandbox.timings[name])
    return phases


class Recording(ContainerProvider):
    """The container provider, keeping each sandbox so its phase timings can be read, and every
    request to the engine: (container id, what, seconds) — what is the method and the last part of
    the path (`POST start`, `POST exec/start`, ...); an exec's requests count for its container."""

    def __init__(self, spec: SandboxSpec) -> None:
        super().__init__(spec)
        self.sandboxes = []
        self.requests: list[tuple[str, str, float]] = []

    async def client(self):
        client = await super().client()
        api = client.api
        if "send" not in vars(api):
            execs: dict[str, str] = {}
            send = api.send

            def recorded(request, **options):
                began = time.perf_counter()
                response = send(request, **options)
                seconds = time.perf_counter() - began  # to the answer's headers (a stream goes on)
                path = request.path_url.split("?")[0].split("/", 2)[-1]  # past /v1.41/
                parts = path.split("/")
                if parts[0] == "exec" and len(parts) > 2:
                    owner, what = execs.get(parts[1], "?"), f"exec/{parts[2]}"
                elif parts[0] == "containers" and len(parts) > 1 and parts[1] not in ("create", "json"):
                    owner, what = parts[1], parts[2] if len(parts) > 2 else "container"
                    if what == "exec" and response.ok:
                        execs[response.json()["Id"]] = owner
                else:
                    owner, what = "", path
                self.requests.append((owner, f"{request.method} {what}", seconds))
                return response

            api.send = recorded
        return client

    async def acquire(self, context):
        sandbox = await super().acquire(context)
        self.sandboxes.append(sandbox)
        return sandbox

    def per_attempt(self) -> tuple[float, dict[str, tuple[float, float]]]:
        """Requests per attempt (its agent's and its grading containers'), and by what: how many
        per attempt and their median seconds."""
        ids = {s.container.id for s in self.sandboxes}
        attempts = max(1, sum(1 for s in self.sandboxes if not s.name.endswith("-grading")))
        ours = [(what, seconds) for owner, what, seconds in self.requests if owner in ids]
        creates = [seconds for owner, what, seconds in self.requests if what == "POST containers/create"]
        kinds: dict[str, list[float]] = {"POST create": creates}
        for what, seconds in ours:
            kinds.setdefault(what, []).append(seconds)
        by_kind = {what: (len(times) / attempts, median(times)) for what, times in kinds.items()}
        return (len(ours) + len(creates)) / attempts, by_kind


# An attempt's way through the race, by its events: each phase runs from one to the next.
MILESTONES = (
    EventKind.ADMITTED,
    EventKind.WORKTREE_READY,
    EventKind.AGENT_STARTED,
    EventKind.AGENT_EXITED,
    EventKind.VALIDATION_STARTED,
    EventKind.VALIDATION_FINISHED,
    EventKind.SETTLED,
)


def phases_of(marks: dict[str, dict[EventKind, float]]) -> dict[str, list[float]]:
    """Each phase's seconds, one per attempt that went through it, named `from -> to`."""
    phases: dict[str, list[float]] = {}
    for before, after in itertools.pairwise(MILESTONES):
        name = f"{before.value} -> {after.value}"
        phases[name] = [
            seen[after] - seen[before] for seen in marks.values() if before in seen and after in seen
        ]
    return phases


def own_cpu() -> float:
    """Seconds of CPU this process has used (the engine's Python: event loop and threads)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


async def race(
    repo: Path, candidates: int, provider
) -> tuple[float, list[float], str, dict[str, list[float]], dict[str, float]]:
    """(wall, attempts' seconds, statuses, phases, CPU seconds per attempt by part: `this process`,
    the engine's parts for a container race, and `machine`: every process on the machine)."""
    spec = build_spec(
        repository=repo,
        name="bench",
        candidates=[
            CandidateSpec(f"c{n}", "command", "fix add", command=("python3", "agents/wrong.py"))
            for n in range(candidates)
        ],
        validate=ValidateSpec(command=("python3", "-m", "unittest", "-q"), timeout=300),
        sandbox=provider.spec if isinstance(provider, ContainerProvider) else SandboxSpec(),
    )
    marks: dict[str, dict[EventKind, float]] = {}
    bus = EventBus()

    def on_event(event) -> None:
        if event.kind in MILESTONES:
            marks.setdefault(event.key, {})[event.kind] = time.perf_counter()

    bus.subscribe(on_event)
    endpoint = None
    if isinstance(provider, ContainerProvider):
        endpoint = resolve_endpoint(provider.spec.endpoint, provider.spec.provider)
    engine = EngineCpu(endpoint) if endpoint and endpoint.startswith("unix://") else None
    cpu_began, machine_began = own_cpu(), machine_seconds()
    began = time.perf_counter()
    result = await Race(spec, bus=bus, provider=provider).run()
    wall = time.perf_counter() - began
    cpu = {
        "this process": own_cpu() - cpu_began,
        **(engine.since() if engine else {}),
        "machine": machine_seconds() - machine_began,
    }
    statuses = ",".join(sorted({c.status.value for c in result.candidates}))
    attempts = [seen[EventKind.SETTLED] - seen[EventKind.ADMITTED] for seen in marks.values()]
    per_attempt = {part: seconds / max(1, len(attempts)) for part, seconds in cpu.items()}
    return wall, attempts, statuses, phases_of(marks), per_attempt


def least_overhead(local_wall: float, machine_s: float) -> float:
    """The least a container race can last beyond the local one: it cannot end before the CPU the
    machine spent on it (`machine_s`, every process's), spread over every core, was spent."""
    return max(0.0, machine_s / (os.cpu_count() or 1) - local_wall)


async def race_overhead(image: str, candidates: int = 4, rounds: int = 2) -> dict:
    """Per-attempt overhead of containers in a race of `candidates`, against local, in one run:
    local and container races alternate `rounds` times; medians of the attempts' times (admitted
    to settled), and of the races' wall times; and the least overhead the machine's CPU allows
    (`least_overhead`): the attempts start together, so each spans most of its race."""
    local_attempts: list[float] = []
    box_attempts: list[float] = []
    local_cpu: list[dict[str, float]] = []
    box_cpu: list[dict[str, float]] = []
    race_overheads: list[float] = []
    least: list[float] = []
    with tempfile.TemporaryDirectory(prefix="outpost-bench-") as scratch:
        root = Path(scratch)
        for number in range(rounds):
            local_wall, attempts, _, _, cpu = await race(
                calc_repo(root / f"local-{number}"), candidates, LocalProvider()
            )
            local_attempts += attempts
            local_cpu.append(cpu)
            recording = Recording(SandboxSpec(provider="podman", image=image))
            try:
                box_wall, attempts, statuses, _, cpu = await race(
                    calc_repo(root / f"box-{number}"), candidates, recording
                )
            finally:
                await recording.aclose()
            assert statuses == "rejected", statuses
            box_attempts += attempts
            box_cpu.append(cpu)
            race_overheads.append(box_wall - local_wall)
            least.append(least_overhead(local_wall, cpu["machine"] * len(attempts)))
    local, box = median(local_attempts), median(box_attempts)
    return {
        "candidates": candidates,
        "rounds": rounds,
        "local_attempt_s": round(local, 3),
        "container_attempt_s": round(box, 3),
        "overhead_per_attempt_s": round(box - local, 3),
        # the race's wall time over local's: all of it, and shared out among the attempts
        "race_overhead_s": round(median(race_overheads), 3),
        "race_overhead_per_attempt_s": round(median(race_overheads) / candidates, 3),
        # the least race overhead the CPU the machine spent allows (engine_cpu.machine_seconds)
        "least_race_overhead_s": round(median(least), 3),
        # CPU seconds per attempt (medians over the rounds): this process's, the engine's parts,
        # and the whole machine's
        "local_cpu_per_attempt_s": medians(local_cpu),
        "container_cpu_per_attempt_s": medians(box_cpu),
    }


def medians(readings: list[dict[str, float]]) -> dict[str, float]:
    parts = {part for reading in readings for part in reading}
    return {part: round(median([r[part] for r in readings if part in r]), 3) for part in sorted(parts)}


def command_costs(
    api, image: str, samples: int, engine: EngineCpu | None = None
) -> dict[str, dict[str, list[float]]]:
    """One command (`true`) in a fresh container, two ways, alternating: as an exec in a
    kept-alive container, paused then removed (what the sandbox does), and as the container's own
    main process, its output attached, waited for and removed. Per way, the seconds from create to
    removed ("wall") and the engine's CPU seconds meanwhile ("engine CPU", when it can be read:
    engine_cpu.py; an exec's cleanup that the engine runs seconds later is not in it)."""
    host_config = api.create_host_config(
        init=True, cap_drop=["ALL"], security_opt=["no-new-privileges"], network_mode="none"
    )
    user = f"{os.getuid()}:{os.getgid()}"

    def exec_in_kept_alive() -> None:
        container = api.create_container(image, ["sleep", "2147483647"], host_config=host_config, user=user)
        api.start(container)
        command = api.exec_create(container, ["true"])
        api.exec_start(command)
        assert api.exec_inspect(command)["ExitCode"] == 0
        api.pause(container)
        api.remove_container(container, force=True)

    def main_process() -> None:
        container = api.create_container(image, ["true"], host_config=host_config, user=user)
        output = api.attach(container, stream=True, logs=True, demux=True)
        api.start(container)
        list(output)
        assert api.wait(container)["StatusCode"] == 0
        api.remove_container(container, force=True)

    ways = {"exec in a kept-alive container": exec_in_kept_alive, "main process": main_process}
    costs: dict[str, dict[str, list[float]]] = {way: {"wall": [], "engine CPU": []} for way in ways}
    for _ in range(samples):
        for way, run in ways.items():
            cpu = sum(engine.since().values()) if engine else 0.0
            began = time.perf_counter()
            run()
            costs[way]["wall"].append(time.perf_counter() - began)
            if engine:
                costs[way]["engine CPU"].append(sum(engine.since().values()) - cpu)
    return costs


async def main_async(args) -> None:
    image = args.image
    with tempfile.TemporaryDirectory(prefix="outpost-bench-") as scratch:
        root = Path(scratch)
        repo = calc_repo(root / "calc")
        directory = root / "calc" / ".outpost" / "workspaces" / "bench"
        git(repo, "worktree", "add", "-q", "-b", "bench", str(directory), "HEAD")
        context = SandboxContext(
            repository=repo,
            directory=directory,
            git_common_dir=repo / ".git",
            race_id="bench-lifecycle",
            key="bench",
            attempt=1,
        )
        container = ContainerProvider(SandboxSpec(provider="podman", image=image))
        await lifecycle(container, replace(context, race_id="bench-warmup"), 1)  # connect, caches

        print(
            f"one command in a fresh container, {args.samples} samples, medians (engine {container.endpoint})"
        )
        api = (await container.client()).api
        assert container.endpoint is not None, "connected"
        engine = EngineCpu(container.endpoint) if container.endpoint.startswith("unix://") else None
        costs = await anyio.to_thread.run_sync(command_costs, api, image, args.samples, engine)
        print(f"  {'':<32}{'wall':>10}{'engine CPU':>12}")
        for way, figures in costs.items():
            cpu = ms(median(figures["engine CPU"])) if figures["engine CPU"] else "        -"
            print(f"  {way:<32}{ms(median(figures['wall'])):>10}{cpu:>12}")

        print(f"\nsandbox lifecycle, {args.samples} samples, medians (image {image})")
        local_phases = await lifecycle(LocalProvider(), context, args.samples)
        container_phases = await lifecycle(container, context, args.samples, engine)
        print(f"  {'phase':<12}{'local':>10}{'container':>12}{'engine CPU':>12}")
        for phase in ("create", "start", "acquire", "first exec", "halt", "close", "total", "removal"):
            local = median(local_phases.get(phase, []))
            local_text = ms(local) if local_phases.get(phase) else "        -"
            seconds = container_phases.get(f"{phase} CPU")
            cpu_text = ms(median(seconds)) if seconds else "        -"
            print(f"  {phase:<12}{local_text:>10}{ms(median(container_phases[phase])):>12}{cpu_text:>12}")
        overhead = median(container_phases["total"]) - median(local_phases["total"])
        print(f"  container overhead per attempt (removal not counted: off its path): {ms(overhead).strip()}")

        print(
            f"\nthe same race of {args.candidates} candidates (agent + unittest validation each, "
            "all run to the end)"
        )
        local_wall, local_attempts, local_status, local_phases, local_cpu = await race(
            calc_repo(root / "calc-local"), args.candidates, LocalProvider()
        )
        recording = Recording(SandboxSpec(provider="podman", image=image))
        box_wall, box_attempts, box_status, box_phases, box_cpu = await race(
            calc_repo(root / "calc-containers"), args.candidates, recording
        )
        print(f"  {'':<22}{'local':>10}{'containers':>12}{'ratio':>8}")
        print(f"  {'race wall time':<22}{ms(local_wall):>10}{ms(box_wall):>12}{box_wall / local_wall:>7.2f}x")
        print(
            f"  {'attempt (median)':<22}{ms(median(local_attempts)):>10}"
            f"{ms(median(box_attempts)):>12}{median(box_attempts) / median(local_attempts):>7.2f}x"
        )
        print(f"  statuses: local {local_status}; containers {box_status}")
        print("  where an attempt's time goes (median per attempt):")
        for phase, seconds in local_phases.items():
            local, box = median(seconds), median(box_phases.get(phase, []))
            print(f"    {phase:<42}{ms(local):>10}{ms(box):>12}  +{ms(box - local).strip()}")
        in_race = {
            name: median([s.timings[name] for s in recording.sandboxes if name in s.timings])
            for name in ("create", "start", "halt", "remove")
        }
        print(
            "  container phases inside the race (median per container): "
            + ", ".join(f"{name} {ms(value).strip()}" for name, value in in_race.items())
            + "  (remove: after the verdict, off the attempt's path)"
        )
        total, by_kind = recording.per_attempt()
        print(
            "  engine requests per attempt (its agent's and grading containers', "
            f"the race's baseline shared): {total:.1f}"
        )
        for what, (count, seconds) in sorted(by_kind.items(), key=lambda item: -item[1][0] * item[1][1]):
            print(f"    {what:<22}{count:5.2f} x {ms(seconds).strip():>7} (median; to the answer's headers)")
        print(
            "  CPU per attempt (engine_cpu.py says what is counted; the commands' own work is not, "
            "but for the machine's, which is everything):"
        )
        for part, seconds in local_cpu.items():
            print(f"    {part + ' (local)':<36}{ms(seconds):>10}")
        for part, seconds in box_cpu.items():
            print(f"    {part + ' (containers)':<36}{ms(seconds):>10}")
        attempts = len(box_attempts)
        least = least_overhead(local_wall, box_cpu["machine"] * attempts)
        print(
            f"  per-attempt overhead inside the race: "
            f"{ms(median(box_attempts) - median(local_attempts)).strip()} (median attempt); "
            f"the race's wall time over local's: {ms(box_wall - local_wall).strip()}, "
            f"{ms((box_wall - local_wall) / attempts).strip()} per attempt"
        )
        print(
            f"  the least the machine's CPU allows: {ms(least).strip()} over local's race "
            f"({ms(box_cpu['machine'] * attempts).strip()} of CPU on {os.cpu_count()} cores, against "
            f"{ms(local_wall).strip()}), {ms(least / attempts).strip()} per attempt"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--candidates", type=int, default=4)
    parser.add_argument("--image", default=os.environ.get("OUTPOST_TEST_IMAGE", DEFAULT_IMAGE))
    anyio.run(main_async, parser.parse_args())


if __name__ == "__main__":
    main()
