"""A reader that goes away (`outpost-tui ... | head`) and a Ctrl-C before any race starts: an exit
code and at most one line, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.cli.support import fake_candidate, run_cli, run_with_closed_stdout, write_race

CLOSED_OUTPUT = 141
INTERRUPTED = 130


def test_a_listing_into_a_closed_pipe_exits_141_quietly():
    done = run_with_closed_stdout("sample")
    assert done.returncode == CLOSED_OUTPUT
    assert done.stderr == ""


def test_a_durable_race_runs_to_its_end_and_is_saved_when_stdout_is_closed(repo, tmp_path: Path):
    race = write_race(
        tmp_path / "race.toml",
        repo,
        fake_candidate("a", "--write", "a.txt", "--commit"),
        extra='run_id = "piped"',
        sections="[durability]\nenabled = true\n",
    )
    done = run_with_closed_stdout("run", race, "--json")
    assert done.returncode == CLOSED_OUTPUT, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
    assert "race winner: a on " in done.stderr  # the race was not cut short

    saved = run_cli("recover", "piped", "--repo", repo, "--inspect", "--json")
    assert saved.returncode == 0, saved.stderr
    assert json.loads(saved.stdout)["status"] == "winner"

    replayed = run_with_closed_stdout("recover", "piped", "--repo", repo, "--replay", "--json")
    assert replayed.returncode == CLOSED_OUTPUT, replayed.stderr
    assert "Traceback" not in replayed.stderr


# Delivers a real SIGINT to the CLI while it imports a subcommand's modules (anyio, by the run
# command), the moment a user's Ctrl-C lands in the first fraction of a second. SIGINT is first
# given back its default, as at a terminal: a suite started in the background (`cmd &` in a
# script) inherits it ignored, and then no Ctrl-C arrives at all.
CTRL_C_DURING_IMPORTS = textwrap.dedent("""\
    import os, signal, sys

    signal.signal(signal.SIGINT, signal.default_int_handler)

    class CtrlC:
        def find_spec(self, name, path=None, target=None):
            if name == "anyio":
                os.kill(os.getpid(), signal.SIGINT)
            return None

    from outpost_tui import cli
    sys.meta_path.insert(0, CtrlC())
    sys.exit(cli.main(sys.argv[1:]))
    """)


def test_ctrl_c_while_importing_is_one_line_and_exit_130(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_DURING_IMPORTS, "check", "race.toml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == INTERRUPTED, done.stderr
    assert done.stderr == "outpost-tui: interrupted\n"


def test_the_top_level_help_lists_130_and_141():
    done = run_cli("--help")
    assert done.returncode == 0
    assert "\n  130 interrupted" in done.stdout and "\n  141 stdout was closed" in done.stdout
