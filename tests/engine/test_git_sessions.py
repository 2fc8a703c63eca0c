"""The race's long-lived git processes: trees and blobs read through `cat-file --batch`, pins
through `update-ref --stdin`. Each answer is held to what the one-shot git command says on the
same repository, including for trees a candidate wrote by hand; a session that dies, a planted
hook and a locked ref are met as they would be without one; none outlives its race."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from outpost_tui.engine import CandidateSpec, build_spec, run_race
from outpost_tui.engine import git as g
from outpost_tui.engine.core.spec import ValidateSpec
from outpost_tui.engine.git import objects as git_objects
from outpost_tui.engine.git import sessions as git_sessions
from tests.conftest import cmd, flags, git, make_repo


def ls_tree(repo: Path, commit: str) -> dict[str, tuple[str, str]]:
    out = subprocess.run(
        ["git", "ls-tree", "-r", "-z", "--full-tree", commit], cwd=repo, capture_output=True, check=True
    ).stdout.decode(errors="surrogateescape")
    listing = {}
    for entry in out.split("\0"):
        meta, _, path = entry.partition("\t")
        if path:
            mode, _, oid = meta.split()
            listing[path] = (mode, oid)
    return listing


def fresh(repo: Path, commit: str) -> dict[str, tuple[str, str]]:
    git_objects._listings.clear()  # read it again, not from the race's cache
    return g.tree(repo, commit)


def session_pids(repo: Path) -> list[int]:
    """Processes of this repository's sessions that are still running."""
    real = os.path.realpath(repo)
    return [
        s._process.pid
        for (root, _), s in git_sessions._sessions.items()
        if root == real and s._process is not None and s._process.poll() is None
    ]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie is gone too: it is the session's to reap (communicate does)
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")


