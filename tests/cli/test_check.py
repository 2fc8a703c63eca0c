"""`outpost-tui check` through the real command line: one line per bad file, exit 2, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]


def check(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "outpost_tui.cli", "check", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def area(tmp_path_factory) -> Path:
    """A directory with a committed repository `repo`, a plain directory and a brief file."""
    root = tmp_path_factory.mktemp("check")
    subprocess.run([*GIT, "init", "-q", str(root / "repo")], check=True)
    (root / "repo" / "README").write_text("hi\n")
    subprocess.run([*GIT, "-C", str(root / "repo"), "add", "README"], check=True)
    subprocess.run([*GIT, "-C", str(root / "repo"), "commit", "-q", "-m", "init"], check=True)
    (root / "plain").mkdir()
    (root / "brief.md").write_text("Fix the bug.\n")
    return root


RACE = '[race]\nname = "demo"\nrepository = "repo"\n'
CAND = '[[candidates]]\nkey = "first"\nagent = "command"\ncommand = ["python", "agent.py"]\nbrief = "go"\n'

BAD = {
    "unknown-key": (RACE + "concurency = 2\n" + CAND, "race.concurency"),
    "wrong-type": (RACE + 'concurrency = "two"\n' + CAND, "race.concurrency"),
    "bool-as-int": (RACE + "[budget]\nattempts = true\n" + CAND, "budget.attempts"),
    "duplicate-key": (RACE + CAND + CAND, "candidates[1].key"),
    "option-the-agent-lacks": (
        RACE + '[[candidates]]\nkey = "c"\nagent = "codex"\nbrief = "go"\nmax_turns = 3\n',
        "candidates[0].max_turns",
    ),
    "dotdot-key": (RACE + CAND.replace('"first"', '"../x"'), "candidates[0].key"),
    "empty-candidates": ("candidates = []\n" + RACE, "candidates"),
    "no-candidates": (RACE, "candidates"),
    "missing-repository": (RACE.replace('"repo"', '"no-such-dir"') + CAND, "race.repository"),
    "not-a-repository": (RACE.replace('"repo"', '"plain"') + CAND, "race.repository"),
    "best-without-score": (RACE + 'select = "best"\n' + CAND, "race.select"),
    "negative-budget": (RACE + "[budget]\ncost_usd = -1\n" + CAND, "budget.cost_usd"),
    "git-location-in-env": (RACE + CAND + 'env = { GIT_DIR = "/elsewhere" }\n', "candidates[0].env.GIT_DIR"),
    "negative-tokens": (RACE + "[budget]\ntokens = { output = -10 }\n" + CAND, "budget.tokens.output"),
    "unknown-agent": (
        RACE + CAND.replace('agent = "command"', 'agent = "gpt-wizard"'),
        "candidates[0].agent",
    ),
    "toml-syntax": (RACE + "mode = race\n" + CAND, "race.mode"),
    "command-without-command": (
        RACE + '[[candidates]]\nkey = "a"\nagent = "command"\nbrief = "b"\n',
        "candidates[0]",
    ),
    "validate-string": (RACE + '[validate]\ncommand = "pytest -q"\n' + CAND, "validate.command"),
    "brief-and-brief-file": (RACE + CAND + 'brief_file = "brief.md"\n', "candidates[0].brief_file"),
    "missing-brief": (
        RACE + '[[candidates]]\nkey = "a"\nagent = "command"\ncommand = ["x"]\n',
        "candidates[0]",
    ),
    "docker-without-image": (RACE + '[sandbox]\nprovider = "docker"\n' + CAND, "sandbox"),
    "bad-run-id": (RACE + 'run_id = "a/b"\n' + CAND, "race.run_id"),
    "cleanup-timeout-top-level": ("cleanup_timeout = 5\n" + RACE + CAND, "cleanup_timeout"),
    "demo-without-script": (
        RACE + '[[candidates]]\nkey = "d"\nagent = "demo"\nbrief = "b"\n',
        "candidates[0]",
    ),
    "fallback-with-best": (
        RACE + 'mode = "fallback"\nselect = "best"\n[score]\ncommand = ["true"]\n' + CAND,
        "race.select",
    ),
    "fallback-with-concurrency": (RACE + 'mode = "fallback"\nconcurrency = 3\n' + CAND, "race.concurrency"),
    "race-brief-and-brief-file": (RACE + 'brief = "go"\nbrief_file = "brief.md"\n' + CAND, "race.brief_file"),
    # the API allows 0 (a race that starts nothing); a race file asking for it is a mistake
    "zero-attempts": (RACE + "[budget]\nattempts = 0\n" + CAND, "budget.attempts"),
    "setup-copy-outside": (RACE + '[setup]\ncopy = ["../.env"]\n' + CAND, "setup.copy[0]"),
    "setup-ports-string": (RACE + '[setup]\nports = "2"\n' + CAND, "setup.ports"),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_race_file_is_one_line_and_exit_2(area: Path, name: str):
    text, key = BAD[name]
    race_file = area / f"bad-{name}.toml"
    race_file.write_text(text)
    done = check(race_file, cwd=area)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), done.stderr
    assert lines[0].startswith("outpost-tui: ")
    assert f"bad-{name}.toml" in lines[0] and f" {key}: " in lines[0], lines[0]


def test_an_unquoted_word_gets_a_hint(area: Path):
    (area / "unquoted.toml").write_text(RACE + "mode = fallback\n" + CAND)
    done = check("unquoted.toml", cwd=area)
    assert done.returncode == 2
    assert done.stderr == (
        "outpost-tui: unquoted.toml:4: race.mode: invalid TOML: invalid value (column 8): "
        'text needs quotes, e.g. "fallback"\n'
    )
    assert done.stdout == ""


def test_valid_race_file_prints_a_summary(area: Path):
    race_file = area / "good.toml"
    race_file.write_text(
        RACE
        + "[budget]\nattempts = 4\ncost_usd = 2.5\n"
        + CAND
        + '[[candidates]]\nkey = "second"\nagent = "command"\ncommand = ["true"]\n'
        'brief_file = "brief.md"\nmodel = "m1"\n'
    )
    done = check("good.toml", cwd=area)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "good.toml: ok" in done.stdout and "demo" in done.stdout
    assert str((area / "repo").resolve()) in done.stdout
    assert "2: first (command), second (command, m1)" in done.stdout
    assert "4 attempts" in done.stdout and "$2.50" in done.stdout


def test_json_summary_and_json_error(area: Path):
    (area / "good-json.toml").write_text(RACE + 'mode = "fallback"\n' + CAND)
    done = check("good-json.toml", "--json", cwd=area)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["ok"] is True and summary["mode"] == "fallback" and summary["concurrency"] == 1
    assert summary["candidates"] == [{"key": "first", "agent": "command", "model": None}]
    assert summary["repository"] == str((area / "repo").resolve())

    (area / "bad-json.toml").write_text(RACE + "concurrency = 0\n" + CAND)
    done = check("bad-json.toml", "--json", cwd=area)
    assert done.returncode == 2
    error = json.loads(done.stdout)
    assert error == {
        "ok": False,
        "error": {
            "path": "bad-json.toml",
            "line": 4,
            "key": "race.concurrency",
            "message": "must be between 1 and 64, found 0",
        },
    }
    assert (
        done.stderr == "outpost-tui: bad-json.toml:4: race.concurrency: must be between 1 and 64, found 0\n"
    )


@pytest.mark.parametrize("target, message", [("missing.toml", "no such file"), (".", "is a directory")])
def test_missing_or_unreadable_file(area: Path, target: str, message: str):
    done = check(target, cwd=area)
    assert done.returncode == 2
    assert done.stderr == f"outpost-tui: {target}: {message}" + (
        ", not a race file\n" if target == "." else "\n"
    )


def test_help_shows_an_example(area: Path):
    done = check("--help", cwd=area)
    assert done.returncode == 0
    assert "outpost-tui check race.toml" in done.stdout and "--json" in done.stdout


def test_zero_attempts_says_at_least_one(area: Path):
    (area / "zero.toml").write_text(RACE + "[budget]\nattempts = 0\n" + CAND)
    done = check("zero.toml", cwd=area)
    assert done.returncode == 2
    assert done.stderr.startswith("outpost-tui: zero.toml:5: budget.attempts: must be at least 1, found 0")


@pytest.mark.parametrize("command", [["check"], ["run", "--headless"]])
def test_a_fifo_is_refused_at_once_and_never_opened(area: Path, command: list[str]):
    """Opening a FIFO for reading blocks until some writer comes: the command would hang forever."""
    fifo = area / f"fifo-{command[0]}.toml"
    os.mkfifo(fifo)
    done = subprocess.run(
        [sys.executable, "-m", "outpost_tui.cli", command[0], str(fifo), *command[1:]],
        cwd=area,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert done.stderr == f"outpost-tui: {fifo}: is a FIFO, not a race file (it must be a regular file)\n"


def test_a_device_is_refused(area: Path):
    done = check("/dev/zero", cwd=area)  # reading it would never end
    assert done.returncode == 2
    assert done.stderr == "outpost-tui: /dev/zero: is a device, not a race file (it must be a regular file)\n"


def test_setup_is_summarised(area: Path):
    (area / "setup.toml").write_text(
        RACE + '[setup]\ncommand = ["npm", "ci"]\ncache = ["node_modules"]\n'
        'cache_key = ["package-lock.json"]\ncopy = [".env"]\nports = 2\n' + CAND
    )
    done = check("setup.toml", cwd=area)
    assert done.returncode == 0, done.stderr
    assert (
        "setup       npm ci (timeout 600s); cache node_modules keyed on package-lock.json; "
        "copy .env; 2 port(s) each"
    ) in done.stdout
    summary = json.loads(check("setup.toml", "--json", cwd=area).stdout)
    assert summary["setup"] == {
        "command": ["npm", "ci"],
        "timeout": 600.0,
        "cache": ["node_modules"],
        "cache_key": ["package-lock.json"],
        "copy": [".env"],
        "ports": 2,
    }
