"""What this machine has for racing agents: agent CLIs, logins, git, a container engine, storage.

Every check is cheap and spends no tokens: programs are asked for `--version`, logins are judged
from credential files and environment variables (None when that cannot tell), the container
engine is asked for its version. Given a race, the checks it depends on are marked required, and
`missing()` lists the ones that fail.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from .agents import adapter_for, known_agents
from .spec import RaceSpec

VERSION_TIMEOUT = 10.0
ENGINE_TIMEOUT = 3.0
GIT_IDENTITY = ("-c", "user.name=outpost-tui doctor", "-c", "user.email=doctor@outpost.invalid",
                "-c", "commit.gpgsign=false")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None  # None: cannot tell without spending tokens or credentials we do not read
    detail: str
    required: bool = False

    @property
    def missing(self) -> bool:
        return self.required and self.ok is False

    def to_json(self) -> dict:
        return {"name": self.name, "ok": self.ok, "detail": self.detail, "required": self.required}


def missing(checks: list[Check]) -> list[Check]:
    return [check for check in checks if check.missing]


def run_checks(spec: RaceSpec | None = None, *, env: Mapping[str, str] | None = None,
               home: Path | None = None, repository: Path | None = None) -> list[Check]:
    env = dict(os.environ if env is None else env)
    home = home or Path(env.get("HOME") or Path.home())
    needed_agents = {c.agent for c in spec.candidates} if spec else set()
    checks: list[Check] = []
    for kind in known_agents():
        adapter = adapter_for(kind)
        if adapter.program is None:
            continue
        checks.extend(agent_checks(kind, env, home, required=kind in needed_agents))
    if spec is not None:
        checks.extend(command_checks(spec, env))
    checks.extend(git_checks(env, required=spec is not None))
    provider = spec.sandbox.provider if spec else None
    checks.append(container_check(spec, required=provider in ("docker", "podman")))
    repository = spec.repository if spec else (repository or _git_toplevel(Path.cwd(), env))
    checks.append(storage_check(repository, required=bool(spec and spec.durability.enabled)))
    return checks


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
    checks = [Check(f"agent {kind}", True, f"{version_of(adapter.version_argv() or (program,), env)} "
                                           f"({location})", required)]
    auth_status = getattr(adapter, "auth_status", None)
    if auth_status is not None:
        ok, detail = auth_status(env, home)
        checks.append(Check(f"login {kind}", ok, detail, required))
    return checks


def version_of(argv: tuple[str, ...], env: Mapping[str, str]) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, errors="replace",
                              stdin=subprocess.DEVNULL, timeout=VERSION_TIMEOUT, env=dict(env))
    except subprocess.TimeoutExpired:
        return f"version unknown (`{' '.join(argv)}` did not answer within {VERSION_TIMEOUT:g}s)"
    except OSError as error:
        return f"version unknown ({error.strerror or error})"
    for line in (done.stdout + "\n" + done.stderr).splitlines():
        if line.strip():
            return line.strip()[:120]
    return f"version unknown (exit code {done.returncode})"


def command_checks(spec: RaceSpec, env: Mapping[str, str]) -> list[Check]:
    checks = []
    for candidate in spec.candidates:
        if candidate.agent != "command" or not candidate.command:
            continue
        program = candidate.command[0]
        path = {**env, **candidate.env}.get("PATH")
        if os.sep in program:
            found = Path(program)
            if not found.is_absolute() and spec.path is not None:
                found = spec.path.parent / found
            ok = found.is_file() and os.access(found, os.X_OK)
            where = str(found)
        else:
            where = shutil.which(program, path=path)
            ok = where is not None
        detail = f"{program} ({where})" if ok else f"`{program}` not found" + (
            "" if os.sep in program else " on PATH")
        checks.append(Check(f"command {candidate.key}", ok, detail, True))
    return checks


# -- git ---------------------------------------------------------------------------------------

def git_checks(env: Mapping[str, str], *, required: bool) -> list[Check]:
    if shutil.which("git", path=env.get("PATH")) is None:
        return [Check("git", False, "git not found on PATH", required),
                Check("git merge-tree", False, "needs git", required)]
    version = version_of(("git", "--version"), env)
    return [Check("git", True, version, required), merge_tree_check(env, required=required)]


def merge_tree_check(env: Mapping[str, str], *, required: bool) -> Check:
    """Tries `git merge-tree --write-tree` (git 2.38+) in a scratch repository."""
    clean_env = {k: v for k, v in env.items() if not k.startswith("GIT_")}
    with tempfile.TemporaryDirectory(prefix="outpost-doctor-") as scratch:
        steps = (["git", "init", "-q"],
                 ["git", *GIT_IDENTITY, "commit", "-q", "--allow-empty", "-m", "probe"],
                 ["git", "merge-tree", "--write-tree", "HEAD", "HEAD"])
        for argv in steps:
            try:
                done = subprocess.run(argv, cwd=scratch, capture_output=True, text=True, env=clean_env,
                                      stdin=subprocess.DEVNULL, timeout=VERSION_TIMEOUT)
            except (OSError, subprocess.TimeoutExpired) as error:
                return Check("git merge-tree", False, f"could not run git: {error}", required)
            if done.returncode != 0:
                if argv[1] == "merge-tree":
                    return Check("git merge-tree", False, "`git merge-tree --write-tree` is not supported "
                                 "(needs git 2.38 or later)", required)
                detail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
                return Check("git merge-tree", False, f"`{' '.join(argv[:2])}` failed: {detail}", required)
    return Check("git merge-tree", True, "--write-tree supported", required)


def _git_toplevel(directory: Path, env: Mapping[str, str]) -> Path | None:
    try:
        done = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=directory, capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=VERSION_TIMEOUT, env=dict(env))
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None


# -- container engine --------------------------------------------------------------------------

def container_check(spec: RaceSpec | None, *, required: bool) -> Check:
    from .sandbox.base import SandboxError
    from .sandbox.container import connect

    sandbox = spec.sandbox if spec else None
    provider = sandbox.provider if sandbox and sandbox.provider != "local" else None
    try:
        client, endpoint = connect(sandbox.endpoint if sandbox else None, provider,
                                   timeout=ENGINE_TIMEOUT, pool=1)
    except (SandboxError, ImportError) as error:
        return Check("container engine", False, str(error), required)
    try:
        version = client.version()
    except Exception as error:  # the SDK raises requests/urllib3/docker errors alike
        detail = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        return Check("container engine", False, f"{endpoint} not reachable: {detail}", required)
    name = engine_name(version)
    detail = f"{name} {version.get('Version', '?')} at {endpoint}"
    ok: bool | None = True
    if provider and provider != name:
        detail += f" (the race asks for {provider}; the Docker API is the same, so it is used)"
    image = sandbox.image if sandbox else None
    if image and provider:
        try:
            client.images.get(image)
            detail += f"; image {image} present"
        except Exception:
            ok = False
            detail += f"; image {image} not found (build it: outpost-tui image build --tag {image})"
    try:
        client.close()
    except Exception:
        pass
    return Check("container engine", ok, detail, required)


def engine_name(version: Mapping) -> str:
    names = " ".join(str(c.get("Name", "")) for c in version.get("Components") or [] if isinstance(c, dict))
    platform = str((version.get("Platform") or {}).get("Name", ""))
    return "podman" if re.search(r"podman", names + " " + platform, re.IGNORECASE) else "docker"


# -- storage -----------------------------------------------------------------------------------

def storage_check(repository: Path | None, *, required: bool) -> Check:
    if repository is None:
        return Check("storage", None, "not in a git repository: nothing to check", required)
    storage = repository / ".outpost" / "storage"
    if not storage.exists():
        parent = next((p for p in (storage.parent, repository) if p.exists()), repository)
        if os.access(parent, os.W_OK | os.X_OK):
            return Check("storage", True, f"{storage} not created yet (made 0700 on first durable run)",
                         required)
        return Check("storage", False, f"{parent} is not writable: {storage} cannot be created", required)
    if not storage.is_dir():
        return Check("storage", False, f"{storage} is not a directory", required)
    mode = stat.S_IMODE(storage.stat().st_mode)
    if not os.access(storage, os.W_OK | os.X_OK):
        return Check("storage", False, f"{storage} is not writable (mode {mode:04o})", required)
    if mode != 0o700:
        return Check("storage", False, f"{storage} has mode {mode:04o}; expected 0700 "
                                       f"(chmod 700 {storage})", required)
    return Check("storage", True, f"{storage} (mode 0700)", required)
