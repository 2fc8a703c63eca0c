"""A candidate's own git repository: what its `git` writes, instead of the user's.

A fenced candidate (bubblewrap, a container) does not see the repository's worktree git
directories (`<common>/worktrees`): in their place it sees its checkout's *view*, a directory of its
own under `.outpost/repositories/` (named like the checkout, made before its sandbox starts, so a
container can mount it while git is still checking out). Inside the view, under the name of the
checkout's own git directory, is its private repository, so the checkout's `.git` file, untouched,
leads its git there: the checkout's branch (or, for a grading checkout, its detached commit) and
index, the user's branches and tags as a snapshot, the user's objects read through alternates and
never written, a config with nothing that runs a program. Whatever the candidate does there
(branches made, moved or deleted, replace refs, hooks and drivers in its config) stays there.

Every private repository of a race starts from one template, read once as the race starts (its
refs listing, one config read). When its agent is done, the engine brings the one result commit
into the user's repository itself: the candidate's files are read by hand, never with git in that
repository (its config is the candidate's); the new objects are packed by the user's repository's
git reading the private objects beside its own and indexed again as they stream in, each hashed,
checked and its links found (`index-pack --strict`); and only then is the attempt's own branch
moved, from the commit it held to the result.
"""

from __future__ import annotations

import bisect
import os
import re
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from . import sessions
from .layout import OUTPOST_DIR, WORKSPACES, git_common_dir
from .runner import GitError, _failure, _pipe, _run, error_line, output
from .worktrees import BRANCH_PREFIX, worktree_git_dir

REPOSITORIES = "repositories"

# Nothing the candidate wrote is read past this: a ref or HEAD is one short line.
_MOST = 4096
_OBJECT_ID = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_REF = re.compile(r"^refs/[A-Za-z0-9._/+-]{1,240}$")
# The settings a private repository copies from the user's: the format, the committer.
_COPIED = r"^(core\.repositoryformatversion|extensions\.(objectformat|refstorage)|user\.(name|email))$"


@dataclass(frozen=True)
class PrivateTemplate:
    """What every private repository of one race starts from."""

    common: Path  # the user's repository's git directory: the objects every one borrows
    refs: tuple[tuple[str, str], ...]  # the user's branches and tags as the race found them, sorted
    config: str
    copied: tuple[tuple[str, bytes], ...]  # info/exclude, shallow: as the user's

    def packed_refs(self, branch: str = "", tip: str = "") -> str:
        """The refs, with the checkout's branch among them (where git looks for it first)."""
        listed = list(self.refs)
        if branch:
            listed = [entry for entry in listed if entry[0] != branch]
            bisect.insort(listed, (branch, tip))
        return "# pack-refs with: peeled sorted\n" + "".join(f"{oid} {name}\n" for name, oid in listed)


def private_template(repo_root: Path | str, refs: Mapping[str, str]) -> PrivateTemplate:
    """The race's template: `refs` as the race listed them (the engine's own branches left out),
    and the repository's format and committer, in one git call."""
    root = Path(repo_root)
    common = git_common_dir(root)
    own = f"refs/heads/{BRANCH_PREFIX.split('/')[0]}/"
    listed = sorted(
        (name, oid)
        for name, oid in refs.items()
        if name.startswith(("refs/heads/", "refs/tags/")) and not name.startswith(own)
    )
    copied = []
    for name in ("info/exclude", "shallow"):
        try:
            copied.append((name, (common / name).read_bytes()))
        except FileNotFoundError:
            continue
        except OSError as error:
            raise GitError(f"cannot read {common / name}: {error.strerror or error}") from None
    return PrivateTemplate(
        common=common, refs=tuple(listed), config=_config(_settings(root)), copied=tuple(copied)
    )


def candidate_view(directory: Path | str) -> Path:
    """What a fenced sandbox shows as `<common>/worktrees` to the checkout at `directory` (one
    under `.outpost/workspaces/`): `.outpost/repositories/<its name>`, made or not."""
    target = Path(directory).absolute()
    if target.parent.name != WORKSPACES or target.parent.parent.name != OUTPOST_DIR:
        raise GitError(f"{target} is not a checkout under {OUTPOST_DIR}/{WORKSPACES}")
    return target.parent.parent / REPOSITORIES / target.name


def make_view(directory: Path | str) -> Path:
    """The checkout's view, made (empty) if it is not there: what a container mounts as it starts."""
    view = candidate_view(directory)
    try:
        try:
            os.mkdir(view, 0o700)
        except FileNotFoundError:  # the race's first: .outpost/repositories/ too
            view.mkdir(parents=True, exist_ok=True, mode=0o700)
    except FileExistsError:
        pass
    except OSError as error:
        raise GitError(f"cannot create {view}: {error.strerror or error}") from None
    return view


def private_git_dir(directory: Path | str) -> Path:
    """The private repository of the checkout at `directory` (made or not)."""
    return candidate_view(directory) / worktree_git_dir(directory).name


