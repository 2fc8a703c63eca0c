"""ui/shell.py: the user's $SHELL, started for real in a worktree."""

from __future__ import annotations

import sys

import pytest
from textual.app import App

from outpost_tui.engine import git as g
from outpost_tui.ui.shell import open_shell, run_shell


def worktree(repo):
    branch = g.branch_name("r1", "a", 1)
    directory = g.worktree_directory(repo, "a", branch)
    g.add_worktree(repo, branch, directory, g.resolve_commit(repo))
    return directory


def fake_shell(tmp_path, monkeypatch):
    record = tmp_path / "shell-ran"
    script = tmp_path / "myshell"
    script.write_text(
        f"#!{sys.executable}\nimport os\nopen({str(record)!r}, 'w').write(os.getcwd() + '|' + "
        "os.environ['OUTPOST_WORKTREE'])\nraise SystemExit(3)\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("SHELL", str(script))
    return record


def test_the_users_shell_runs_in_the_worktree(repo, tmp_path, monkeypatch):
    directory = worktree(repo)
    record = fake_shell(tmp_path, monkeypatch)
    assert run_shell(directory) == 3
    assert record.read_text() == f"{directory}|{directory}"


def test_no_shell_in_a_worktree_whose_git_link_changed(repo, tmp_path, monkeypatch):
    directory = worktree(repo)
    record = fake_shell(tmp_path, monkeypatch)
    (directory / ".git").write_text("gitdir: /somewhere/else\n")
    with pytest.raises(g.GitError, match="git link"):
        run_shell(directory)
    assert not record.exists()


@pytest.mark.anyio
async def test_open_shell_says_so_when_the_terminal_cannot_be_handed_over(repo, tmp_path, monkeypatch):
    directory = worktree(repo)
    record = fake_shell(tmp_path, monkeypatch)
    app = App()
    async with app.run_test():
        message = open_shell(app, directory)
    assert message == f"this terminal cannot hand over to a shell; run: cd {directory}"
    assert not record.exists()
