"""The real Gemini CLI, opencode and aider (versions pinned in ./versions) in real races against the
stand-in model server: Gemini through GOOGLE_GEMINI_BASE_URL (streamGenerateContent), opencode
through a custom @ai-sdk/openai-compatible provider, aider through OPENAI_API_BASE (litellm)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import psutil

from outpost_tui.engine import BudgetSpec, CandidateSpec, build_spec, run_race_async
from outpost_tui.engine.records.flightlog import read_flight_log
from tests.agents.real.conftest import (
    SAMPLE_PROJECT,
    aider_env,
    closed_port_url,
    gemini_env,
    opencode_env,
    project,
)
from tests.agents.real.model_server import Step, Tokens
from tests.conftest import git

BRIEF = "calc.add(2, 3) returns -1. Fix add() in calc.py, run the tests, commit your change."
FIXED = (
    (SAMPLE_PROJECT / "calc.py")
    .read_text()
    .replace('"""The sum of a and b."""\n    return a - b', '"""The sum of a and b."""\n    return a + b')
)
TEST_AND_COMMIT = "python3 -B -m unittest -q && git commit -qam 'Fix add()'"
# OpenAI list prices the table holds for gpt-4o, and Google's for gemini-2.5-pro (per million)
GPT_4O = {"input": 2.5, "cached": 1.25, "output": 10.0}
GEMINI_PRO = {"input": 1.25, "cached": 0.125, "output": 10.0}


def race_file(tmp_path: Path, agent: str, candidate: str = "", extra: str = "") -> Path:
    path = tmp_path / "race.toml"
    path.write_text(
        textwrap.dedent(f"""\
        [race]
        name = "real-{agent}"
        repository = "project"
        brief = "{BRIEF}"

        [budget]
        candidate_timeout = 90
        {extra}

        [validate]
        command = ["python3", "-B", "-m", "unittest", "-q"]
        timeout = 60

        [[candidates]]
        key = "{agent}"
        agent = "{agent}"
        {candidate}
        """)
    )
    return path


def run(tmp_path: Path, race: Path, env: dict[str, str]) -> tuple[int, dict, str, float]:
    full = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GIT_", "OPENAI_", "GEMINI_", "GOOGLE_", "OPENCODE_", "XDG_", "AIDER_"))
    }
    full.update(env)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "outpost_tui.cli", "run", str(race), "--headless", "--json"],
        cwd=tmp_path,
        env=full,
        capture_output=True,
        text=True,
        timeout=240,
    )
    took = time.monotonic() - started
    try:
        return done.returncode, json.loads(done.stdout), done.stderr, took
    except ValueError:
        raise AssertionError(f"no JSON result (exit {done.returncode}): {done.stderr[-3000:]}") from None


def flight_log(repo: Path, result: dict, key: str) -> list[dict]:
    return read_flight_log(repo / ".outpost" / "runs" / result["id"] / f"{key}.1.jsonl")


def priced(tokens: list[Tokens], price: dict, thinking_is_output: bool = True) -> float:
    return (
        sum(
            t.input * price["input"]
            + t.cached * price["cached"]
            + (t.output + (t.thinking if thinking_is_output else 0)) * price["output"]
            for t in tokens
        )
        / 1e6
    )


def usage_of(record: dict) -> dict:
    return {k: record["usage"][k] for k in ("input", "cached", "cache_write", "output")}


# -- Gemini CLI ---------------------------------------------------------------------------------


def gemini_fix() -> list[Step]:
    return [
        Step(
            tool="write_file",
            tool_input={"file_path": "calc.py", "content": FIXED},
            tokens=Tokens(input=1200, cached=800, output=40, thinking=30),
        ),
        Step(
            tool="run_shell_command",
            tool_input={"command": TEST_AND_COMMIT},
            tokens=Tokens(input=1300, cached=900, output=20, thinking=10),
        ),
        Step(text="Fixed add() to return the sum.", tokens=Tokens(input=1400, output=10)),
    ]


def test_gemini_fixes_commits_under_the_users_identity_and_wins_with_exact_usage(
    tmp_path, model_server, agent_home
):
    repo = project(tmp_path)
    # the identity lives only in ~/.gitconfig, which Gemini's shell hides (GIT_CONFIG_GLOBAL=/dev/null)
    git(repo, "config", "--unset", "user.name")
    git(repo, "config", "--unset", "user.email")
    (agent_home / ".gitconfig").write_text("[user]\n\tname = Home User\n\temail = home@example.com\n")
    model_server.steps = gemini_fix()
    race = race_file(tmp_path, "gemini", 'model = "gemini-2.5-pro"')
    code, result, stderr, _ = run(tmp_path, race, gemini_env(model_server.url, agent_home))

    gemini = result["candidates"][0]
    assert code == 0 and gemini["status"] == "winner", stderr
    assert gemini["committed_on_behalf"] is False
    assert (
        git(repo, "log", "-1", "--format=%an <%ae>|%s", gemini["commit"])
        == "Home User <home@example.com>|Fix add()"
    )
    billed = model_server.billed()
    assert len(billed) == 3
    # thinking tokens are output; cached tokens come out of the prompt
    assert usage_of(gemini) == {
        "input": 3900,
        "cached": 1700,
        "cache_write": 0,
        "output": sum(t.output + t.thinking for t in billed),
    }
    assert gemini["usage"]["cost_usd"] == round(priced(billed, GEMINI_PRO), 6)
    assert gemini["usage"]["estimated"] is True
    assert gemini["result"] == "Fixed add() to return the sum."


DAILY_QUOTA = {
    "error": {
        "code": 429,
        "status": "RESOURCE_EXHAUSTED",
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": "generativelanguage.googleapis.com/"
                        "generate_content_free_tier_requests",
                        "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
                        "quotaValue": "250",
                    }
                ],
            }
        ],
    }
}


def test_gemini_daily_quota_ends_on_the_quota_without_an_invented_reset_time(
    tmp_path, model_server, agent_home
):
    project(tmp_path)
    model_server.steps = [Step(status=429, error=DAILY_QUOTA)]
    race = race_file(tmp_path, "gemini", 'model = "gemini-2.5-pro"')
    _code, result, stderr, _ = run(tmp_path, race, gemini_env(model_server.url, agent_home))

    gemini = result["candidates"][0]
    assert gemini["status"] == "quota", stderr
    assert gemini["quota"]["message"] == (
        "TerminalQuotaError: You have exhausted your daily quota on this model."
    )
    # its report file is named after today's date: that is no reset time
    assert gemini["quota"]["reset_at"] is None


def test_gemini_overloaded_once_is_a_retry_and_it_goes_on_to_win(tmp_path, model_server, agent_home):
    repo = project(tmp_path)
    model_server.steps = [
        Step(
            status=503,
            error={"error": {"code": 503, "status": "UNAVAILABLE", "message": "The model is overloaded."}},
        ),
        *gemini_fix(),
    ]
    race = race_file(tmp_path, "gemini", 'model = "gemini-2.5-pro"')
    code, result, stderr, _ = run(tmp_path, race, gemini_env(model_server.url, agent_home))

    gemini = result["candidates"][0]
    assert code == 0 and gemini["status"] == "winner", stderr
    assert gemini["quota"] is None
    retries = [e for e in flight_log(repo, result, "gemini") if e["kind"] == "retry"]
    assert [(r["retry"], r["cause"]) for r in retries] == [(1, "overloaded")]


def test_gemini_without_a_model_server_is_stopped_with_the_network_reason(tmp_path, agent_home):
    project(tmp_path)
    race = race_file(tmp_path, "gemini", 'model = "gemini-2.5-pro"', extra="unreachable_timeout = 3")
    _code, result, stderr, took = run(tmp_path, race, gemini_env(closed_port_url(), agent_home))

    gemini = result["candidates"][0]
    assert gemini["status"] == "failed", stderr
    assert gemini["error"].startswith(
        "cannot reach the model API (Attempt 1 failed. Retrying with "
        "backoff... Error: exception TypeError: fetch failed"
    ), gemini["error"]
    assert took < 60 and gemini["usage"]["complete"] is False


# -- opencode -----------------------------------------------------------------------------------


def opencode_fix() -> list[Step]:
    return [
        Step(
            tool="write",
            tool_input={"filePath": "calc.py", "content": FIXED},
            tokens=Tokens(input=1000, cached=2000, output=40),
        ),
        Step(
            tool="bash",
            tool_input={"command": TEST_AND_COMMIT, "description": "test and commit"},
            tokens=Tokens(input=1300, cached=2100, output=20),
        ),
        Step(text="Fixed add() to return the sum.", tokens=Tokens(input=1400, output=10)),
    ]


def test_opencode_fixes_commits_and_wins_with_exact_tokens_and_a_priced_cost(
    tmp_path, model_server, agent_home
):
    repo = project(tmp_path)
    model_server.steps = opencode_fix()
    race = race_file(tmp_path, "opencode", 'model = "stand-in/gpt-4o"')
    code, result, stderr, _ = run(tmp_path, race, opencode_env(model_server.url, agent_home))

    opencode = result["candidates"][0]
    assert code == 0 and opencode["status"] == "winner", stderr
    assert [c["subject"] for c in opencode["commits"]] == ["Fix add()"]
    assert "return a + b" in git(repo, "show", f"{opencode['commit']}:calc.py")
    billed = model_server.billed()
    assert len(billed) == 3
    assert usage_of(opencode) == {
        "input": sum(t.input for t in billed),
        "cached": sum(t.cached for t in billed),
        "cache_write": 0,
        "output": sum(t.output for t in billed),
    }
    # opencode has no price for a custom provider's model and says 0: the table's price, estimated
    assert opencode["usage"]["cost_usd"] == round(priced(billed, GPT_4O), 10)
    assert opencode["usage"]["estimated"] is True


def test_opencode_long_rate_limit_wait_is_not_sat_out_it_ends_on_the_quota(
    tmp_path, model_server, agent_home
):
    project(tmp_path)
    limited = Step(
        status=429,
        headers={"retry-after": "3600"},
        error={
            "error": {
                "type": "requests",
                "code": "rate_limit_exceeded",
                "message": "Rate limit reached for gpt-4o. Please try again in 1h.",
            }
        },
    )
    model_server.steps = [limited] * 3
    race = race_file(tmp_path, "opencode", 'model = "stand-in/gpt-4o"')
    before = datetime.now(UTC)
    _code, result, stderr, took = run(tmp_path, race, opencode_env(model_server.url, agent_home))

    opencode = result["candidates"][0]
    assert opencode["status"] == "quota", stderr
    assert opencode["quota"]["message"] == "Rate limit reached for gpt-4o. Please try again in 1h."
    reset = datetime.strptime(opencode["quota"]["reset_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert before + timedelta(minutes=59) <= reset <= datetime.now(UTC) + timedelta(hours=1)
    assert took < 80, f"the race sat out opencode's wait for {took:.0f}s"


# -- aider --------------------------------------------------------------------------------------

AIDER_EDIT = textwrap.dedent('''\
    calc.py
    ```python
    <<<<<<< SEARCH
        """The sum of a and b."""
        return a - b
    =======
        """The sum of a and b."""
        return a + b
    >>>>>>> REPLACE
    ```
    ''')


def test_aider_fixes_commits_and_wins_with_usage_from_its_analytics_log(tmp_path, model_server, agent_home):
    repo = project(tmp_path)
    edit = Tokens(input=4710, cached=1024, output=61)
    model_server.steps = [
        Step(text=AIDER_EDIT, tokens=edit),
        Step(text="fix: return the sum in add()", tokens=Tokens(input=321, output=9)),
    ]
    race = race_file(tmp_path, "aider", 'model = "gpt-4o"')
    code, result, stderr, _ = run(tmp_path, race, aider_env(model_server.url, agent_home))

    aider = result["candidates"][0]
    assert code == 0 and aider["status"] == "winner", stderr
    assert [c["subject"] for c in aider["commits"]] == ["fix: return the sum in add()"]
    assert len(model_server.served) == 2  # the edit, then the commit message
    # exact, not "5.7k": but OpenAI's cached tokens are not reported and the commit-message call
    # is counted nowhere, hence estimated
    assert usage_of(aider) == {
        "input": edit.input + edit.cached,
        "cached": 0,
        "cache_write": 0,
        "output": edit.output,
    }
    assert aider["usage"]["cost_usd"] == round(priced([edit], GPT_4O), 6)
    assert aider["usage"]["estimated"] is True
    log = flight_log(repo, result, "aider")
    assert any("aider usage is estimated" in line for e in log if e["kind"] == "log" for line in e["lines"])


def test_aider_without_a_key_never_waits_for_a_browser_sign_in(tmp_path, agent_home):
    project(tmp_path)
    _code, result, stderr, took = run(tmp_path, race_file(tmp_path, "aider"), aider_env(None, agent_home))

    aider = result["candidates"][0]
    assert aider["status"] == "failed", stderr
    assert aider["error"].startswith(
        "not logged in: aider found no model and no API key and started a browser sign-in (OpenRouter)"
    ), aider["error"]
    assert took < 60, f"{took:.0f}s: the race waited for aider's five-minute sign-in"


def test_aider_without_a_model_server_fails_with_the_network_reason_not_no_commits(tmp_path, agent_home):
    project(tmp_path)
    race = race_file(tmp_path, "aider", 'model = "gpt-4o"', extra="unreachable_timeout = 3")
    _code, result, stderr, took = run(tmp_path, race, aider_env(closed_port_url(), agent_home))

    aider = result["candidates"][0]
    assert aider["status"] == "failed", stderr
    # whole lines (COLUMNS): "Connection error." is not cut at 80 columns
    assert aider["error"].startswith(
        "cannot reach the model API (litellm.InternalServerError: "
        "InternalServerError: OpenAIException - Connection error."
    ), aider["error"]
    assert took < 60


# -- cancelled mid-run --------------------------------------------------------------------------

FIX_WHEN_TOLD = """
import pathlib, subprocess, sys
open(sys.argv[1]).read()
calc = pathlib.Path("calc.py")
calc.write_text(calc.read_text().replace("return a - b", "return a + b", 1))
subprocess.run(["git", "commit", "-qam", "fix add()"], check=True)
"""


def cancelled_by_a_winner(
    tmp_path: Path, model_server, agent: str, model: str, env: dict, ready: Callable[[], None] | None = None
) -> dict:
    """Races `agent` against a command that wins once the agent's second model call is in flight
    (or once `ready` returns)."""
    repo = project(tmp_path)
    go = tmp_path / "go"
    os.mkfifo(go)
    spec = build_spec(
        repository=repo,
        validate=["python3", "-B", "-m", "unittest", "-q"],
        candidates=[
            CandidateSpec(agent, agent, BRIEF, model=model, env=env),
            CandidateSpec("fixer", "command", BRIEF, command=(sys.executable, "-c", FIX_WHEN_TOLD, str(go))),
        ],
        budget=BudgetSpec(candidate_timeout=90),
    )

    async def main():
        async with anyio.create_task_group() as group:

            async def release_fixer():
                await anyio.to_thread.run_sync(ready or model_server.holding.wait)
                await anyio.to_thread.run_sync(lambda: open(go, "w").close())

            group.start_soon(release_fixer)
            with anyio.fail_after(150):
                return await run_race_async(spec)

    result = anyio.run(main).to_json()
    assert result["winner"]["key"] == "fixer"
    return result


def test_opencode_cancelled_mid_run_keeps_the_steps_it_finished_marked_incomplete(
    tmp_path, model_server, agent_home
):
    first = Tokens(input=1000, cached=2000, output=40)
    model_server.steps = [
        Step(tool="bash", tool_input={"command": "git status --short", "description": "look"}, tokens=first),
        Step(text="Almost", tokens=Tokens(input=5, output=9), hold=threading.Event()),
    ]
    result = cancelled_by_a_winner(
        tmp_path, model_server, "opencode", "stand-in/gpt-4o", opencode_env(model_server.url, agent_home)
    )
    opencode = next(c for c in result["candidates"] if c["key"] == "opencode")
    assert opencode["status"] == "cancelled"
    assert usage_of(opencode) == {
        "input": first.input,
        "cached": first.cached,
        "cache_write": 0,
        "output": first.output,
    }
    assert opencode["usage"]["complete"] is False and result["usage"]["complete"] is False
    assert result["usage"]["input"] >= first.input  # the race's totals include it


def test_opencode_cancelled_while_its_shell_command_runs_stops_the_command_too(
    tmp_path, model_server, agent_home
):
    """opencode runs its shell commands in process groups of their own: TERM reaches them as well,
    so the command it was running cannot go on to commit through the grace, and the result says
    how opencode was stopped."""
    started, termed = tmp_path / "tool-started", tmp_path / "tool-termed"
    late = (
        f"trap 'touch {termed}; exit 143' TERM; touch {started}; sleep 7.4321 & wait; "
        "git commit -q --allow-empty -m late"
    )
    first = Tokens(input=1000, cached=2000, output=40)
    model_server.steps = [
        Step(tool="bash", tool_input={"command": "git status --short", "description": "look"}, tokens=first),
        Step(
            tool="bash", tool_input={"command": late, "description": "slow"}, tokens=Tokens(input=7, output=5)
        ),
        Step(text="Done", tokens=Tokens(input=5, output=9)),
    ]

    def tool_running() -> None:
        while not started.exists():  # a condition: the command is running in opencode's worktree
            time.sleep(0.01)

    result = cancelled_by_a_winner(
        tmp_path,
        model_server,
        "opencode",
        "stand-in/gpt-4o",
        opencode_env(model_server.url, agent_home),
        ready=tool_running,
    )
    opencode = next(c for c in result["candidates"] if c["key"] == "opencode")
    assert opencode["status"] == "cancelled"
    # The step it finished is counted, and what it reports in the grace too: opencode may hear its
    # command end (TERMed) and make its next call before its own TERM ends it (seen in a loaded CI
    # run: all three steps reported). Never less than the first step, never more than it was served.
    counted, served = usage_of(opencode), model_server.billed()
    assert counted["cached"] == first.cached and counted["cache_write"] == 0, counted
    for kind in ("input", "output"):
        assert getattr(first, kind) <= counted[kind] <= sum(getattr(t, kind) for t in served), (
            counted,
            served,
        )
    assert opencode["usage"]["complete"] is False
    stop = opencode["stop"]
    assert stop["why"] == "cancelled" and stop["grace"] == 1.0
    assert stop["ended_by"] in ("TERM", "KILL") and stop["seconds"] < stop["grace"] + 5, stop
    assert termed.exists(), "the TERM never reached opencode's shell command"
    # nothing of its command is left to commit later, and it did not commit meanwhile
    assert not [p for p in psutil.process_iter(["cmdline"]) if "7.4321" in " ".join(p.info["cmdline"] or [])]
    assert [c["subject"] for c in opencode["commits"]] == []
    assert "late" not in git(Path(result["repository"]), "log", "--format=%s", opencode["branch"])


def test_gemini_cancelled_mid_run_reports_nothing_it_did_not_see_and_says_so(
    tmp_path, model_server, agent_home
):
    model_server.steps = [
        Step(
            tool="run_shell_command",
            tool_input={"command": "git status --short"},
            tokens=Tokens(input=1200, output=40),
        ),
        Step(text="Almost", tokens=Tokens(input=5, output=9), hold=threading.Event()),
    ]
    result = cancelled_by_a_winner(
        tmp_path, model_server, "gemini", "gemini-2.5-pro", gemini_env(model_server.url, agent_home)
    )
    gemini = next(c for c in result["candidates"] if c["key"] == "gemini")
    # Gemini reports usage only in its final stats: a lower bound, never "spent nothing"
    assert gemini["status"] == "cancelled" and gemini["usage"]["complete"] is False
    assert result["usage"]["complete"] is False


def test_opencode_without_a_model_server_is_stopped_with_the_network_reason(tmp_path, agent_home):
    project(tmp_path)
    race = race_file(tmp_path, "opencode", 'model = "stand-in/gpt-4o"', extra="unreachable_timeout = 3")
    _code, result, stderr, took = run(tmp_path, race, opencode_env(closed_port_url(), agent_home))

    opencode = result["candidates"][0]
    assert opencode["status"] == "failed", stderr
    assert opencode["error"].startswith("cannot reach the model API ("), opencode["error"]
    assert "Unable to connect" in opencode["error"]
    assert took < 80 and opencode["usage"]["complete"] is False


OUT_OF_CREDIT = {
    "error": {
        "type": "insufficient_quota",
        "code": "insufficient_quota",
        "message": "You exceeded your current quota, please check your plan and billing details.",
    }
}


def test_aider_out_of_credit_ends_on_the_quota_at_once(tmp_path, model_server, agent_home):
    project(tmp_path)
    model_server.steps = [Step(status=429, error=OUT_OF_CREDIT)] * 30
    race = race_file(tmp_path, "aider", 'model = "gpt-4o"')
    _code, result, stderr, took = run(tmp_path, race, aider_env(model_server.url, agent_home))

    aider = result["candidates"][0]
    assert aider["status"] == "quota", stderr
    assert aider["quota"]["message"] == (
        "litellm.RateLimitError: RateLimitError: OpenAIException - You "
        "exceeded your current quota, please check your plan and "
        "billing details."
    )
    assert aider["quota"]["reset_at"] is None
    assert took < 50, f"{took:.0f}s: aider's minute of retries was sat out"