def make_private(
    template: PrivateTemplate, directory: Path | str, head: str | None = None, *, fresh: bool = False
) -> Path:
    """The checkout's private repository, made from the checkout as it is now: on its branch at
    `head` (the branch's tip; read with git when not given), or detached at the commit its HEAD
    names. One a replay of the attempt finds is kept as it is (its refs may hold the candidate's
    commits), unless `fresh` (a grading checkout's, made again for each run it grades)."""
    target = Path(directory)
    own = worktree_git_dir(target)
    view = make_view(target)
    private = view / own.name
    if fresh or os.path.islink(private):
        _remove(private)  # (a link a candidate left in its place is never kept, nor followed)
    if os.path.isfile(private / "HEAD"):
        return private
    line = _head_line(own)
    branch = line.removeprefix("ref:").strip() if line.startswith("ref:") else ""
    if branch and head is None:
        head = str(output("reading the branch", target, "rev-parse", "--verify", f"{branch}^{{commit}}"))
    tip = (head if branch else line) or ""
    if (branch and not branch.startswith("refs/heads/")) or not _OBJECT_ID.fullmatch(tip):
        raise GitError(f"cannot make the candidate's repository {private}: the checkout's HEAD is {line!r}")
    staging = view / f".{own.name}.new"
    _remove(staging)
    # as few files and directories as git needs (each costs a write on a slow disk): the branch
    # in packed-refs, no empty refs/heads or refs/tags
    files = {
        "HEAD": f"ref: {branch}\n" if branch else f"{tip}\n",
        "config": template.config,
        "packed-refs": template.packed_refs(branch, tip),
        "objects/info/alternates": f"{template.common / 'objects'}\n",
    }
    try:
        copied_info = any(name.startswith("info/") for name, _ in template.copied)
        for part in ("", "objects", "objects/info", "refs", *(["info"] if copied_info else [])):
            os.mkdir(staging / part)
        for name, text in files.items():
            _write(staging / name, text.encode())
        for name, content in template.copied:
            _write(staging / name, content)
        if (own / "index").is_file():
            shutil.copyfile(own / "index", staging / "index")
        os.rename(staging, private)
    except OSError as error:
        _remove(staging)
        raise GitError(
            f"cannot make the candidate's repository {private}: {error.strerror or error}"
        ) from None
    return private


def remove_view(directory: Path | str) -> None:
    """The checkout's view and its private repository, once the checkout itself is gone (a
    directory that is no checkout of the engine's, such as a worktree a candidate nested in its
    own, has none)."""
    try:
        view = candidate_view(directory)
    except GitError:
        return
    _remove(view)


def _config(found: Mapping[str, str]) -> str:
    """The private repository's config: the repository's format and the committer the user set
    for it; nothing that runs a program."""
    version = found.get("core.repositoryformatversion") or "0"
    # no reflogs: nothing reads them, and every file the candidate's git writes is one more to
    # remove with the checkout
    lines = ["[core]", f"\trepositoryformatversion = {version}", "\tbare = false"]
    lines.append("\tlogAllRefUpdates = false")
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
    if not os.path.lexists(private):
        return None
    where = f"the candidate's repository {private}"
    result = _private_head(private)
    if result is None:
        raise GitError(f"{where} has no HEAD commit the engine can read: its work was not brought in")
    ref = f"refs/heads/{branch}"
    known = _tip(root, ref)
    if result == known:
        return result  # nothing committed: the worktree's own index is still the branch's
    if _present(root, result) and not _made_here(private, result):
        # it can read the repository's objects and refs (a rival's result, once brought in; a
        # branch of the user's), not make them: its result is a commit it wrote (the same commit
        # a rival wrote too, byte for byte, is its own all the same)
        raise GitError(
            f"{where}: its HEAD {result[:12]} names a commit that was already in your repository, "
            "not one it made: its work was not brought in"
        )
    _copy_objects(root, private, result, known, where)
    try:
        # the race's update-ref session, from the commit the branch held: no process of its own
        sessions.update_ref(os.fspath(root), ref, result, known)
    except sessions.SessionFailed:
        _move(root, ref, result, known, where)
    # the worktree's own index, as git would write it for the commit: the candidate's is its own.
    # --reset keeps the stat data of every file the commit did not change, so the status that
    # follows hashes only what it did, not the whole checkout again (and, unlike -m, takes the
    # commit's version of a file the candidate changed, whatever its stat data says).
    status, _, err = _run(target, "read-tree", "--reset", "HEAD")
    if status != 0:
        raise _failure(f"resetting the index of {target}", target, err)
    return result


def _move(root: Path, ref: str, result: str, known: str, where: str) -> None:
    """`ref` from `known` to `result` with a process of its own, which says why not."""
    status, _, err = _run(root, "update-ref", "-m", "outpost: the candidate's result", ref, result, known)
    if status != 0 and "non-commit" in str(err):
        raise GitError(f"{where}: its HEAD {result[:12]} is not a commit: its work was not brought in")
    if status != 0:
        raise _failure(f"moving {ref.removeprefix('refs/heads/')} to the candidate's result", root, err)


