"""The container sandbox from the command line: a candidate's git inside is a repository of its
own, so refs it moves there are not the user's (nothing to report, nothing to undo); git's
location variables never reach a container either."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from outpost_tui.engine.sandbox.container_engine import list_containers
from tests.conftest import git

from .conftest import IMAGE

pytestmark = pytest.mark.container


def test_refs_moved_from_inside_a_container_are_its_own(engine, calc_repo, tmp_path):
    main = git(calc_repo, "rev-parse", "refs/heads/main")
    agent = (
        "echo '# fixed' >> calc.py && git commit -qam fix && "
        # the user's checked-out branch, to a commit with the same tree: the checkout stays clean
        'git update-ref refs/heads/main "$(git commit-tree HEAD~1^{tree} -p HEAD~1 -m moved)" && '
        "git update-ref refs/tags/planted HEAD && "
        # its own repository's config: never one the host's git reads
        "git config core.fsmonitor 'touch /tmp/pwned' && "
        "env > agent-env"
    )
    race_file = tmp_path / "race.toml"
    race_file.write_text(f"""\
[race]
name = "refs from a container"
repository = "{calc_repo}"

[sandbox]
provider = "podman"
image = "{IMAGE}"

[[candidates]]
key = "boxed"
agent = "command"
brief = "b"
command = ["sh", "-c", {json.dumps(agent)}]
""")
    env = {**os.environ, "GIT_DIR": str(calc_repo / ".git"), "GIT_INDEX_FILE": ".git/index"}
    done = subprocess.run(
        [sys.executable, "-m", "outpost_tui.cli", "run", str(race_file), "--json"],
        cwd=calc_repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["winner"]["key"] == "boxed", done.stderr
    assert result["tampering"] == []
    assert git(calc_repo, "rev-parse", "refs/heads/main") == main
    assert not git(calc_repo, "tag", "--list", "planted")
    assert "fsmonitor" not in (calc_repo / ".git" / "config").read_text()
    assert result["integration"]["status"] == "clean"
    assert "CHANGED YOUR REPOSITORY" not in done.stderr
    seen = (Path(result["candidates"][0]["directory"]) / "agent-env").read_text()
    assert "GIT_DIR=" not in seen and "GIT_INDEX_FILE=" not in seen
    assert list_containers(result["id"]) == []
