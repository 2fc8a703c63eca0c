"""Where things are: the repository's root and common git directory, and `.outpost/` inside it
(created private, excluded from git) with its workspaces and recovery directories."""

from __future__ import annotations

import os
from pathlib import Path

from ..paths import real_path
from .runner import GitError, _git_dirs, _run, output

OUTPOST_DIR = ".outpost"


WORKSPACES = "workspaces"


RECOVERY = "recovery"


EXCLUDE_LINE = "/.outpost/"


def repository_root(path: Path | str) -> Path:
    """The top level of the checkout that contains `path`."""
    path = Path(path).expanduser().absolute()
    if not path.is_dir():
        raise GitError(f"not a git repository: {path}")
    status, out, _ = _run(path, "rev-parse", "--show-toplevel")
    if status != 0 or not out:
        raise GitError(f"not a git repository: {path}")
    return Path(str(out))


def git_common_dir(repo_root: Path | str) -> Path:
    """The repository's shared .git directory (the same for every worktree of it)."""
    root = Path(repo_root).absolute()
    found = _common_dir_from_files(root)
    if found is not None:
        return found
    out = output("finding the .git directory", root, "rev-parse", "--git-common-dir")
    return Path(real_path(root / str(out)))


def _common_dir_from_files(root: Path) -> Path | None:
    """Read the .git layout directly, as git itself does, to save a process per call."""
    dirs = _git_dirs(root)
    return dirs[1] if dirs is not None else None


def ensure_outpost_dir(repo_root: Path | str) -> Path:
    """Create <repo>/.outpost (0700) and hide it from the host's git through info/exclude."""
    root = Path(repo_root)
    outpost = root / OUTPOST_DIR
    try:
        outpost.mkdir(mode=0o700)
        os.chmod(outpost, 0o700)  # mkdir's mode passes through the umask; state dirs must be 0700
    except FileExistsError:
        if not outpost.is_dir():
            raise GitError(f"{outpost} exists and is not a directory") from None
    except OSError as error:
        raise GitError(f"cannot create {outpost}: {error.strerror}") from error
    exclude = git_common_dir(root) / "info" / "exclude"
    try:
        exclude.parent.mkdir(parents=True, exist_ok=True)
        existing = exclude.read_text(encoding="utf-8", errors="surrogateescape") if exclude.exists() else ""
        if EXCLUDE_LINE not in (line.strip() for line in existing.splitlines()):
            separator = "" if not existing or existing.endswith("\n") else "\n"
            # Appending keeps whatever the user or another tool wrote there.
            with open(exclude, "a", encoding="utf-8", errors="surrogateescape") as handle:
                handle.write(f"{separator}{EXCLUDE_LINE}\n")
    except OSError as error:
        raise GitError(f"cannot update {exclude}: {error.strerror}") from error
    return outpost


def workspaces_directory(repo_root: Path | str) -> Path:
    """`.outpost/workspaces/` of the repository: where candidate worktrees live, and only there."""
    return Path(repo_root) / OUTPOST_DIR / WORKSPACES


def is_inside(path: Path | str, parent: Path | str) -> bool:
    """Whether `path` lies strictly below `parent`, symlinks resolved in both."""
    real, base = real_path(path), real_path(parent)
    return real != base and real.startswith(base + os.sep)


def check_worktree_link(directory: Path | str) -> None:
    """Refuse a candidate worktree whose git link no longer leads into its own repository.

    A worktree's `.git` file names its git directory, and that directory's `commondir` names the
    repository. An agent that rewrote either could point the engine's git at a configuration of
    its own (filters, fsmonitor, hooks) and have it run programs on the host."""
    path = Path(directory).absolute()
    parts = path.parts
    for index in range(len(parts) - 2, 0, -1):
        if parts[index] == WORKSPACES and parts[index - 1] == OUTPOST_DIR:
            root = Path(*parts[: index - 1])
            break
    else:
        return  # not a candidate worktree: nothing an agent was given
    # strings from here: every git call in a worktree passes here first
    target = str(path)
    common = str(git_common_dir(root))
    link = os.path.join(target, ".git")
    try:
        if os.path.islink(link) or not os.path.isfile(link):
            raise GitError(
                f"{link} is not the git link file the engine created: refusing to run git in that worktree"
            )
        text = _read(link)
        git_dir = real_path(os.path.join(target, text.removeprefix("gitdir:").strip()))
        leads_to = real_path(os.path.join(git_dir, _read(os.path.join(git_dir, "commondir"))))
        # git's own record of which worktree that git directory belongs to
        owner = real_path(os.path.join(git_dir, _read(os.path.join(git_dir, "gitdir"))))
    except (OSError, UnicodeDecodeError) as error:
        raise GitError(f"cannot read the git link of {target}: {error}") from None
    if (
        not text.startswith("gitdir:")
        or os.path.dirname(git_dir) != os.path.join(common, "worktrees")
        or leads_to != common
    ):
        raise GitError(
            f"the git link of {target} was changed to lead to {leads_to} "
            f"(expected {common}): refusing to run git in that worktree"
        )
    if owner != real_path(link):
        raise GitError(
            f"the git link of {target} was changed to another worktree's "
            f"({os.path.dirname(owner)}): refusing to run git in that worktree"
        )
    if os.path.exists(os.path.join(git_dir, "config.worktree")):
        # the engine never writes one; its settings (filters, fsmonitor) would apply on the host
        raise GitError(
            f"{os.path.join(git_dir, 'config.worktree')} appeared in the worktree's git directory: "
            "refusing to run git in that worktree"
        )


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read().strip()
