import os
import subprocess
import sys
from pathlib import Path

import pytest

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
