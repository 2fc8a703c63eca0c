"""The clean-tree check reads the index itself to skip `git ls-files` when no entry hides an edit.

Every index here is written by real git (versions 2, 3 and 4, split, long paths, sha256), or is
one of those with bytes changed the way a candidate could change them; git's own listing of the
same file is the truth the read is held to: it may say "maybe" too often, never "no" wrongly."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
from pathlib import Path

import pytest

from outpost_tui.engine import git as g
from outpost_tui.engine.git import index as git_index
from outpost_tui.engine.git import runner as git_runner
from tests.conftest import git, make_repo


def flagged_by_git(repo: Path, index: Path) -> bool | None:
    """What git itself lists of `index`: True when an entry is assume-unchanged or skip-worktree,
    None when git cannot read the file."""
    done = subprocess.run(
        ["git", "ls-files", "-v", "-z"],
        cwd=repo,
        capture_output=True,
        env={**os.environ, "GIT_INDEX_FILE": str(index)},
    )
    if done.returncode != 0:
        return None
    tags = [record[:1] for record in done.stdout.split(b"\0") if record]
    return any(tag.islower() or tag == b"S" for tag in tags)


def index_of(repo: Path) -> Path:
    return repo / ".git" / "index"


def with_files(repo: Path, count: int = 30) -> None:
    for n in range(count):
        path = repo / f"d{n % 4}" / ("deeper/" * (n % 3)) / f"f{n}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{n}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "files")


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_every_index_version_is_read_and_agrees_with_git(repo, version):
    with_files(repo)
    git(repo, "update-index", "--index-version", version)
    index = index_of(repo)
    assert git_index.may_hide_edits(str(index)) is False
    assert flagged_by_git(repo, index) is False

    git(repo, "update-index", "--assume-unchanged", "d0/deeper/f4.txt")
    assert flagged_by_git(repo, index) is True
    assert git_index.may_hide_edits(str(index)) is True

    git(repo, "update-index", "--no-assume-unchanged", "d0/deeper/f4.txt")
    git(repo, "update-index", "--skip-worktree", "d3/f27.txt")  # git moves to version 3 if needed
    assert flagged_by_git(repo, index) is True
    assert git_index.may_hide_edits(str(index)) is True


def test_a_path_longer_than_the_flags_can_say_is_read(repo):
    long_path = "/".join(["a" * 200] * 25) + "/end.txt"  # over 4095 bytes: the name field says 0xfff
    blob = git(repo, "hash-object", "-w", "base.txt")
    for version in ("2", "3", "4"):
        git(repo, "update-index", "--index-version", version)
        git(repo, "update-index", "--add", "--cacheinfo", f"100644,{blob},{long_path}")
        git(repo, "update-index", "--add", "--cacheinfo", f"100644,{blob},zz.txt")
        assert git_index.may_hide_edits(str(index_of(repo))) is False, version
        git(repo, "update-index", "--skip-worktree", "zz.txt")
        assert git_index.may_hide_edits(str(index_of(repo))) is True, version
        git(repo, "update-index", "--no-skip-worktree", "zz.txt")


def test_a_split_index_is_left_to_git(repo):
    with_files(repo)
    git(repo, "update-index", "--split-index")
    # the entries live in a shared index file this read does not follow: always "maybe"
    assert git_index.may_hide_edits(str(index_of(repo))) is True


def test_a_sha256_repository_is_read(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "--object-format=sha256")
    (repo / "a.txt").write_text("a\n")
    git(repo, "add", "a.txt")
    assert git_index.may_hide_edits(str(index_of(repo))) is False
    git(repo, "update-index", "--assume-unchanged", "a.txt")
    assert git_index.may_hide_edits(str(index_of(repo))) is True


def rehash(data: bytes, size: int = 20) -> bytes:
    body = data[:-size]
    return body + hashlib.new("sha1" if size == 20 else "sha256", body).digest()


def test_a_doubtful_file_is_maybe(repo):
    with_files(repo, 5)
    data = index_of(repo).read_bytes()
    bogus = index_of(repo).with_name("bogus")
    cases = {
        "missing": None,
        "empty": b"",
        "truncated": data[: len(data) // 2],
        "checksum zeroed (index.skipHash)": data[:-20] + bytes(20),
        "checksum wrong": data[:-1] + bytes([data[-1] ^ 1]),
        "another signature": rehash(b"XIRC" + data[4:]),
        "version 5": rehash(data[:4] + (5).to_bytes(4, "big") + data[8:]),
        "one entry too many": rehash(
            data[:8] + (int.from_bytes(data[8:12], "big") + 1).to_bytes(4, "big") + data[12:]
        ),
        "a sparse directory extension": rehash(data[:-20] + b"sdir" + bytes(4) + bytes(20)),
        "an extension longer than the file": rehash(
            data[:-20] + b"ZZZZ" + (99).to_bytes(4, "big") + bytes(20)
        ),
    }
    for what, content in cases.items():
        if content is None:
            bogus.unlink(missing_ok=True)
        else:
            bogus.write_bytes(content)
        assert git_index.may_hide_edits(str(bogus)) is True, what


def test_no_mutation_of_a_flagged_index_reads_as_unflagged_where_git_sees_a_flag(repo):
    # A candidate writes the index: every byte changed (checksum made right again, as a careful
    # attacker would) either still reads as "maybe", or git itself lists no flagged entry.
    with_files(repo, 6)
    randomness = random.Random(13)
    for version in ("2", "3", "4"):
        git(repo, "update-index", "--index-version", version)
        git(repo, "update-index", "--skip-worktree", "d1/deeper/f1.txt")
        git(repo, "update-index", "--assume-unchanged", "d2/deeper/deeper/f2.txt")
        data = index_of(repo).read_bytes()
        git(repo, "update-index", "--no-skip-worktree", "d1/deeper/f1.txt")
        git(repo, "update-index", "--no-assume-unchanged", "d2/deeper/deeper/f2.txt")
        mutated = index_of(repo).with_name(f"mutated-{version}")
        positions = list(range(12, len(data) - 20))
        for position in randomness.sample(positions, min(60, len(positions))):
            for flip in (0x80, 0x40, 0x01, 0xFF):
                changed = bytearray(data)
                changed[position] ^= flip
                mutated.write_bytes(rehash(bytes(changed)))
                if git_index.may_hide_edits(str(mutated)) is False:
                    assert flagged_by_git(repo, mutated) is not True, (version, position, flip)


def test_an_edit_behind_each_flag_keeps_the_worktree_in_every_index_version(tmp_path):
    repo = make_repo(tmp_path / "repo")
    (repo / "other.txt").write_text("other\n")
    git(repo, "add", "other.txt")
    git(repo, "commit", "-qm", "two")
    baseline = g.resolve_commit(repo)
    for n, (version, flag, name) in enumerate(
        [
            (v, f, p)
            for v in ("2", "3", "4")
            for f, p in (("--assume-unchanged", "base.txt"), ("--skip-worktree", "other.txt"))
        ]
    ):
        branch = g.branch_name("race1", "c", n + 1)
        directory = g.worktree_directory(repo, "c", branch)
        g.add_worktree(repo, branch, directory, baseline)
        git(directory, "update-index", "--index-version", version)
        git(directory, "update-index", flag, name)
        (directory / name).write_text("precious work\n")
        assert git(directory, "status", "--porcelain") == ""  # hidden from status
        assert g.is_clean(directory) is False, (version, flag)
        assert g.remove_worktree(repo, directory) is False
        assert (directory / name).read_text() == "precious work\n"
        # a flag with nothing behind it: the full check runs and finds the worktree clean
        (directory / name).write_text((repo / name).read_text())
        assert g.is_clean(directory) is True, (version, flag)


def test_a_clean_worktree_is_checked_with_one_git_process(repo, monkeypatch):
    baseline = g.resolve_commit(repo)
    branch = g.branch_name("race1", "c", 1)
    directory = g.worktree_directory(repo, "c", branch)
    g.add_worktree(repo, branch, directory, baseline)
    g.is_clean(directory)  # the runner reads the repository's drivers once
    commands: list[list[str]] = []
    execute = git_runner._execute

    def counted(command, **options):
        commands.append(command)
        return execute(command, **options)

    monkeypatch.setattr(git_runner, "_execute", counted)
    assert g.is_clean(directory) is True
    assert [c[c.index("-C") + 2 :][:2] for c in commands] == [["--no-optional-locks", "status"]]
    git(directory, "update-index", "--skip-worktree", "base.txt")
    commands.clear()
    assert g.is_clean(directory) is True  # flagged but unchanged: git lists the flags
    assert [c[c.index("-C") + 2] for c in commands] == ["--no-optional-locks", "ls-files"]