def test_a_commits_files_read_through_the_session_are_what_ls_tree_lists(repo):
    for name in ("a b.txt", "dir/inner/deep.txt", "dir/z.txt", "üni/código.py", "x-\x01-ctrl"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(name)
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    os.symlink("dir/z.txt", repo / "link")
    git(repo, "add", "-A")
    blob = git(repo, "hash-object", "-w", "base.txt")
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{head},sub/module")
    git(repo, "commit", "-qm", "many kinds")
    commit = git(repo, "rev-parse", "HEAD")

    listing = fresh(repo, commit)
    assert listing == ls_tree(repo, commit)
    assert list(listing) == list(ls_tree(repo, commit))  # in ls-tree's order too
    assert listing["run.sh"][0] == "100755" and listing["link"][0] == "120000"
    assert listing["sub/module"] == ("160000", head)
    assert g.blob(repo, blob) == b"base\n"
    assert session_pids(repo), "read through the session"


def test_a_sha256_repository_is_read_through_the_session(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "--object-format=sha256")
    (repo / "d").mkdir()
    (repo / "d" / "f.txt").write_text("f\n")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=T", "-c", "user.email=t@e", "commit", "-qm", "one")
    commit = git(repo, "rev-parse", "HEAD")
    assert fresh(repo, commit) == ls_tree(repo, commit)


def hand_written_tree(repo: Path, entries: bytes) -> str:
    """A commit of a tree object written byte for byte (as a candidate could), past git's checks."""
    tree = (
        subprocess.run(
            ["git", "hash-object", "-t", "tree", "--literally", "-w", "--stdin"],
            cwd=repo,
            input=entries,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )
    return git(repo, "commit-tree", tree, "-m", "hand written")


@pytest.mark.parametrize(
    "entry",
    [
        b"100664 odd-mode.txt\0",  # an old git's mode, which ls-tree shows canonical
        b"100644 a/b.txt\0",  # a slash inside a name
        b"100644 \0",  # an empty name
        b"100644 ..\0",
        b"40000 dir\0",  # a tree entry whose object is a blob
        b"100644 no-id\0\x01\x02",  # an object id cut short
        b"100644-no-space\0",
    ],
)
def test_a_hand_written_tree_is_listed_as_git_lists_it(repo, entry):
    blob = bytes.fromhex(git(repo, "hash-object", "-w", "base.txt"))
    entries = b"100644 base.txt\0" + blob + (entry + blob if not entry.endswith(b"\x02") else entry)
    commit = hand_written_tree(repo, entries)
    expected = subprocess.run(
        ["git", "ls-tree", "-r", "-z", "--full-tree", commit], cwd=repo, capture_output=True
    )
    if expected.returncode != 0:
        with pytest.raises(g.GitError):
            fresh(repo, commit)
    else:
        assert fresh(repo, commit) == ls_tree(repo, commit)


def test_a_session_killed_between_reads_is_started_again(repo):
    commit = git(repo, "rev-parse", "HEAD")
    fresh(repo, commit)
    [pid] = session_pids(repo)
    os.kill(pid, signal.SIGKILL)
    # the read that meets the dead process falls back to ls-tree; the next starts a new one
    assert fresh(repo, commit) == ls_tree(repo, commit)
    assert fresh(repo, commit) == ls_tree(repo, commit)
    assert session_pids(repo) and session_pids(repo) != [pid]


def test_pins_go_through_one_process_and_a_planted_hook_never_runs(repo, tmp_path):
    marker = tmp_path / "hook-ran"
    hooks = repo / ".git" / "planted-hooks"
    hooks.mkdir()
    for name in ("reference-transaction", "post-update"):
        (hooks / name).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (hooks / name).chmod(0o755)
    git(repo, "config", "core.hooksPath", str(hooks))
    commit = git(repo, "rev-parse", "HEAD")
    refs = [g.pin_validated(repo, "race1", f"c{n}", 1, commit) for n in range(3)]
    assert [git(repo, "rev-parse", ref) for ref in refs] == [commit] * 3
    assert len(session_pids(repo)) == 1  # the update-ref session, for all three
    assert not marker.exists(), "a planted hook ran"


def test_a_pin_that_git_refuses_fails_loudly_and_the_next_one_works(repo):
    commit = git(repo, "rev-parse", "HEAD")
    g.pin_validated(repo, "race1", "a", 1, commit)
    locked = repo / ".git" / "refs" / "outpost" / "validated" / "race1" / "b" / "1.lock"
    locked.parent.mkdir(parents=True)
    locked.write_text("")
    with pytest.raises(g.GitError, match="pinning the validated commit"):
        g.pin_validated(repo, "race1", "b", 1, commit)
    assert subprocess.run(
        ["git", "rev-parse", "--verify", "-q", "refs/outpost/validated/race1/b/1"], cwd=repo
    ).returncode
    ref = g.pin_validated(repo, "race1", "c", 1, commit)
    assert git(repo, "rev-parse", ref) == commit


def test_no_session_outlives_its_race(repo):
    spec = build_spec(
        repository=repo,
        candidates=[cmd(f"c{n}", *flags(write=f"f{n}.txt", commit=True)) for n in range(2)],
        validate=ValidateSpec(command=("true",)),
    )
    result = run_race(spec)
    assert result.status.value == "winner"
    assert session_pids(repo) == []


def test_an_idle_session_ends_by_itself(repo, monkeypatch):
    monkeypatch.setattr(git_sessions, "IDLE_SECONDS", 0.2)
    commit = git(repo, "rev-parse", "HEAD")
    fresh(repo, commit)
    [pid] = session_pids(repo)
    deadline = time.monotonic() + 30
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(pid)
    assert fresh(repo, commit) == ls_tree(repo, commit)  # and a later read starts one again


def test_a_repository_made_elsewhere_is_read_too(tmp_path):
    repo = make_repo(tmp_path / "other")
    commit = git(repo, "rev-parse", "HEAD")
    assert fresh(repo, commit) == {"base.txt": ls_tree(repo, commit)["base.txt"]}


def test_an_agent_holds_none_of_the_sessions_pipes(repo, monkeypatch):
    # a candidate holding the update-ref session's input could move any ref; it gets none of them
    monkeypatch.setattr(git_sessions, "IDLE_SECONDS", 600.0)
    commit = git(repo, "rev-parse", "HEAD")
    fresh(repo, commit)
    g.pin_validated(repo, "before", "c", 1, commit)
    pipes = set()
    for (root, _), found in git_sessions._sessions.items():
        if root == os.path.realpath(repo) and found._process is not None:
            for stream in (found._process.stdin, found._process.stdout, found._process.stderr):
                assert stream is not None
                pipes.add(os.fstat(stream.fileno()).st_ino)
    assert len(pipes) == 6
    listing = "ls -l /proc/$$/fd/ > fds.txt && git add fds.txt && git commit -qm fds"
    spec = build_spec(
        repository=repo,
        candidates=[CandidateSpec("looker", "command", "look", command=("sh", "-c", listing))],
        validate=ValidateSpec(command=("true",)),
    )
    result = run_race(spec)
    assert result.status.value == "winner", result.to_json()
    seen = git(repo, "show", f"{result.candidates[0].commit}:fds.txt")
    held = {int(inode) for inode in re.findall(r"pipe:\[(\d+)\]", seen)}
    assert held, seen  # its own output pipes at least
    assert not held & pipes, seen
