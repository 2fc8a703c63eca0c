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
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio

from outpost_tui.engine import BudgetSpec, CandidateSpec, build_spec, run_race_async
from outpost_tui.engine.agents.quota_time import from_epoch
from outpost_tui.engine.core.events import EventKind
from outpost_tui.engine.records.flightlog import read_flight_log
from tests.agents.real.conftest import claude_env, closed_port_url, project
from tests.agents.real.model_server import Step, Tokens, working_directory
from tests.conftest import git

BRIEF = "calc.add(2, 3) returns -1. Fix add() in calc.py, run the tests, commit your change."


def fix_and_commit() -> list:
    """Read calc.py, fix add(), commit, say so: four model calls with distinctive usage."""

    def read(request):
        return Step(
            text="Reading calc.py.",
            tool="Read",
            tool_input={"file_path": f"{working_directory(request)}/calc.py"},
            tokens=Tokens(input=1101, cached=2203, cache_write=3307, output=41),
        )

    def edit(request):
        return Step(
            tool="Edit",
            tool_input={
                "file_path": f"{working_directory(request)}/calc.py",
                "old_string": '    """The sum of a and b."""\n    return a - b',
                "new_string": '    """The sum of a and b."""\n    return a + b',
            },
            tokens=Tokens(input=13, cached=5003, cache_write=211, output=97),
        )

    return [
        read,
        edit,
        Step(
            tool="Bash",
            tool_input={
                "command": "git commit -qam 'Fix add() to return the sum'",
                "description": "Commit the fix",
            },
            tokens=Tokens(input=17, cached=5309, cache_write=149, output=53),
        ),
        Step(
            text="Fixed add() and committed.", tokens=Tokens(input=19, cached=5501, cache_write=61, output=29)
        ),
    ]


def race_file(tmp_path: Path, extra: str = "", candidate: str = "") -> Path:
    path = tmp_path / "race.toml"
    path.write_text(
        textwrap.dedent(f"""\
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
        """)
    )
    return path


def run(tmp_path: Path, race: Path, env: dict[str, str]) -> tuple[int, dict, str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "ANTHROPIC_", "CLAUDE_"))}
    full.update(env)
    done = subprocess.run(
        [sys.executable, "-m", "outpost_tui.cli", "run", str(race), "--headless", "--json"],
        cwd=tmp_path,
        env=full,
        capture_output=True,
        text=True,
        timeout=180,
    )
    try:
        return done.returncode, json.loads(done.stdout), done.stderr
    except ValueError:
        raise AssertionError(f"no JSON result (exit {done.returncode}): {done.stderr[-3000:]}") from None


def totals(tokens: list[Tokens]) -> dict:
    return {
        "input": sum(t.input for t in tokens),
        "cached": sum(t.cached for t in tokens),
        "cache_write": sum(t.cache_write for t in tokens),
        "output": sum(t.output for t in tokens),
    }


def test_claude_fixes_commits_and_wins_with_exactly_the_usage_the_server_reported(
    tmp_path, model_server, agent_home
):
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


# A command candidate that fixes add() and commits once the test lets it (by opening the FIFO it
# waits on), so it wins while Claude is in the middle of a model call.
FIX_WHEN_TOLD = """
import pathlib, subprocess, sys
open(sys.argv[1]).read()
calc = pathlib.Path("calc.py")
calc.write_text(calc.read_text().replace("return a - b", "return a + b", 1))
subprocess.run(["git", "commit", "-qam", "fix add()"], check=True)
"""


