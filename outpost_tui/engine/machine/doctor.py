"""What this machine has for racing agents: agent CLIs, logins, git, a container engine, storage.

Every check is cheap and spends no tokens: programs are asked for `--version`, logins are judged
from credential files and environment variables (None when that cannot tell), each agent's model
API is asked for a HEAD of its base URL (any HTTP answer means it is reachable), the container
engine is asked for its version (`containers`). Given a race, the checks it depends on are marked
required, and `check.missing()` lists the ones that fail. A container race runs its agents inside
its image, so there the host's agent programs are not needed; the image is probed for them instead.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..agents import adapter_for, known_agents
from ..core.spec import RaceSpec
from ..errors import OutpostError
from .check import Check
from .containers import container_checks

VERSION_TIMEOUT = 10.0
ENDPOINT_TIMEOUT = 5.0
CONTAINER_PROVIDERS = ("docker", "podman")
GIT_IDENTITY = (
    "-c",
    "user.name=outpost-tui doctor",
    "-c",
    "user.email=doctor@outpost.invalid",
    "-c",
    "commit.gpgsign=false",
)


def run_checks(
    spec: RaceSpec | None = None,
    *,
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
    repository: Path | None = None,
) -> list[Check]:
    env = dict(os.environ if env is None else env)
    home = home or Path(env.get("HOME") or Path.home())
    contained = in_container(spec)
    needed_agents = host_agents_needed(spec)
    checks: list[Check] = []
    for kind in known_agents():
        adapter = adapter_for(kind)
        if adapter.program is None:
            continue
        checks.extend(agent_checks(kind, env, home, required=kind in needed_agents))
    if spec is not None:
        checks.extend(command_checks(spec, env, contained=contained))
    checks.extend(git_checks(env, required=spec is not None))
    checks.extend(
        container_checks(
            spec, required=contained, programs=image_programs(spec) if contained and spec is not None else {}
        )
    )
    repository = spec.repository if spec else (repository or _git_toplevel(Path.cwd()))
    # reported, not required: the engine commits a candidate's edits under its own name when
    # there is no identity, but agents that commit themselves fail
    checks.append(identity_check(repository, required=False))
    checks.append(storage_check(repository, required=bool(spec and spec.durability.enabled)))
    checks.append(containment_check())
    if not contained:
        checks.append(isolation_check(spec))
    return checks


def isolation_check(spec: RaceSpec | None) -> Check:
    """Whether local candidates run isolated (bubblewrap) or as the user; required when the race
    file asks for bubblewrap, loud (not ok) whenever they would run unisolated."""
    from ..sandbox import isolation

    wanted = spec.sandbox.isolation if spec is not None else "auto"
    try:
        program, warning = isolation.choose(wanted)
    except OutpostError as error:
        return Check("isolation", False, str(error), required=True)
    if program is not None:
        own = "each candidate writes only its worktree and a git repository of its own"
        unfiltered = isolation.probe().unfiltered
        keys = f"; the kernel's keyrings stay open to it ({unfiltered})" if unfiltered else ""
        return Check("isolation", True, f"bubblewrap ({program}): {own}{keys}")
    return Check("isolation", False, warning)


def containment_check() -> Check:
    """How the local sandbox ends every process a command starts (cgroup v2 or the tracked tree)."""
    from ..sandbox import containment

    return Check("process containment", True, containment.mechanism())


# -- what a race needs --------------------------------------------------------------------------


def in_container(spec: RaceSpec | None) -> bool:
    return spec is not None and spec.sandbox.provider in CONTAINER_PROVIDERS


def host_agents_needed(spec: RaceSpec | None) -> set[str]:
    """The agent kinds whose programs (and logins) this host must have: none for a container race."""
    if spec is None or in_container(spec):
        return set()
    return {candidate.agent for candidate in spec.candidates}


def image_programs(spec: RaceSpec) -> dict[str, str]:
    """Check name -> program that a container race runs inside its image."""
    programs: dict[str, str] = {}
    for candidate in spec.candidates:
        program = adapter_for(candidate.agent).program
        if program is not None:
            programs[f"agent {candidate.agent} in image"] = program
        elif candidate.agent == "command" and candidate.command and os.sep not in candidate.command[0]:
            programs[f"command {candidate.key} in image"] = candidate.command[0]
    return programs


# -- agents ------------------------------------------------------------------------------------


def agent_checks(kind: str, env: Mapping[str, str], home: Path, *, required: bool) -> list[Check]:
    adapter = adapter_for(kind)
    program = adapter.program
    assert program is not None
    location = shutil.which(program, path=env.get("PATH"))
    if location is None:
        hint = getattr(adapter, "install_hint", None)
        detail = f"`{program}` not found on PATH" + (f" (install: {hint})" if hint else "")
        return [Check(f"agent {kind}", False, detail, required)]
    checks = [
        Check(
            f"agent {kind}",
            True,
            f"{version_of(adapter.version_argv() or (program,), env)} ({location})",
            required,
        )
    ]
    auth_status = getattr(adapter, "auth_status", None)
    if auth_status is not None:
        ok, detail = auth_status(env, home)
        checks.append(Check(f"login {kind}", ok, detail, required))
    endpoint = adapter.api_endpoint(env, home)
    if endpoint is not None:
        checks.append(endpoint_check(f"api {kind}", endpoint, env, required=required))
    return checks


def agents_ready(
    kinds: Iterable[str], env: Mapping[str, str] | None = None, home: Path | None = None
) -> list[Check]:
    """Installed and logged in, for each agent kind: the local part of `doctor`'s agent checks
    (no network, nothing spent). Only the checks that fail are returned."""
    env = dict(os.environ if env is None else env)
    home = home or Path(env.get("HOME") or Path.home())
    failed: list[Check] = []
    for kind in sorted(set(kinds)):
        adapter = adapter_for(kind)
        program = adapter.program
        if program is None:
            continue  # demo and command agents need nothing installed
        if shutil.which(program, path=env.get("PATH")) is None:
            hint = getattr(adapter, "install_hint", None)
            failed.append(
                Check(
                    f"agent {kind}",
                    False,
                    f"`{program}` not found on PATH" + (f" (install: {hint})" if hint else ""),
                    True,
                )
            )
            continue
        auth_status = getattr(adapter, "auth_status", None)
        if auth_status is not None:
            ok, detail = auth_status(env, home)
            if ok is False:
                failed.append(Check(f"login {kind}", False, detail, True))
    return failed


def endpoint_check(
    name: str, url: str, env: Mapping[str, str], *, required: bool, timeout: float = ENDPOINT_TIMEOUT
) -> Check:
    """Whether the model API at `url` answers at all: a HEAD request, no credentials sent, so no
    tokens are spent. Any HTTP answer (even 404 or 401) means it is reachable."""
    import urllib.error
    import urllib.request

    if not url.startswith(("http://", "https://")):
        return Check(name, False, f"{url} is not an http(s) URL", required)
    proxies = {
        scheme: env[key] for scheme, key in (("http", "HTTP_PROXY"), ("https", "HTTPS_PROXY")) if env.get(key)
    }
    opener = urllib.request.build_opener(urllib.request.ProxyHandler(proxies))
    try:
        with opener.open(urllib.request.Request(url, method="HEAD"), timeout=timeout) as answer:
            status = answer.status
    except urllib.error.HTTPError as error:
        status = error.code
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", None) or error
        reason = getattr(reason, "strerror", None) or str(reason) or type(error).__name__
        return Check(name, False, f"cannot reach {url}: {reason}", required)
    return Check(name, True, f"{url} answers (HTTP {status})", required)


def version_of(argv: tuple[str, ...], env: Mapping[str, str]) -> str:
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            errors="replace",
            stdin=subprocess.DEVNULL,
            timeout=VERSION_TIMEOUT,
            env=dict(env),
        )
    except subprocess.TimeoutExpired:
        return f"version unknown (`{' '.join(argv)}` did not answer within {VERSION_TIMEOUT:g}s)"
    except OSError as error:
        return f"version unknown ({error.strerror or error})"
    for line in (done.stdout + "\n" + done.stderr).splitlines():
        if line.strip():
            return line.strip()[:120]
    return f"version unknown (exit code {done.returncode})"


def command_checks(spec: RaceSpec, env: Mapping[str, str], *, contained: bool = False) -> list[Check]:
    """Command agents' programs on the host; in a container race a bare program name is looked up
    in the image instead (image_programs), so the host's is reported but not needed."""
    checks = []
    for candidate in spec.candidates:
        if candidate.agent != "command" or not candidate.command:
            continue
        program = candidate.command[0]
        path = {**env, **candidate.env}.get("PATH")
        where: str | None
        if os.sep in program:
            found = Path(program)
            if not found.is_absolute() and spec.path is not None:
                found = spec.path.parent / found
            ok = found.is_file() and os.access(found, os.X_OK)
            where = str(found)
        else:
            where = shutil.which(program, path=path)
            ok = where is not None
        detail = (
            f"{program} ({where})"
            if ok
            else f"`{program}` not found" + ("" if os.sep in program else " on PATH")
        )
        checks.append(
            Check(f"command {candidate.key}", ok, detail, not (contained and os.sep not in program))
        )
    return checks


