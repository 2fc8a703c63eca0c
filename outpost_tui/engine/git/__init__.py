"""Git for the race: baseline, candidate branches and worktrees, commits, integration check, retention.

Every function is synchronous and spawns `git` through one runner (the coordinator calls them in a
worker thread). Each runs as few git processes as it can: a race's overhead is measured against the
raw git work it wraps. Nothing here merges, pushes, deletes a branch or removes a worktree that holds
any file git would not recreate.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import stat
import subprocess
import threading
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Callable, Iterator, Sequence

from .. import gitenv
from ..core.spec import valid_key

OUTPOST_DIR = ".outpost"
WORKSPACES = "workspaces"
RECOVERY = "recovery"
EXCLUDE_LINE = "/.outpost/"
BRANCH_PREFIX = "outpost/speculation"
BOT_NAME = "outpost-tui"
BOT_EMAIL = "outpost-tui@localhost"
MERGE_TREE_TIMEOUT = 30.0
MERGE_TREE_MAX_OUTPUT = 1024 * 1024
MERGE_TREE_MIN_VERSION = (2, 38)

# A race id becomes one ref component and one path component: no slashes, no "..", no ".lock".
RACE_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
SPECULATION_BRANCH = re.compile(r"^outpost/speculation/([^/]+)/([^/]+)/([0-9]+)$")

# status must not take the index lock: agents run git in their worktrees at the same time, and the
# integration check promises not to touch the host's index.
_STATUS = ("--no-optional-locks", "status")


class _WorktreeLock:
    """Worktree commands of one repository: many at once (`shared`), or one alone (`exclusive`).

    Adds and removes of different worktrees run concurrently: a fresh attempt's allocation waits
    for no other. What deletes worktree metadata it finds incomplete (`git worktree prune`, and
    the rare repairs around it) runs alone, since an add in flight has such metadata for a moment.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._shared = 0
        self._exclusive = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._changed:
            self._changed.wait_for(lambda: not self._exclusive)
            self._shared += 1
        try:
            yield
        finally:
            with self._changed:
                self._shared -= 1
                self._changed.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._changed:
            self._changed.wait_for(lambda: not self._exclusive and not self._shared)
            self._exclusive = True
        try:
            yield
        finally:
            with self._changed:
                self._exclusive = False
                self._changed.notify_all()


_worktree_locks: dict[str, _WorktreeLock] = {}
_worktree_locks_guard = threading.Lock()


def _worktree_lock(repo_root: Path | str) -> _WorktreeLock:
    key = os.path.realpath(repo_root)
    with _worktree_locks_guard:
        return _worktree_locks.setdefault(key, _WorktreeLock())


# A worktree command reads every worktree's metadata before it writes anything; git writes a new
# worktree's files one by one, and a command reading them at that instant can find `commondir`
# created but still empty and stop. Nothing was changed then: it is run again.
_METADATA_RACE = re.compile(r"failed to read .*/worktrees/[^/]*/commondir")
METADATA_RETRIES = 5


class GitError(Exception):
    """A git operation failed; the message is one line naming the repository or path."""


@dataclass(frozen=True)
class HostSnapshot:
    head: str
    branch: str  # "HEAD" when detached
    dirty: bool
    fingerprint: str

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Commit:
    oid: str
    subject: str

    def to_json(self) -> dict:
        return {"oid": self.oid, "subject": self.subject}


@dataclass(frozen=True)
class Integration:
    status: str  # "clean" | "conflict" | "blocked"
    conflicts: tuple[str, ...] = ()
    reason: str | None = None
    host_head: str | None = None
    candidate_commit: str | None = None

    def to_json(self) -> dict:
        return {
            "status": self.status,
            "conflicts": list(self.conflicts),
            "reason": self.reason,
            "host_head": self.host_head,
            "candidate_commit": self.candidate_commit,
        }


# --- running git -----------------------------------------------------------------------------

# Settings of every call of the engine's git. A candidate in the local sandbox shares the
# repository's .git directory and can write its config; these keep anything written there from
# making the engine's git start a program: hooks, the fsmonitor, editors, pagers, signing, network
# transports (ssh commands, credential helpers, upload-pack), background gc. The stat
# settings keep an edit from hiding behind stat data a candidate forged (core.ignoreStat, ctime).
# Named drivers (filters, diff and merge drivers) are found and switched off per repository.
PROGRAM_CONFIG = (
    "core.hooksPath=/dev/null", "core.fsmonitor=false", "core.editor=false", "sequence.editor=false",
    "core.pager=cat", "commit.gpgSign=false", "tag.gpgSign=false",
    "log.showSignature=false", "protocol.allow=never", "credential.helper=", "core.sshCommand=false",
    "gc.auto=0", "maintenance.auto=false", "core.ignoreStat=false", "core.trustctime=true",
    "core.checkStat=default", "submodule.recurse=false",
)
# Drivers that git looks up by a name an attribute gives (.gitattributes, info/attributes), each
# with a program in the config. Emptied, a filter passes content through and a textconv is off; a
# merge driver cannot be emptied (git tries to run ""), so it becomes `false`: a conflict.
_DRIVERS = (r"^((filter|diff|merge)\..+\.(clean|smudge|process|textconv|command|driver)"
            r"|include(if\..+)?\.path)$")
GIT_TIMEOUT_STATUS = -9


def _environment() -> dict[str, str]:
    # prompts would hang a worker thread forever; C locale keeps git's messages parseable
    return {**gitenv.scrubbed(), "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANGUAGE": "C",
            "GIT_PAGER": "cat", "GIT_EDITOR": "false"}


def _command(directory: str, args: Sequence[str]) -> list[str]:
    return ["git", "--no-pager", "-C", directory, *args]


def _settings(directory: str, config: Sequence[str], users_own: bool) -> list[tuple[str, str]]:
    """The settings of one call as (key, value): the program switches, the drivers, the caller's."""
    pairs = [tuple(setting.split("=", 1)) for setting in config]
    if users_own:
        return pairs
    fixed = [tuple(setting.split("=", 1)) for setting in PROGRAM_CONFIG]
    return [*fixed, *_driver_config(directory), *pairs]


def _config_environment(settings: Sequence[tuple[str, str]]) -> dict[str, str]:
    # GIT_CONFIG_COUNT rather than -c: a key and its value stay apart, whatever characters a
    # planted driver's name holds ("-c" splits "filter.a=b.clean=" at the wrong "=")
    env = {"GIT_CONFIG_COUNT": str(len(settings))}
    for index, (key, value) in enumerate(settings):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