def _present(root: Path, oid: str) -> bool:
    """Whether the repository has the object `oid` (its cat-file session; a process where it fails)."""
    try:
        [(_, kind, _)] = sessions.read_objects(os.fspath(root), [oid])
        return kind != "missing"
    except sessions.SessionFailed:
        return _run(root, "cat-file", "-e", oid)[0] == 0


def wrote(directory: Path | str, oid: str) -> bool:
    """Whether the private repository of the checkout at `directory` wrote the commit `oid`
    itself: a deterministic program writes the very commit a rival wrote in the same second
    (same files, same parent, same author), and that commit is its own all the same."""
    try:
        return _made_here(private_git_dir(directory), oid)
    except (GitError, OSError, UnicodeDecodeError):  # no checkout of the engine's, or no link
        return False


def _made_here(private: Path, oid: str) -> bool:
    """Whether the private repository holds the commit `oid` as a loose object of its own (what
    git writes for a commit), reached without following a link."""
    try:
        top = os.open(private, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        os.stat(f"objects/{oid[:2]}/{oid[2:]}", dir_fd=top, follow_symlinks=False)
        return True
    except OSError:
        return False
    finally:
        os.close(top)


def _tip(root: Path, ref: str) -> str:
    """The commit `ref` names, through the race's `cat-file` session (a process where it fails)."""
    try:
        [(oid, kind, _)] = sessions.read_objects(os.fspath(root), [ref])
        if kind == "commit":
            return oid
    except sessions.SessionFailed:
        pass
    return str(output("reading the attempt's branch", root, "rev-parse", "--verify", f"{ref}^{{commit}}"))


def _copy_objects(root: Path, private: Path, result: str, known: str, where: str) -> None:
    """The objects of `result` the repository lacks, packed by its git reading the private
    objects beside its own, and indexed again as the pack streams in (never held in memory):
    every object hashed and checked, and every object it links to found, in the pack or in the
    repository, so the commit arrives whole or not at all."""

    def refuse(what: str, err: str = "") -> GitError:
        said = f" ({error_line(err)})" if err else ""
        return GitError(f"{where}: its commit {result[:12]} {what}{said}: its work was not brought in")

    # whether it is a commit at all is update-ref's to refuse: one git call fewer per attempt
    packed, indexed = _pipe(
        root,
        ("pack-objects", "--revs", "--stdout", "-q"),
        ("index-pack", "--stdin", "--strict"),
        input=f"{result}\n^{known}\n".encode(),
        borrow=private / "objects",
    )
    if packed[0] != 0:
        raise refuse("cannot be read whole", packed[1])
    if indexed[0] != 0:
        raise refuse("failed the object check", indexed[1])


def _private_head(private: Path) -> str | None:
    """HEAD of the private repository, read as files (git would read the candidate's config),
    none of them through a symbolic link: the candidate's links would lead the engine to refs it
    cannot see (a rival's git directory, the user's refs) and name them as its own."""
    try:
        top = os.open(private, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        head = _read_small(top, "HEAD")
        for _ in range(5):  # a symbolic ref to a symbolic ref, no further
            if _OBJECT_ID.match(head):
                return head
            name = head.removeprefix("ref:").strip()
            if not head.startswith("ref:") or not _REF.match(name) or ".." in name.split("/"):
                return None
            loose = _read_small(top, name)
            if loose:
                head = loose
                continue
            return _packed(top, name)
        return None
    finally:
        os.close(top)


def _packed(top: int, name: str) -> str | None:
    try:
        text = _read_limited(top, "packed-refs", 64 * 1024 * 1024)
    except OSError:
        return None
    for line in text.splitlines():
        value, _, ref = line.partition(" ")
        if ref == name and _OBJECT_ID.match(value):
            return value
    return None


def _head_line(git_dir: Path) -> str:
    """The first line of a git directory's HEAD (the engine's own worktree git directory)."""
    try:
        top = os.open(git_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return ""
    try:
        return _read_small(top, "HEAD")
    finally:
        os.close(top)


def _read_small(top: int, name: str) -> str:
    try:
        return _read_limited(top, name, _MOST).strip()
    except OSError:
        return ""


def _read_limited(top: int, name: str, most: int) -> str:
    """`name` (a relative path) under the directory `top`, a regular file reached without
    following any link; at most `most` bytes."""
    *parents, last = name.split("/")
    opened: list[int] = []
    try:
        at = top
        for part in parents:
            at = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=at)
            opened.append(at)
        descriptor = os.open(last, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=at)
    finally:
        for fd in opened:
            os.close(fd)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(f"{name} is not a regular file")
        return os.read(descriptor, most).decode("utf-8", errors="replace")
    finally:
        os.close(descriptor)


def _write(path: Path, content: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(descriptor, view) :]
    finally:
        os.close(descriptor)


def _remove(path: Path) -> None:
    """Remove what the candidate had (its links are removed, never followed)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
