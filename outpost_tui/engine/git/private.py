"""A candidate's own git repository: what its `git` writes, instead of the user's.

An isolated candidate's worktree `.git` leads to a repository of its own (`candidate.git`, in the
worktree's git directory, so it goes with the worktree): the worktree's branch and index, the
user's branches and tags as a snapshot, and the user's objects read through alternates, never
written. Whatever the candidate does there (branches made, moved or deleted, replace refs, a
config with hooks and drivers) stays there. When its agent is done the engine brings the one
result commit into the user's repository itself: the candidate's files are read by hand, never
with git in that repository (its config is the candidate's), the new objects are packed by the
user's repository's git and indexed again with every object hashed and checked (`index-pack
--strict`), and only then does the engine move the attempt's own branch, from the commit it
knew to the result.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

from .layout import git_common_dir
from .runner import GitError, _failure, _run, error_line, output
from .worktrees import worktree_git_dir

PRIVATE = "candidate.git"
POINTER = "candidate.gitfile"

# Nothing the candidate wrote is read past this: a ref or HEAD is one short line.
_MOST = 4096
_OBJECT_ID = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_REF = re.compile(r"^refs/[A-Za-z0-9._/+-]{1,240}$")


def private_git_dir(directory: Path | str) -> Path:
    """Where the candidate repository of the worktree `directory` lives (made or not)."""
    return worktree_git_dir(directory) / PRIVATE


def pointer_file(directory: Path | str) -> Path:
    """The `.git` file a sandbox puts over the worktree's own: `gitdir:` the private repository."""
    return worktree_git_dir(directory) / POINTER


def make_private(repo_root: Path | str, directory: Path | str, *, fresh: bool = False) -> Path:
    """The worktree's private repository, made from the worktree as it is now; one a replay of
    the attempt finds is kept as it is (its refs may hold the candidate's commits), unless
    `fresh` (a grading checkout's, made again for each commit it grades)."""
    root, target = Path(repo_root), Path(directory)
    own = worktree_git_dir(target)
    private = own / PRIVATE
    common = git_common_dir(root)
    pointer = own / POINTER
    if fresh:
        shutil.rmtree(private, ignore_errors=True)
    if (private / "HEAD").is_file():
        _write(pointer, f"gitdir: {private}\n")
        return private
    # a candidate's worktree is on its branch; a grading checkout is detached at the graded commit
    branch = _read_small(own / "HEAD").removeprefix("ref:").strip()
    detached = not branch.startswith("refs/heads/")
    refs = str(
        output(
            "listing branches and tags",
            root,
            "for-each-ref",
            "--format=%(objectname) %(refname)",
            "refs/heads",
            "refs/tags",
        )
    )
    # the worktree's HEAD as the engine left it: its branch's tip, or the graded commit itself
    tips = {name: oid for oid, _, name in (line.partition(" ") for line in refs.splitlines())}
    head = tips.get(branch, "") if not detached else branch
    if not _OBJECT_ID.fullmatch(head):
        raise GitError(f"cannot make the candidate's repository {private}: the worktree's HEAD is {branch!r}")
    # the user's branches and tags, to read (git log main); the engine's own are not the candidate's
    packed = [line for line in refs.splitlines() if " refs/heads/outpost/" not in line]
    staging = own / f"{PRIVATE}.new"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        for part in ("objects/info", "refs/heads", "refs/tags", "info"):
            (staging / part).mkdir(parents=True, exist_ok=True)
        _write(staging / "objects" / "info" / "alternates", f"{common / 'objects'}\n")
        _write(staging / "HEAD", f"{head}\n" if detached else f"ref: {branch}\n")
        _write(
            staging / "packed-refs",
            "# pack-refs with: peeled sorted\n" + "".join(f"{line}\n" for line in packed),
        )
        if not detached:
            _write(staging / branch, f"{head}\n")
        _write(staging / "config", _config(root, common))
        for name in ("info/exclude", "shallow"):
            if (common / name).is_file():
                shutil.copyfile(common / name, staging / name)
        if (own / "index").is_file():
            shutil.copyfile(own / "index", staging / "index")
        os.rename(staging, private)
    except OSError as error:
        shutil.rmtree(staging, ignore_errors=True)
        raise GitError(
            f"cannot make the candidate's repository {private}: {error.strerror or error}"
        ) from None
    _write(pointer, f"gitdir: {private}\n")
    return private


def _config(root: Path, common: Path) -> str:
    """The private repository's config: the repository's format and the committer the user set
    for it; nothing that runs a program."""
    found = _settings(root)
    version = found.get("core.repositoryformatversion") or "0"
    lines = ["[core]", f"\trepositoryformatversion = {version}", "\tbare = false"]
    formats = [(key, found.get(f"extensions.{key}", "")) for key in ("objectformat", "refstorage")]
    formats = [(key, value) for key, value in formats if value]
    if formats:
        lines += ["[extensions]", *(f"\t{key} = {value}" for key, value in formats)]
    identity = [(key, found.get(f"user.{key}", "")) for key in ("name", "email")]
    identity = [(key, value) for key, value in identity if value]
    if identity:
        lines += ["[user]", *(f"\t{key} = {_quoted(value)}" for key, value in identity)]
    return "\n".join(lines) + "\n"


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


