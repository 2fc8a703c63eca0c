"""A command agent that reports usage while it is being stopped, raced against one that wins once it
runs: what the stop path must still read and count, locally and in containers.

The agent reports some usage, says "ready" (the winner's gate opens) and waits. On TERM it reports
the usage of a call that was in flight, three reports and a plain line, and then either ignores the
TERM and goes on (`STUBBORN=ignore`: only KILL ends it) or exits (`STUBBORN=exit`). With
`STUBBORN_WAIT=timeout` there is no winner: it waits until its candidate_timeout.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from outpost_tui.engine import CandidateSpec, EventKind, build_spec, run_race
from outpost_tui.engine.core.spec import BudgetSpec, SandboxSpec, ValidateSpec
from tests.conftest import git

STRAY = """\
import signal, sys, time
def on_term(signum, frame):
    open(sys.argv[1], "w").write("TERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
open(sys.argv[1] + ".ready", "w").close()
while True:
    time.sleep(1)
"""

AGENT = (
    "STRAY = "
    + repr(STRAY)
    + "\n"
    + """\
import json, os, signal, subprocess, sys, time

def report(**figures):
    print(json.dumps({"kind": "usage", **figures}), flush=True)

def on_term(signum, frame):
    # one write: a loaded machine that holds the process back between writes for the whole
    # grace would cut what it says here in two (seen once in a CI run on Docker Engine)
    lines = [json.dumps({"kind": "usage", "input": 10, "output": 5, "cost_usd": 0.001})] * 3
    sys.stdout.write("\\n".join([*lines, "a call in flight finished after TERM"]) + "\\n")
    sys.stdout.flush()
    if os.environ["STUBBORN"] == "exit":
        sys.exit(143)

signal.signal(signal.SIGTERM, on_term)
mark = os.environ.get("STRAY_MARK")
if mark:  # a tool in a session of its own, as agents run theirs: it says whether TERM reached it
    subprocess.Popen([sys.executable, "-c", STRAY, mark], start_new_session=True)
    while not os.path.exists(mark + ".ready"):
        time.sleep(0.01)
report(input=1000, output=100, cost_usd=0.1)
print(json.dumps({"kind": "text", "text": "ready"}), flush=True)
while True:
    time.sleep(1)
"""
)

FIX = """\
import os, subprocess, time
while not os.path.exists("gate"):
    time.sleep(0.01)
with open("calc.py") as handle:
    source = handle.read()
with open("calc.py", "w") as handle:
    handle.write(source.replace("return a - b", "return a + b", 1))
subprocess.run(["git", "commit", "-qam", "fix add"], check=True)
"""

CALC = Path(__file__).resolve().parents[1] / "sample-races" / "projects" / "calc"
# before the grace, the first report; in it, three more
BEFORE = {"input": 1000, "output": 100}
IN_GRACE = {"input": 30, "output": 15}


def calc_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "calc"
    shutil.copytree(CALC, repo, ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "agents").mkdir()
    (repo / "agents" / "stubborn.py").write_text(AGENT)
    (repo / "agents" / "fix.py").write_text(FIX)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Test")
    git(repo, "config", "user.email", "test@example.invalid")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "calc with a bug in add()")
    return repo


def race(
    repo: Path,
    mode: str,
    sandbox: SandboxSpec | None = None,
    *,
    python: str = "python3",
    timeout: float = 120,
    env: dict[str, str] | None = None,
):
    """Runs the stubborn agent (cancelled by the fixer's win, or timed out when `timeout` is short
    and there is no fixer); returns (result, warnings about it)."""
    directories: dict[str, str] = {}
    warnings: list[str] = []
    ready: list[bool] = []
    opened: list[bool] = []

    def on_event(event) -> None:
        if event.kind is EventKind.WORKTREE_READY:
            directories[event.key] = event.directory
        if event.kind is EventKind.TEXT and event.key == "stubborn" and event.text == "ready":
            ready.append(True)
        # the gate opens once both hold, in whichever order they come: the stubborn agent may be
        # ready before the fixer's worktree is (then no winner: both would wait for the timeout)
        if ready and "fixer" in directories and not opened:
            Path(directories["fixer"], "gate").touch()
            opened.append(True)
        if event.kind is EventKind.WARNING and event.key == "stubborn":
            warnings.append(event.message)

    candidates = [
        CandidateSpec(
            "stubborn",
            "command",
            "fix add",
            command=(python, "agents/stubborn.py"),
            env={"STUBBORN": mode, **(env or {})},
        )
    ]
    if timeout >= 60:
        candidates.append(CandidateSpec("fixer", "command", "fix add", command=(python, "agents/fix.py")))
    options = {"sandbox": sandbox} if sandbox is not None else {}
    spec = build_spec(
        repository=repo,
        candidates=candidates,
        validate=ValidateSpec(command=(python, "-B", "-m", "unittest", "-q"), timeout=120),
        budget=BudgetSpec(candidate_timeout=timeout),
        **options,
    )
    return run_race(spec, on_event=on_event).to_json(), warnings


def stubborn_record(result: dict) -> dict:
    return next(c for c in result["candidates"] if c["key"] == "stubborn")


def figures(usage: dict) -> dict:
    return {k: usage[k] for k in ("input", "output")}


def plus(a: dict, b: dict) -> dict:
    return {k: a[k] + b[k] for k in a}
