"""What a candidate prints never reaches the user's terminal raw: escape sequences (OSC 52 writes
the clipboard, OSC 0 the window's title, CSI moves the cursor and clears the screen), C1 controls,
a lone ESC, BEL, backspace and carriage-return tricks are shown as escapes (`\\x1b`) on the
headless progress and in the app's panels. A real agent prints each of them on stdout, on stderr,
in its own words (a JSON string) and in a tool's name, and exits on an stderr line full of them,
which becomes its reason."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from outpost_tui.engine.core.text import visible
from tests.cli.support import write_race

SEQUENCES = [
    "\x1b]52;c;SGVsbG8=\x07",  # OSC 52: the clipboard
    "\x1b]0;pwned\x07",  # the window's title
    "\x1b[2J",
    "\x1b[H",
    "\x1b[31m",
    "\x9b2J",  # C1 CSI
    "\x90qpayload\x9c",  # C1 DCS ... ST
    "\x9d0;title\x9c",  # C1 OSC
    "lone \x1b",
    "bell \x07",
    "good\x08\x08\x08\x08evil",
    "harmless\rEVIL WINS",
    "\x7f",
]

AGENT = r"""
import json, os, sys
sequences = json.loads(sys.argv[1])
for text in sequences:
    os.write(1, f"out {text}\n".encode())
    os.write(1, b"raw C1 byte \x9b\x1b[2J\n")  # not UTF-8: a terminal may still read it
    os.write(2, f"err {text}\n".encode())
    print(json.dumps({"kind": "text", "text": f"said {text}"}), flush=True)
    print(json.dumps({"kind": "tool", "name": f"tool {text}", "input": text}), flush=True)
os.write(2, ("failing " + "".join(sequences[:3]) + "\n").encode())
sys.exit(1)
"""

# what a terminal obeys: C0 controls but tab and newline, DEL, C1 (as characters, or as raw bytes a
# UTF-8 decoder cannot read: surrogate escapes U+DC80-U+DC9F)
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\udc80-\udc9f]")


def raw_controls(data: bytes) -> list[str]:
    return RAW.findall(data.decode("utf-8", "surrogateescape"))


def agent_argv(tmp_path: Path) -> list[str]:
    script = tmp_path / "escapes.py"
    script.write_text(AGENT)
    return [sys.executable, str(script), json.dumps(SEQUENCES)]


def race_file(repo: Path, tmp_path: Path) -> Path:
    argv = json.dumps(agent_argv(tmp_path))
    candidate = f'\n[[candidates]]\nkey = "shouter"\nagent = "command"\nbrief = "b"\ncommand = {argv}\n'
    return write_race(tmp_path / "race.toml", repo, candidate, sections='[validate]\ncommand = ["true"]\n')


def test_headless_progress_shows_every_sequence_as_escapes(repo, tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "outpost_tui.cli",
            "run",
            str(race_file(repo, tmp_path)),
            "--headless",
            "--json",
            "-v",
        ],
        cwd=repo,
        capture_output=True,
        timeout=120,
    )

    assert done.returncode == 1, done.stderr
    assert b"Traceback" not in done.stderr
    assert raw_controls(done.stderr) == [], done.stderr
    text = done.stderr.decode()
    # shown, not dropped: the tool's name, and the reason (its last stderr line)
    assert "tool \\x1b]52;c;SGVsbG8=\\x07" in text
    assert "failing \\x1b]52;c;SGVsbG8=\\x07\\x1b]0;pwned\\x07" in text
    assert "harmless\\x0dEVIL WINS" in text  # the tool's name, whole
    # the result JSON carries the same visible text
    result = json.loads(done.stdout)
    assert "\\x1b[2J" in result["candidates"][0]["error"]
    log = repo / ".outpost" / "runs" / result["id"] / "shouter.1.jsonl"
    assert (
        raw_controls(
            json.dumps(
                [json.loads(line) for line in log.read_bytes().splitlines()], ensure_ascii=False
            ).encode()
        )
        == []
    )


def test_control_the_agent_really_prints_them_raw(tmp_path):
    done = subprocess.run(agent_argv(tmp_path), capture_output=True, timeout=60)

    assert b"\x1b]52;c;SGVsbG8=\x07" in done.stdout and b"\x1b]52;c;" in done.stderr
    assert b"\xc2\x9b2J" in done.stdout and b"\r" in done.stderr
    assert raw_controls(done.stdout) and raw_controls(done.stderr)
    # and the JSON a decoder reads turns into the raw characters themselves
    said = [
        json.loads(line)["text"]
        for line in done.stdout.decode("utf-8", "replace").split("\n")
        if line.startswith("{") and '"text"' in line
    ]
    assert any("\x1b]0;pwned\x07" in text for text in said)


@pytest.mark.parametrize("text", SEQUENCES)
def test_visible_leaves_no_control_and_keeps_tabs(text):
    shown = visible(f"a\t{text}")
    assert shown.startswith("a\t")
    assert raw_controls(shown.encode()) == []
