"""Tests marked `alone` run while no other test of the run does, on xdist workers too (the lock in
tests/conftest.py): a small suite runs on two workers and logs when each test starts and ends."""

import itertools
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

INNER = """
import os, time
import pytest

def log(name, what):
    with open(os.environ["ALONE_LOG"], "a") as handle:
        handle.write(f"{name} {what} {time.monotonic()}\\n")

def work(name):
    log(name, "start")
    time.sleep(0.3)  # the work itself: long enough for the other worker to overlap it
    log(name, "end")

@pytest.mark.parametrize("n", range(4))
def test_before(n):
    work(f"before{n}")

@pytest.mark.alone
def test_alone():
    work("alone")

@pytest.mark.parametrize("n", range(4))
def test_after(n):
    work(f"after{n}")
"""


def test_an_alone_test_overlaps_no_other_test_on_two_workers(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_inner.py").write_text(INNER)
    (suite / "conftest.py").write_text(
        "from tests.conftest import pytest_runtest_protocol  # noqa: F401\n\n"
        "def pytest_configure(config):\n"
        "    config.addinivalue_line('markers', 'alone: runs alone')\n"
    )
    log = tmp_path / "log"
    env = {**os.environ, "ALONE_LOG": str(log), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            "load",
            "--basetemp",
            str(tmp_path / "temp"),
            str(suite),
        ],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    times: dict[str, dict[str, float]] = {}
    for line in log.read_text().splitlines():
        name, what, at = line.split()
        times.setdefault(name, {})[what] = float(at)
    assert len(times) == 9 and all(len(span) == 2 for span in times.values()), times
    alone = times.pop("alone")
    overlapping = [
        name for name, span in times.items() if span["start"] < alone["end"] and alone["start"] < span["end"]
    ]
    assert overlapping == [], (alone, times)
    # the ordinary tests did run side by side: two workers, not one after another
    spans = sorted(times.values(), key=lambda span: span["start"])
    assert any(b["start"] < a["end"] for a, b in itertools.pairwise(spans)), spans
