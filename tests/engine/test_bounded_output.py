"""An agent's output is bounded by the engine, not by the agent: whatever it prints, the
coordinator's memory and the attempt's flight log stay within their bounds, what is kept is the
head and the tail, and one line says how much was cut. Each race runs a real agent program (a
Python script writing big chunks with os.write) under a real coordinator process, which reports
its own peak memory."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from outpost_tui.engine.sandbox.lines import LOG_LIMIT, LOG_TAIL, MAX_LOG_LINE, LineSplitter

MIB = 1 << 20

# One attempt's flight log beyond its log text: the events of an attempt and their envelopes.
OVERHEAD = 1 * MIB

AGENT = textwrap.dedent("""\
    import os, sys
    mode, total = sys.argv[1], int(sys.argv[2])
    os.write(1, b"first line\\n")
    if mode == "lines":
        line = b"x" * 1023 + b"\\n"
        chunk = line * 1024  # 1 MiB of 1 KiB lines
    else:
        chunk = b"y" * (1 << 20)  # one line with no end
    for _ in range(total // len(chunk)):
        os.write(1, chunk)
    os.write(1, b"\\nlast line\\n")
""")

# The coordinator: a process of its own, so its peak memory is the race's and nothing else's.
COORDINATOR = textwrap.dedent("""\
    import json, resource, sys
    from outpost_tui.engine import build_spec, run_race
    from outpost_tui.engine.core.spec import CandidateSpec
    repository, agent, mode, total = sys.argv[1:5]
    spec = build_spec(
        repository=repository,
        candidates=[CandidateSpec("a", "command", "b", command=(sys.executable, agent, mode, total))],
        validate=["true"],
    )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run_race(spec)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"id": result.id, "status": str(result.status),
                      "candidate": str(result.candidates[0].status), "before": before, "peak": peak}))
""")


def race(repo: Path, tmp_path: Path, mode: str, total: int) -> tuple[dict, list[dict], int]:
    agent = tmp_path / "printer.py"
    agent.write_text(AGENT)
    done = subprocess.run(
        [sys.executable, "-c", COORDINATOR, str(repo), str(agent), mode, str(total)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    log = repo / ".outpost" / "runs" / outcome["id"] / "a.1.jsonl"
    events = [json.loads(line) for line in log.read_bytes().splitlines()]
    return outcome, events, log.stat().st_size


def logged(events: list[dict]) -> list[str]:
    return [line for event in events if event["kind"] == "log" for line in event["lines"]]


def test_300_mib_of_lines_leave_memory_and_the_flight_log_bounded(repo, tmp_path):
    total = 300 * MIB
    outcome, events, size = race(repo, tmp_path, "lines", total)

    # the race settles as it would have: the agent exited 0, its (empty) result graded
    assert outcome["status"] == "no-winner" and outcome["candidate"] == "rejected", outcome
    # memory: the coordinator holds its tail and its splitters, never the output (ru_maxrss: KiB)
    growth = (outcome["peak"] - outcome["before"]) * 1024
    assert growth < 100 * MIB, f"the coordinator grew by {growth / MIB:.0f} MiB"
    assert size < LOG_LIMIT + OVERHEAD, f"flight log is {size / MIB:.1f} MiB"
    lines = logged(events)
    # the head and the tail kept, and between them one line saying how much was cut
    assert lines[0] == "first line" and lines[-1] == "last line"
    cut = [line for line in lines if line.startswith("outpost: ")]
    assert len(cut) == 1, cut
    said = int(cut[0].split()[1])
    kept = sum(len(line) + 1 for line in lines if line.startswith("x"))
    assert said + kept == total, (said, kept)
    tail = lines[lines.index(cut[0]) + 1 :]
    assert LOG_TAIL // 2 < sum(len(line) for line in tail) <= LOG_TAIL
    warned = [event["message"] for event in events if event["kind"] == "warning"]
    assert any("printed more than" in message for message in warned), warned


def test_one_enormous_line_is_cut_to_its_head_and_says_how_much(repo, tmp_path):
    total = 300 * MIB
    outcome, events, size = race(repo, tmp_path, "one-line", total)

    assert outcome["candidate"] == "rejected", outcome
    growth = (outcome["peak"] - outcome["before"]) * 1024
    assert growth < 100 * MIB, f"the coordinator grew by {growth / MIB:.0f} MiB"
    assert size < MAX_LOG_LINE + OVERHEAD
    lines = logged(events)
    assert lines[0] == "first line" and lines[-1] == "last line"
    (long,) = [line for line in lines if line.startswith("y")]
    assert long == "y" * MAX_LOG_LINE + f" …[line truncated: {total - MAX_LOG_LINE} bytes cut]"


def test_control_a_normal_amount_of_output_is_kept_whole(repo, tmp_path):
    total = 2 * MIB
    outcome, events, size = race(repo, tmp_path, "lines", total)

    assert outcome["candidate"] == "rejected", outcome
    lines = logged(events)
    assert lines == ["first line", *(["x" * 1023] * (total // 1024)), "", "last line"]
    assert not [event for event in events if event["kind"] == "warning"]
    assert size > total


@pytest.mark.parametrize("cut_at", [1, 5, 9, 10, 11, 4096])
def test_the_splitter_holds_a_long_line_head_and_counts_the_rest(cut_at):
    splitter = LineSplitter(max_line=10)
    data = b"short\n" + b"z" * 25 + b"\nnext\npartial"
    lines = []
    for start in range(0, len(data), cut_at):
        lines += splitter.feed(data[start : start + cut_at])
    lines += splitter.flush()
    assert lines == ["short", "z" * 10 + " …[line truncated: 15 bytes cut]", "next", "partial"]
