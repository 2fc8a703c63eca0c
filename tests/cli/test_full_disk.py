"""A full disk still ends with the result JSON and the exit code of what happened. The repository
(and so `.outpost/`, the worktrees and the flight log) lives on a 2 MiB tmpfs, and the candidate
fills it: the race settles, `run --headless --json` prints its result and exits 1 (no winner), and
stderr says once, in one line, that writing the flight log failed, with no traceback. The control:
the same race on the same small disk, the candidate not filling it, says nothing of the kind."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.cli.support import run_cli, write_race
from tests.conftest import git, make_repo

FILLER = """\
import sys
if sys.argv[1] == "fill":
    try:
        with open("big.bin", "wb") as f:
            while True:
                f.write(b"x" * 65536)
                f.flush()
    except OSError as error:
        print("the disk is full:", error, flush=True)
for i in range(2000):
    print(f"line {i} " + "y" * 200, flush=True)
sys.exit(1)
"""


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


def race(disk: Path, tmp_path: Path, mode: str) -> subprocess.CompletedProcess:
    repo = make_repo(disk / "repo")
    (repo / "filler.py").write_text(FILLER)
    git(repo, "add", "filler.py")
    git(repo, "commit", "-qm", "filler")
    argv = json.dumps(["python3", "filler.py", mode])
    candidate = f'\n[[candidates]]\nkey = "filler"\nagent = "command"\nbrief = "b"\ncommand = {argv}\n'
    path = write_race(tmp_path / "race.toml", repo, candidate, sections='[validate]\ncommand = ["true"]\n')
    return run_cli("run", path, "--headless", "--json", cwd=repo)


def test_a_candidate_filling_the_disk_still_gets_its_result_and_exit_code(small_disk, tmp_path):
    done = race(small_disk, tmp_path, "fill")

    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "no-winner"
    assert result["candidates"][0]["status"] == "failed"
    said = [line for line in done.stderr.splitlines() if "flight log" in line]
    assert len(said) == 1 and "writing the flight log failed: No space left on device" in said[0], said


def test_control_the_same_race_with_room_left_says_nothing_of_the_log(small_disk, tmp_path):
    done = race(small_disk, tmp_path, "print")

    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["status"] == "no-winner"
    assert "flight log" not in done.stderr
