"""`outpost-tui run --headless`: exit codes, the result JSON, progress, Ctrl-C, the sample races."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

from outpost_tui.samples import materialise
from tests.conftest import FAKE_AGENT, git

CLI = [sys.executable, "-m", "outpost_tui.cli"]


def run_cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


def write_race(tmp_path: Path, repo: Path, candidates: str, extra: str = "") -> Path:
    path = tmp_path / "race.toml"
    path.write_text(
        textwrap.dedent(f"""\
        [race]
        name = "cli test"
        repository = "{repo}"
        {extra}
        """)
        + textwrap.dedent(candidates)
    )
    return path


def fake_candidate(key: str, *flags: str) -> str:
    argv = json.dumps([sys.executable, str(FAKE_AGENT), *flags])
    return f'\n[[candidates]]\nkey = "{key}"\nagent = "command"\nbrief = "b"\ncommand = {argv}\n'


def test_sample_race_runs_offline_and_the_fixer_wins(tmp_path):
    race_file = materialise("race", tmp_path / "demo")
    started = time.monotonic()
    # pace 0.5: the breaker commits about a second before the fixer, time for its grading to reject
    # it first on a loaded machine (at 0.2 a fresh CI run saw the fixer win while the breaker was
    # still being graded: cancelled, not rejected)
    done = run_cli("run", str(race_file), "--headless", "--json", env={"OUTPOST_DEMO_PACE": "0.5"})
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 60
    result = json.loads(done.stdout)
    statuses = {c["key"]: c["status"] for c in result["candidates"]}
    assert statuses == {"fixer": "winner", "breaker": "rejected", "slow": "cancelled"}
    assert result["winner"]["key"] == "fixer"
    assert result["integration"]["status"] == "clean"
    # The project's own tests pass on the winner's commit.
    project = Path(result["repository"])
    git(project, "worktree", "add", "-q", str(tmp_path / "check"), result["winner"]["commit"])
    tests = subprocess.run(
        ["python3", "-m", "unittest", "-q"], cwd=tmp_path / "check", capture_output=True, text=True
    )
    assert tests.returncode == 0, tests.stderr
    # Progress went to stderr, a line per state change.
    assert "fixer#1 winner" in done.stderr and "slow#1 cancelled" in done.stderr


def test_sample_fallback_chain(tmp_path):
    race_file = materialise("fallback", tmp_path / "demo")
    done = run_cli("run", str(race_file), "--headless", "--json", env={"OUTPOST_DEMO_PACE": "0"})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [c["status"] for c in result["candidates"]] == ["failed", "rejected", "winner"]
    assert "not found" in result["candidates"][0]["error"]


def test_no_winner_exits_1_with_json(repo, tmp_path):
    race_file = write_race(tmp_path, repo, fake_candidate("a", "--exit", "4"))
    done = run_cli("run", str(race_file), "--headless", "--json")
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert result["status"] == "no-winner"
    assert result["candidates"][0]["status"] == "failed"


def test_bad_race_file_exits_2_with_one_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[race]\nrepository = '.'\nconcurency = 2\n")
    done = run_cli("run", str(path), "--headless", "--json")
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad.toml" in lines[0] and "Traceback" not in done.stderr


def test_ctrl_c_aborts_cleanly_and_leaves_no_process(repo, tmp_path):
    pidfile = tmp_path / "agent.pid"
    race_file = write_race(
        tmp_path, repo, fake_candidate("hangs", "--pidfile", str(pidfile), "--spawn-child", "--hang")
    )
    process = subprocess.Popen(
        [*CLI, "run", str(race_file), "--headless", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not pidfile.exists():
        assert time.monotonic() < deadline, "the agent never started"
        assert process.poll() is None, process.stderr.read()
        time.sleep(0.02)
    agent_pids = [int(p) for p in pidfile.read_text().split()]
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 1, err
    result = json.loads(out)
    assert result["status"] == "aborted"
    assert result["candidates"][0]["status"] == "cancelled"
    assert "Traceback" not in err
    for pid in agent_pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_help_and_version():
    done = run_cli("--help")
    assert done.returncode == 0 and "exit codes" in done.stdout
    assert run_cli("--version").stdout.startswith("outpost-tui ")
    for command in ("run", "check", "sample", "recover", "runs", "worktrees", "doctor", "image"):
        helped = run_cli(command, "--help")
        assert helped.returncode == 0 and "example" in helped.stdout.lower(), command


def test_a_dirty_checkout_is_pointed_out(repo, tmp_path):
    (repo / "base.txt").write_text("edited but not committed\n")
    race_file = write_race(tmp_path, repo, fake_candidate("a", "--write", "a.txt", "--commit"))
    done = run_cli("run", str(race_file), "--headless")
    assert done.returncode == 0, done.stderr
    assert "uncommitted changes" in done.stderr
    assert (repo / "base.txt").read_text() == "edited but not committed\n"  # the host is never touched


def test_json_implies_headless(repo, tmp_path):
    race_file = write_race(tmp_path, repo, fake_candidate("a", "--write", "a.txt", "--commit"))
    done = run_cli("run", str(race_file), "--json")  # no terminal, no --headless: still runs
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["winner"]["key"] == "a"
    helped = run_cli("run", "--help")
    assert "implies --headless" in helped.stdout
