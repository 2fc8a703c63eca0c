"""Replaying agent transcripts: through a decoder directly, or through a fake agent program.

A fake agent is a real executable named like the real CLI (`claude`, `codex`, ...) written into a
temporary bin directory that a test puts first on PATH. It records how it was launched (argv,
stdin, cwd, TZ), prints a transcript from tests/agents/transcripts/ line by line, edits files in
its working directory (the candidate's worktree) and commits them like a real agent would, and
exits with the code the test asks for.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

from outpost_tui.engine.agents import adapter_for
from outpost_tui.engine.agents.base import AgentEvent
from outpost_tui.engine.core.spec import CandidateSpec

TRANSCRIPTS = Path(__file__).parent / "transcripts"


def transcript(name: str) -> list[str]:
    return (TRANSCRIPTS / name).read_text(encoding="utf-8").splitlines()


def candidate(agent: str, **options) -> CandidateSpec:
    return CandidateSpec(
        key=options.pop("key", agent), agent=agent, brief=options.pop("brief", "Fix add()."), **options
    )


def decoder_for(agent: str, prices=None, **options):
    return adapter_for(agent).decoder(candidate(agent, **options), prices)


def feed(decoder, lines: list[str], stream: str = "stdout") -> list[AgentEvent]:
    """Lines one at a time, as the engine would see them arriving."""
    events: list[AgentEvent] = []
    for line in lines:
        events.extend(decoder.decode([line], stream))
    return events


def kinds(events: list[AgentEvent]) -> list[str]:
    return [str(event.kind) for event in events]


def of_kind(events: list[AgentEvent], kind: str) -> list[dict]:
    return [dict(event.data) for event in events if str(event.kind) == kind]


_FAKE = r"""#!{python}
import json, os, subprocess, sys

PLAN = json.loads({plan!r})


def emit(line, stream=sys.stdout):
    stream.write(line + "\n")
    stream.flush()


def act():
    for path, content in PLAN.get("edits", {{}}).items():
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as handle:
            handle.write(content)
    if PLAN.get("commit"):
        identity = ["-c", "user.name=Fake Agent", "-c", "user.email=agent@fake.invalid"]
        subprocess.run(["git", "add", "-A"], check=True)
        subprocess.run(["git", *identity, "commit", "-qm", PLAN["commit"]], check=True)


with open(PLAN["record"], "w") as handle:
    json.dump({{"argv": sys.argv[1:], "program": os.path.basename(sys.argv[0]),
               "stdin": sys.stdin.read(), "cwd": os.getcwd(), "tz": os.environ.get("TZ")}}, handle)

lines = []
if PLAN.get("transcript"):
    with open(PLAN["transcript"], encoding="utf-8") as handle:
        lines = handle.read().splitlines()
act_after = PLAN.get("act_after", len(lines) // 2)
huge_after = PLAN.get("huge_after")
for number, line in enumerate(lines):
    if number == act_after:
        act()
    if number == huge_after:
        payload = "x" * (2 * 1024 * 1024)
        emit(json.dumps({{"type": "user", "message": {{"role": "user", "content": [
            {{"type": "tool_result", "tool_use_id": "toolu_huge", "content": payload}}]}}}}))
        emit("plain " + payload)
    emit(line)
if act_after >= len(lines):
    act()
if PLAN.get("wait_for"):
    # Poll with a deadline: another candidate's progress decides when this one may finish.
    import time
    deadline = time.monotonic() + 60
    while not os.path.exists(PLAN["wait_for"]) and time.monotonic() < deadline:
        time.sleep(0.02)
for line in PLAN.get("stderr", []):
    emit(line, sys.stderr)
sys.exit(PLAN.get("exit_code", 0))
"""


def write_fake(
    bin_dir: Path,
    program: str,
    *,
    record: Path,
    transcript_name: str | None = None,
    edits: dict[str, str] | None = None,
    commit: str | None = None,
    exit_code: int = 0,
    stderr: list[str] | None = None,
    act_after: int | None = None,
    huge_after: int | None = None,
    wait_for: Path | None = None,
) -> Path:
    """Writes an executable `bin_dir/program` that plays the agent; returns its path."""
    plan = {
        "record": str(record),
        "edits": edits or {},
        "commit": commit,
        "exit_code": exit_code,
        "stderr": stderr or [],
        "transcript": str(TRANSCRIPTS / transcript_name) if transcript_name else None,
    }
    if act_after is not None:
        plan["act_after"] = act_after
    if huge_after is not None:
        plan["huge_after"] = huge_after
    if wait_for is not None:
        plan["wait_for"] = str(wait_for)
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / program
    path.write_text(_FAKE.format(python=sys.executable, plan=json.dumps(plan)))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


AGENT_PROGRAMS = ("claude", "codex", "gemini", "aider", "opencode")


def path_with(bin_dir: Path, base: str | None = None) -> str:
    """PATH with bin_dir first and no real agent CLI anywhere after it.

    A directory holding a real agent CLI is replaced by a sibling of bin_dir with links to
    everything else in it, so python3, git and the rest stay reachable.
    """
    parts = [str(bin_dir)]
    base = base if base is not None else os.environ.get("PATH", "")
    for index, part in enumerate(base.split(os.pathsep)):
        directory = Path(part)
        if not part or not directory.is_dir():
            continue
        if not any((directory / name).exists() for name in AGENT_PROGRAMS):
            parts.append(part)
            continue
        mirror = bin_dir.parent / f"{bin_dir.name}-path-{index}"
        mirror.mkdir(exist_ok=True)
        for entry in directory.iterdir():
            if entry.name not in AGENT_PROGRAMS and not (mirror / entry.name).exists():
                (mirror / entry.name).symlink_to(entry)
        parts.append(str(mirror))
    return os.pathsep.join(parts)


def read_record(path: Path) -> dict:
    return json.loads(path.read_text())
