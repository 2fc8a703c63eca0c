"""`outpost-tui sample` through the real command line: unwritable targets, and --run's wording."""

from __future__ import annotations

from pathlib import Path

from tests.cli.support import one_line_error, run_cli


def test_a_directory_under_a_file_is_one_line_exit_2(tmp_path: Path):
    existing = tmp_path / "race.toml"
    existing.write_text("mine\n")
    target = existing / "sub"
    done = run_cli("sample", "race", target)
    assert done.returncode == 2
    line = one_line_error(done)
    assert str(target) in line and "Not a directory" in line, line
    assert existing.read_text() == "mine\n"


def test_a_directory_that_cannot_be_created_is_one_line_exit_2():
    target = Path("/proc/outpost-tui-sample")  # /proc takes no new directories, even from root
    done = run_cli("sample", "race", target)
    assert done.returncode == 2
    line = one_line_error(done)
    assert str(target) in line and "No such file or directory" in line, line
    assert not target.exists()


def test_run_says_it_is_running_the_race_rather_than_telling_how(tmp_path: Path):
    written = run_cli("sample", "race", tmp_path / "only")
    assert written.returncode == 0, written.stderr
    assert "Run it with:" in written.stdout

    ran = run_cli("sample", "fallback", tmp_path / "ran", "--run", env={"OUTPOST_DEMO_PACE": "0"})
    assert ran.returncode == 0, ran.stderr
    assert "Run it with:" not in ran.stdout
    assert "Running it now" in ran.stdout and "outpost-tui run" in ran.stdout
    assert "race winner" in ran.stderr  # and it did run
