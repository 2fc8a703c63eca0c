"""Numbers and sizes through the real CLI: usage reports that are not finite non-negative numbers
are refused with a warning and never summed (the result JSON stays strict JSON, a durable run
finishes), and a brief of any size `check` accepts reaches every agent."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from outpost_tui.engine.racefile import MAX_BRIEF_BYTES
from tests.cli.support import run_cli, write_race

# Reports usage, some of it unsound, then commits one file.
UNSOUND_USAGE = """\
import json, subprocess, sys
def say(text):
    sys.stdout.write(text + "\\n"); sys.stdout.flush()
say(json.dumps({"kind": "usage", "input": 10, "output": 5, "cost_usd": 0.5}))
say('{"kind": "usage", "cost_usd": NaN}')
say('{"kind": "usage", "output": Infinity}')
say('{"kind": "usage", "input": -7}')
say('{"kind": "usage", "cost_usd": 1e308}')
say('{"kind": "usage", "cost_usd": 1e308}')
say(json.dumps({"kind": "usage", "input": 1, "output": 1}))
open("done.txt", "w").write("done\\n")
subprocess.run(["git", "add", "-A"], check=True)
subprocess.run(["git", "-c", "user.name=a", "-c", "user.email=a@example.invalid", "commit", "-qm", "done"],
               check=True)
"""


def strict(text: str):
    def refuse(constant: str):
        raise AssertionError(f"result JSON is not strict JSON: it holds {constant}")

    return json.loads(text, parse_constant=refuse)


def unsound_race(tmp_path: Path, repo: Path, sections: str = "", extra: str = "") -> Path:
    agent = tmp_path / "unsound_agent.py"
    agent.write_text(UNSOUND_USAGE)
    argv = json.dumps([sys.executable, str(agent)])
    candidate = f'\n[[candidates]]\nkey = "a"\nagent = "command"\nbrief = "b"\ncommand = {argv}\n'
    return write_race(tmp_path / "race.toml", repo, candidate, extra=extra, sections=sections)


def check_refused(done, result: dict) -> None:
    usage = result["candidates"][0]["usage"]
    # the sound reports only: 10+1 in, 5+1 out, $0.5 + the first 1e308 (the second would overflow)
    assert (usage["input"], usage["output"]) == (11, 6), usage
    assert usage["cost_usd"] == 0.5 + 1e308
    assert result["usage"]["cost_usd"] == usage["cost_usd"]
    warnings = [line for line in done.stderr.splitlines() if "refused a usage report" in line]
    assert len(warnings) == 4, done.stderr
    assert any("NaN" in line and "cost_usd" in line for line in warnings), warnings
    assert any("Infinity" in line and "output" in line for line in warnings), warnings
    assert any("-7" in line and "input" in line for line in warnings), warnings
    assert any("overflow" in line for line in warnings), warnings


def test_unsound_usage_reports_are_refused_with_a_warning_and_the_result_is_strict_json(repo, tmp_path):
    done = run_cli("run", unsound_race(tmp_path, repo), "--json")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    check_refused(done, strict(done.stdout))


def test_a_durable_run_survives_unsound_usage_reports(repo, tmp_path):
    race = unsound_race(tmp_path, repo, extra='run_id = "numbers"', sections="[durability]\nenabled = true\n")
    done = run_cli("run", race, "--json")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    check_refused(done, strict(done.stdout))
    saved = run_cli("recover", "numbers", "--repo", repo, "--inspect", "--json")
    assert saved.returncode == 0, saved.stderr
    assert strict(saved.stdout)["status"] == "winner"


# Writes what it received as its brief (stdin, OUTPOST_BRIEF, OUTPOST_BRIEF_FILE) and commits it.
BRIEF_ECHO = """\
import os, subprocess, sys
stdin = sys.stdin.buffer.read()
from_file = open(os.environ["OUTPOST_BRIEF_FILE"], "rb").read()
assert from_file == stdin, "OUTPOST_BRIEF_FILE differs from stdin"
in_env = os.environ.get("OUTPOST_BRIEF")
if in_env is not None:
    assert in_env.encode() == stdin, "OUTPOST_BRIEF differs from stdin"
open("brief.out", "wb").write(stdin)
open("env.out", "w").write("env" if in_env is not None else "file only")
subprocess.run(["git", "add", "-A"], check=True)
subprocess.run(["git", "-c", "user.name=a", "-c", "user.email=a@example.invalid", "commit", "-qm", "brief"],
               check=True)
"""


def brief_race(tmp_path: Path, repo: Path, size: int) -> tuple[Path, str]:
    agent = tmp_path / "brief_agent.py"
    agent.write_text(BRIEF_ECHO)
    brief = ("fix the bug " * (size // 12 + 1))[: size - 1] + "\n"
    (tmp_path / "brief.md").write_text(brief)
    argv = json.dumps([sys.executable, str(agent)])
    candidate = f'\n[[candidates]]\nkey = "a"\nagent = "command"\nbrief_file = "brief.md"\ncommand = {argv}\n'
    return write_race(tmp_path / "race.toml", repo, candidate), brief


def test_a_brief_as_large_as_check_accepts_reaches_the_agent(repo, tmp_path):
    race, brief = brief_race(tmp_path, repo, MAX_BRIEF_BYTES)
    assert run_cli("check", race).returncode == 0
    done = run_cli("run", race, "--json")
    assert done.returncode == 0, done.stderr
    result = strict(done.stdout)
    commit = result["winner"]["commit"]
    from tests.conftest import git

    assert git(repo, "show", f"{commit}:brief.out") + "\n" == brief
    assert git(repo, "show", f"{commit}:env.out") == "file only"  # too large for the environment


def test_a_small_brief_is_in_the_environment_and_in_a_file(repo, tmp_path):
    race, _brief = brief_race(tmp_path, repo, 1000)
    done = run_cli("run", race, "--json")
    assert done.returncode == 0, done.stderr
    from tests.conftest import git

    assert git(repo, "show", f"{strict(done.stdout)['winner']['commit']}:env.out") == "env"


def test_check_refuses_a_brief_over_the_limit_naming_it(repo, tmp_path):
    race, _ = brief_race(tmp_path, repo, MAX_BRIEF_BYTES + 1)
    done = run_cli("check", race)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert "brief" in line and "MiB" in line, done.stderr


def test_agents_that_take_the_prompt_on_argv_get_a_large_brief_by_file(tmp_path):
    from outpost_tui.engine.agents import LaunchContext, adapter_for
    from outpost_tui.engine.agents.base import MAX_BRIEF_INLINE
    from outpost_tui.engine.core.spec import CandidateSpec

    brief_file = tmp_path / "outpost-brief.md"
    context = LaunchContext(directory=tmp_path, git_common_dir=tmp_path, brief_file=brief_file)
    large = "z" * (MAX_BRIEF_INLINE + 1)
    for agent in ("claude", "codex", "gemini", "aider", "opencode", "command"):
        command = ("true",) if agent == "command" else None
        launch = adapter_for(agent).launch(CandidateSpec("k", agent, large, command=command), large, context)
        assert all(len(arg.encode()) <= MAX_BRIEF_INLINE for arg in launch.argv), agent
        assert all(len(value.encode()) <= MAX_BRIEF_INLINE for value in launch.env.values()), agent
        assert launch.stdin == large.encode() or str(brief_file) in " ".join(launch.argv), agent
