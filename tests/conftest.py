import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from outpost_tui.engine import CandidateSpec

FAKE_AGENT = Path(__file__).parent / "fixtures" / "agents" / "fake_agent.py"

os.environ.setdefault("OUTPOST_DEMO_PACE", "0")


def git(cwd, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Test")
    git(path, "config", "user.email", "test@example.invalid")
    (path / "base.txt").write_text("base\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "initial")
    return path


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_repo(tmp_path / "repo")


def fake(*flags: str) -> tuple[str, ...]:
    """argv of the fake agent with these flags."""
    return (sys.executable, str(FAKE_AGENT), *flags)


def cmd(key: str, *flags: str, brief: str = "do the task", **options) -> CandidateSpec:
    """A command candidate running the fake agent with these flags."""
    return CandidateSpec(key, "command", brief, command=fake(*flags), **options)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def pids(path: Path) -> list[int]:
    """The pids a fake agent wrote to its --pidfile."""
    return [int(p) for p in path.read_text().split()]
