"""The one way the engine runs git: every call with the repository's own programs switched off
(hooks, fsmonitor, filters and drivers, pagers, editors, signing, network transports), git's own
variables removed, a timeout, and its process group stopped with it."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import IO, Any, Literal, overload

from .. import gitenv
from ..errors import OutpostError
from ..paths import real_path

# status must not take the index lock: agents run git in their worktrees at the same time, and the
# integration check promises not to touch the host's index.
_STATUS = ("--no-optional-locks", "status")


# A worktree command reads every worktree's metadata before it writes anything: one being added
# (git writes its files one by one: `commondir` there but still empty) or removed ("Invalid path
# '<common>/worktrees/<id>'", seen with six removals at once under load) at that instant makes it
# stop. Nothing was changed then: it is run again.
_METADATA_RACE = re.compile(
    r"failed to read .*/worktrees/[^/]*/commondir|Invalid path '.*/worktrees/[^/']*': No such file"
)


# A loaded machine can keep the other command from writing its next file for tens of milliseconds
# (measured: 5 immediate retries all met the same half-written worktree with 8 candidates at once
# under load 12): the retries wait a little longer each time, 0.3 s in all at most.
METADATA_RETRIES = 10
METADATA_PAUSE = 0.005


class GitError(OutpostError):
    """A git operation failed; the message is one line naming the repository or path."""


# Settings of every call of the engine's git. A candidate in the local sandbox shares the
# repository's .git directory and can write its config; these keep anything written there from
# making the engine's git start a program: hooks, the fsmonitor, editors, pagers, signing, network
# transports (ssh commands, credential helpers, upload-pack), background gc. The stat
# settings keep an edit from hiding behind stat data a candidate forged (core.ignoreStat, ctime).
# Named drivers (filters, diff and merge drivers) are found and switched off per repository.
PROGRAM_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.editor=false",
    "sequence.editor=false",
    "core.pager=cat",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "log.showSignature=false",
    "protocol.allow=never",
    "credential.helper=",
    "core.sshCommand=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "core.ignoreStat=false",
    "core.trustctime=true",
    "core.checkStat=default",
    "submodule.recurse=false",
)


# Drivers that git looks up by a name an attribute gives (.gitattributes, info/attributes), each
# with a program in the config. Emptied, a filter passes content through and a textconv is off; a
# merge driver cannot be emptied (git tries to run ""), so it becomes `false`: a conflict.
_DRIVERS = (
    r"^((filter|diff|merge)\..+\.(clean|smudge|process|textconv|command|driver)"
    r"|include(if\..+)?\.path)$"
)


GIT_TIMEOUT_STATUS = -9


def _environment() -> dict[str, str]:
    # prompts would hang a worker thread forever; C locale keeps git's messages parseable. Replace
    # refs and grafts are history a repository's content (or a candidate) makes up: the engine
    # reads the objects as they are.
    return {
        **gitenv.scrubbed(),
        "GIT_NO_REPLACE_OBJECTS": "1",
        # a path that cannot exist (ENOTDIR): git reads no grafts and, unlike for an empty file
        # such as /dev/null, prints no deprecation hint where the engine reads git's first line
        "GIT_GRAFT_FILE": os.path.join(os.devnull, "no-grafts"),
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
        "LANGUAGE": "C",
        "GIT_PAGER": "cat",
        "GIT_EDITOR": "false",
    }


def _command(directory: str, args: Sequence[str]) -> list[str]:
    return ["git", "--no-pager", "-C", directory, *args]


def _pair(setting: str) -> tuple[str, str]:
    key, _, value = setting.partition("=")
    return key, value


def _settings(directory: str, config: Sequence[str], users_own: bool) -> list[tuple[str, str]]:
    """The settings of one call as (key, value): the program switches, the drivers, the caller's."""
    pairs = [_pair(setting) for setting in config]
    if users_own:
        # the user's hooks run as in their own `git merge`; drivers named in the repository's
        # config do not: a candidate of the fallback sandbox could have written them there
        return [*_driver_config(directory), *pairs]
    fixed = [_pair(setting) for setting in PROGRAM_CONFIG]
    return [*fixed, *_driver_config(directory), *pairs]


def _config_environment(settings: Sequence[tuple[str, str]]) -> dict[str, str]:
    # GIT_CONFIG_COUNT rather than -c: a key and its value stay apart, whatever characters a
    # planted driver's name holds ("-c" splits "filter.a=b.clean=" at the wrong "=")
    env = {"GIT_CONFIG_COUNT": str(len(settings))}
    for index, (key, value) in enumerate(settings):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


