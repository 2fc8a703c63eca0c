"""A real race whose worktrees stay behind, for the review, archive and cleanup tests."""

from __future__ import annotations

from pathlib import Path

from outpost_tui.engine import race
from tests.conftest import cmd, git


def kept_race(repo: Path) -> dict:
    """Run a fallback race: `lose` is rejected by the tests, `win` wins; both leave an untracked file.

    Returns {"race_id", "lose", "win"} with each attempt's worktree path."""
    (repo / ".gitignore").write_text("*.log\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore logs")
    result = race(
        repository=repo,
        mode="fallback",
        candidates=[
            cmd("lose", "--write", "a.txt", "--content", "bad", "--commit", "--dirty"),
            cmd("win", "--write", "a.txt", "--content", "good", "--commit", "--dirty"),
        ],
        validate=["sh", "-c", "grep -q good a.txt"],
    )
    paths = {c.key: c.retained_directory for c in result.candidates}
    assert all(paths.values()), result.to_json()
    return {"race_id": result.id, **paths, "result": result}
