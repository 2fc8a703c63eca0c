"""The container engine's API as the sandbox uses it: finding and connecting to the engine (Docker or
Podman, negotiated once), what kind of engine it is, what a container mounts of its checkout and
the repository, and the containers a race left behind, found by their labels, listed and
removed."""

from __future__ import annotations

import contextlib
import io
import os
import re
import tarfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .. import git
from .base import SandboxError
from .engines import ContextError, Endpoint, discover, searched

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

RESOURCE_PREFIX = "container:"


LABEL_RACE = "outpost.race"


LABEL_KEY = "outpost.key"


LABEL_ATTEMPT = "outpost.attempt"


LABEL_REPOSITORY = "outpost.repository"


LABEL_ROLE = "outpost.role"  # "grading" for a grading checkout's container; none for the agent's


ENGINE_INFO_TIMEOUT = 60.0  # seconds for the engine's /info and /version when a race connects


def _docker() -> ModuleType:
    import docker  # imported lazily: local races never need it

    return docker


def resolve_endpoint(explicit: str | None = None, provider: str | None = None) -> str | None:
    """The engine to use (see engines.py for the order); None when there is none."""
    try:
        found = discover(explicit, provider)
    except ContextError:
        return None
    return found.url if found else None


def describe_endpoint(endpoint: str | None) -> str:
    docker_host = os.environ.get("DOCKER_HOST")
    where = endpoint or "no engine socket found"
    return f"{where} (DOCKER_HOST={docker_host})" if docker_host else f"{where} (DOCKER_HOST unset)"


def find_endpoint(explicit: str | None = None, provider: str | None = None) -> Endpoint:
    """The engine to use and why; SandboxError saying where it looked when there is none."""
    try:
        found = discover(explicit, provider)
    except ContextError as error:
        raise SandboxError(
            f"{error} (switch with `docker context use default`, or set DOCKER_HOST)"
        ) from None
    if found is None:
        raise SandboxError(
            f"no container engine found (looked at {searched(provider)}): set DOCKER_HOST (e.g. "
            "unix:///run/podman/podman.sock, ssh://user@host, tcp://host:2376) or [sandbox] "
            "endpoint, or start Docker or `podman system service`"
        )
    return found


def connect(
    endpoint: str | None = None, provider: str | None = None, *, timeout: float = 60.0, pool: int = 128
) -> tuple[Any, str]:
    """A Docker API client and the endpoint it talks to; SandboxError when there is none."""
    client, found = connect_endpoint(endpoint, provider, timeout=timeout, pool=pool)
    return client, found.url


def connect_endpoint(
    endpoint: str | None = None, provider: str | None = None, *, timeout: float = 60.0, pool: int = 128
) -> tuple[Any, Endpoint]:
    """connect(), also saying how the endpoint was chosen."""
    docker = _docker()
    found = find_endpoint(endpoint, provider)
    resolved = found.url
    # ssh:// goes through the ssh program (keys, agent and ~/.ssh/config as usual). The API version
    # is negotiated from /_ping below: the SDK's own negotiation asks /version, which takes
    # ~0.4 s on Podman, for every race.
    options: dict[str, Any] = {
        "timeout": timeout,
        "max_pool_size": pool,
        "use_ssh_client": resolved.startswith("ssh://"),
        "version": docker.constants.MINIMUM_DOCKER_API_VERSION,
    }
    try:
        if found.why == "DOCKER_HOST":
            client = docker.from_env(**options)  # also honours DOCKER_TLS_VERIFY / DOCKER_CERT_PATH
        else:
            if found.tls and resolved.startswith("tcp://"):
                tls = found.tls
                options["tls"] = docker.tls.TLSConfig(
                    client_cert=(tls["cert"], tls["key"]) if tls.get("cert") and tls.get("key") else None,
                    ca_cert=tls.get("ca"),
                    verify=bool(tls.get("verify")) and (tls.get("ca") or True),
                )
            client = docker.DockerClient(base_url=resolved, **options)
        _negotiate(client)
    except Exception as error:  # requests, urllib3, ssh and docker errors alike
        docker_host = os.environ.get("DOCKER_HOST")
        where = found.describe()
        if found.why != "DOCKER_HOST":
            where += f"; DOCKER_HOST={docker_host} not used" if docker_host else "; DOCKER_HOST unset"
        raise SandboxError(f"cannot reach the container engine at {where}: {_first_line(error)}") from None
    return client, found


