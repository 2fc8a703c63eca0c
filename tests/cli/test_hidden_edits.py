"""Work that git does not show: an edit behind assume-unchanged or skip-worktree keeps its worktree.

`git status` trusts those index flags, so a cancelled candidate's edit hidden by them once looked
clean and was removed with its worktree. Through the real CLI, with a real candidate hiding edits
and a real winner cancelling it."""

from __future__ import annotations

import json
from pathlib import Path

from outpost_tui.engine import git as g
from tests.cli.support import run_cli, write_race
from tests.conftest import git


def shell_candidate(key: str, script: str) -> str:
    argv = json.dumps(["sh", "-c", script])
    return f'\n[[candidates]]\nkey = "{key}"\nagent = "command"\nbrief = "b"\ncommand = {argv}\n'


def test_a_cancelled_candidates_hidden_edits_keep_its_worktree(repo, tmp_path):
    ready = tmp_path / "hidden"
    (repo / "other.txt").write_text("other\n")
    git(repo, "add", "other.txt")
    git(repo, "commit", "-qm", "two files")
    hider = (
        f"echo 'precious work' > base.txt && git update-index --assume-unchanged base.txt && "
        f"echo 'more work' > other.txt && git update-index --skip-worktree other.txt && "
        f'test -z "$(git status --porcelain)" && touch {ready} && exec sleep 600'
    )
    winner = (
        f"while [ ! -e {ready} ]; do sleep 0.05; done; "
        "echo fixed > fix.txt && git add fix.txt && git commit -qm fix"
    )
    race = write_race(
        tmp_path / "race.toml",
        repo,
        shell_candidate("hider", hider) + shell_candidate("winner", winner),
        sections='[validate]\ncommand = ["sh", "-c", "test -f fix.txt"]\n',
    )

    done = run_cli("run", race, "--headless", "--json", cwd=repo)

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    hider_record = next(c for c in result["candidates"] if c["key"] == "hider")
    assert hider_record["status"] == "cancelled"
    kept = hider_record["retained_directory"]
    assert kept, "the worktree holding hidden edits was removed"
    assert (Path(kept) / "base.txt").read_text() == "precious work\n"
    assert (Path(kept) / "other.txt").read_text() == "more work\n"
    # and the worktree list (the app's worktrees screen reads it) says it is not clean
    [listed] = [w for w in g.list_worktrees(repo) if w["path"] == kept]
    assert listed["clean"] is False
    assert g.remove_worktree(repo, kept) is False
    assert (Path(kept) / "base.txt").read_text() == "precious work\n"