def test_a_claude_cancelled_mid_run_keeps_what_it_spent_marked_incomplete_and_the_totals_count_it(
    tmp_path, model_server, agent_home
):
    repo = project(tmp_path)
    held = threading.Event()
    first = Tokens(input=1709, cached=2311, cache_write=397, output=83)
    second = Tokens(input=23, cached=4001, cache_write=59, output=900)  # its output never arrives
    model_server.steps = [
        Step(text="Looking around.", tool="Bash", tool_input={"command": "git status"}, tokens=first),
        Step(text="Now I will", tokens=second, hold=held),
    ]
    go = tmp_path / "go"
    os.mkfifo(go)
    spec = build_spec(
        repository=repo,
        validate=["python3", "-B", "-m", "unittest", "-q"],
        candidates=[
            CandidateSpec(
                "claude", "claude", BRIEF, model="sonnet", env=claude_env(model_server, agent_home)
            ),
            CandidateSpec("fixer", "command", BRIEF, command=(sys.executable, "-c", FIX_WHEN_TOLD, str(go))),
        ],
        budget=BudgetSpec(candidate_timeout=60),
    )

    async def main():
        async with anyio.create_task_group() as group:

            async def release_fixer():
                # Claude's second call is in flight (its message_start has been sent) ...
                await anyio.to_thread.run_sync(model_server.holding.wait)
                await seen_second.wait()
                # ... so the fixer may win now, and Claude is cancelled mid-call.
                await anyio.to_thread.run_sync(lambda: open(go, "w").close())

            seen_second = anyio.Event()

            def on_event(event):
                if (
                    event.kind is EventKind.USAGE
                    and event.key == "claude"
                    and event.total["input"] == first.input + second.input
                ):
                    seen_second.set()

            group.start_soon(release_fixer)
            with anyio.fail_after(120):
                return await run_race_async(spec, on_event=on_event)

    result = anyio.run(main).to_json()
    claude = next(c for c in result["candidates"] if c["key"] == "claude")
    assert result["winner"]["key"] == "fixer"
    assert claude["status"] == "cancelled"
    # Everything the server billed, the second call's input side included; its output is the
    # placeholder of 1 the API sends before the reply is done. Marked incomplete: at least this much.
    assert {k: claude["usage"][k] for k in ("input", "cached", "cache_write", "output")} == {
        "input": first.input + second.input,
        "cached": first.cached + second.cached,
        "cache_write": first.cache_write + second.cache_write,
        "output": first.output + 1,
    }
    assert claude["usage"]["complete"] is False and claude["usage"]["cost_usd"] > 0
    assert result["usage"]["input"] == first.input + second.input
    assert result["usage"]["cost_usd"] == claude["usage"]["cost_usd"]
    assert result["usage"]["complete"] is False


def test_no_model_server_at_all_fails_soon_with_the_network_reason(tmp_path, agent_home):
    project(tmp_path)
    race = race_file(tmp_path, extra="unreachable_timeout = 2")
    started = time.monotonic()
    code, result, stderr = run(tmp_path, race, claude_env(closed_port_url(), agent_home))
    took = time.monotonic() - started

    claude = result["candidates"][0]
    assert code == 1 and claude["status"] == "failed", stderr
    assert claude["error"].startswith("cannot reach the model API (network (no answer"), claude["error"]
    assert claude["error"].endswith(") for 2s")
    assert "network, the agent is retrying" in stderr and "rate limited" not in stderr
    assert took < 60  # claude alone retries for about 3 minutes
    assert claude["usage"]["complete"] is False and claude["usage"]["output"] == 0


RATE_LIMITED = {
    "type": "error",
    "error": {
        "type": "rate_limit_error",
        "message": "Number of request tokens has exceeded your per-minute rate limit",
    },
}


def test_a_subscription_limit_stops_claude_with_its_exact_reset_time(tmp_path, model_server, agent_home):
    project(tmp_path)
    reset = int(time.time()) + 3723  # seconds included: they must survive
    limited = Step(
        status=429,
        error=RATE_LIMITED,
        headers={
            "anthropic-ratelimit-unified-status": "rejected",
            "anthropic-ratelimit-unified-reset": str(reset),
            "anthropic-ratelimit-unified-representative-claim": "five_hour",
        },
    )
    model_server.steps = [limited] * 3
    env = {**claude_env(model_server, agent_home), "CLAUDE_CODE_OAUTH_TOKEN": "stand-in-token"}
    env.pop("ANTHROPIC_API_KEY")
    _code, result, stderr = run(tmp_path, race_file(tmp_path), env)

    claude = result["candidates"][0]
    assert result["status"] == "quota" and claude["status"] == "quota", stderr
    assert claude["quota"]["reset_at"] == from_epoch(reset)
    assert claude["quota"]["message"] == "five hour limit reached"
    assert claude["error"] == f"quota: five hour limit reached (resets {from_epoch(reset)})"
    assert "quota: quota" not in stderr and "quota: quota" not in claude["error"]