def engine_kind(client: Any, endpoint: str) -> dict[str, Any]:
    """Which engine it is (docker | podman) and whether it runs rootless: what decides how
    containers must run for their files to belong to the user.

    The name comes from /_ping's headers (Podman adds its own); /version takes seconds on a loaded
    Podman. A local socket owned by root is a rootful engine's; anything else asks /info."""
    api = client.api
    response = api._get(api.base_url + "/_ping")
    response.raise_for_status()
    headers = {name.lower(): value for name, value in response.headers.items()}
    podman = "libpod-api-version" in headers or "libpod" in headers.get("server", "").lower()
    name = "podman" if podman else "docker"
    rootless: bool | None = None
    if endpoint.startswith("unix://"):
        try:
            if os.stat(endpoint.removeprefix("unix://")).st_uid == 0:
                rootless = False
        except OSError:
            pass
    if rootless is None:
        # Docker says so among its security options; Podman's compat /info does not (4.3 lists
        # only seccomp there) but has its own "Rootless": true
        info = client.info()
        options = " ".join(str(option) for option in info.get("SecurityOptions") or [])
        rootless = "rootless" in options or info.get("Rootless") is True
    return {"name": name, "rootless": rootless}


def user_mapping(kind: Mapping[str, Any], uid: int, gid: int) -> tuple[dict[str, Any], str]:
    """Container options under which files written in the worktree belong to uid:gid on the host,
    and how. A rootful engine runs the container as uid:gid. A rootless engine (Docker or Podman)
    maps the container's root to the user who runs the engine and every other id to a subordinate
    one, so the container runs as its root: still unprivileged on the host, and without
    capabilities inside."""
    if not kind.get("rootless"):
        return {"user": f"{uid}:{gid}"}, f"rootful {kind['name']}: containers run as {uid}:{gid}"
    name = "Podman" if kind["name"] == "podman" else "Docker"
    return (
        {"user": "0:0"},
        f"rootless {name}: containers run as their root, which is the engine's user on the host",
    )


def check_network(client: Any, network: str) -> None:
    """SandboxError unless the engine has the network the race asks for: an engine without a
    bridge network would otherwise start the container with no network, silently."""
    if network in ("none", "host", ""):
        return
    try:
        networks = client.networks.list()
    except Exception as error:  # docker, requests errors alike
        raise SandboxError(f"cannot list the engine's networks: {_first_line(error)}") from None
    names = {n.name: (n.attrs or {}).get("Driver") for n in networks}
    if network in names:
        return
    if network == "bridge" and "bridge" in names.values():
        return  # Podman's default network ("podman") is a bridge
    shown = ", ".join(f"{name} ({driver})" for name, driver in sorted(names.items())) or "none"
    raise SandboxError(
        f"[sandbox] network = {network!r}: the engine has no such network "
        f"(it has: {shown}); a container would start without any network"
    )


def _negotiate(client: DockerClient) -> None:
    """Use the highest API version both the engine and the SDK speak."""
    docker = _docker()
    # Any: the SDK's stubs leave out the private members this pins (_get, _version)
    api: Any = client.api
    response = api._get(api.base_url + "/_ping")
    response.raise_for_status()

    def parts(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split("."))

    server = response.headers.get("Api-Version")
    newest = docker.constants.DEFAULT_DOCKER_API_VERSION
    if server and re.fullmatch(r"\d+\.\d+", server):
        api._version = server if parts(server) < parts(newest) else newest
    else:
        api._version = newest


def container_name(race_id: str, key: str, attempt: int, role: str = "") -> str:
    raw = f"outpost-{race_id}-{key}-{attempt}" + (f"-{role}" if role else "")
    name = re.sub(r"[^a-zA-Z0-9_.-]+", "-", raw)
    if len(name) > 200:
        import hashlib

        name = f"{name[:180]}-{hashlib.sha256(raw.encode()).hexdigest()[:12]}"
    return name


def git_binds(directory: str, git_dir: str) -> tuple[dict[str, dict[str, str]], tuple[str, str]]:
    """What a container mounts of its checkout and of the repository, and a directory beside the
    checkout it may write in (where the race's first container leaves its marker): its path on
    the host and in the container.

    The checkout, writable. In place of the repository's worktree git directories, the
    checkout's view: its private repository (engine/git/private.py), writable, which its `.git`
    file leads to. The repository's objects, which that repository borrows, read-only (and the
    object directories they borrow in turn). Nothing else of the repository's `.git`: its refs,
    config, hooks and the rivals' git directories are not in the container. A directory that is
    not a checkout of the engine's sees the repository's `.git` read-only."""
    binds = {directory: {"bind": directory, "mode": "rw"}}
    try:
        view = str(git.make_view(directory))
    except git.GitError:
        binds[git_dir] = {"bind": git_dir, "mode": "ro"}
        return binds, (directory, directory)
    inside = os.path.join(git_dir, "worktrees")
    binds[view] = {"bind": inside, "mode": "rw"}
    for objects in _object_directories(os.path.join(git_dir, "objects")):
        binds[objects] = {"bind": objects, "mode": "ro"}
    return binds, (view, inside)


