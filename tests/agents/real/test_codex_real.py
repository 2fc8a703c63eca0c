"""The real Codex CLI (version pinned in ./versions) against the stand-in model server.

This version's default model works in "code mode": one custom `exec` tool whose input is
JavaScript calling nested tools (`tools.apply_patch`, `tools.exec_command`). The scripts below
answer that way; Codex really applies the patch and runs the command in its sandbox.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import anyio

from outpost_tui.engine import BudgetSpec, CandidateSpec, build_spec, run_race_async
from outpost_tui.engine.agents.quota_time import from_epoch
from outpost_tui.engine.records.flightlog import read_flight_log
from tests.agents.real.conftest import closed_port_url, codex_env, project
from tests.agents.real.model_server import Step, Tokens
from tests.conftest import git

BRIEF = "calc.add(2, 3) returns -1. Fix add() in calc.py, run the tests, commit your change."
PATCH = textwrap.dedent('''\
    *** Begin Patch
    *** Update File: calc.py
    @@
     def add(a, b):
         """The sum of a and b."""
    -    return a - b
    +    return a + b
    *** End Patch
    ''')


def exec_js(*calls: str) -> str:
    """Code-mode input: each nested tool call, its result appended as text."""
    return "\n".join(f"text(JSON.stringify(await {call}));" for call in calls)


def fix_and_commit() -> list[Step]:
    return [
        Step(
            text="Patching add().",
            tool="exec",
            tool_input=exec_js(
                f"tools.apply_patch({json.dumps(PATCH)})",
                "tools.exec_command({cmd: \"git commit -qam 'Fix add()'\"})",
            ),
            tokens=Tokens(input=1201, cached=3301, output=71),
        ),
        Step(text="Fixed add() to return the sum.", tokens=Tokens(input=403, cached=4507, output=29)),
    ]


def race_file(tmp_path: Path, extra: str = "", candidate: str = "", sandbox: str = "") -> Path:
    path = tmp_path / "race.toml"
    path.write_text(
        textwrap.dedent(f"""\
        [race]
        name = "real-codex"
        repository = "project"
        brief = "{BRIEF}"

        [budget]
        candidate_timeout = 60
        {extra}

        [sandbox]
        {sandbox}

        [validate]
        command = ["python3", "-B", "-m", "unittest", "-q"]
        timeout = 60

        [[candidates]]
        key = "codex"
        agent = "codex"
        {candidate}
        """)
    )
    return path


def run(tmp_path: Path, race: Path, env: dict[str, str]) -> tuple[int, dict, str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "OPENAI_", "CODEX_"))}
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


def test_codex_isolated_commits_in_its_own_repository_and_wins(tmp_path, model_server, agent_home):
    # Isolated, the git directory Codex's sandbox may write is the candidate's own repository:
    # its own `git commit` goes through, with its own message, and nothing is done on its behalf.
    repo = project(tmp_path)
    model_server.steps = fix_and_commit()
    env = codex_env(model_server.url, agent_home)
    code, result, stderr = run(tmp_path, race_file(tmp_path), env)

    assert code == 0, stderr
    codex = result["candidates"][0]
    assert result["status"] == "winner" and codex["status"] == "winner", stderr
    assert result["isolation"]["mode"] == "bubblewrap"
    # its CODEX_HOME (outside every path the run lets candidates write) is the agent's state:
    # writable, so its session was recorded there
    assert list(Path(env["CODEX_HOME"], "sessions").rglob("*.jsonl"))
    assert codex["committed_on_behalf"] is False
    assert [c["subject"] for c in codex["commits"]] == ["Fix add()"]
    assert "return a + b" in git(repo, "show", f"{codex['commit']}:calc.py")


def test_codex_fixes_is_committed_for_and_wins_with_exactly_the_usage_the_server_reported(
    tmp_path, model_server, agent_home
):
    repo = project(tmp_path)
    model_server.steps = fix_and_commit()
    race = race_file(tmp_path, sandbox='isolation = "none"')
    code, result, stderr = run(tmp_path, race, codex_env(model_server.url, agent_home))

    assert code == 0, stderr
    codex = result["candidates"][0]
    assert result["status"] == "winner" and codex["status"] == "winner", stderr
    # Unisolated, Codex's sandbox keeps .git read-only in a linked worktree: its own commit is
    # refused, so the engine commits on its behalf, with the full message, and says so where the
    # user looks.
    assert codex["committed_on_behalf"] is True
    # The commit keeps Codex's own message when its refused `git commit` shows in the --json stream;
    # a nested call of Codex's code-mode `exec` tool does not show there, and then the subject is
    # the brief's first line. Either way the body says who committed and carries the final words.
    subject = git(repo, "log", "-1", "--format=%s", codex["commit"]).strip()
    assert subject in ("Fix add()", f"codex (codex): {BRIEF}")
    assert [c["subject"] for c in codex["commits"]] == [subject]
    assert git(repo, "log", "-1", "--format=%B", codex["commit"]).splitlines()[1:] == [
        "",
        "Committed by outpost-tui on behalf of codex (codex): its sandbox could not commit.",
        "",
        "Fixed add() to return the sum.",
    ]
    assert "return a + b" in git(repo, "show", f"{codex['commit']}:calc.py")
    assert (
        f"codex#1 committed on its behalf (codex could not commit in its sandbox): "
        f"{codex['commit'][:12]} {subject}" in stderr
    )
    assert codex["result"] == "Fixed add() to return the sum."

    # Codex's turn total is cumulative and counts cached tokens inside input.
    assert len(model_server.served) == 2
    billed = model_server.billed()
    assert {k: codex["usage"][k] for k in ("input", "cached", "cache_write", "output")} == {
        "input": sum(t.input for t in billed),
        "cached": sum(t.cached for t in billed),
        "cache_write": 0,
        "output": sum(t.output for t in billed),
    }
    # --json never names the model: the engine passed this version's default explicitly and
    # priced it by its family, marked estimated.
    assert model_server.served[0].request["model"] == "gpt-6.1-sol"
    gpt5 = (1604 * 1.25 + 7808 * 0.125 + 100 * 10.0) / 1e6
    assert codex["usage"]["cost_usd"] == round(gpt5, 6)
    assert codex["usage"]["estimated"] is True and codex["usage"]["cost_unknown"] is False

    log = read_flight_log(repo / ".outpost" / "runs" / result["id"] / "codex.1.jsonl")
    changes = [e for e in log if e["kind"] == "file-change"]
    assert [Path(e["path"]).name for e in changes] == ["calc.py"]


def test_no_model_server_at_all_fails_soon_with_the_network_reason(tmp_path, agent_home):
    project(tmp_path)
    race = race_file(tmp_path, extra="unreachable_timeout = 2")
    started = time.monotonic()
    code, result, stderr = run(tmp_path, race, codex_env(closed_port_url(), agent_home, retries=1))
    took = time.monotonic() - started

    codex = result["candidates"][0]
    assert code == 1 and codex["status"] == "failed", stderr
    # Codex alone would reconnect until the candidate timeout; its own words are kept.
    assert codex["error"].startswith("cannot reach the model API (Reconnecting... waiting for network"), (
        codex["error"]
    )
    assert "network, the agent is retrying" in stderr and "quota" not in stderr
    assert took < 45
    assert codex["usage"]["complete"] is False


RATE_LIMITED = {
    "error": {
        "type": "rate_limit_exceeded",
        "code": "rate_limit_exceeded",
        "message": "Rate limit reached for requests",
    }
}


def test_a_usage_limit_stops_codex_never_before_it_resets(tmp_path, model_server, agent_home):
    project(tmp_path)
    resets = int(time.time()) + 3719
    model_server.steps = [
        Step(
            status=429,
            error={
                "error": {
                    "type": "usage_limit_reached",
                    "message": "The usage limit has been reached",
                    "plan_type": "plus",
                    "resets_at": resets,
                    "resets_in_seconds": 3719,
                }
            },
        )
    ]
    _code, result, stderr = run(tmp_path, race_file(tmp_path), codex_env(model_server.url, agent_home))

    codex = result["candidates"][0]
    assert result["status"] == "quota" and codex["status"] == "quota", stderr
    assert codex["quota"]["message"].startswith("You’ve hit your usage limit.")
    # Codex prints the time cut to the minute; the end of that minute is never early.
    minute_end = (resets // 60 + 1) * 60
    assert codex["quota"]["reset_at"] == from_epoch(minute_end)
    assert "quota: quota" not in stderr


def test_a_transient_429_is_a_retry_not_a_quota_and_codex_goes_on_to_win(tmp_path, model_server, agent_home):
    project(tmp_path)
    model_server.steps = [
        Step(status=429, error=RATE_LIMITED, headers={"retry-after": "0"}),
        *fix_and_commit(),
    ]
    code, result, stderr = run(
        tmp_path, race_file(tmp_path), codex_env(model_server.url, agent_home, retries=1)
    )

    codex = result["candidates"][0]
    assert code == 0 and codex["status"] == "winner", stderr
    assert codex["quota"] is None and "quota" not in stderr
    assert (
        "codex#1 rate limited, the agent is retrying: Reconnecting... 1/1 "
        "(exceeded retry limit, last status: 429"
    ) in stderr


def test_429s_until_its_retries_run_out_end_codex_as_quota_without_a_reset_time(
    tmp_path, model_server, agent_home
):
    project(tmp_path)
    model_server.steps = [Step(status=429, error=RATE_LIMITED)] * 4
    _code, result, stderr = run(tmp_path, race_file(tmp_path), codex_env(model_server.url, agent_home))

    codex = result["candidates"][0]
    assert codex["status"] == "quota", stderr
    assert codex["quota"]["reset_at"] is None and "(resets unknown)" in stderr
    assert "429" in codex["quota"]["message"]


FIX_WHEN_TOLD = """
import pathlib, subprocess, sys
open(sys.argv[1]).read()
calc = pathlib.Path("calc.py")
calc.write_text(calc.read_text().replace("return a - b", "return a + b", 1))
subprocess.run(["git", "commit", "-qam", "fix add()"], check=True)
"""


def test_a_codex_cancelled_mid_run_is_marked_incomplete_and_the_totals_say_so(
    tmp_path, model_server, agent_home
):
    repo = project(tmp_path)
    held = threading.Event()
    model_server.steps = [
        Step(
            text="Looking.",
            tool="exec",
            tool_input=exec_js('tools.exec_command({cmd: "git status --short"})'),
            tokens=Tokens(input=1201, cached=3301, output=71),
        ),
        Step(text="Almost", tokens=Tokens(input=5, output=9), hold=held),
    ]
    go = tmp_path / "go"
    os.mkfifo(go)
    spec = build_spec(
        repository=repo,
        validate=["python3", "-B", "-m", "unittest", "-q"],
        candidates=[
            CandidateSpec("codex", "codex", BRIEF, env=codex_env(model_server.url, agent_home)),
            CandidateSpec("fixer", "command", BRIEF, command=(sys.executable, "-c", FIX_WHEN_TOLD, str(go))),
        ],
        budget=BudgetSpec(candidate_timeout=60),
    )

    async def main():
        async with anyio.create_task_group() as group:

            async def release_fixer():
                await anyio.to_thread.run_sync(model_server.holding.wait)  # its second call is in flight
                await anyio.to_thread.run_sync(lambda: open(go, "w").close())

            group.start_soon(release_fixer)
            with anyio.fail_after(120):
                return await run_race_async(spec)

    result = anyio.run(main).to_json()
    codex = next(c for c in result["candidates"] if c["key"] == "codex")
    assert result["winner"]["key"] == "fixer" and codex["status"] == "cancelled"
    # Codex reports tokens only when its turn ends: nothing seen, and the figures say they are a
    # lower bound rather than claiming it spent nothing.
    assert codex["usage"]["complete"] is False and codex["usage"]["output"] == 0
    assert result["usage"]["complete"] is False
    assert len(model_server.served) == 2


def test_an_api_key_out_of_quota_stops_codex_without_a_reset_time(tmp_path, model_server, agent_home):
    project(tmp_path)
    model_server.steps = [
        Step(
            status=429,
            error={
                "error": {
                    "type": "insufficient_quota",
                    "code": "insufficient_quota",
                    "message": "You exceeded your current quota, please check your plan and billing details.",
                }
            },
        )
    ] * 3
    _code, result, stderr = run(tmp_path, race_file(tmp_path), codex_env(model_server.url, agent_home))

    codex = result["candidates"][0]
    assert codex["status"] == "quota", stderr
    assert codex["quota"]["reset_at"] is None
    assert codex["error"].startswith("quota: ") and not codex["error"].lower().startswith("quota: quota")