# -- git ---------------------------------------------------------------------------------------


def git_checks(env: Mapping[str, str], *, required: bool) -> list[Check]:
    if shutil.which("git", path=env.get("PATH")) is None:
        return [
            Check("git", False, "git not found on PATH", required),
            Check("git merge-tree", False, "needs git", required),
        ]
    return [Check("git", True, _git_version(), required), merge_tree_check(env, required=required)]


def _git_version() -> str:
    from .. import git

    try:
        status, out, err = git.run("/", "--version", timeout=VERSION_TIMEOUT)
    except git.GitError as error:
        return f"version unknown ({error})"
    if status == git.GIT_TIMEOUT_STATUS:
        return f"version unknown (`git --version` did not answer within {VERSION_TIMEOUT:g}s)"
    lines = [line.strip() for line in (out + "\n" + err).splitlines() if line.strip()]
    return lines[0][:120] if lines else f"version unknown (exit code {status})"


def identity_check(repository: Path | None, *, required: bool) -> Check:
    """The git identity agents commit under (outpost hands it to agents whose shell hides
    ~/.gitconfig, such as Gemini CLI): without one, a candidate's own commits fail."""
    from .. import git

    try:
        found = git.identity(repository or Path.cwd())
    except git.GitError as error:
        return Check("git identity", False, str(error), required)
    if "name" in found and "email" in found:
        return Check("git identity", True, f"{found['name']} <{found['email']}>", required)
    missing = " and ".join(f"user.{key}" for key in ("name", "email") if key not in found)
    return Check(
        "git identity",
        False,
        f"no {missing}: agents cannot commit themselves (git config --global user.name …, user.email …)",
        required,
    )


