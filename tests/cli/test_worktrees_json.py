"""`outpost-tui worktrees --prune --json`: stdout is JSON on every exit (done, nothing to do, refused
input, an error part-way), and a bad `--older-than` is one line naming the option and the value."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.support import one_line_error, run_cli
from tests.conftest import make_repo
from tests.retention import kept_race


def as_json(done: subprocess.CompletedProcess) -> dict:
    """stdout parsed whole: one JSON document and nothing else."""
    assert "Traceback" not in done.stderr, done.stderr
    parsed = json.loads(done.stdout)
    assert isinstance(parsed, dict), done.stdout
    return parsed


BAD_DAYS = ["nan", "inf", "-inf", "-1", "", "1e400", "a week"]


@pytest.mark.parametrize("days", BAD_DAYS)
def test_a_bad_older_than_is_one_line_naming_the_option_and_the_value(tmp_path: Path, days: str):
    repo = make_repo(tmp_path / "repo")
    done = run_cli("worktrees", repo, "--prune", f"--older-than={days}", "--dry-run")
    assert done.returncode == 2
    line = one_line_error(done)
    assert "--older-than" in line and repr(days) in line, line
    assert done.stdout == ""

    with_json = run_cli("worktrees", repo, "--prune", f"--older-than={days}", "--dry-run", "--json")
    assert with_json.returncode == 2
    assert as_json(with_json) == {
        "error": one_line_error(with_json).removeprefix("outpost-tui: "),
        "exit_code": 2,
    }


def test_control_a_finite_older_than_is_taken(tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    kept_race(repo)
    for days in ("0", "0.5", "1e3"):
        done = run_cli("worktrees", repo, "--prune", f"--older-than={days}", "--dry-run", "--json")
        assert done.returncode == 0, done.stderr
        steps = as_json(done)["steps"]
        assert len(steps) == 2
        # at 0 days every worktree is old enough; at half a day or more the fresh ones are not
        assert {s["action"] for s in steps} == ({"remove"} if days == "0" else {"keep"})


def test_success_is_json(tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    kept = kept_race(repo)
    done = run_cli("worktrees", repo, "--prune", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    report = as_json(done)
    assert sorted(r["directory"] for r in report["removed"]) == sorted([kept["lose"], kept["win"]])
    assert report["failed"] == [] and report["freed_bytes"] > 0


def test_nothing_to_do_is_json(tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    done = run_cli("worktrees", repo, "--prune", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    assert as_json(done) == {"dry_run": False, "steps": [], "would_free_bytes": 0}


def test_not_a_repository_is_json(tmp_path: Path):
    nowhere = tmp_path / "plain"
    nowhere.mkdir()
    done = run_cli("worktrees", nowhere, "--prune", "--yes", "--json")
    assert done.returncode == 2
    error = as_json(done)
    assert error["exit_code"] == 2 and str(nowhere) in error["error"]
    assert one_line_error(done) == f"outpost-tui: {error['error']}"


def test_not_confirmed_is_json(tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    kept = kept_race(repo)
    done = run_cli("worktrees", repo, "--prune", "--json")  # no terminal, no --yes
    assert done.returncode == 1
    error = as_json(done)
    assert error["exit_code"] == 1 and "nothing was removed" in error["error"]
    assert Path(kept["win"]).is_dir() and Path(kept["lose"]).is_dir()


def test_a_worktree_in_use_is_json_and_kept(tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    kept = kept_race(repo)
    busy = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], cwd=kept["win"], stdin=subprocess.PIPE
    )
    try:
        done = run_cli("worktrees", repo, "--prune", "--yes", "--json")
    finally:
        busy.stdin.close()
        busy.wait()
    assert done.returncode == 0, done.stderr
    report = as_json(done)
    assert [r["directory"] for r in report["removed"]] == [kept["lose"]]
    ((kept_id, why),) = ((k["id"], k["why"]) for k in report["kept"])
    assert kept_id == f"{kept['race_id']}/win/1" and f"pid {busy.pid}" in why
    assert Path(kept["win"]).is_dir()


def test_an_error_part_way_is_json(tmp_path: Path):
    # The winner's archive ref is locked (what a git process holding it leaves): its archive fails
    # after the loser's worktree was removed; the report says both, and the exit code says refused.
    repo = make_repo(tmp_path / "repo")
    kept = kept_race(repo)
    lock = repo / ".git" / "refs" / "outpost" / "archive" / kept["race_id"] / "win" / "1.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    done = run_cli("worktrees", repo, "--prune", "--yes", "--json")
    assert done.returncode == 1, done.stderr
    report = as_json(done)
    assert [r["directory"] for r in report["removed"]] == [kept["lose"]]
    (failed,) = report["failed"]
    assert failed["id"] == f"{kept['race_id']}/win/1" and "refs/outpost/archive" in failed["why"]
    assert Path(kept["win"]).is_dir()

    lock.unlink()  # the control: the same prune with the ref free removes it
    again = run_cli("worktrees", repo, "--prune", "--yes", "--json")
    assert again.returncode == 0, again.stderr
    assert [r["directory"] for r in as_json(again)["removed"]] == [kept["win"]]
