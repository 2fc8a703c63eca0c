"""Finding the container engine as users have it, and saying why that one.

In order: the race file's `[sandbox] endpoint`; `DOCKER_HOST`; then, for Docker, the current
Docker context (`docker context use`: `DOCKER_CONTEXT`, else `currentContext` in the Docker CLI's
config.json, whose endpoint is in `contexts/meta/<sha256 of the name>/meta.json`); then the sockets
engines listen on: rootful Docker, rootless Docker (`$XDG_RUNTIME_DIR/docker.sock`), Docker
Desktop, rootless Podman (`$XDG_RUNTIME_DIR/podman/podman.sock`), rootful Podman. A race that asks
for Podman looks at Podman's sockets first.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import OutpostError

DEFAULT_CONTEXT = "default"


@dataclass(frozen=True)
class Endpoint:
    url: str
    why: str  # how it was chosen, for `doctor` and error messages
    # A Docker context's TLS material: ca, cert, key file paths and whether to verify.
    tls: Mapping[str, object] | None = None

    def describe(self) -> str:
        return f"{self.url} ({self.why})"


def _runtime_dir(env: Mapping[str, str]) -> str:
    return env.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"


def sockets(engine: str, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """(path, what it is) of the sockets an engine listens on, the usual one first."""
    runtime = _runtime_dir(env)
    home = env.get("HOME") or os.path.expanduser("~")
    if engine == "docker":
        return [
            ("/var/run/docker.sock", "Docker's socket"),
            (f"{runtime}/docker.sock", "rootless Docker's socket"),
            (f"{home}/.docker/run/docker.sock", "Docker Desktop's socket"),
        ]
    return [
        (f"{runtime}/podman/podman.sock", "rootless Podman's socket"),
        ("/run/podman/podman.sock", "rootful Podman's socket"),
    ]


def docker_config_dir(env: Mapping[str, str]) -> Path:
    if env.get("DOCKER_CONFIG"):
        return Path(env["DOCKER_CONFIG"])
    return Path(env.get("HOME") or os.path.expanduser("~")) / ".docker"


def docker_context(env: Mapping[str, str]) -> Endpoint | None:
    """The endpoint of the Docker CLI's current context, when it is not the default one."""
    config_dir = docker_config_dir(env)
    name = env.get("DOCKER_CONTEXT")
    how = "DOCKER_CONTEXT"
    if not name:
        try:
            name = json.loads((config_dir / "config.json").read_text()).get("currentContext")
        except (OSError, ValueError, AttributeError):
            return None
        how = f"the current Docker context in {config_dir / 'config.json'}"
    if not name or not isinstance(name, str) or name == DEFAULT_CONTEXT:
        return None
    digest = hashlib.sha256(name.encode()).hexdigest()
    meta_file = config_dir / "contexts" / "meta" / digest / "meta.json"
    try:
        meta = json.loads(meta_file.read_text())
        docker = meta["Endpoints"]["docker"]
        host = docker["Host"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ContextError(
            f"Docker context {name!r} ({how}) has no readable endpoint in {meta_file}"
        ) from None
    tls_dir = config_dir / "contexts" / "tls" / digest / "docker"
    tls = None
    if tls_dir.is_dir():
        tls = {
            "ca": _existing(tls_dir / "ca.pem"),
            "cert": _existing(tls_dir / "cert.pem"),
            "key": _existing(tls_dir / "key.pem"),
            "verify": not docker.get("SkipTLSVerify", False),
        }
    return Endpoint(host, f"Docker context {name!r}, from {how}", tls)


class ContextError(OutpostError):
    """The current Docker context names an endpoint that cannot be read."""


def _existing(path: Path) -> str | None:
    return str(path) if path.is_file() else None


def _is_socket(path: str) -> bool:
    try:
        return Path(path).is_socket()
    except OSError:
        return False


def discover(
    explicit: str | None = None, provider: str | None = None, env: Mapping[str, str] | None = None
) -> Endpoint | None:
    """The engine to use and why; None when there is none to be found."""
    env = os.environ if env is None else env
    if explicit:
        return Endpoint(explicit, "[sandbox] endpoint in the race file")
    if env.get("DOCKER_HOST"):
        return Endpoint(env["DOCKER_HOST"], "DOCKER_HOST")
    order = ["podman", "docker"] if provider == "podman" else ["docker", "podman"]
    for engine in order:
        if engine == "docker":
            context = docker_context(env)
            if context is not None:
                return context
        for path, what in sockets(engine, env):
            if _is_socket(path):
                return Endpoint(f"unix://{path}", f"{what}, found at {path}")
    return None


def searched(provider: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """Where discover looked, for the message that says nothing was found."""
    env = os.environ if env is None else env
    order = ["podman", "docker"] if provider == "podman" else ["docker", "podman"]
    paths = [path for engine in order for path, _ in sockets(engine, env)]
    return "DOCKER_HOST, the current Docker context, " + ", ".join(paths)


def engine_name(version: Mapping[str, Any]) -> str:
    """docker or podman, from the engine's /version answer (both speak the Docker API)."""
    names = " ".join(str(c.get("Name", "")) for c in version.get("Components") or [] if isinstance(c, dict))
    platform = str((version.get("Platform") or {}).get("Name", ""))
    return "podman" if re.search(r"podman", names + " " + platform, re.IGNORECASE) else "docker"
