"""`outpost-tui worktrees`: one worktree whose git link was tampered with is marked, not fatal."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.support import run_cli
from tests.conftest import git, make_repo


def add_candidate_worktree(repo: Path, key: str) -> Path:
    path = repo / ".outpost" / "workspaces" / f"{key}-1"
    git(repo, "worktree", "add", "-q", "-b", f"outpost/speculation/r1/{key}/1", str(path))
    return path


def test_a_tampered_worktree_is_listed_and_marked_and_the_others_still_inspected(tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    good = add_candidate_worktree(repo, "good")
    tampered = add_candidate_worktree(repo, "bad")
    elsewhere = make_repo(tmp_path / "elsewhere")
    # What a hostile agent could do: lead git to a repository (and configuration) of its own.
    (tampered / ".git").write_text(f"gitdir: {elsewhere / '.git'}\n")

    done = run_cli("worktrees", repo, "--json")
    assert done.returncode == 0, done.stderr
    listed = {Path(w["path"]).name: w for w in json.loads(done.stdout)["worktrees"]}
    assert set(listed) == {"good-1", "bad-1"}
    assert listed["good-1"]["clean"] is True and listed["good-1"]["link_changed"] is False
    assert listed["bad-1"]["link_changed"] is True and listed["bad-1"]["clean"] is False
    assert "git link" in listed["bad-1"]["problem"]

    text = run_cli("worktrees", repo)
    assert text.returncode == 0, text.stderr
    blocks = dict(zip(text.stdout.splitlines()[0::2], text.stdout.splitlines()[1::2]))
    assert "good#1 of race r1, clean" in blocks[str(good)]
    assert "bad#1 of race r1, git link changed: not inspected" in blocks[str(tampered)]


def test_help_lists_exit_codes():
    done = run_cli("worktrees", "--help")
    assert done.returncode == 0 and "exit codes: 0 listed" in done.stdout