def _object_directories(objects: str, depth: int = 5) -> list[str]:
    """`objects` and the object directories its alternates name, as git follows them."""
    found = [objects]
    try:
        with open(os.path.join(objects, "info", "alternates"), encoding="utf-8") as listed:
            lines = listed.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return found
    for line in lines:
        line = line.strip()
        if depth and line and not line.startswith("#"):
            path = os.path.realpath(os.path.join(objects, line))
            if os.path.isdir(path):
                found += _object_directories(path, depth - 1)
    return list(dict.fromkeys(found))


def _tar(files: Mapping[str, bytes], uid: int, gid: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = len(content), 0o600, uid, gid
            info.mtime = int(time.time())
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _unreachable(error: BaseException) -> bool:
    """Whether an error says the engine itself is gone (its socket closed or missing, the
    connection aborted mid-stream), rather than that one request failed."""
    import requests
    import urllib3

    seen: set[int] = set()
    pending: list[object] = [error]
    while pending:
        current = pending.pop()
        if not isinstance(current, BaseException) or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(
            current,
            (
                requests.exceptions.ConnectionError,
                urllib3.exceptions.ProtocolError,
                ConnectionError,
                FileNotFoundError,
            ),
        ):
            return True
        pending += [current.__cause__, current.__context__, *current.args]
    return False


def gone(error: BaseException) -> bool:
    """Whether an engine's error says the container does not exist (any more): Docker says 404,
    Podman 500 "no such container" for one whose removal is under way."""
    docker = _docker()
    return isinstance(error, docker.errors.NotFound) or (
        isinstance(error, docker.errors.APIError) and "no such container" in str(error.explanation)
    )


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:300]


def _remove_quietly(container: Container) -> None:
    with contextlib.suppress(Exception):  # already gone, or the engine is: replay finds it by label
        container.remove(force=True)


def _info(summary: Mapping[str, Any]) -> dict[str, Any]:
    labels = summary.get("Labels") or {}
    names = summary.get("Names") or [""]
    created = summary.get("Created")
    return {
        "id": summary.get("Id"),
        "name": str(names[0]).lstrip("/"),
        "status": summary.get("State"),
        "image": summary.get("Image"),
        "created": (
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created)) if isinstance(created, int) else None
        ),
        "race": labels.get(LABEL_RACE),
        "key": labels.get(LABEL_KEY),
        "attempt": int(labels[LABEL_ATTEMPT]) if str(labels.get(LABEL_ATTEMPT, "")).isdigit() else None,
        "repository": labels.get(LABEL_REPOSITORY),
        "role": labels.get(LABEL_ROLE) or "agent",
    }


def _listed(client: DockerClient, filters: list[str]) -> list[dict[str, Any]]:
    # The engine's own summary, in one request: the SDK's list inspects each container after it,
    # which fails on Podman (500, not 404) for one that a race is removing meanwhile.
    summaries: list[dict[str, Any]] = client.api.containers(all=True, filters={"label": filters})
    return summaries


def list_containers(
    race_id: str | None = None, endpoint: str | None = None, repository: str | Path | None = None
) -> list[dict[str, Any]]:
    """Containers made by outpost-tui (every race, or one), running or not.

    Returns [] when no engine is configured at all; raises SandboxError when one is configured but
    cannot be reached. Each entry: id, name, status, image, created, race, key, attempt, repository,
    role (agent, or grading: the container a result is validated in).
    """
    if resolve_endpoint(endpoint) is None:
        return []
    client, _ = connect(endpoint, timeout=20)
    filters = [f"{LABEL_RACE}={race_id}"] if race_id else [LABEL_RACE]
    if repository is not None:
        filters.append(f"{LABEL_REPOSITORY}={Path(repository).resolve()}")
    try:
        return [_info(summary) for summary in _listed(client, filters)]
    finally:
        client.close()


def remove_race_containers(
    race_id: str, endpoint: str | None = None, repository: str | Path | None = None
) -> int:
    """Remove every container of a race (by label; of that repository's, when given); returns how
    many were removed."""
    docker = _docker()
    if resolve_endpoint(endpoint) is None:
        return 0
    client, _ = connect(endpoint, timeout=30)
    removed = 0
    filters = [f"{LABEL_RACE}={race_id}"]
    if repository is not None:
        filters.append(f"{LABEL_REPOSITORY}={Path(repository).resolve()}")
    try:
        for summary in _listed(client, filters):
            try:
                client.api.remove_container(summary["Id"], force=True)
                removed += 1
            except docker.errors.APIError as error:
                if not gone(error):
                    raise
                continue  # removed meanwhile (by its own race): already what this wants
    finally:
        client.close()
    return removed