_drivers_seen: dict[str, tuple[tuple, tuple[str, ...], tuple[tuple[str, str], ...]]] = {}
_drivers_guard = threading.Lock()


def _driver_config(directory: str) -> tuple[tuple[str, str], ...]:
    """Settings that switch off every filter, diff and merge driver the repository's configuration
    names (its config, config.worktree files and what they include).

    Drivers of the user's own (global) and the system's configuration stay on: a candidate of the
    container sandbox cannot reach them, one of the local sandbox can run anything as the user
    anyway, and they are what makes a checkout right (Git LFS's smudge filter). Found with one `git
    config` call and remembered until a file it read, or could read, changes."""
    files = _config_files(directory)
    # Checkouts of one repository without a config.worktree of their own read the same files:
    # the engine's many worktrees and grading checkouts share one look.
    key = directory
    dirs = _git_dirs(Path(directory))
    if dirs is not None and not os.path.lexists(dirs[0] / "config.worktree"):
        key = f"shared:{dirs[1]}"
    with _drivers_guard:
        cached = _drivers_seen.get(key)
    if cached is not None and cached[0] == _stat_all(cached[1]):
        return cached[2]
    command = _command(directory, ["config", "--null", "--show-scope", "--show-origin", "--get-regexp",
                                   _DRIVERS])
    fixed = [tuple(setting.split("=", 1)) for setting in PROGRAM_CONFIG]
    status, out, _ = _execute(command, timeout=60.0, binary=False, strip=False, settings=fixed)
    settings: list[tuple[str, str]] = []
    watched = list(files)
    for scope, origin, key, value in _config_records(str(out)):
        # a relative origin (".git/config") is relative to the directory git ran in
        origin = os.path.join(directory, origin.removeprefix("file:"))
        watched.append(origin)
        if key.endswith(".path"):
            watched.append(_include_target(value, origin))
            continue
        if scope not in ("local", "worktree"):
            continue
        kind, _, rest = key.partition(".")
        name = rest.rpartition(".")[0]
        if kind == "filter":
            settings += [(f"filter.{name}.clean", ""), (f"filter.{name}.smudge", ""),
                         (f"filter.{name}.process", ""), (f"filter.{name}.required", "false")]
        elif kind == "diff":
            settings.append((f"diff.{name}.textconv", ""))  # external diffs: every diff says --no-ext-diff
        else:
            settings.append((f"merge.{name}.driver", "false"))
    found = tuple(dict.fromkeys(settings))
    if status in (0, 1):  # 1: nothing matched
        paths = tuple(dict.fromkeys(watched))
        with _drivers_guard:
            _drivers_seen[key] = (_stat_all(paths), paths, found)
    return found


def _config_records(out: str) -> list[tuple[str, str, str, str]]:
    # --null --show-scope --show-origin: scope NUL origin NUL key NEWLINE value NUL (no newline
    # when a key has no value)
    fields = out.split("\0")
    records = []
    for index in range(0, len(fields) - 2, 3):
        key, _, value = fields[index + 2].partition("\n")
        # git prints section and variable names lowercased; a subsection keeps its case
        records.append((fields[index], fields[index + 1], key, value))
    return records


def _include_target(value: str, origin: str) -> str:
    target = os.path.expanduser(value)
    return target if os.path.isabs(target) else os.path.join(os.path.dirname(origin), target)


def _config_files(directory: str) -> tuple[str, ...]:
    """Every configuration file git could read for `directory`, present or not."""
    home = os.path.expanduser("~")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    files = ["/etc/gitconfig", os.path.join(home, ".gitconfig"), os.path.join(xdg, "git", "config")]
    dirs = _git_dirs(Path(directory))
    if dirs is not None:
        git_dir, common = dirs
        files += [str(common / "config"), str(common / "config.worktree"), str(git_dir / "config.worktree")]
    return tuple(files)


def _stat_all(paths: Sequence[str]) -> tuple:
    seen = []
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            seen.append(None)
        else:
            seen.append((info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns))
    return tuple(seen)


def _execute(command: list[str], *, timeout: float | None, binary: bool, strip: bool,
             settings: Sequence[tuple[str, str]] = (),
             on_start: Callable[[int], None] | None = None, new_group: bool = False,
             input: bytes | None = None, index: Path | None = None) -> tuple[int, str | bytes, str]:
    """The one place the engine starts git: scrubbed environment, output captured.

    `index` is a private index file (object-store plumbing builds trees in one): the only git
    location variable the engine ever sets, and only its own."""
    subcommand = command.index("-C") + 2 if "-C" in command else len(command)
    worktree_command = command[subcommand:subcommand + 1] == ["worktree"]
    for _ in range(METADATA_RETRIES):
        status, out, err = _execute_once(command, timeout=timeout, binary=binary, strip=strip,
                                         settings=settings, on_start=on_start, new_group=new_group,
                                         input=input, index=index)
        if not (worktree_command and status != 0 and _METADATA_RACE.search(err)):
            break
    return status, out, err


def _execute_once(command: list[str], *, timeout: float | None, binary: bool, strip: bool,
                  settings: Sequence[tuple[str, str]], on_start: Callable[[int], None] | None,
                  new_group: bool, input: bytes | None,
                  index: Path | None) -> tuple[int, str | bytes, str]:
    where = command[command.index("-C") + 1] if "-C" in command else "/"
    env = {**_environment(), **_config_environment(settings)}
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    try:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd="/",
                                   start_new_session=new_group)
    except FileNotFoundError as error:
        raise GitError(f"git is not installed or not on PATH (needed for {where})") from error
    except OSError as error:
        raise GitError(f"cannot run git in {where}: {error.strerror or error}") from error
    try:
        if on_start is not None:
            on_start(process.pid)
        try:
            out, err = process.communicate(input, timeout=timeout)
            status = process.returncode
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
            status, err = GIT_TIMEOUT_STATUS, f"Timeout: git did not finish within {timeout:g} s".encode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if new_group:
            try:
                os.killpg(process.pid, signal.SIGKILL)  # whatever it left in the background
            except (ProcessLookupError, PermissionError):
                pass
    error_text = err.decode(errors="replace")
    if strip:
        error_text = error_text.removesuffix("\n")
    if binary:
        return status, out, error_text
    text = out.decode(errors="surrogateescape")
    return status, (text.removesuffix("\n") if strip else text), error_text


