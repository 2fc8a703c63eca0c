"""The real Claude Code (version pinned in ./versions) against the stand-in model server.

Each test scripts the model's side of a short conversation; the real `claude -p` runs its real
tools (Read, Edit, Bash) in a real worktree, and the engine decodes what it really prints.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from outpost_tui.engine.flightlog import read_flight_log
from tests.agents.real.conftest import claude_env, project
from tests.agents.real.model_server import Step, Tokens, working_directory
from tests.conftest import git

BRIEF = "calc.add(2, 3) returns -1. Fix add() in calc.py, run the tests, commit your change."


def fix_and_commit() -> list:
    """Read calc.py, fix add(), commit, say so: four model calls with distinctive usage."""
    def read(request):
        return Step(text="Reading calc.py.", tool="Read",
                    tool_input={"file_path": f"{working_directory(request)}/calc.py"},
                    tokens=Tokens(input=1101, cached=2203, cache_write=3307, output=41))

    def edit(request):
        return Step(tool="Edit", tool_input={
            "file_path": f"{working_directory(request)}/calc.py",
            "old_string": '    """The sum of a and b."""\n    return a - b',
            "new_string": '    """The sum of a and b."""\n    return a + b'},
            tokens=Tokens(input=13, cached=5003, cache_write=211, output=97))

    return [read, edit,
            Step(tool="Bash", tool_input={"command": "git commit -qam 'Fix add() to return the sum'",
                                          "description": "Commit the fix"},
                 tokens=Tokens(input=17, cached=5309, cache_write=149, output=53)),
            Step(text="Fixed add() and committed.", tokens=Tokens(input=19, cached=5501, cache_write=61,
                                                                   output=29))]


def race_file(tmp_path: Path, extra: str = "", candidate: str = "") -> Path:
    path = tmp_path / "race.toml"
    path.write_text(textwrap.dedent(f"""\
        [race]
        name = "real-claude"
        repository = "project"
        brief = "{BRIEF}"

        [budget]
        candidate_timeout = 60
        {extra}

        [validate]
        command = ["python3", "-B", "-m", "unittest", "-q"]
        timeout = 60

        [[candidates]]
        key = "claude"
        agent = "claude"
        model = "sonnet"
        {candidate}
        """))
    return path


def run(tmp_path: Path, race: Path, env: dict[str, str]) -> tuple[int, dict, str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "ANTHROPIC_", "CLAUDE_"))}
    full.update(env)
    done = subprocess.run([sys.executable, "-m", "outpost_tui.cli", "run", str(race), "--headless", "--json"],
                          cwd=tmp_path, env=full, capture_output=True, text=True, timeout=180)
    try:
        return done.returncode, json.loads(done.stdout), done.stderr
    except ValueError:
        raise AssertionError(f"no JSON result (exit {done.returncode}): {done.stderr[-3000:]}") from None


def totals(tokens: list[Tokens]) -> dict:
    return {"input": sum(t.input for t in tokens), "cached": sum(t.cached for t in tokens),
            "cache_write": sum(t.cache_write for t in tokens), "output": sum(t.output for t in tokens)}


def test_claude_fixes_commits_and_wins_with_exactly_the_usage_the_server_reported(
        tmp_path, model_server, agent_home):
    repo = project(tmp_path)
    model_server.steps = fix_and_commit()
    code, result, stderr = run(tmp_path, race_file(tmp_path), claude_env(model_server, agent_home))

    assert code == 0, stderr
    claude = result["candidates"][0]
    assert result["status"] == "winner" and claude["status"] == "winner", stderr
    assert claude["committed_on_behalf"] is False  # claude committed itself
    assert [c["subject"] for c in claude["commits"]] == ["Fix add() to return the sum"]
    assert "return a + b" in git(repo, "show", f"{claude['commit']}:calc.py")
    assert claude["result"] == "Fixed add() and committed."

    served = totals(model_server.billed())
    assert len(model_server.served) == 4
    assert {k: claude["usage"][k] for k in served} == served
    # Claude prices its own calls: the cost is its own, not an estimate, and never $0.
    assert claude["usage"]["cost_usd"] > 0 and claude["usage"]["estimated"] is False
    assert claude["usage"]["complete"] is True
    assert result["usage"]["output"] == served["output"]

    # Live figures carried the real output counts (message_delta), not a placeholder of 1 per call,
    # and were priced while the run went on.
    log = read_flight_log(repo / ".outpost" / "runs" / result["id"] / "claude.1.jsonl")
    live = [e["total"] for e in log if e["kind"] == "usage" and e["total"]["estimated"]]
    assert live and max(t["output"] for t in live) >= 41 + 97
    assert all(t["cost_usd"] > 0 and not t["cost_unknown"] for t in live)
    # The sonnet alias resolves to a model no table lists by name: priced by its family.
    lines = [line for e in log if e["kind"] == "log" for line in e["lines"]]
    assert any("priced as claude-sonnet-4" in line for line in lines), lines