_Stats = tuple[tuple[int, int, int, int] | None, ...]  # what _stat_all saw of each file
_drivers_seen: dict[str, tuple[_Stats, tuple[str, ...], tuple[tuple[str, str], ...]]] = {}


_drivers_guard = threading.Lock()


def _driver_config(directory: str) -> tuple[tuple[str, str], ...]:
    """Settings that switch off every filter, diff and merge driver the repository's configuration
    names (its config, config.worktree files and what they include).

    Drivers of the user's own (global) and the system's configuration stay on: a candidate of the
    container sandbox cannot reach them, one of the local sandbox can run anything as the user
    anyway, and they are what makes a checkout right (Git LFS's smudge filter). Found with one `git
    config` call and remembered until a file it read, or could read, changes."""
    dirs = _git_dir_names(directory)
    files = _config_files(dirs)
    # Checkouts of one repository without a config.worktree of their own read the same files:
    # the engine's many worktrees and grading checkouts share one look.
    key = directory
    if dirs is not None and not os.path.lexists(os.path.join(dirs[0], "config.worktree")):
        key = f"shared:{dirs[1]}"
    with _drivers_guard:
        cached = _drivers_seen.get(key)
    if cached is not None and cached[0] == _stat_all(cached[1]):
        return cached[2]
    command = _command(
        directory, ["config", "--null", "--show-scope", "--show-origin", "--get-regexp", _DRIVERS]
    )
    fixed = [_pair(setting) for setting in PROGRAM_CONFIG]
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
            settings += [
                (f"filter.{name}.clean", ""),
                (f"filter.{name}.smudge", ""),
                (f"filter.{name}.process", ""),
                (f"filter.{name}.required", "false"),
            ]
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


def _config_files(dirs: tuple[str, str] | None) -> tuple[str, ...]:
    """Every configuration file git could read in a checkout with these (git directory, common
    directory), present or not."""
    home = os.path.expanduser("~")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    files = ["/etc/gitconfig", os.path.join(home, ".gitconfig"), os.path.join(xdg, "git", "config")]
    if dirs is not None:
        git_dir, common = dirs
        files += [
            os.path.join(common, "config"),
            os.path.join(common, "config.worktree"),
            os.path.join(git_dir, "config.worktree"),
        ]
    return tuple(files)


def _stat_all(paths: Sequence[str]) -> _Stats:
    seen: list[tuple[int, int, int, int] | None] = []
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            seen.append(None)
        else:
            seen.append((info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns))
    return tuple(seen)


def _execute(
    command: list[str],
    *,
    timeout: float | None,
    binary: bool,
    strip: bool,
    settings: Sequence[tuple[str, str]] = (),
    on_start: Callable[[int], None] | None = None,
    new_group: bool = False,
    input: bytes | None = None,
    index: Path | None = None,
    borrow: Path | None = None,
) -> tuple[int, str | bytes, str]:
    """The one place the engine starts git: scrubbed environment, output captured.

    `index` is a private index file (object-store plumbing builds trees in one), `borrow` an object
    directory read beside the repository's own (a candidate's private repository, whose result
    commit is being brought in): the only git location variables the engine ever sets."""
    subcommand = command.index("-C") + 2 if "-C" in command else len(command)
    worktree_command = command[subcommand : subcommand + 1] == ["worktree"]
    for attempt in range(METADATA_RETRIES):
        if attempt:
            time.sleep(METADATA_PAUSE * attempt)  # a worker thread's: git writes the file meanwhile
        status, out, err = _execute_once(
            command,
            timeout=timeout,
            binary=binary,
            strip=strip,
            settings=settings,
            on_start=on_start,
            new_group=new_group,
            input=input,
            index=index,
            borrow=borrow,
        )
        if not (worktree_command and status != 0 and _METADATA_RACE.search(err)):
            break
    return status, out, err


def _execute_once(
    command: list[str],
    *,
    timeout: float | None,
    binary: bool,
    strip: bool,
    settings: Sequence[tuple[str, str]],
    on_start: Callable[[int], None] | None,
    new_group: bool,
    input: bytes | None,
    index: Path | None,
    borrow: Path | None,
) -> tuple[int, str | bytes, str]:
    where = command[command.index("-C") + 1] if "-C" in command else "/"
    env = {**_environment(), **_config_environment(settings)}
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    if borrow is not None:
        env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = str(borrow)
    process = _popen(command, env, where, piped=input is not None, new_group=new_group)
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
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)  # whatever it left in the background
    error_text = err.decode(errors="replace")
    if strip:
        error_text = error_text.removesuffix("\n")
    if binary:
        return status, out, error_text
    text = out.decode(errors="surrogateescape")
    return status, (text.removesuffix("\n") if strip else text), error_text


