"""Real races through `outpost-tui run RACE.toml --headless --json` with fake agent CLIs.

The fakes are real executables named `claude` and `codex`, first on PATH, so the engine finds and
launches them exactly as it would the real programs. Each replays a transcript from
tests/agents/transcripts/, edits calc.py in its worktree and (Claude) commits; the winner is
chosen by the project's real unittest suite.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from outpost_tui.engine.records.flightlog import read_flight_log
from tests.agents.replay import path_with, read_record, write_fake
from tests.conftest import git

SAMPLE_PROJECT = Path(__file__).resolve().parents[2] / "sample-races" / "projects" / "calc"
FIXED = (
    (SAMPLE_PROJECT / "calc.py")
    .read_text()
    .replace("return a - b\n\n\ndef subtract", "return a + b\n\n\ndef subtract")
)
BROKEN = (
    (SAMPLE_PROJECT / "calc.py")
    .read_text()
    .replace("return a - b\n\n\ndef subtract", "return a * b\n\n\ndef subtract")
)
BRIEF = "calc.add(2, 3) returns -1. Fix add() in calc.py.\nRun `python3 -m unittest -q`; commit your change."


def project(tmp_path: Path) -> Path:
    repo = tmp_path / "project"
    shutil.copytree(SAMPLE_PROJECT, repo, ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Test")
    git(repo, "config", "user.email", "test@example.invalid")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "calc with a bug in add()")
    return repo


def race_file(
    tmp_path: Path, candidates: str, *, validate: str = '["python3", "-m", "unittest", "-q"]', extra: str = ""
) -> Path:
    path = tmp_path / "race.toml"
    path.write_text(
        textwrap.dedent(f"""\
        [race]
        name = "agents"
        repository = "project"

        [budget]
        candidate_timeout = 60

        [validate]
        command = {validate}
        timeout = 60
        {extra}
        """)
        + textwrap.dedent(candidates)
    )
    return path


def briefed(*agents: str) -> str:
    """A candidate per agent, keyed by its name, each given the race's brief."""
    return "".join(
        f'[[candidates]]\nkey = "{agent}"\nagent = "{agent}"\nbrief = {json.dumps(BRIEF)}\n\n'
        for agent in agents
    )