_COPIED = r"^(core\.repositoryformatversion|extensions\.(objectformat|refstorage)|user\.(name|email))$"


def _settings(root: Path) -> dict[str, str]:
    """The settings the private repository copies, in one git call (the last value of each wins,
    as git reads them)."""
    status, out, _ = _run(root, "config", "-z", "--get-regexp", _COPIED)
    found: dict[str, str] = {}
    if status == 0:
        for entry in str(out).split("\0"):
            key, _, value = entry.partition("\n")
            if key:
                found[key.lower()] = value
    return found


def import_result(repo_root: Path | str, directory: Path | str, branch: str) -> str | None:
    """Bring the private repository's HEAD commit into the user's repository as `branch` (the
    attempt's own); returns that commit, or None when there was no private repository.

    Raises GitError (one line) when the candidate left something that is not a commit whose every
    object is intact; the attempt's branch is then where the engine left it."""
    root, target = Path(repo_root), Path(directory)
    private = private_git_dir(target)
    if not private.is_dir():
        return None
    where = f"the candidate's repository {private}"
    result = _private_head(private)
    if result is None:
        raise GitError(f"{where} has no HEAD commit the engine can read: its work was not brought in")
    known = str(output("reading the attempt's branch", root, "rev-parse", "--verify", f"refs/heads/{branch}"))
    known = known.strip()
    if result != known:
        _copy_objects(root, private, result, known, where)
        status, _, err = _run(
            root, "update-ref", "-m", "outpost: the candidate's result", f"refs/heads/{branch}", result, known
        )
        if status != 0 and "non-commit" in str(err):
            raise GitError(f"{where}: its HEAD {result[:12]} is not a commit: its work was not brought in")
        if status != 0:
            raise _failure(f"moving {branch} to the candidate's result", root, err)
    # the worktree's own index, as git would write it for the commit: the candidate's is its own
    status, _, err = _run(target, "read-tree", "HEAD")
    if status != 0:
        raise _failure(f"resetting the index of {target}", target, err)
    return result


def _copy_objects(root: Path, private: Path, result: str, known: str, where: str) -> None:
    """The objects of `result` the repository lacks, packed by its git reading the private
    objects beside its own, then indexed again: every object hashed, checked and connected."""
    borrow = private / "objects"

    def refuse(what: str, err: str = "") -> GitError:
        said = f" ({error_line(err)})" if err else ""
        return GitError(f"{where}: its commit {result[:12]} {what}{said}: its work was not brought in")

    # whether it is a commit at all is update-ref's to refuse: one git call fewer per attempt
    revisions = f"{result}\n^{known}\n".encode()
    status, pack, err = _run(
        root,
        "pack-objects",
        "--revs",
        "--stdout",
        "-q",
        input=revisions,
        binary=True,
        timeout=None,
        borrow=borrow,
    )
    if status != 0:
        raise refuse("cannot be read whole", err)
    status, _, err = _run(
        root,
        "index-pack",
        "--stdin",
        "--strict",
        input=pack if isinstance(pack, bytes) else b"",
        timeout=None,
    )
    if status != 0:
        raise refuse("failed the object check", err)
    status, _, err = _run(root, "rev-list", "--objects", "--quiet", result, "--not", known)
    if status != 0:
        raise refuse("is not complete", err)


def _private_head(private: Path) -> str | None:
    """HEAD of the private repository, read as files (git would read the candidate's config)."""
    head = _read_small(private / "HEAD")
    for _ in range(5):  # a symbolic ref to a symbolic ref, no further
        if _OBJECT_ID.match(head):
            return head
        name = head.removeprefix("ref:").strip()
        if not head.startswith("ref:") or not _REF.match(name) or ".." in name:
            return None
        loose = _read_small(private / name)
        if loose:
            head = loose
            continue
        return _packed(private, name)
    return None


def _packed(private: Path, name: str) -> str | None:
    try:
        text = _read_limited(private / "packed-refs", 64 * 1024 * 1024)
    except OSError:
        return None
    for line in text.splitlines():
        value, _, ref = line.partition(" ")
        if ref == name and _OBJECT_ID.match(value):
            return value
    return None


def _read_small(path: Path) -> str:
    try:
        return _read_limited(path, _MOST).strip()
    except OSError:
        return ""


def _read_limited(path: Path, most: int) -> str:
    # a regular file only, never followed through a link: the candidate wrote it
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(f"{path} is not a regular file")
        return os.read(descriptor, most).decode("utf-8", errors="replace")
    finally:
        os.close(descriptor)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