def test_an_api_key_rate_limit_takes_its_reset_from_the_retry_after_claude_reports(
    tmp_path, model_server, agent_home
):
    project(tmp_path)
    model_server.steps = [Step(status=429, error=RATE_LIMITED, headers={"retry-after": "2"})] * 3
    env = {**claude_env(model_server, agent_home), "CLAUDE_CODE_MAX_RETRIES": "1"}
    before = datetime.now(UTC).replace(microsecond=0)
    _code, result, stderr = run(tmp_path, race_file(tmp_path), env)
    after = datetime.now(UTC)

    claude = result["candidates"][0]
    assert claude["status"] == "quota", stderr
    assert claude["quota"]["message"].startswith("API Error: Request rejected (429)")
    reset = datetime.fromisoformat(claude["quota"]["reset_at"].replace("Z", "+00:00"))
    assert before + timedelta(seconds=2) <= reset <= after + timedelta(seconds=3)
    assert "rate limited, the agent is retrying: rate limited (HTTP 429, rate_limit)" in stderr


def test_an_api_key_rate_limit_without_retries_says_the_reset_time_is_unknown(
    tmp_path, model_server, agent_home
):
    project(tmp_path)
    model_server.steps = [Step(status=429, error=RATE_LIMITED)]
    env = {**claude_env(model_server, agent_home), "CLAUDE_CODE_MAX_RETRIES": "0"}
    _code, result, stderr = run(tmp_path, race_file(tmp_path), env)

    claude = result["candidates"][0]
    assert claude["status"] == "quota" and claude["quota"]["reset_at"] is None, stderr
    assert "(resets unknown)" in stderr


def test_a_transient_429_is_a_retry_not_a_quota_and_claude_goes_on_to_win(tmp_path, model_server, agent_home):
    project(tmp_path)
    model_server.steps = [
        Step(status=429, error=RATE_LIMITED, headers={"retry-after": "0"}),
        *fix_and_commit(),
    ]
    code, result, stderr = run(tmp_path, race_file(tmp_path), claude_env(model_server, agent_home))

    claude = result["candidates"][0]
    assert code == 0 and claude["status"] == "winner", stderr
    assert claude["quota"] is None and "quota" not in stderr
    assert "claude#1 rate limited, the agent is retrying: rate limited (HTTP 429, rate_limit)" in stderr
    served = totals(model_server.billed())
    assert {k: claude["usage"][k] for k in served} == served


def test_an_output_budget_stops_claude_mid_run_on_its_live_figures(tmp_path, model_server, agent_home):
    project(tmp_path)
    held = threading.Event()  # the second reply never finishes: only the budget can end the run
    model_server.steps = [
        Step(
            text="Looking.",
            tool="Bash",
            tool_input={"command": "git status"},
            tokens=Tokens(input=10, cached=20, cache_write=30, output=150),
        ),
        Step(text="Still going", tokens=Tokens(input=5, output=900), hold=held),
    ]
    race = race_file(tmp_path, extra="tokens = { output = 100 }")
    _code, result, stderr = run(tmp_path, race, claude_env(model_server, agent_home))

    claude = result["candidates"][0]
    assert result["status"] == "budget-exhausted" and claude["status"] == "cancelled", stderr
    assert result["error"].startswith("token budget exhausted: output 15"), result["error"]
    # Stopped on the first reply's real output (150, not the placeholder 1) before any result line.
    assert claude["usage"]["output"] >= 150 and claude["usage"]["complete"] is False


def test_an_api_key_spend_cap_stops_claude_until_the_day_it_names(tmp_path, model_server, agent_home):
    project(tmp_path)
    model_server.steps = [
        Step(
            status=400,
            error={
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "You have reached your specified API usage limits. "
                    "You will regain access on 2027-01-01 at 00:00 UTC.",
                },
            },
        )
    ] * 10
    _code, result, stderr = run(tmp_path, race_file(tmp_path), claude_env(model_server, agent_home))

    claude = result["candidates"][0]
    assert claude["status"] == "quota", stderr
    assert claude["quota"]["reset_at"] == "2027-01-01T00:00:00Z"
    assert "reached your specified API usage limits" in claude["quota"]["message"]
    assert len(model_server.served) == 6  # this version retries a 400 five times, silently