def run_race(tmp_path: Path, race: Path, bin_dir: Path) -> tuple[int, dict, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.pop("TZ", None)
    env["PATH"] = path_with(bin_dir)
    done = subprocess.run(
        [sys.executable, "-m", "outpost_tui.cli", "run", str(race), "--headless", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    try:
        result = json.loads(done.stdout)
    except ValueError:
        pytest.fail(f"no JSON result (exit {done.returncode}): {done.stderr[-3000:]}")
    return done.returncode, result, done.stderr


def flight_log(repo: Path, result: dict, key: str) -> list[dict]:
    return read_flight_log(repo / ".outpost" / "runs" / result["id"] / f"{key}.1.jsonl")


def candidate(result: dict, key: str) -> dict:
    return next(c for c in result["candidates"] if c["key"] == key)


def test_claude_fixes_commits_and_wins_with_its_own_usage_and_cost(tmp_path):
    repo = project(tmp_path)
    bin_dir, record = tmp_path / "bin", tmp_path / "claude.json"
    write_fake(
        bin_dir,
        "claude",
        record=record,
        transcript_name="claude_fix.jsonl",
        edits={"calc.py": FIXED},
        commit="Fix add()",
        huge_after=4,
    )
    race = race_file(
        tmp_path,
        f"""\
        [[candidates]]
        key = "claude"
        agent = "claude"
        model = "sonnet"
        max_turns = 30
        allowed_tools = ["Read", "Edit", "Bash(git commit:*)", "Bash(python3:*)"]
        args = ["--fallback-model", "haiku"]
        brief = {json.dumps(BRIEF)}
        """,
    )
    code, result, stderr = run_race(tmp_path, race, bin_dir)
    assert code == 0, stderr
    claude = candidate(result, "claude")
    assert result["status"] == "winner" and result["winner"]["key"] == "claude"

    launched = read_record(record)
    assert launched["program"] == "claude"
    assert launched["argv"] == [
        "-p",
        BRIEF,
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
        "--permission-mode",
        "acceptEdits",
        "--allowedTools",
        "Read,Edit,Bash(git commit:*),Bash(python3:*)",
        "--max-turns",
        "30",
        "--model",
        "sonnet",
        "--fallback-model",
        "haiku",
    ]
    assert launched["stdin"] == "" and launched["tz"] == "UTC"
    assert Path(launched["cwd"]).resolve() == Path(claude["directory"]).resolve()

    assert claude["status"] == "winner" and claude["error"] is None
    # The agent's final message is kept: on its agent-exited event and in the result JSON.
    assert claude["result"] == "Fixed add() to return a + b and committed."
    [exited] = [e for e in flight_log(repo, result, "claude") if e["kind"] == "agent-exited"]
    assert exited["result"] == claude["result"] and exited["exit_code"] == 0
    assert [c["subject"] for c in claude["commits"]] == ["Fix add()"]
    assert claude["committed_on_behalf"] is False
    assert claude["validation"]["status"] == "passed"
    assert claude["usage"] == {
        "input": 921,
        "cached": 79800,
        "cache_write": 2650,
        "output": 546,
        "cost_usd": 0.1843,
        "complete": True,
        "estimated": False,
        "cost_unknown": False,
    }

    events = flight_log(repo, result, "claude")
    kinds = [e["kind"] for e in events]
    assert kinds.count("tool") == 4 and kinds.count("file-change") == 1
    change = events[kinds.index("file-change")]
    assert (change["path"], change["change"]) == ("calc.py", "update")
    # The 2 MB tool result (a line over 1 MB) was decoded and cut, and the stream went on.
    results = [e for e in events if e["kind"] == "tool-result"]
    assert any(len(e["output"]) < 2100 and e["output"].startswith("xxxx") for e in results)
    cut = [line for e in events if e["kind"] == "log" for line in e["lines"] if line.startswith("plain x")]
    assert len(cut) == 1 and cut[0].endswith("chars cut]")
    # Live usage (each message id once, estimated) and then the result line's figures.
    # Lines arrive in batches, so any prefix of the transcript may be the one reported; a
    # message id counted twice would give totals outside this list.
    prefixes = [
        (3, 14200, 1800, 1),
        (3, 14200, 1800, 96),
        (8, 30200, 2100, 216),
        (12, 46500, 2300, 296),
        (18, 63000, 2550, 446),
        (21, 79800, 2650, 486),
    ]
    totals = [e["total"] for e in events if e["kind"] == "usage"]
    live = [(t["input"], t["cached"], t["cache_write"], t["output"]) for t in totals[:-1]]
    assert live and all(t in prefixes for t in live), live
    assert all(t["estimated"] and t["cost_usd"] > 0 for t in totals[:-1])
    assert totals[-1] == claude["usage"]
    assert git(repo, "show", f"{claude['commit']}:calc.py") == FIXED.strip()


def test_claude_against_codex_the_real_tests_choose_codex(tmp_path):
    """Claude commits a wrong fix; Codex fixes add() and leaves it uncommitted (committed for it)."""
    repo = project(tmp_path)
    bin_dir = tmp_path / "bin"
    marker = tmp_path / "claude-validated"
    # Validation is the project's real test suite; the wrapper only lets the Codex fake know
    # when Claude's verdict is in, so both outcomes are fixed rather than timing-dependent.
    checker = tmp_path / "check.py"
    checker.write_text(
        textwrap.dedent(f"""\
        import os, subprocess, sys
        code = subprocess.run([sys.executable, "-m", "unittest", "-q"]).returncode
        if os.environ.get("OUTPOST_CANDIDATE") == "claude":
            open({str(marker)!r}, "w").close()
        sys.exit(code)
        """)
    )
    write_fake(
        bin_dir,
        "claude",
        record=tmp_path / "claude.json",
        transcript_name="claude_fix.jsonl",
        edits={"calc.py": BROKEN},
        commit="Fix add()",
    )
    write_fake(
        bin_dir,
        "codex",
        record=tmp_path / "codex.json",
        transcript_name="codex_fix.jsonl",
        edits={"calc.py": FIXED},
        wait_for=marker,
    )
    race = race_file(
        tmp_path,
        f"""\
        [[candidates]]
        key = "claude"
        agent = "claude"
        brief = {json.dumps(BRIEF)}

        [[candidates]]
        key = "codex"
        agent = "codex"
        model = "gpt-5-codex"
        brief = {json.dumps(BRIEF)}

        [prices."gpt-5-codex"]
        input = 2.0
        cached = 0.5
        output = 20.0
        """,
        validate=json.dumps([sys.executable, str(checker)]),
    )
    code, result, stderr = run_race(tmp_path, race, bin_dir)
    assert code == 0, stderr
    assert result["status"] == "winner" and result["winner"]["key"] == "codex"

    claude, codex = candidate(result, "claude"), candidate(result, "codex")
    assert claude["status"] == "rejected" and claude["validation"]["status"] == "failed"
    assert claude["usage"]["cost_usd"] == 0.1843

    launched = read_record(tmp_path / "codex.json")
    assert launched["program"] == "codex"
    # isolated, the engine's fence is its sandbox: its own (nested) is off
    assert launched["argv"] == ["exec", "--json", "--sandbox", "danger-full-access", "-m", "gpt-5-codex", "-"]
    assert launched["stdin"] == BRIEF and launched["tz"] == "UTC"

    assert codex["status"] == "winner"
    assert codex["committed_on_behalf"] is True and len(codex["commits"]) == 1
    # Codex's input includes cached tokens; no cost from the tool, so the race file's price.
    cost = round((7250 * 2.0 + 40960 * 0.5 + 1312 * 20.0) / 1e6, 6)
    assert codex["usage"] == {
        "input": 7250,
        "cached": 40960,
        "cache_write": 0,
        "output": 1312,
        "cost_usd": cost,
        "complete": True,
        "estimated": True,
        "cost_unknown": False,
    }
    assert result["usage"]["cost_usd"] == pytest.approx(0.1843 + cost)
    assert result["usage"]["estimated"] is True
    assert git(repo, "show", f"{codex['commit']}:calc.py") == FIXED.strip()


def test_rate_limit_retries_then_success(tmp_path):
    repo = project(tmp_path)
    bin_dir = tmp_path / "bin"
    write_fake(
        bin_dir,
        "claude",
        record=tmp_path / "claude.json",
        transcript_name="claude_retry.jsonl",
        edits={"calc.py": FIXED},
        commit="Fix add()",
    )
    race = race_file(tmp_path, briefed("claude"))
    code, result, stderr = run_race(tmp_path, race, bin_dir)
    assert code == 0, stderr
    assert candidate(result, "claude")["status"] == "winner"
    retries = [e for e in flight_log(repo, result, "claude") if e["kind"] == "retry"]
    assert [(e["retry"], e["delay_ms"]) for e in retries] == [(1, 600), (2, 1200)]
    assert candidate(result, "claude")["quota"] is None


def test_quota_stops_candidates_with_absolute_reset_times(tmp_path):
    repo = project(tmp_path)
    bin_dir = tmp_path / "bin"
    write_fake(
        bin_dir,
        "claude",
        record=tmp_path / "claude.json",
        transcript_name="claude_quota_event.jsonl",
        exit_code=1,
    )
    write_fake(
        bin_dir,
        "codex",
        record=tmp_path / "codex.json",
        transcript_name="codex_quota_date.jsonl",
        exit_code=1,
        stderr=["Error: You've hit your usage limit."],
    )
    race = race_file(tmp_path, briefed("claude", "codex"))
    code, result, stderr = run_race(tmp_path, race, bin_dir)
    assert code == 1, stderr
    assert result["status"] == "quota"
    claude, codex = candidate(result, "claude"), candidate(result, "codex")
    assert claude["status"] == "quota"
    assert claude["quota"] == {"message": "five hour limit reached", "reset_at": "2026-01-01T05:00:00Z"}
    assert claude["error"] == "quota: five hour limit reached (resets 2026-01-01T05:00:00Z)"
    assert codex["status"] == "quota" and codex["quota"]["reset_at"] == "2026-08-20T11:51:00Z"
    assert codex["validation"]["status"] == "not-run"
    assert any(e["kind"] == "quota" for e in flight_log(repo, result, "claude"))


def test_a_missing_program_fails_the_candidate_with_a_clear_reason(tmp_path):
    project(tmp_path)
    bin_dir = tmp_path / "bin"
    write_fake(
        bin_dir,
        "codex",
        record=tmp_path / "codex.json",
        transcript_name="codex_fix.jsonl",
        edits={"calc.py": FIXED},
    )
    race = race_file(tmp_path, briefed("claude", "codex"))
    code, result, stderr = run_race(tmp_path, race, bin_dir)
    assert code == 0, stderr
    claude = candidate(result, "claude")
    assert claude["status"] == "failed"
    assert claude["error"] == (
        "agent program 'claude' not found on PATH (install: npm install -g @anthropic-ai/claude-code)"
    )
    assert claude["result"] is None  # it never ran, so it said nothing
    assert result["winner"]["key"] == "codex"
    assert candidate(result, "codex")["result"] == "Fixed the sign in add(); tests pass."


def test_not_logged_in_is_explained(tmp_path):
    project(tmp_path)
    bin_dir = tmp_path / "bin"
    write_fake(
        bin_dir,
        "claude",
        record=tmp_path / "claude.json",
        transcript_name="claude_not_logged_in.jsonl",
        exit_code=1,
    )
    race = race_file(tmp_path, briefed("claude"))
    code, result, _stderr = run_race(tmp_path, race, bin_dir)
    assert code == 1
    claude = candidate(result, "claude")
    assert claude["status"] == "failed"
    assert claude["error"] == "not logged in: run `claude login` or set ANTHROPIC_API_KEY"


def test_claude_json_array_output_form(tmp_path):
    """`args = ["--output-format", "json"]` with verbose on: one JSON array, decoded all the same."""
    repo = project(tmp_path)
    bin_dir = tmp_path / "bin"
    write_fake(
        bin_dir,
        "claude",
        record=tmp_path / "claude.json",
        transcript_name="claude_verbose_array.json",
        edits={"calc.py": FIXED},
        commit="Fix add()",
        act_after=0,
    )
    race = race_file(
        tmp_path,
        f"""\
        [[candidates]]
        key = "claude"
        agent = "claude"
        args = ["--output-format", "json"]
        brief = {json.dumps(BRIEF)}
        """,
    )
    code, result, stderr = run_race(tmp_path, race, bin_dir)
    assert code == 0, stderr
    assert read_record(tmp_path / "claude.json")["argv"][-2:] == ["--output-format", "json"]
    claude = candidate(result, "claude")
    assert claude["status"] == "winner"
    assert claude["usage"] == {
        "input": 6,
        "cached": 6900,
        "cache_write": 1000,
        "output": 62,
        "cost_usd": 0.0123,
        "complete": True,
        "estimated": False,
        "cost_unknown": False,
    }
    kinds = [e["kind"] for e in flight_log(repo, result, "claude")]
    assert kinds.count("tool") == 1 and kinds.count("file-change") == 1 and kinds.count("text") == 1


OTHER_AGENTS = {
    "gemini": (
        "gemini_fix.jsonl",
        "gemini-2.5-pro",
        [
            "-p",
            BRIEF,
            "--output-format",
            "stream-json",
            "--skip-trust",
            "--approval-mode",
            "yolo",
            "-m",
            "gemini-2.5-pro",
        ],
        {
            "input": 17900,
            "cached": 41000,
            "cache_write": 0,
            "output": 2300,
            "cost_usd": 0.0505,
            "complete": True,
            "estimated": True,
            "cost_unknown": False,
        },
    ),
    "aider": (
        "aider_fix.txt",
        "claude-sonnet-4-5",
        [
            "--message",
            BRIEF,
            "--yes-always",
            "--no-pretty",
            "--no-stream",
            "--no-check-update",
            "--no-show-model-warnings",
            "--no-gitignore",
            "--no-analytics",
            "--analytics-log",
            "/dev/stderr",
            "--model",
            "claude-sonnet-4-5",
        ],
        {
            "input": 3200,
            "cached": 12000,
            "cache_write": 3000,
            "output": 599,
            "cost_usd": 0.04,
            "complete": True,
            "estimated": True,
            "cost_unknown": False,
        },
    ),
    "opencode": (
        "opencode_fix.jsonl",
        "anthropic/claude-sonnet-4-5",
        [
            "run",
            "--format",
            "json",
            "-m",
            "anthropic/claude-sonnet-4-5",
            "--auto",
            "--print-logs",
            "--log-level",
            "ERROR",
            BRIEF,
        ],
        {
            "input": 932,
            "cached": 31400,
            "cache_write": 400,
            "output": 330,
            "cost_usd": 0.0204,
            "complete": True,
            "estimated": False,
            "cost_unknown": False,
        },
    ),
}


@pytest.mark.parametrize("agent", sorted(OTHER_AGENTS))
def test_gemini_aider_and_opencode_fix_and_win(tmp_path, agent):
    name, model, argv, usage = OTHER_AGENTS[agent]
    repo = project(tmp_path)
    bin_dir = tmp_path / "bin"
    write_fake(
        bin_dir,
        agent,
        record=tmp_path / "agent.json",
        transcript_name=name,
        edits={"calc.py": FIXED},
        commit="Fix add()",
    )
    race = race_file(
        tmp_path,
        f"""\
        [[candidates]]
        key = "{agent}"
        agent = "{agent}"
        model = "{model}"
        brief = {json.dumps(BRIEF)}
        """,
    )
    code, result, stderr = run_race(tmp_path, race, bin_dir)
    assert code == 0, stderr
    launched = read_record(tmp_path / "agent.json")
    assert launched["program"] == agent and launched["argv"] == argv
    assert launched["stdin"] == "" and launched["tz"] == "UTC"
    record = candidate(result, agent)
    assert record["status"] == "winner" and record["usage"] == usage
    events = flight_log(repo, result, agent)
    changes = [e for e in events if e["kind"] == "file-change"]
    assert len(changes) == 1 and changes[0]["path"].endswith("calc.py")


@pytest.mark.parametrize(
    "agent, name, wait",
    [
        ("gemini", "gemini_quota.jsonl", 2 * 3600 + 52 * 60 + 39),  # "reset after 2h52m39s"
        ("opencode", "opencode_quota.jsonl", 3600),  # retry-after: 3600
    ],
)
def test_quota_reset_times_relative_to_now(tmp_path, agent, name, wait):
    project(tmp_path)
    bin_dir = tmp_path / "bin"
    write_fake(bin_dir, agent, record=tmp_path / "agent.json", transcript_name=name, exit_code=1)
    race = race_file(tmp_path, briefed(agent))
    before = datetime.now(UTC).replace(microsecond=0)
    code, result, _stderr = run_race(tmp_path, race, bin_dir)
    after = datetime.now(UTC)
    assert code == 1
    record = candidate(result, agent)
    assert record["status"] == "quota" and result["status"] == "quota"
    reset_at = datetime.fromisoformat(record["quota"]["reset_at"].replace("Z", "+00:00"))
    assert before + timedelta(seconds=wait) <= reset_at <= after + timedelta(seconds=wait)


def test_headless_human_output_shows_what_the_winner_said(tmp_path):
    project(tmp_path)
    bin_dir = tmp_path / "bin"
    write_fake(
        bin_dir,
        "claude",
        record=tmp_path / "claude.json",
        transcript_name="claude_fix.jsonl",
        edits={"calc.py": FIXED},
        commit="Fix add()",
    )
    race = race_file(tmp_path, briefed("claude"))
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env["PATH"] = path_with(bin_dir)
    done = subprocess.run(
        [sys.executable, "-m", "outpost_tui.cli", "run", str(race), "--headless"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[-1] == "claude said: Fixed add() to return a + b and committed."
    assert lines[-4].split("] ", 1)[1].startswith("race winner: claude on ")
    assert lines[-3].split("] ", 1)[1].startswith("  claude#1 winner")
    assert lines[-2].split("] ", 1)[1].startswith("merge it with: git -C ")
    assert done.stdout == ""


def unreachable_race(tmp_path: Path, budget: str) -> Path:
    path = tmp_path / "race.toml"
    path.write_text(
        textwrap.dedent(f"""\
        [race]
        repository = "project"
        brief = {json.dumps(BRIEF)}

        [budget]
        {budget}

        [validate]
        command = ["python3", "-m", "unittest", "-q"]

        [[candidates]]
        key = "codex"
        agent = "codex"
        """)
    )
    return path


def test_an_agent_that_cannot_reach_its_api_fails_after_the_unreachable_timeout(tmp_path):
    project(tmp_path)
    bin_dir = tmp_path / "bin"
    # Codex offline reconnects for ever; this one then waits (at most a minute) for a file that
    # never comes, so only the engine's limit can end it in seconds.
    write_fake(
        bin_dir,
        "codex",
        record=tmp_path / "codex.json",
        transcript_name="codex_offline.jsonl",
        wait_for=tmp_path / "never",
    )
    race = unreachable_race(tmp_path, "candidate_timeout = 120\n        unreachable_timeout = 1")
    started = time.monotonic()
    code, result, stderr = run_race(tmp_path, race, bin_dir)
    assert time.monotonic() - started < 45
    codex = candidate(result, "codex")
    assert code == 1 and codex["status"] == "failed", stderr
    assert codex["error"] == (
        "cannot reach the model API (Reconnecting... waiting for network "
        "(Connection failed: error sending request)) for 1s"
    )
    assert "codex#1 network, the agent is retrying: Reconnecting... waiting for network" in stderr
    assert "codex#1 agent stopped after" in stderr
    assert codex["usage"]["complete"] is False


def test_a_timeout_while_the_api_is_unreachable_says_so(tmp_path):
    project(tmp_path)
    bin_dir = tmp_path / "bin"
    write_fake(
        bin_dir,
        "codex",
        record=tmp_path / "codex.json",
        transcript_name="codex_offline.jsonl",
        wait_for=tmp_path / "never",
    )
    race = unreachable_race(tmp_path, "candidate_timeout = 2\n        unreachable_timeout = 600")
    _code, result, stderr = run_race(tmp_path, race, bin_dir)
    codex = candidate(result, "codex")
    assert codex["status"] == "failed", stderr
    assert codex["error"] == (
        "agent timed out after 2s (cannot reach the model API: Reconnecting... "
        "waiting for network (Connection failed: error sending request))"
    )
