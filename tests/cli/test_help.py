"""Every command's --help shows an example and its exit codes."""

from __future__ import annotations

import pytest

from outpost_tui.commands import MODULES
from tests.cli.support import run_cli

COMMANDS = [[name] for name in MODULES] + [["image", "build"]]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_has_an_example_and_exit_codes(command: list[str]):
    done = run_cli(*command, "--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout.lower()
    assert "example" in text and "exit codes" in text


def test_the_top_level_help_too():
    done = run_cli("--help")
    assert "examples:" in done.stdout and "exit codes:" in done.stdout
