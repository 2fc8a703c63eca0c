"""`outpost-tui recover` through the real command line: options given to a step that does not use
them, releasing a run nobody owns, and a replay race file without a run id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.support import fake_candidate, one_line_error, run_cli, write_race
from tests.conftest import make_repo

RUN_ID = "recover-cli"


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, Path]:
    """A repository holding one finished durable run (nobody owns it any more), and its race file."""
    root = tmp_path_factory.mktemp("recover")
    repo = make_repo(root / "repo")
    race = write_race(
        root / "race.toml",
        repo,
        fake_candidate("a", "--write", "a.txt", "--commit"),
        extra=f'run_id = "{RUN_ID}"',
        sections="[durability]\nenabled = true\n",
    )
    done = run_cli("run", race, "--headless")
    assert done.returncode == 0, done.stderr
    return repo, race


def inspect(repo: Path) -> dict:
    done = run_cli("recover", RUN_ID, "--repo", repo, "--inspect", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    "args, wrong",
    [
        (["--stop", "--revision", "r"], "--revision is only for --release, not --stop"),
        (["--inspect", "--revision", "r"], "--revision is only for --release, not --inspect"),
        (["--revision", "r"], "--revision is only for --release, not --inspect"),
        (["--replay", "--revision", "r"], "--revision is only for --release, not --replay"),
        (["--inspect", "--race-file", "race.toml"], "--race-file is only for --replay, not --inspect"),
        (["--stop", "--race-file", "race.toml"], "--race-file is only for --replay, not --stop"),
        (
            ["--release", "--revision", "r", "--race-file", "race.toml"],
            "--race-file is only for --replay, not --release",
        ),
        (["--stop", "--timeout", "-1"], "argument --timeout: must be 0 or more seconds, found -1"),
        (["--stop", "--timeout", "nan"], "argument --timeout: must be 0 or more seconds, found nan"),
    ],
)
def test_an_option_the_step_does_not_use_is_refused(finished, args: list[str], wrong: str):
    repo, _ = finished
    before = inspect(repo)["revision"]
    done = run_cli("recover", RUN_ID, "--repo", repo, *args)
    assert done.returncode == 2
    assert wrong in one_line_error(done)
    assert done.stdout == ""
    assert inspect(repo)["revision"] == before


def test_releasing_a_run_nobody_owns_says_so_and_writes_nothing(finished):
    repo, _ = finished
    view = inspect(repo)
    assert view["owner"] is None
    storage = repo / ".outpost" / "storage"
    files = {path: path.stat().st_mtime_ns for path in storage.rglob("*") if path.is_file()}
    done = run_cli("recover", RUN_ID, "--repo", repo, "--release", "--revision", view["revision"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"run {RUN_ID} is not owned: nothing to release")
    assert inspect(repo)["revision"] == view["revision"]
    assert {path: path.stat().st_mtime_ns for path in storage.rglob("*") if path.is_file()} == files

    as_json = run_cli(
        "recover", RUN_ID, "--repo", repo, "--release", "--revision", view["revision"], "--json"
    )
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == {
        "released": False,
        "reason": "not owned",
    }
    # A stale revision is still refused, owned or not.
    stale = run_cli("recover", RUN_ID, "--repo", repo, "--release", "--revision", "0" * 32)
    assert stale.returncode == 4 and "changed since it was read" in one_line_error(stale)


def test_replaying_with_a_race_file_without_run_id_names_the_missing_key(finished, tmp_path):
    repo, race = finished
    anonymous = tmp_path / "anonymous.toml"
    anonymous.write_text(race.read_text().replace(f'run_id = "{RUN_ID}"', ""))
    done = run_cli("recover", RUN_ID, "--repo", repo, "--replay", "--race-file", anonymous)
    assert done.returncode == 2
    assert one_line_error(done) == (
        f"outpost-tui: {anonymous}: has no [race] run_id (a durable race needs one)"
    )


def test_help_lists_success_and_bad_arguments():
    done = run_cli("recover", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "exit codes: 0 done" in text and "2 bad arguments" in text