def merge_tree_check(env: Mapping[str, str], *, required: bool) -> Check:
    """Tries `git merge-tree --write-tree` (git 2.38+) in a scratch repository, through the engine's
    own git runner: the git, environment and settings a race will use."""
    from .. import git

    with tempfile.TemporaryDirectory(prefix="outpost-doctor-") as scratch:
        steps = (
            ("init", ("init", "-q")),
            ("commit", (*GIT_IDENTITY, "commit", "-q", "--allow-empty", "-m", "probe")),
            ("merge-tree", ("merge-tree", "--write-tree", "HEAD", "HEAD")),
        )
        for name, args in steps:
            try:
                status, _, err = git.run(scratch, *args, timeout=VERSION_TIMEOUT)
            except git.GitError as error:
                return Check("git merge-tree", False, f"could not run git: {error}", required)
            if status != 0:
                if name == "merge-tree":
                    return Check(
                        "git merge-tree",
                        False,
                        "`git merge-tree --write-tree` is not supported (needs git 2.38 or later)",
                        required,
                    )
                detail = (err.strip().splitlines() or [f"exit {status}"])[-1]
                return Check("git merge-tree", False, f"`git {name}` failed: {detail}", required)
    return Check("git merge-tree", True, "--write-tree supported", required)


def _git_toplevel(directory: Path) -> Path | None:
    from .. import git

    try:
        return git.repository_root(directory)
    except git.GitError:
        return None


# -- storage -----------------------------------------------------------------------------------


def storage_check(repository: Path | None, *, required: bool) -> Check:
    if repository is None:
        return Check("storage", None, "not in a git repository: nothing to check", required)
    storage = repository / ".outpost" / "storage"
    if not storage.exists():
        parent = next((p for p in (storage.parent, repository) if p.exists()), repository)
        if os.access(parent, os.W_OK | os.X_OK):
            return Check(
                "storage", True, f"{storage} not created yet (made 0700 on first durable run)", required
            )
        return Check("storage", False, f"{parent} is not writable: {storage} cannot be created", required)
    if not storage.is_dir():
        return Check("storage", False, f"{storage} is not a directory", required)
    mode = stat.S_IMODE(storage.stat().st_mode)
    if not os.access(storage, os.W_OK | os.X_OK):
        return Check("storage", False, f"{storage} is not writable (mode {mode:04o})", required)
    if mode != 0o700:
        return Check(
            "storage", False, f"{storage} has mode {mode:04o}; expected 0700 (chmod 700 {storage})", required
        )
    return Check("storage", True, f"{storage} (mode 0700)", required)
