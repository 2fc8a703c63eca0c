"""A candidate's result (HEAD and the commits since the baseline) read from the commit objects
through the race's cat-file session, held to what `git log` lists in the same worktree: every
message shape, every history shape a candidate can make, and every case the walk leaves to git."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from outpost_tui.engine import git as g
from outpost_tui.engine.git import commits as git_commits
from tests.conftest import git


@pytest.fixture
def worktree(repo) -> tuple[Path, Path, str]:
    branch = g.branch_name("race1", "c", 1)
    directory = g.worktree_directory(repo, "c", branch)
    baseline = g.resolve_commit(repo)
    g.add_worktree(repo, branch, directory, baseline)
    return repo, directory, baseline


def by_git_log(directory: Path, baseline: str) -> tuple[str, list[g.Commit]]:
    commits = g.commits_since(directory, baseline)
    return (commits[-1].oid if commits else g.head(directory)), commits


def commit_with(directory: Path, message: bytes, *parents: str) -> str:
    """A commit of HEAD's tree with this exact message (as `git commit-tree` writes it), checked out."""
    tree = git(directory, "rev-parse", "HEAD^{tree}")
    parent_args = [arg for p in (parents or (git(directory, "rev-parse", "HEAD"),)) for arg in ("-p", p)]
    return checked_out(directory, ["git", "commit-tree", tree, *parent_args], message)


def hand_written_commit(directory: Path, body: bytes) -> str:
    return checked_out(
        directory, ["git", "hash-object", "-t", "commit", "--literally", "-w", "--stdin"], body
    )


def checked_out(directory: Path, command: list[str], data: bytes) -> str:
    """The commit `command` writes from `data` on its input, checked out."""
    run = subprocess.run(command, cwd=directory, input=data, capture_output=True, check=True)
    oid = run.stdout.decode().strip()
    git(directory, "reset", "-q", "--hard", oid)
    return oid


MESSAGES = [
    b"plain\n",
    b"\n\n  leading blank lines\nand a second line  \n\nthe body\n",
    b"tabs\there\t\n",
    b"crlf\r\nnext line\r\n\r\nbody\r\n",
    b"a carriage\rreturn inside",
    b"form\x0cfeed and\x0bvertical tab\n",
    b"a trailing form feed\x0c\x0b \n",
    "ünïcode ✓\n".encode(),
    b"\xff\xfe not utf-8\n",
    b"",
    b"   \n\n\n",
    b"one\ntwo\nthree\n\nfour\n",
]


def test_every_message_shape_reads_as_git_log_prints_it(worktree):
    _, directory, baseline = worktree
    for message in MESSAGES:
        commit_with(directory, message)
    walked = git_commits.walked(directory, baseline)
    assert walked is not None
    assert walked == by_git_log(directory, baseline)
    assert len(walked[1]) == len(MESSAGES)


def test_a_subject_cannot_pass_another_commit_off_as_the_result(worktree):
    # A "\r" in a subject once cut git log's line there: what followed read as the last commit id
    _, directory, baseline = worktree
    decoy = git(directory, "rev-parse", "HEAD")
    head = commit_with(directory, b"honest\r" + decoy.encode() + b" decoy\n")
    assert git_commits.walked(directory, baseline)[0] == head
    assert g.commits_since(directory, baseline)[-1].oid == head
    assert g.head_and_commits(directory, baseline)[0] == head


def test_head_at_the_baseline_is_read_without_git_log(worktree):
    _, directory, baseline = worktree
    assert git_commits.walked(directory, baseline) == (baseline, [])
    assert g.head_and_commits(directory, baseline) == by_git_log(directory, baseline)


def test_a_detached_head_is_read(worktree):
    _, directory, baseline = worktree
    oid = commit_with(directory, b"one\n")
    git(directory, "checkout", "-q", "--detach", oid)
    assert git_commits.walked(directory, baseline) == by_git_log(directory, baseline)


def shapes(repo: Path, directory: Path, baseline: str) -> dict[str, object]:
    """History shapes the walk leaves to git log, each made in the worktree by a callable."""

    def merge() -> None:
        side = commit_with(directory, b"side\n")
        git(directory, "reset", "-q", "--hard", baseline)
        main = commit_with(directory, b"main\n")
        commit_with(directory, b"merge\n", main, side)

    def unrelated_root() -> None:
        tree = git(directory, "rev-parse", "HEAD^{tree}")
        root = subprocess.run(
            ["git", "commit-tree", tree, "-m", "root"], cwd=directory, capture_output=True, check=True
        ).stdout.decode()
        git(directory, "reset", "-q", "--hard", root.strip())
        commit_with(directory, b"on top\n")

    def too_long() -> None:
        for n in range(git_commits._WALK_LIMIT + 1):
            commit_with(directory, f"commit {n}\n".encode())

    def parent_after_the_author() -> None:
        # git reads parents only right after the tree: this one is a root commit to git
        tree = git(directory, "rev-parse", "HEAD^{tree}")
        head = git(directory, "rev-parse", "HEAD")
        hand_written_commit(
            directory,
            f"tree {tree}\nauthor A <a@x> 1 +0000\nparent {head}\n"
            "committer A <a@x> 1 +0000\n\nsneaky\n".encode(),
        )

    def reencoded() -> None:
        tree = git(directory, "rev-parse", "HEAD^{tree}")
        head = git(directory, "rev-parse", "HEAD")
        hand_written_commit(
            directory,
            f"tree {tree}\nparent {head}\nauthor A <a@x> 1 +0000\ncommitter A <a@x> 1 +0000\n"
            "encoding ISO-8859-1\n\n".encode()
            + "caf\xe9\n".encode("latin-1"),
        )

    def replaced() -> None:
        one = commit_with(directory, b"one\n")
        other = commit_with(directory, b"other\n", baseline)
        git(directory, "reset", "-q", "--hard", one)
        git(directory, "replace", one, other)

    def grafted() -> None:
        commit_with(directory, b"one\n")
        (repo / ".git" / "info").mkdir(exist_ok=True)
        (repo / ".git" / "info" / "grafts").write_text(git(directory, "rev-parse", "HEAD") + "\n")

    return {
        "merge": merge,
        "unrelated root": unrelated_root,
        "too long": too_long,
        "parent after the author": parent_after_the_author,
        "re-encoded": reencoded,
        "replaced": replaced,
        "grafted": grafted,
    }


@pytest.mark.parametrize(
    "shape",
    ["merge", "unrelated root", "too long", "parent after the author", "re-encoded", "replaced", "grafted"],
)
def test_every_other_history_shape_is_left_to_git_log(worktree, shape):
    repo, directory, baseline = worktree
    shapes(repo, directory, baseline)[shape]()  # type: ignore[operator]
    assert git_commits.walked(directory, baseline) is None
    assert g.head_and_commits(directory, baseline) == by_git_log(directory, baseline)


def test_the_main_checkout_is_left_to_git_log(repo):
    baseline = g.resolve_commit(repo)
    git(repo, "commit", "-q", "--allow-empty", "-m", "on main")
    assert git_commits.walked(repo, baseline) is None
    assert g.head_and_commits(repo, baseline) == by_git_log(repo, baseline)
