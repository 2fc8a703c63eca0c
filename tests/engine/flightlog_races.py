"""Races whose flight logs between them hold most event kinds (tests/engine/test_flightlog_shape.py).

The sample race (demo agents: text, tools, usage, a rejected and a cancelled candidate, a winner) and
a command-agent race with [setup], select = "best" and a score, a quota report and an unknown
program; each race's flight log is read back as {kind: sorted keys of its JSON objects}.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from outpost_tui.engine import run_race
from outpost_tui.engine.racefile import load_race
from outpost_tui.samples import materialise

AGENT = textwrap.dedent("""\
    import json, subprocess, sys
    sys.stdin.read()
    def say(**event):
        print(json.dumps(event), flush=True)
    say(kind="text", text="adding a file")
    say(kind="tool", name="Write", input="answer.txt")
    say(kind="usage", input=100, cached=0, cache_write=0, output=20, cost_usd=0.001)
    if len(sys.argv) > 2:
        say(kind="quota", message="quota: used up", reset_at=None)
    print("plain output", flush=True)
    open("answer.txt", "w").write(sys.argv[1] + "\\n")
    subprocess.run(["git", "add", "answer.txt"], check=True)
    subprocess.run(["git", "-c", "user.name=a", "-c", "user.email=a@example.com", "commit", "-qm", "answer"],
                   check=True)
""")


def command_race(root: Path) -> Path:
    project = root / "project"
    project.mkdir(parents=True)
    (project / "agent.py").write_text(AGENT)
    (project / "score.py").write_text("print(len(open('answer.txt').read()))\n")
    import subprocess

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q", "-b", "main", str(project)], check=True)
    subprocess.run([*git, "-C", str(project), "add", "."], check=True)
    subprocess.run([*git, "-C", str(project), "commit", "-qm", "init"], check=True)
    race = root / "race.toml"
    py = json.dumps(sys.executable)
    race.write_text(
        textwrap.dedent(f"""\
        [race]
        repository = "project"
        select = "best"
        brief = "write an answer"
        [validate]
        command = [{py}, "-c", "import sys; sys.exit(0)"]
        gate = "exit-code"
        [score]
        command = [{py}, "score.py"]
        [setup]
        command = [{py}, "-c", "print('set up')"]
        ports = 1
        [[candidates]]
        key = "short"
        agent = "command"
        command = [{py}, "agent.py", "a"]
        [[candidates]]
        key = "long"
        agent = "command"
        command = [{py}, "agent.py", "a much longer answer"]
        [[candidates]]
        key = "limited"
        agent = "command"
        command = [{py}, "agent.py", "b", "quota"]
        [[candidates]]
        key = "missing"
        agent = "command"
        command = ["no-such-program-outpost-test"]
        """)
    )
    return race


def kinds_of(repository: Path) -> dict[str, list[str]]:
    shapes: dict[str, set[str]] = {}
    for log in sorted((repository / ".outpost" / "runs").glob("*/*.jsonl")):
        for line in log.read_text().splitlines():
            event = json.loads(line)
            shapes.setdefault(event["kind"], set()).update(event)
    return {kind: sorted(keys) for kind, keys in sorted(shapes.items())}


def run_both(root: Path) -> dict[str, dict[str, list[str]]]:
    sample = materialise("race", root / "sample")
    spec = load_race(sample)
    run_race(spec)
    race = command_race(root / "command")
    run_race(load_race(race))
    return {"sample": kinds_of(spec.repository), "command": kinds_of(race.parent / "project")}


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        json.dump(run_both(Path(directory)), sys.stdout, indent=1, sort_keys=True)
