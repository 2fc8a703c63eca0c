"""Cost of a checkpoint save against the raw durable write it wraps.

Run on its own: `python tests/benchmarks/bench_transport.py [--saves N] [--directory DIR]`.
It saves a realistic 8-attempt race state N times through CheckpointStore (lock, compare-and-swap,
temp file, fsync, rename, directory fsync) and writes the same bytes N times with a bare
temp-file + fsync + rename + directory fsync, and prints both per-write times and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from outpost_tui.engine.durable.checkpoint import CheckpointStore, _encode_state
from outpost_tui.engine.durable.local_transport import LocalTransport

RUN = "bench-race"


def realistic_state(attempts: int = 8) -> dict:
    race_id = "4f9c1f0e-2b7a-4c55-9a57-1d1b5f0e8c21"
    tail = "\n".join(f"tests/test_parser.py::test_case_{n} PASSED" for n in range(60))  # ~2.7 KB
    entries = []
    for n in range(attempts):
        key = f"agent-{n % 4}"
        entries.append(
            {
                "key": key,
                "attempt": n // 4 + 1,
                "branch": f"outpost/speculation/{race_id}/{key}/{n // 4 + 1}",
                "phase": "settled" if n < 6 else "running",
                "cleanup": "done" if n < 6 else "pending",
                "resource_id": f"outpost-{race_id[:8]}-{key}-{n}",
                "directory": f"/home/dev/project/.outpost/workspaces/{race_id}/{key}/{n // 4 + 1}",
                "accepted": n == 2,
                "record": {
                    "key": key,
                    "attempt": n // 4 + 1,
                    "status": "winner" if n == 2 else "rejected",
                    "branch": f"outpost/speculation/{race_id}/{key}/{n // 4 + 1}",
                    "commit": f"{n:040x}",
                    "commits": [f"{n * 7 + c:040x}" for c in range(3)],
                    "usage": {
                        "input": 120_000 + n,
                        "cached": 900_000,
                        "cache_write": 40_000,
                        "output": 18_000,
                        "cost_usd": 1.2345,
                        "complete": True,
                        "estimated": False,
                    },
                    "validation": {
                        "status": "passed" if n == 2 else "failed",
                        "exit_code": 0 if n == 2 else 1,
                        "output": tail,
                    },
                    "retained_directory": f"/home/dev/project/.outpost/workspaces/{race_id}/"
                    f"{key}/{n // 4 + 1}",
                    "cleanup": "done",
                    "error": None,
                    "quota": None,
                },
            }
        )
    return {
        "id": race_id,
        "format": 1,
        "finished": False,
        "status": None,
        "before": {"head": "a" * 40, "branch": "main", "dirty": False},
        "usage": {
            "attempts": attempts,
            "input": 960_000,
            "cached": 7_200_000,
            "cache_write": 320_000,
            "output": 144_000,
            "cost_usd": 9.876,
            "complete": True,
        },
        "attempts": entries,
    }


def raw_write(directory: Path, content: bytes, count: int) -> float:
    directory.mkdir(mode=0o700, exist_ok=True)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    began = time.perf_counter()
    try:
        for n in range(count):
            temp = f".state.{n}.tmp"
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dir_fd)
            os.write(fd, content)
            os.fsync(fd)
            os.close(fd)
            os.replace(temp, "state", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return (time.perf_counter() - began) / count


def bench(directory: Path, saves: int) -> dict:
    state = realistic_state()
    store = CheckpointStore(LocalTransport(directory / "storage"), RUN)
    store.claim(state, identity="bench")
    began, cpu = time.perf_counter(), time.process_time()
    for n in range(saves):
        state["usage"]["input"] = 960_000 + n  # a save per usage report, the common case
        store.save(state)
    per_save = (time.perf_counter() - began) / saves
    cpu_per_save = (time.process_time() - cpu) / saves

    began = time.perf_counter()
    for _ in range(saves):
        _encode_state(RUN, state)
    per_encode = (time.perf_counter() - began) / saves

    envelope = store.transport.read(store.key).data
    per_raw = raw_write(directory / "raw", envelope, saves)
    return {
        "saves": saves,
        "state_bytes": len(envelope),
        "save_ms": per_save * 1000,
        "save_cpu_ms": cpu_per_save * 1000,
        "encode_ms": per_encode * 1000,
        "raw_write_ms": per_raw * 1000,
        "ratio": per_save / per_raw,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=1000)
    parser.add_argument("--directory", type=Path, help="where to write (default: a temporary directory)")
    parser.add_argument("--json", action="store_true", help="print the numbers as one JSON document")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.directory) as scratch:
        runs = [bench(Path(scratch) / str(n), args.saves) for n in range(3)]
    # fsync latency swings with the disk's other traffic: report the median run, and every run.
    runs.sort(key=lambda run: run["save_ms"])
    median = runs[1]
    if args.json:
        print(json.dumps({"median": median, "runs": runs}))
        return 0
    print(f"{median['saves']} saves of an 8-attempt state ({median['state_bytes']} bytes), median of 3 runs:")
    print(
        f"  checkpoint save   {median['save_ms']:.3f} ms  (JSON encoding {median['encode_ms']:.3f} ms of it)"
    )
    print(f"  CPU user+sys     {median['save_cpu_ms']:.3f} ms  (kernel fsync work included)")
    print(f"  raw durable write {median['raw_write_ms']:.3f} ms")
    print(f"  overhead ratio    {median['ratio']:.2f}x")
    print(
        "  all runs (save ms / raw ms): "
        + ", ".join(f"{run['save_ms']:.3f} / {run['raw_write_ms']:.3f}" for run in runs)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
