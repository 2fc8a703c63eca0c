"""`outpost-tui history` and `outpost-tui show` through the real CLI, against a race the CLI ran."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from outpost_tui.engine.records.flightlog import seal_path
from tests.cli.support import fake_candidate, one_line_error, run_cli, write_race

VALIDATE = Path(__file__).parents[1] / "fixtures" / "agents" / "validate.py"
STAMP = re.compile(r"^\[\d\d:\d\d:\d\d\] ")


@pytest.fixture
def live(repo, tmp_path):
    """A race run by `run --headless --json`: its race id, its result and the lines it printed."""
    path = write_race(
        tmp_path / "race.toml",
        repo,
        fake_candidate("bad", "--write", "fix.txt", "--content", "bad", "--commit")
        + fake_candidate(
            "good", "--write", "fix.txt", "--content", "good", "--commit", "--usage", "100", "0", "0", "20"
        ),
        extra='mode = "fallback"',
        sections=f"[validate]\ncommand = {json.dumps([sys.executable, str(VALIDATE)])}\n",
    )
    done = run_cli("run", path, "--headless", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    return result["id"], result, done.stderr.splitlines()


def test_history_lists_the_race(repo, live):
    race_id, result, _ = live
    done = run_cli("history", repo)
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    assert line.startswith(race_id)
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", line)
    assert line.split()[3:] == ["winner", "good", "bad,", "good"]
    listed = json.loads(run_cli("history", repo, "--json").stdout)
    assert [
        (r["id"], r["status"], r["winner"], r["winner_branch"], r["candidates"], r["finished"])
        for r in listed
    ] == [(race_id, "winner", "good", result["winner"]["branch"], ["bad", "good"], True)]
    # the current directory by default
    here = run_cli("history", cwd=repo)
    assert here.stdout == done.stdout


def test_show_headless_prints_what_the_live_run_printed(repo, live):
    race_id, _, printed = live
    done = run_cli("show", race_id, "--repo", repo, "--headless")
    assert done.returncode == 0, done.stderr
    shown = done.stdout.splitlines()
    # The same lines, times included (they come from the events); a replay leaves out the
    # periodic usage lines, which depend on the wall clock of the live run.
    assert shown == [line for line in printed if not STAMP.sub("", line).startswith("usage:")]
    ending = [STAMP.sub("", line) for line in shown]
    assert any(line.startswith("race winner: good on outpost/speculation/") for line in ending)
    assert any(line.startswith("merge it with: git -C") for line in ending)
    assert any(line.startswith("bad#1 rejected") for line in ending)


def test_show_json_is_the_live_result(repo, live):
    race_id, result, _ = live
    done = run_cli("show", race_id, "--json", cwd=repo)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == result


def test_an_unknown_race_id_is_one_line_and_exit_2(repo, live):
    race_id, _, _ = live
    for args in (["--headless"], ["--json"], []):
        done = run_cli("show", race_id[:-1] + "x", "--repo", repo, *args)
        assert done.returncode == 2
        line = one_line_error(done)
        assert "no recorded race" in line and race_id in line
        assert done.stdout == ""


def test_a_race_that_never_finished(repo, live):
    race_id, _, printed = live
    # As a coordinator killed before its end leaves it: no race-finished event, no seal.
    seal_path(race_id).unlink()
    race_file = repo / ".outpost" / "runs" / race_id / "race.jsonl"
    race_file.write_text(
        "".join(line + "\n" for line in race_file.read_text().splitlines() if '"race-finished"' not in line)
    )
    done = run_cli("show", race_id, "--repo", repo, "--json")
    assert done.returncode == 1 and done.stdout == ""
    assert "never finished" in one_line_error(done)
    headless = run_cli("show", race_id, "--repo", repo, "--headless")
    assert headless.returncode == 1 and "never finished" in one_line_error(headless)
    finish = next(i for i, line in enumerate(printed) if "race winner" in line)
    assert headless.stdout.splitlines() == printed[:finish]  # everything up to the missing end
    assert "bad#1 rejected" in headless.stdout and "race winner" not in headless.stdout
    assert "unfinished" in run_cli("history", repo).stdout


def test_the_app_needs_a_terminal(repo, live):
    race_id, _, _ = live
    done = run_cli("show", race_id, "--repo", repo)
    assert done.returncode == 2
    assert "needs a terminal" in one_line_error(done)


def test_history_outside_a_repository_and_with_no_races(repo, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    done = run_cli("history", plain)
    assert done.returncode == 2 and "not a git repository" in one_line_error(done)
    empty = run_cli("history", repo)
    assert empty.returncode == 0 and empty.stdout.strip() == "no races recorded here"
    assert json.loads(run_cli("history", repo, "--json").stdout) == []