def _popen(
    command: list[str],
    env: dict[str, str],
    where: str,
    *,
    piped: bool,
    new_group: bool = False,
    stdin: IO[bytes] | None = None,
) -> subprocess.Popen[bytes]:
    """Every git process the engine starts, started here (its stdin a raw pipe when `piped`, or
    `stdin`: another git's output)."""
    try:
        return subprocess.Popen(
            command,
            stdin=stdin if stdin is not None else subprocess.PIPE if piped else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd="/",
            start_new_session=new_group,
            bufsize=0,
        )
    except FileNotFoundError as error:
        raise GitError(f"git is not installed or not on PATH (needed for {where})") from error
    except OSError as error:
        raise GitError(f"cannot run git in {where}: {error.strerror or error}") from error


def _pipe(
    directory: Path | str,
    first: Sequence[str],
    second: Sequence[str],
    *,
    input: bytes,
    borrow: Path | None = None,
    timeout: float | None = None,
) -> tuple[tuple[int, str], tuple[int, str]]:
    """`git <first> | git <second>` in `directory`, the first given `input` and `borrow`: what one
    writes, the other reads as it comes (a pack as big as a candidate made it is never held
    here). (status, stderr) of each; both end with a timeout."""
    directory = os.path.abspath(directory)
    env = {**_environment(), **_config_environment(_settings(directory, (), False))}
    reading = dict(env)
    if borrow is not None:
        reading["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = str(borrow)
    writer = _popen(_command(directory, first), reading, directory, piped=True)
    try:
        assert writer.stdout is not None and writer.stdin is not None
        reader = _popen(_command(directory, second), env, directory, piped=False, stdin=writer.stdout)
        writer.stdout.close()  # the reader's now: the writer sees it go if the reader ends first
        failed: list[tuple[int, str]] = []
        errors: dict[int, bytes] = {}

        def drain(process: subprocess.Popen[bytes]) -> None:
            assert process.stderr is not None
            errors[process.pid] = process.stderr.read()
            process.stderr.close()
            if process is reader and reader.stdout is not None:
                reader.stdout.close()  # index-pack's one line: the pack's name

        readers = [threading.Thread(target=drain, args=(p,), daemon=True) for p in (writer, reader)]
        for thread in readers:
            thread.start()
        with contextlib.suppress(BrokenPipeError):
            writer.stdin.write(input)
        writer.stdin.close()
        try:
            for process in (writer, reader):
                process.wait(timeout)
        except subprocess.TimeoutExpired:
            failed = [(GIT_TIMEOUT_STATUS, f"Timeout: git did not finish within {timeout:g} s")] * 2
        finally:
            for process in (writer, reader):
                if process.poll() is None:
                    process.kill()
                    process.wait()
        for thread in readers:
            thread.join()
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    if failed:
        return failed[0], failed[1]
    return (
        (writer.returncode, errors.get(writer.pid, b"").decode(errors="replace")),
        (reader.returncode, errors.get(reader.pid, b"").decode(errors="replace")),
    )


def _spawn(directory: str, args: Sequence[str]) -> subprocess.Popen[bytes]:
    """A long-lived git (a session's) in `directory`, with every call's environment and settings,
    reading its requests from a pipe."""
    env = {**_environment(), **_config_environment(_settings(directory, (), False))}
    return _popen(_command(directory, args), env, directory, piped=True)


def _run(
    directory: Path | str,
    *args: str,
    config: Sequence[str] = (),
    timeout: float | None = None,
    binary: bool = False,
    strip: bool = True,
    input: bytes | None = None,
    index: Path | None = None,
    borrow: Path | None = None,
    users_own: bool = False,
) -> tuple[int, str | bytes, str]:
    """Run git in `directory` and return (status, stdout, stderr) without raising on a non-zero exit.

    `-C` pins the directory; the child's own cwd is "/", so a missing directory is an error rather
    than whatever checkout the app happens to run in. `users_own`: the user's own act carried out
    on request (merging a winner), which runs their hooks and drivers as the `git merge` they would
    type; the environment is scrubbed all the same."""
    directory = os.path.abspath(directory)
    return _execute(
        _command(directory, args),
        timeout=timeout,
        binary=binary,
        strip=strip,
        settings=_settings(directory, config, users_own),
        input=input,
        index=index,
        borrow=borrow,
    )


@overload
def run(
    directory: Path | str,
    *args: str,
    timeout: float | None = ...,
    strip: bool = ...,
    binary: Literal[True],
    **options: Any,
) -> tuple[int, bytes, str]: ...
@overload
def run(
    directory: Path | str,
    *args: str,
    timeout: float | None = ...,
    strip: bool = ...,
    binary: Literal[False] = False,
    **options: Any,
) -> tuple[int, str, str]: ...
def run(
    directory: Path | str,
    *args: str,
    timeout: float | None = 60.0,
    strip: bool = False,
    binary: bool = False,
    **options: Any,
) -> tuple[int, str | bytes, str]:
    """Git for the rest of outpost-tui: (status, stdout, stderr), never raising on a non-zero exit.

    By default bounded at 60 s and stdout as git wrote it; `timeout=None` waits as long as git
    takes, `strip=True` drops the final newline, `binary=True` keeps stdout as bytes. The other
    options are the runner's own (`config`, `input`, `index`, `borrow`, `users_own`)."""
    return _run(directory, *args, timeout=timeout, strip=strip, binary=binary, **options)


def _run_in_group(
    directory: Path | str,
    *args: str,
    config: Sequence[str] = (),
    on_start: Callable[[int], None] | None = None,
) -> tuple[int, str, str]:
    """Run git in a process group of its own, reported to `on_start` while it runs.

    For commands that may run for a while inside an allocation (worktree add): the group lets a
    crashed coordinator's successor stop it, and is swept when git is done."""
    directory = os.path.abspath(directory)
    status, out, err = _execute(
        _command(directory, args),
        timeout=None,
        binary=False,
        strip=False,
        settings=_settings(directory, config, False),
        on_start=on_start,
        new_group=True,
    )
    return status, str(out).strip(), err


def error_line(text: str) -> str:
    """The first line git wrote to stderr that says something, without its "fatal: " or "error: "."""
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line.removeprefix("fatal: ").removeprefix("error: ")
    return "no message"


def _failure(what: str, directory: Path | str, err: str) -> GitError:
    return GitError(f"{what} failed in {directory}: {error_line(err)}")


@overload
def output(what: str, directory: Path | str, *args: str, binary: Literal[True], **options: Any) -> bytes: ...
@overload
def output(
    what: str, directory: Path | str, *args: str, binary: Literal[False] = False, **options: Any
) -> str: ...
def output(what: str, directory: Path | str, *args: str, binary: bool = False, **options: Any) -> str | bytes:
    """The stdout of a git command that must succeed (final newline dropped, no timeout unless
    given); otherwise GitError: "<what> failed in <directory>: <git's reason>"."""
    status, out, err = _run(directory, *args, binary=binary, **options)
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


def _git_dirs(root: Path) -> tuple[Path, Path] | None:
    """(git directory, common directory) of the checkout at `root`, read from its .git."""
    dirs = _git_dir_names(os.fspath(root))
    return (Path(dirs[0]), Path(dirs[1])) if dirs is not None else None


def _git_dir_names(root: str) -> tuple[str, str] | None:
    """_git_dirs as strings: every git call asks, and paths as strings cost a fraction."""
    dot_git = os.path.join(root, ".git")
    try:
        kind = os.stat(dot_git).st_mode
        if stat.S_ISDIR(kind):
            git_dir = dot_git
        elif stat.S_ISREG(kind):  # (never opened otherwise: a planted FIFO would hang the read)
            with open(dot_git, "rb") as handle:
                text = handle.read().decode().strip()
            if not text.startswith("gitdir:"):
                return None
            git_dir = os.path.join(root, text.removeprefix("gitdir:").strip())
        else:
            return None
        git_dir = real_path(git_dir)
        try:
            common_kind = os.stat(common := os.path.join(git_dir, "commondir")).st_mode
        except FileNotFoundError:
            common_kind = 0
        if stat.S_ISREG(common_kind):
            with open(common, "rb") as handle:
                common_dir = real_path(os.path.join(git_dir, handle.read().decode().strip()))
        else:
            common_dir = git_dir
    except (OSError, UnicodeDecodeError):
        return None
    return (git_dir, common_dir) if os.path.isdir(os.path.join(common_dir, "objects")) else None
