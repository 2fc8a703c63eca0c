"""real_path answers what os.path.realpath answers, for every shape of path the engine meets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from outpost_tui.engine.paths import real_path


def _layout(tmp_path: Path) -> list[str]:
    base = tmp_path / "base"
    (base / "dir" / "sub").mkdir(parents=True)
    (base / "dir" / "file").write_text("x")
    os.symlink("dir", base / "rel-link")  # relative
    os.symlink(base / "dir" / "sub", base / "abs-link")  # absolute
    os.symlink("rel-link/sub", base / "chain")  # a link through a link
    os.symlink("missing", base / "dangling")
    os.symlink("loop-b", base / "loop-a")
    os.symlink("loop-a", base / "loop-b")
    os.symlink("..", base / "dir" / "up")
    os.mkfifo(base / "fifo")
    locked = base / "locked"
    locked.mkdir()
    (locked / "inside").mkdir()
    doomed = base / "doomed"
    doomed.mkdir()
    return [
        str(base / "dir"),
        str(base / "dir" / "file"),
        str(base / "dir" / "file") + "/",  # a file named as a directory
        str(base / "rel-link"),
        str(base / "rel-link" / "file"),
        str(base / "abs-link" / ".."),  # ".." after a link: the link's target's parent
        str(base / "chain"),
        str(base / "dangling"),
        str(base / "dangling" / "deeper"),
        str(base / "loop-a"),
        str(base / "dir" / "up" / "rel-link" / "sub"),
        str(base / "missing" / ".." / "dir"),
        str(base / "fifo"),
        str(base / "dir" / "." / "sub" / ".."),
        str(base) + "//dir///sub",
        "relative/from/cwd",
        ".",
        "/",
        str(locked / "inside"),
    ]


def test_real_path_is_realpath_for_every_kind_of_path(tmp_path, monkeypatch):
    paths = _layout(tmp_path)
    monkeypatch.chdir(tmp_path / "base")
    for path in paths:
        assert real_path(path) == os.path.realpath(path), path
        assert real_path(Path(path)) == os.path.realpath(path), path


def test_a_directory_removed_after_it_was_opened_is_not_named_deleted(tmp_path, monkeypatch):
    # The kernel names a removed directory "<path> (deleted)": never an answer.
    doomed = tmp_path / "doomed"
    doomed.mkdir()
    monkeypatch.chdir(doomed)
    doomed.rmdir()
    # what realpath does, then: there is no path to name
    with pytest.raises(FileNotFoundError):
        os.path.realpath(".")
    with pytest.raises(FileNotFoundError):
        real_path(".")


def test_a_directory_without_read_permission_still_resolves(tmp_path):
    # O_PATH needs no permission on the path itself, only to search the directories above it.
    shut = tmp_path / "shut"
    shut.mkdir()
    os.symlink(shut, tmp_path / "to-shut")
    shut.chmod(0)
    try:
        assert real_path(tmp_path / "to-shut") == str(shut)
    finally:
        shut.chmod(0o755)
