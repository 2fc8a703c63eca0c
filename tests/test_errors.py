"""One error root: every error outpost-tui raises for the operator is an OutpostError with a one-line
message and an exit code, and the command line reports it in one place (cli.py)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import outpost_tui
from outpost_tui import exitcodes
from outpost_tui.engine.errors import OutpostError

# The demo agent is a program of its own (a candidate, not outpost-tui): its exceptions end its
# script and never reach the operator as outpost-tui's. Ended is control flow, not an error.
NOT_OURS = {"outpost_tui.engine.agents.demo_program", "outpost_tui.engine.agents.demo_script"}


def _our_exceptions() -> dict[str, type[BaseException]]:
    found = {}
    for info in pkgutil.walk_packages(outpost_tui.__path__, "outpost_tui."):
        if info.name in NOT_OURS or info.name == "outpost_tui.ui.served":
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == info.name:
                found[f"{info.name}.{name}"] = value
    return found


def test_every_error_outpost_tui_defines_derives_from_the_one_root():
    found = _our_exceptions()
    # the ones the CLI and the app handle by name are among them (the walk really finds them)
    names = {kind.__name__ for kind in found.values()}
    assert {
        "RaceFileError",
        "GitError",
        "CheckpointError",
        "TransportError",
        "SampleError",
        "SandboxError",
        "RaceError",
        "OutpostError",
    } <= names
    strays = sorted(name for name, kind in found.items() if not issubclass(kind, OutpostError))
    assert strays == []


def test_every_error_carries_an_exit_code_from_exitcodes():
    codes = {value for name, value in vars(exitcodes).items() if name.isupper()}
    for name, kind in _our_exceptions().items():
        assert kind.exit_code in codes, name


def test_the_message_is_one_line_and_the_code_can_be_the_callers():
    error = OutpostError("git failed in /repo:\nfatal: not a git repository\n  (or any parent)")
    assert str(error) == "git failed in /repo: fatal: not a git repository (or any parent)"
    assert error.exit_code == exitcodes.BAD_INPUT
    assert OutpostError("refused", exit_code=exitcodes.REFUSED).exit_code == exitcodes.REFUSED


# A bug inside a command, in a real process: the listing of samples fails in a way nobody expected.
BUG = textwrap.dedent("""\
    import sys
    import outpost_tui.samples as samples
    from outpost_tui import cli

    def broken():
        raise KeyError("a bug in the sample listing")

    samples.samples = broken
    import outpost_tui.commands.sample as command
    command.samples = broken
    sys.exit(cli.main(["sample"]))
    """)


def test_an_unexpected_error_is_one_line_and_its_traceback_goes_to_the_bug_log(tmp_path: Path):
    state = tmp_path / "state"
    done = subprocess.run(
        [sys.executable, "-c", BUG],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_STATE_HOME": str(state)},
    )
    log = state / "outpost-tui" / "bugs.log"
    assert done.returncode == exitcodes.BUG, done.stderr
    assert done.stderr == (
        f"outpost-tui: internal error: KeyError: 'a bug in the sample listing' (the traceback is in {log})\n"
    )
    written = log.read_text()
    assert "Traceback (most recent call last)" in written and "def broken" not in written
    assert "KeyError: 'a bug in the sample listing'" in written and "in broken" in written


def test_an_unwritable_bug_log_still_gives_one_line(tmp_path: Path):
    state = tmp_path / "state"
    state.write_text("a file where the state directory should be")
    done = subprocess.run(
        [sys.executable, "-c", BUG],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_STATE_HOME": str(state)},
    )
    assert done.returncode == exitcodes.BUG
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith(
        "outpost-tui: internal error: KeyError: 'a bug in the sample listing' "
        f"(its traceback could not be written to {state / 'outpost-tui' / 'bugs.log'}"
    )
