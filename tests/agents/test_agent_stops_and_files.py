"""The engine's side of the agent contract, through real races with small agent programs:
an agent whose decoder asks for a stop is stopped at once (not left waiting until its timeout),
and the files a launch asks for exist while the agent runs and are gone after it."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path

from tests.agents.test_end_to_end import candidate, project, race_file, run_race


def write_program(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(0o755)


def test_aider_waiting_for_a_browser_sign_in_is_stopped_at_once(tmp_path):
    project(tmp_path)
    bin_dir = tmp_path / "bin"
    # aider 0.86.2's own lines when it has no model and no key, then its five-minute wait
    write_program(
        bin_dir,
        "aider",
        """\
        import sys, time
        for line in ["No LLM model was specified and no API keys were provided.",
                     "OpenRouter provides free and paid access to many LLMs.",
                     "Waiting up to 5 minutes for you to finish in the browser..."]:
            print(line, flush=True)
        time.sleep(300)
        """,
    )
    race = race_file(
        tmp_path,
        """\
        [[candidates]]
        key = "aider"
        agent = "aider"
        brief = "Fix add()."
        """,
    )
    started = time.monotonic()
    _code, result, _stderr = run_race(tmp_path, race, bin_dir)
    elapsed = time.monotonic() - started
    record = candidate(result, "aider")
    assert record["error"].startswith("not logged in: aider found no model and no API key"), record
    assert elapsed < 45, f"the race waited {elapsed:.0f}s for a sign-in that cannot happen"


def test_gemini_policy_file_exists_while_it_runs_and_is_removed_after(tmp_path):
    repo = project(tmp_path)
    bin_dir, seen = tmp_path / "bin", tmp_path / "seen.json"
    write_program(
        bin_dir,
        "gemini",
        f"""\
        import json, os, sys
        policy = sys.argv[sys.argv.index("--policy") + 1]
        with open(policy) as handle:
            text = handle.read()
        json.dump({{"policy": policy, "text": text, "mode": oct(os.stat(policy).st_mode & 0o777),
                   "trust": os.environ.get("GEMINI_CLI_TRUST_WORKSPACE"),
                   "author": os.environ.get("GIT_AUTHOR_EMAIL")}}, open({str(seen)!r}, "w"))
        print(json.dumps({{"type": "result", "status": "success", "stats": {{}}}}))
        """,
    )
    race = race_file(
        tmp_path,
        """\
        [[candidates]]
        key = "gemini"
        agent = "gemini"
        brief = "Fix add()."
        allowed_tools = ["run_shell_command(git)"]
        """,
    )
    run_race(tmp_path, race, bin_dir)
    report = json.loads(seen.read_text())
    policy = Path(report["policy"])
    assert policy.is_relative_to((repo / ".git").resolve()) or policy.is_relative_to(repo / ".git")
    assert 'toolName = "run_shell_command"' in report["text"] and 'commandPrefix = "git"' in report["text"]
    assert report["mode"] == "0o600" and report["trust"] == "true"
    assert report["author"] == "test@example.invalid"  # the repository's identity, passed along
    assert not policy.exists()