def _run(
    directory: Path | str,
    *args: str,
    config: Sequence[str] = (),
    timeout: float | None = None,
    binary: bool = False,
    strip: bool = True,
    input: bytes | None = None,
    index: Path | None = None,
    users_own: bool = False,
) -> tuple[int, str | bytes, str]:
    """Run git in `directory` and return (status, stdout, stderr) without raising on a non-zero exit.

    `-C` pins the directory; the child's own cwd is "/", so a missing directory is an error rather
    than whatever checkout the app happens to run in. `users_own`: the user's own act carried out
    on request (merging a winner), which runs their hooks and drivers as the `git merge` they would
    type; the environment is scrubbed all the same."""
    directory = os.path.abspath(directory)
    return _execute(_command(directory, args), timeout=timeout, binary=binary, strip=strip,
                    settings=_settings(directory, config, users_own), input=input, index=index)


def run(directory: Path | str, *args: str, timeout: float | None = 60.0) -> tuple[int, str, str]:
    """Git for the rest of outpost-tui (race file checks, the worktrees screen): the same runner."""
    status, out, err = _run(directory, *args, timeout=timeout, strip=False)
    return status, str(out), err


def _run_in_group(directory: Path | str, *args: str, config: Sequence[str] = (),
                  on_start: Callable[[int], None] | None = None) -> tuple[int, str, str]:
    """Run git in a process group of its own, reported to `on_start` while it runs.

    For commands that may run for a while inside an allocation (worktree add): the group lets a
    crashed coordinator's successor stop it, and is swept when git is done."""
    directory = os.path.abspath(directory)
    status, out, err = _execute(_command(directory, args), timeout=None, binary=False, strip=False,
                                settings=_settings(directory, config, False), on_start=on_start,
                                new_group=True)
    return status, str(out).strip(), err


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line.removeprefix("fatal: ").removeprefix("error: ")
    return "no message"


def _failure(what: str, directory: Path | str, err: str) -> GitError:
    return GitError(f"{what} failed in {directory}: {_first_line(err)}")


def _check(what: str, directory: Path | str, *args: str, **options) -> str:
    status, out, err = _run(directory, *args, **options)
    if status != 0:
        raise _failure(what, directory, err)
    return out


def _revision(value: str, role: str) -> str:
    # A revision that starts with "-" would be read as an option.
    if not value or value.startswith("-") or "\0" in value or "\n" in value:
        raise GitError(f"invalid {role}: {value!r}")
    return value


@cache
def _git_version() -> tuple[int, ...]:
    status, out, _ = _run("/", "version")
    numbers = re.findall(r"\d+", str(out).split(" ")[-1] if status == 0 else "")
    return tuple(int(n) for n in numbers[:3])


# --- repository layout -----------------------------------------------------------------------


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
    out = _check("finding the .git directory", root, "rev-parse", "--git-common-dir")
    return (root / str(out)).resolve()


def _common_dir_from_files(root: Path) -> Path | None:
    """Read the .git layout directly, as git itself does, to save a process per call."""
    dirs = _git_dirs(root)
    return dirs[1] if dirs is not None else None


def _git_dirs(root: Path) -> tuple[Path, Path] | None:
    """(git directory, common directory) of the checkout at `root`, read from its .git."""
    dot_git = root / ".git"
    try:
        if dot_git.is_dir():
            git_dir = dot_git
        elif dot_git.is_file():
            text = dot_git.read_text(encoding="utf-8").strip()
            if not text.startswith("gitdir:"):
                return None
            git_dir = (root / text.removeprefix("gitdir:").strip()).resolve()
        else:
            return None
        common = git_dir / "commondir"
        common_dir = git_dir / common.read_text(encoding="utf-8").strip() if common.is_file() else git_dir
        git_dir, common_dir = git_dir.resolve(), common_dir.resolve()
    except (OSError, UnicodeDecodeError):
        return None
    return (git_dir, common_dir) if (common_dir / "objects").is_dir() else None


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


def _workspaces(repo_root: Path | str) -> Path:
    return Path(repo_root) / OUTPOST_DIR / WORKSPACES


def _inside(path: Path | str, parent: Path | str) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(parent)
    return real != base and real.startswith(base + os.sep)


# --- commits and the host ----------------------------------------------------------------------


