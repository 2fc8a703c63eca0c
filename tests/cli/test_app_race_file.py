"""`outpost-tui RACE.toml` opens the app on a race file that names its candidates and checks the
file after the app's first frame; a bad file still ends as one line naming what is wrong and where,
with exit code 2: before the app opens when its candidates cannot even be read, after it when only
the check finds the fault."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.cli.support import CLI, AppInATerminal


def test_a_file_whose_candidates_cannot_be_read_is_one_line_and_no_app(tmp_path: Path):
    broken = tmp_path / "race.toml"
    broken.write_text('[race]\nrepository = "."\n[[candidates]\nkey = "a"\n')
    done = subprocess.run([*CLI, str(broken)], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith(f"outpost-tui: {broken}:3: ") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_without_a_terminal_no_app_opens_and_the_file_is_checked_at_once(tmp_path: Path):
    (tmp_path / "plain").mkdir()
    race = tmp_path / "race.toml"
    race.write_text('[race]\nrepository = "plain"\n\n[[candidates]]\nkey = "only"\nagent = "command"\n')
    for command in ([str(race)], ["run", str(race)]):
        done = subprocess.run([*CLI, *command], capture_output=True, text=True, cwd=tmp_path, timeout=60)
        assert done.returncode == 2, command
        assert done.stderr.startswith(f"outpost-tui: {race}:2: race.repository: not a git repository: ")
        assert done.stderr.count("\n") == 1 and done.stdout == ""


def test_a_file_only_its_check_refuses_opens_the_app_then_ends_with_its_one_line(tmp_path: Path):
    (tmp_path / "plain").mkdir()  # no git repository: only the check (git) finds it
    race = tmp_path / "race.toml"
    race.write_text('[race]\nrepository = "plain"\n\n[[candidates]]\nkey = "only"\nagent = "command"\n')
    app = AppInATerminal([*CLI, str(race)], tmp_path)
    try:
        app.wait_for(lambda seen: b"cannot run" in seen, "why it cannot run", 60)
        assert app.quit() == 2  # ctrl+q: nothing runs, the app quits at once
        # printed once the app has given the terminal back (after its last escape sequence)
        said = app.seen.decode(errors="replace").replace("\r", "").rstrip("\n")
        last = said[said.rindex("\x1b[") :].split("outpost-tui: ", 1)[-1]
        assert last.startswith(f"{race}:2: race.repository: not a git repository: "), said[-500:]
        assert "\n" not in last and "Traceback" not in said
    finally:
        app.close()