def resolve_commit(repo_root: Path | str, rev: str = "HEAD") -> str:
    """The full object id of the commit `rev` names."""
    _revision(rev, "revision")
    status, out, _ = _run(repo_root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if status != 0 or not out:
        raise GitError(f"{rev!r} does not name a commit in {repo_root}")
    return str(out)


def _outpost_path(path: str) -> bool:
    return path == OUTPOST_DIR or path.startswith(OUTPOST_DIR + "/")


def host_snapshot(repo_root: Path | str) -> HostSnapshot:
    """HEAD, branch, dirtiness and a fingerprint of the checkout's content (outside .outpost/).

    One `status` call gives head, branch and every change; `diff` runs only when tracked files
    changed, since otherwise it would print nothing.
    """
    root = Path(repo_root)
    out = _check("git status", root, *_STATUS, "--porcelain=v2", "--branch", "--untracked-files=all", "-z")
    head = branch = ""
    tracked_changes = False
    untracked: list[str] = []
    entries = str(out).split("\0")
    index = 0
    while index < len(entries):
        entry = entries[index]
        index += 1
        if entry.startswith("# branch.oid "):
            head = entry.removeprefix("# branch.oid ")
        elif entry.startswith("# branch.head "):
            branch = entry.removeprefix("# branch.head ")
        elif entry.startswith("? "):
            if not _outpost_path(entry[2:]):
                untracked.append(entry[2:])
        elif entry[:2] in ("1 ", "2 ", "u "):
            fields = {"1 ": 8, "2 ": 9, "u ": 10}[entry[:2]]
            path = entry.split(" ", fields)[-1]
            if entry.startswith("2 "):
                index += 1  # a rename is followed by its original path
            if not _outpost_path(path):
                tracked_changes = True
    if not head or head == "(initial)":
        raise GitError(f"repository has no commits yet: {root}")
    if branch == "(detached)":
        branch = "HEAD"
    digest = hashlib.sha256()
    digest.update(head.encode() + b"\0")
    if tracked_changes:
        patch = _check("git diff", root, "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff",
                       "--no-textconv", "--", ".", f":(top,exclude){OUTPOST_DIR}",
                       binary=True, strip=False)
        digest.update(b"diff\0%d\0" % len(patch) + patch)
    for path in sorted(untracked):
        _hash_file(digest, root, path)
    return HostSnapshot(head=head, branch=branch, dirty=tracked_changes or bool(untracked),
                        fingerprint=digest.hexdigest())


def _hash_file(digest, root: Path, path: str) -> None:
    full = root / path
    name = os.fsencode(path)
    try:
        info = os.lstat(full)
        digest.update(b"file\0%d\0%s\0%o\0" % (len(name), name, info.st_mode))
        if stat.S_ISLNK(info.st_mode):
            digest.update(os.fsencode(os.readlink(full)))
        elif stat.S_ISREG(info.st_mode):
            with open(full, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
    except FileNotFoundError:
        # Deleted between status and now: still part of what the snapshot saw.
        digest.update(b"gone\0%d\0%s\0" % (len(name), name))
    except OSError as error:
        raise GitError(f"cannot read {full}: {error.strerror}") from error


# --- files the race's setup copies and keys on ---------------------------------------------------


def _paths(out: str | bytes) -> list[str]:
    return [path for path in str(out).split("\0") if path]


def untracked_files(repo_root: Path | str, globs: Sequence[str]) -> list[str]:
    """Untracked files (ignored ones included) of the checkout matching git glob pathspecs."""
    if not globs:
        return []
    specs = [f":(top,glob){pattern}" for pattern in globs]
    out = _check("git ls-files", repo_root, "ls-files", "-z", "--others", "--", *specs,
                 f":(top,exclude){OUTPOST_DIR}", strip=False)
    return _paths(out)


def included_files(repo_root: Path | str, include_file: Path | str) -> list[str]:
    """Files a `.worktreeinclude` names (gitignore syntax) that git ignores, as Claude Code copies."""
    out = _check("git ls-files", repo_root, "ls-files", "-z", "--others", "--ignored",
                 f"--exclude-from={include_file}", "--", ".", f":(top,exclude){OUTPOST_DIR}",
                 strip=False)
    named = _paths(out)
    ignored: list[str] = []
    for start in range(0, len(named), 500):  # bounded command lines
        chunk = [f":(top,literal){path}" for path in named[start:start + 500]]
        out = _check("git ls-files", repo_root, "ls-files", "-z", "--others", "--ignored",
                     "--exclude-standard", "--", *chunk, strip=False)
        ignored += _paths(out)
    return sorted(set(ignored))


def tree_files(repo_root: Path | str, commit: str, globs: Sequence[str]) -> list[tuple[str, str]]:
    """(path, blob id) of the files in commit's tree matching globs as git's glob pathspec reads
    them (`*` stays within a directory, `**` crosses them); ls-tree has no glob magic itself."""
    _revision(commit, "commit")
    patterns = [_glob_pattern(pattern) for pattern in globs]
    out = _check("git ls-tree", repo_root, "ls-tree", "-r", "-z", "--full-tree", commit, strip=False)
    files = []
    for entry in _paths(out):
        meta, _, path = entry.partition("\t")
        if any(pattern.fullmatch(path) for pattern in patterns):
            files.append((path, meta.split()[2]))
    return sorted(files)


def _glob_pattern(glob: str) -> re.Pattern:
    out, index = "", 0
    while index < len(glob):
        if glob.startswith("**/", index):
            out, index = out + "(?:.*/)?", index + 3
        elif glob.startswith("**", index):
            out, index = out + ".*", index + 2
        elif glob[index] == "*":
            out, index = out + "[^/]*", index + 1
        elif glob[index] == "?":
            out, index = out + "[^/]", index + 1
        elif glob[index] == "[" and "]" in glob[index + 2:]:
            end = glob.index("]", index + 2)
            body = glob[index + 1:end]
            body = body.replace("\\", "\\\\")
            out += "[" + ("^" + body[1:] if body[:1] == "!" else body) + "]"
            index = end + 1
        else:
            out, index = out + re.escape(glob[index]), index + 1
    return re.compile(out)


def untracked_entries(directory: Path | str) -> list[str]:
    """Untracked and ignored entries of a worktree as status shows them (a directory ends in /)."""
    check_worktree_link(directory)
    out = _check("git status", directory, *_STATUS, "--porcelain", "-z", "--ignored=matching",
                 "--untracked-files=normal", strip=False)
    return [entry[3:] for entry in _paths(out) if entry[:3] in ("?? ", "!! ")]


# --- branches and worktrees --------------------------------------------------------------------


def branch_name(race_id: str, key: str, attempt: int) -> str:
    if not valid_key(key):
        raise ValueError(f"invalid candidate key {key!r}: use letters, digits, '_' or '-' (at most 64)")
    if not RACE_ID_PATTERN.fullmatch(race_id) or ".." in race_id or race_id.endswith((".", ".lock")):
        raise ValueError(f"invalid race id {race_id!r}: use letters, digits, '.', '_' or '-'")
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise ValueError(f"invalid attempt {attempt!r}: attempts count from 1")
    return f"{BRANCH_PREFIX}/{race_id}/{key}/{attempt}"


def worktree_directory(repo_root: Path | str, key: str, branch: str) -> Path:
    if not valid_key(key):
        raise ValueError(f"invalid candidate key {key!r}: use letters, digits, '_' or '-' (at most 64)")
    suffix = hashlib.sha256(branch.encode()).hexdigest()[:12]
    return _workspaces(repo_root) / f"{key}-{suffix}"


def _registered_worktrees(repo_root: Path | str) -> list[dict]:
    # Callers inside add_worktree already hold the repository's worktree lock.
    out = _check("git worktree list", repo_root, "worktree", "list", "--porcelain")
    worktrees: list[dict] = []
    for line in str(out).splitlines():
        word, _, value = line.partition(" ")
        if word == "worktree":
            worktrees.append({"path": value, "head": None, "branch": None,
                              "locked": False, "prunable": False})
        elif worktrees and word == "HEAD":
            worktrees[-1]["head"] = value
        elif worktrees and word == "branch":
            worktrees[-1]["branch"] = value.removeprefix("refs/heads/")
        elif worktrees and word in ("locked", "prunable"):
            worktrees[-1][word] = True
    return worktrees


def _same_path(left: Path | str, right: Path | str) -> bool:
    return os.path.realpath(left) == os.path.realpath(right)


def make_worktree_directory(repo_root: Path | str, directory: Path | str) -> bool:
    """Make the (empty) directory of an attempt's worktree ahead of `add_worktree`, so that a
    sandbox can mount it while git checks out; False (nothing made) when something is there."""
    target = Path(directory).absolute()
    if not _inside(target, _workspaces(repo_root)):
        raise GitError(f"{target} is not under {_workspaces(repo_root)}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        target.mkdir()  # as git would make it
    except FileExistsError:
        return False
    except OSError as error:
        raise GitError(f"cannot create {target}: {error.strerror}") from error
    return True


def add_worktree(repo_root: Path | str, branch: str, directory: Path | str, baseline: str,
                 on_start: Callable[[int], None] | None = None, *, made_empty: bool = False) -> None:
    """Create `branch` at `baseline`, checked out in `directory`; reuse it when a replay finds it.

    `on_start` gets the process group id of each `git worktree add` (which runs the user's
    post-checkout hook) as soon as it exists. `made_empty`: `make_worktree_directory` made the
    directory (a sandbox may have it mounted already): while it is still empty, git checks out
    into it, and it is never taken for a replay's worktree or moved aside as a stray."""
    root = Path(repo_root)
    target = Path(directory).absolute()
    _revision(branch, "branch name")
    _revision(baseline, "baseline")
    ensure_outpost_dir(root)
    try:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as error:
        raise GitError(f"cannot create {target.parent}: {error.strerror}") from error

    def present() -> bool:
        return os.path.lexists(target) and not (made_empty and _empty_directory(target))

    # The usual case, a fresh attempt, costs exactly one process, beside the others' allocations.
    first_error = ""
    if not present():
        with _worktree_lock(root).shared():
            status, _, err = _run_in_group(root, "worktree", "add", "--quiet", "-b", branch,
                                           str(target), baseline,
                                           config=("branch.autoSetupMerge=false",),
                                           on_start=on_start)
        if status == 0:
            return
        first_error = err
    with _worktree_lock(root).exclusive():
        _add_worktree_again(root, branch, target, baseline, on_start, present, first_error)


def _add_worktree_again(root: Path, branch: str, target: Path, baseline: str,
                        on_start: Callable[[int], None] | None, present: Callable[[], bool],
                        first_error: str) -> None:
    """A replay's worktree found, a stale record or a stray directory in the way, a branch that
    exists already: the rarer cases, alone among the repository's worktree commands."""
    registered = [w for w in _registered_worktrees(root) if _same_path(w["path"], target)]
    if registered:
        entry = registered[0]
        if entry["branch"] == branch and present() and os.path.isdir(target):
            return  # a durable replay: the attempt's worktree is already there
        if present():
            raise GitError(f"{target} is a worktree of {entry['branch'] or 'a detached HEAD'}, not {branch}")
        # Registered but its directory is gone (or is the empty one made for it): drop the stale
        # record so the path can be reused.
        _check("git worktree prune", root, "worktree", "prune")
    if present():
        _move_aside(root, target)
    exists = _run(root, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}")[0] == 0
    if exists:
        args = ("worktree", "add", "--quiet", str(target), branch)
    else:
        args = ("worktree", "add", "--quiet", "-b", branch, str(target), baseline)
    status, _, err = _run_in_group(root, *args, config=("branch.autoSetupMerge=false",),
                                   on_start=on_start)
    if status != 0:
        raise _failure(f"creating worktree {target} for {branch}", root, err or first_error)


def _move_aside(root: Path, target: Path) -> Path:
    recovery = root / OUTPOST_DIR / RECOVERY
    destination = recovery / f"orphan-{target.name}-{uuid.uuid4().hex[:8]}"
    try:
        recovery.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.rename(target, destination)
    except OSError as error:
        raise GitError(f"cannot move stray directory {target} aside to {destination}: {error.strerror}") from error
    return destination


def check_worktree_link(directory: Path | str) -> None:
    """Refuse a candidate worktree whose git link no longer leads into its own repository.

    A worktree's `.git` file names its git directory, and that directory's `commondir` names the
    repository. An agent that rewrote either could point the engine's git at a configuration of
    its own (filters, fsmonitor, hooks) and have it run programs on the host."""
    target = Path(directory).absolute()
    parts = target.parts
    for index in range(len(parts) - 2, 0, -1):
        if parts[index] == WORKSPACES and parts[index - 1] == OUTPOST_DIR:
            root = Path(*parts[:index - 1])
            break
    else:
        return  # not a candidate worktree: nothing an agent was given
    common = git_common_dir(root)
    link = target / ".git"
    try:
        if link.is_symlink() or not link.is_file():
            raise GitError(f"{link} is not the git link file the engine created: "
                           "refusing to run git in that worktree")
        text = link.read_text(encoding="utf-8").strip()
        git_dir = (target / text.removeprefix("gitdir:").strip()).resolve()
        commondir = (git_dir / "commondir").read_text(encoding="utf-8").strip()
        leads_to = (git_dir / commondir).resolve()
        # git's own record of which worktree that git directory belongs to
        back = (git_dir / "gitdir").read_text(encoding="utf-8").strip()
        owner = Path(back if os.path.isabs(back) else git_dir / back).resolve()
    except (OSError, UnicodeDecodeError) as error:
        raise GitError(f"cannot read the git link of {target}: {error}") from None
    if (not text.startswith("gitdir:") or git_dir.parent != common / "worktrees"
            or leads_to != common):
        raise GitError(f"the git link of {target} was changed to lead to {leads_to} "
                       f"(expected {common}): refusing to run git in that worktree")
    if owner != (target / ".git").resolve():
        raise GitError(f"the git link of {target} was changed to another worktree's "
                       f"({owner.parent}): refusing to run git in that worktree")
    if (git_dir / "config.worktree").exists():
        # the engine never writes one; its settings (filters, fsmonitor) would apply on the host
        raise GitError(f"{git_dir / 'config.worktree'} appeared in the worktree's git directory: "
                       "refusing to run git in that worktree")


def identity(directory: Path | str) -> dict[str, str]:
    """The user's git identity as seen from `directory` (repository, then global and system
    configuration): {"name": …, "email": …}, with whichever of the two is set."""
    status, out, _ = _run(directory, "config", "--get-regexp", r"^user\.(name|email)$", timeout=10)
    found: dict[str, str] = {}
    if status == 0:
        for line in str(out).splitlines():
            key, _, value = line.partition(" ")
            if value.strip():
                found[key.removeprefix("user.")] = value.strip()  # the last (most local) one wins
    return found


def head(directory: Path | str) -> str:
    check_worktree_link(directory)
    return str(_check("reading HEAD", directory, "rev-parse", "--verify", "HEAD"))


def commits_since(directory: Path | str, baseline: str) -> list[Commit]:
    """Commits on HEAD since `baseline`, oldest first."""
    _revision(baseline, "baseline")
    check_worktree_link(directory)
    # Topological order puts HEAD last, which head_and_commits relies on.
    out = _check("listing commits", directory, "log", "--topo-order", "--reverse", "--no-show-signature",
                 "--format=%H %s", f"{baseline}..HEAD", "--")
    commits = []
    for line in str(out).splitlines():
        oid, _, subject = line.partition(" ")
        if oid:
            commits.append(Commit(oid=oid, subject=subject))
    return commits


def head_and_commits(directory: Path | str, baseline: str) -> tuple[str, list[Commit]]:
    """HEAD and the commits since `baseline`, with one git process when there are commits."""
    commits = commits_since(directory, baseline)
    return (commits[-1].oid if commits else head(directory)), commits


def _left_out(paths: Sequence[str]) -> list[str]:
    # Files the race's setup put in a worktree (copied from the user's checkout, or built) are
    # never the candidate's work: they stay out of anything committed on its behalf.
    return [f":(top,exclude,literal){path.rstrip('/')}" for path in paths]


def has_changes(directory: Path | str, leave_out: Sequence[str] = ()) -> bool:
    """Uncommitted tracked changes or untracked files that are not ignored (outside leave_out)."""
    check_worktree_link(directory)
    out = _check("git status", directory, *_STATUS, "--porcelain", "--untracked-files=normal",
                 "--", ".", *_left_out(leave_out))
    return bool(str(out).strip())


_IDENTITY_ERRORS = ("Please tell me who you are", "auto-detection is disabled", "empty ident name",
                    "Author identity unknown", "Committer identity unknown")


def commit_all(directory: Path | str, message: str, leave_out: Sequence[str] = ()) -> str | None:
    """Commit everything left in the worktree on the agent's behalf; None when nothing changed.

    The first attempt refuses guessed identities (user.useConfigOnly); only when the repository
    has none configured does outpost-tui's own identity fill the gap, so a configured user keeps
    authorship. Hooks are skipped: the agent's leftovers are judged by validation, not by the
    user's pre-commit tooling. Paths in leave_out (the setup's files) are never added.
    """
    check_worktree_link(directory)
    _check("git add", directory, "add", "-A", "--", ".", *_left_out(leave_out))
    commit = ("commit", "--quiet", "--no-verify", "--no-gpg-sign", "--allow-empty-message", "-m", message)
    status, _, err = _run(directory, *commit, config=("user.useConfigOnly=true",))
    if status != 0 and any(marker in err for marker in _IDENTITY_ERRORS):
        config = []
        configured = str(_run(directory, "config", "--get-regexp", r"^user\.(name|email)$")[1])
        names = {line.split(" ", 1)[0] for line in configured.splitlines()}
        if "user.email" not in names:
            config += [f"user.email={BOT_EMAIL}", f"user.name={BOT_NAME}"]
        elif "user.name" not in names:
            config += [f"user.name={BOT_NAME}"]
        status, _, err = _run(directory, *commit, config=config)
    if status != 0:
        if _run(directory, "diff", "--cached", "--quiet", "--no-ext-diff")[0] == 0:
            return None
        raise _failure("committing on the agent's behalf", directory, err)
    return head(directory)


def worktree_git_dir(directory: Path | str) -> Path:
    """The worktree's own git directory (<common>/worktrees/<name>), checked to be the engine's:
    git removes it with the worktree."""
    check_worktree_link(directory)
    link = Path(directory).absolute() / ".git"
    return (link.parent / link.read_text(encoding="utf-8").strip().removeprefix("gitdir:").strip()).resolve()


def is_clean(directory: Path | str) -> bool:
    """Attached HEAD and no modified, untracked or ignored file, whatever the index's flags say:
    safe to remove."""
    check_worktree_link(directory)
    out = _check("git status", directory, *_STATUS, "--porcelain=v2", "--branch",
                 "--untracked-files=normal", "--ignored")
    for line in str(out).splitlines():
        if line == "# branch.head (detached)":
            return False
        if line and not line.startswith("# "):
            return False
    # status trusts the index: an edit behind assume-unchanged or skip-worktree is invisible to it
    return not hidden_edits(directory)


def hidden_edits(directory: Path | str) -> list[str]:
    """Paths whose index flags (assume-unchanged, skip-worktree) hide an edit on disk from git status.

    Each flagged file is hashed as git would store it and compared with the index's object id
    (which, once status shows nothing staged, is HEAD's). A flagged file gone from the disk counts:
    it is an edit too, and keeping a worktree is never the loss removing one can be."""
    top = Path(directory)
    status, out, err = _run(top, "ls-files", "-v", "-s", "-z", strip=False)
    if status != 0:
        raise _failure("git ls-files", top, str(err))
    hidden = []
    for record in str(out).split("\0"):
        if not record or "\t" not in record:
            continue
        meta, path = record.split("\t", 1)
        tag, _mode, oid, _stage = meta.split()
        if not (tag.islower() or tag == "S"):
            continue
        full = top / path
        try:
            data = os.fsencode(os.readlink(full)) if os.path.islink(full) else full.read_bytes()
        except FileNotFoundError:
            hidden.append(path)
            continue
        except OSError:
            hidden.append(path)  # unreadable: cannot be shown to match
            continue
        if blob_id(data, "sha256" if len(oid) == 64 else "sha1") != oid:
            hidden.append(path)
    return hidden


def blob_id(data: bytes, algorithm: str = "sha1") -> str:
    """The object id git gives `data` as a blob."""
    digest = hashlib.new(algorithm)
    digest.update(b"blob %d\0" % len(data))
    digest.update(data)
    return digest.hexdigest()


def remove_worktree(repo_root: Path | str, directory: Path | str) -> bool:
    """Remove a clean worktree under .outpost/workspaces; keep its branch. True when it is gone."""
    root = Path(repo_root)
    target = Path(directory).absolute()
    if not _inside(target, _workspaces(root)):
        return False
    if not os.path.lexists(target):
        # Already gone (removed by hand): only git's record of it is left to clear.
        with _worktree_lock(root).exclusive():
            _check("git worktree prune", root, "worktree", "prune")
        return True
    if not is_clean(target):
        return False
    # Never --force: git re-checks cleanliness itself, which closes the gap since is_clean.
    with _worktree_lock(root).shared():
        status, _, err = _run(root, "worktree", "remove", str(target))
    if status != 0:
        if os.path.lexists(target):
            return False
        raise _failure(f"removing worktree {target}", root, err)
    return True


# --- grading checkouts ------------------------------------------------------------------------
# The verdict grades a candidate's result commit in a checkout of exactly that commit, apart from
# the candidate's worktree (whose uncommitted edits stay where the agent left them). The checkout
# is the engine's own: it holds the commit and what validation wrote, nothing else of anyone's.

GRADING_SUFFIX = ".grading"
VALIDATED_REFS = "refs/outpost/validated"


def grading_directory(repo_root: Path | str, name: str) -> Path:
    """Where a grading checkout lives; `name` is a candidate worktree's or the baseline's name."""
    return _workspaces(repo_root) / f"{name}{GRADING_SUFFIX}"


def add_grading_checkout(repo_root: Path | str, directory: Path | str, commit: str, *,
                         made_empty: bool = False) -> None:
    """A detached, clean checkout of `commit` at `directory` (replacing a stale one there).

    `made_empty`: the directory is an empty one `make_grading_directory` made for it (a sandbox
    may already have it mounted), which git checks out into rather than replacing."""
    root = Path(repo_root)
    target = Path(directory).absolute()
    _revision(commit, "commit")
    if not _inside(target, _workspaces(root)) or not target.name.endswith(GRADING_SUFFIX):
        raise GitError(f"{target} is not a grading checkout of {root}")
    if os.path.lexists(target) and not (made_empty and _empty_directory(target)):
        _remove_grading(root, target)
    with _worktree_lock(root).shared():
        _check(f"creating the grading checkout {target}", root, "worktree", "add", "--quiet",
               "--detach", str(target), commit)


def make_grading_directory(repo_root: Path | str, directory: Path | str) -> None:
    """An empty directory where a grading checkout will be (a stale one there is removed first),
    for a sandbox to mount before the commit to grade is known."""
    root = Path(repo_root)
    target = Path(directory).absolute()
    if not _inside(target, _workspaces(root)) or not target.name.endswith(GRADING_SUFFIX):
        raise GitError(f"{target} is not a grading checkout of {root}")
    if os.path.lexists(target):
        _remove_grading(root, target)
    try:
        target.mkdir()  # as git would make it
    except OSError as error:
        raise GitError(f"cannot create {target}: {error.strerror}") from error


def _empty_directory(path: Path) -> bool:
    try:
        if path.is_symlink() or not path.is_dir():
            return False
        with os.scandir(path) as entries:
            return not any(entries)
    except OSError:
        return False


def reset_grading_checkout(directory: Path | str, commit: str) -> None:
    """Back to exactly `commit`: what a previous validation run changed or left is gone."""
    _revision(commit, "commit")
    check_worktree_link(directory)
    _check("resetting the grading checkout", directory, "checkout", "--quiet", "--force", "--detach",
           commit)
    _check("cleaning the grading checkout", directory, "clean", "-ffdxq")


def remove_grading_checkout(repo_root: Path | str, directory: Path | str) -> None:
    root = Path(repo_root)
    target = Path(directory).absolute()
    if not _inside(target, _workspaces(root)) or not target.name.endswith(GRADING_SUFFIX):
        raise GitError(f"{target} is not a grading checkout of {root}")
    _remove_grading(root, target)


def _remove_grading(root: Path, target: Path) -> None:
    # --force twice: validation leaves files behind, and a crashed grading may have left a lock
    with _worktree_lock(root).shared():
        status, _, err = _run(root, "worktree", "remove", "--force", "--force", str(target))
    if status == 0:
        return  # git removed its record with the checkout: nothing to prune
    with _worktree_lock(root).exclusive():
        if os.path.lexists(target):
            if target.is_symlink() or not target.is_dir():
                target.unlink()
            else:
                import shutil

                shutil.rmtree(target)
        _run(root, "worktree", "prune")


def tree(repo_root: Path | str, commit: str) -> dict[str, tuple[str, str]]:
    """Every file of `commit`: path -> (mode, object id)."""
    _revision(commit, "commit")
    return dict(_tree(os.path.realpath(repo_root), commit))


@lru_cache(maxsize=4)
def _tree(root: str, commit: str) -> tuple[tuple[str, tuple[str, str]], ...]:
    # Every grading reads the baseline's tree: a commit id names one tree for good, so it is
    # listed once per race (the few most recent are kept; a candidate's is read once anyway).
    out = str(_check("listing files", root, "ls-tree", "-r", "-z", "--full-tree", commit,
                     strip=False))
    files = []
    for entry in out.split("\0"):
        meta, _, path = entry.partition("\t")
        parts = meta.split()
        if path and len(parts) == 3:
            files.append((path, (parts[0], parts[2])))
    return tuple(files)


def blob(repo_root: Path | str, oid: str) -> bytes:
    _revision(oid, "object id")
    return bytes(_check("reading a file", repo_root, "cat-file", "blob", oid, binary=True, strip=False))


def pin_validated(repo_root: Path | str, race_id: str, key: str, attempt: int, commit: str) -> str:
    """A ref that keeps the validated commit reachable whatever happens to the branch."""
    _revision(commit, "commit")
    ref = f"{VALIDATED_REFS}/{branch_name(race_id, key, attempt).removeprefix(BRANCH_PREFIX + '/')}"
    _check("pinning the validated commit", repo_root, "update-ref", ref, commit)
    return ref


def branch_tip(repo_root: Path | str, branch: str) -> str | None:
    return _candidate(Path(repo_root), branch)


def branch_tips(repo_root: Path | str, branches: Sequence[str]) -> dict[str, str]:
    """The commit each of `branches` (short names) points at, with one git process; a branch
    that does not exist is left out."""
    refs = {f"refs/heads/{branch}": branch for branch in branches if branch}
    if not refs:
        return {}
    for ref in refs:
        _revision(ref, "branch name")
    out = _check("listing branches", repo_root, "for-each-ref", "--format=%(objectname) %(refname)",
                 *refs)
    tips = {}
    for line in str(out).splitlines():
        oid, _, ref = line.partition(" ")
        if ref in refs:  # a pattern also matches refs below it: only the branch itself counts
            tips[refs[ref]] = oid
    return tips


# --- integration check -------------------------------------------------------------------------


def integration_check(repo_root: Path | str, branch: str, expected_commit: str | None = None, *,
                      host: HostSnapshot | None = None) -> Integration:
    """Would merging `branch` into the host's current branch conflict? Touches no file and no index.

    Not a lock: the host can move right after; re-check immediately before a manual merge.
    `host`: a snapshot of the checkout taken just before, which saves taking another.
    """
    root = Path(repo_root)
    try:
        before = host or host_snapshot(root)
    except GitError as error:
        return Integration("blocked", reason=str(error))
    if before.dirty:
        return Integration("blocked", reason="Host has uncommitted changes", host_head=before.head)
    if before.branch == "HEAD":
        return Integration("blocked", reason="Host HEAD is detached", host_head=before.head)
    candidate = _candidate(root, branch)
    if candidate is None:
        return Integration("blocked", reason=f"Candidate branch not found: {branch}", host_head=before.head)
    blocked = {"host_head": before.head, "candidate_commit": candidate}
    if expected_commit is not None and expected_commit != candidate:
        return Integration("blocked", reason="Candidate branch changed since validation", **blocked)
    status, out, err = _run(root, "merge-tree", "--write-tree", "--name-only", "-z", before.head, candidate,
                            timeout=MERGE_TREE_TIMEOUT)
    if status not in (0, 1):
        return Integration("blocked", reason=_merge_tree_failure(status, err), **blocked)
    if len(out) >= MERGE_TREE_MAX_OUTPUT:
        return Integration("blocked", reason="Git merge-tree preflight output exceeded 1 MiB", **blocked)
    conflicts = _conflicts(str(out)) if status == 1 else ()
    try:
        after = host_snapshot(root)
    except GitError as error:
        return Integration("blocked", reason=str(error), **blocked)
    if after != before or _candidate(root, branch) != candidate:
        return Integration("blocked", reason="Repository changed during integration preflight", **blocked)
    return Integration("clean" if status == 0 else "conflict", conflicts=conflicts, **blocked)


def _candidate(root: Path, branch: str) -> str | None:
    if not branch or branch.startswith("-"):
        return None
    status, out, _ = _run(root, "rev-parse", "--verify", "--quiet", f"{branch}^{{commit}}")
    return str(out) if status == 0 and out else None


def _merge_tree_failure(status: int, err: str) -> str:
    if err.startswith("Timeout:"):
        return f"Git merge-tree preflight timed out after {MERGE_TREE_TIMEOUT:g} s"
    version = _git_version()
    if version and version[:2] < MERGE_TREE_MIN_VERSION:
        shown = ".".join(str(n) for n in version)
        return f"Git merge-tree preflight needs git >= 2.38 (found {shown})"
    return f"Git merge-tree preflight failed: {_first_line(err)}"


def _conflicts(out: str) -> tuple[str, ...]:
    # Layout: tree oid NUL, conflicted paths each NUL, an empty entry, then informational messages.
    names: list[str] = []
    for entry in out.split("\0")[1:]:
        if not entry:
            break
        if entry not in names:
            names.append(entry)
    return tuple(names)


# --- review ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One path a candidate's commits changed against the baseline (`git diff --raw`)."""

    status: str  # A added, M modified, D deleted, T type changed, R renamed, C copied
    path: str
    mode: str  # the new file mode: 120000 is a symlink, 100755 an executable
    target: str | None = None  # a symlink's target, read from its blob
    old_path: str | None = None  # where a renamed or copied file came from


def changes(repo_root: Path | str, baseline: str, commit: str) -> tuple[bool, list[Change]]:
    """Whether `commit` descends from `baseline`, and what changed between them (renames seen)."""
    _revision(baseline, "baseline")
    _revision(commit, "commit")
    descends = _run(repo_root, "merge-base", "--is-ancestor", baseline, commit)[0] == 0
    out = str(_check("git diff", repo_root, "diff", "--raw", "-z", "--no-abbrev", "-M",
                     "--no-ext-diff", baseline, commit, "--", strip=False))
    fields = out.split("\0")
    found: list[Change] = []
    index = 0
    while index < len(fields) - 1:
        meta = fields[index].lstrip(":").split()
        if len(meta) < 5:
            break
        status = meta[4][0]
        names = 2 if status in "RC" else 1
        path = fields[index + names]
        found.append(Change(status, path, meta[1], None, fields[index + 1] if names == 2 else None))
        index += 1 + names
    links = [c for c in found if c.mode == "120000" and c.status != "D"]
    if links:
        targets = {c.path: str(_check("reading a symlink", repo_root, "cat-file", "blob",
                                      f"{commit}:{c.path}", strip=False)) for c in links}
        found = [Change(c.status, c.path, c.mode, targets.get(c.path), c.old_path) for c in found]
    return descends, found


def diff(repo_root: Path | str, baseline: str, commit: str) -> str:
    """The change a candidate made, as text for the diff view."""
    _revision(baseline, "baseline")
    _revision(commit, "commit")
    return str(_check("git diff", repo_root, "diff", "--no-color", "--no-ext-diff", "--no-textconv",
                      baseline, commit, "--",
                      strip=False))


def list_worktrees(repo_root: Path | str) -> list[dict]:
    """Worktrees under .outpost/workspaces, with what their branch names say about them."""
    workspaces = _workspaces(repo_root)
    listed = []
    for entry in _registered_worktrees(repo_root):
        if not _inside(entry["path"], workspaces):
            continue
        present = os.path.isdir(entry["path"])
        branch = entry["branch"]
        match = SPECULATION_BRANCH.match(branch or "")
        clean, problem, link_changed = False, None, False
        if present:
            # One worktree an agent tampered with must not hide the others: it is listed, marked,
            # and git is never run in it (check_worktree_link refuses it).
            try:
                check_worktree_link(entry["path"])
            except GitError as error:
                problem, link_changed = str(error), True
            else:
                try:
                    clean = is_clean(entry["path"])
                except GitError as error:
                    problem = str(error)
        listed.append({
            "path": entry["path"],
            "branch": branch,
            "head": entry["head"],
            "clean": clean,
            "missing": not present,
            "link_changed": link_changed,
            "problem": problem,
            "locked": entry["locked"],
            "race_id": match.group(1) if match else None,
            "key": match.group(2) if match else None,
            "attempt": int(match.group(3)) if match else None,
        })
    return listed
