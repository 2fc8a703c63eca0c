"""Sandboxes in containers, through the Docker API of Docker or Podman.

One container per attempt. The host worktree and the repository's git directory are mounted at
their host paths, so the worktree's `.git` file (which holds an absolute host path) still resolves
and git works inside. The container runs as the host user (files it writes belong to that user),
with no network unless the race file asks, every capability dropped, no-new-privileges, an init
process, and the race file's memory, CPU and pids limits. The host's Docker socket is never mounted.

Commands run through exec with their output streamed back frame by frame. Each command is started by
a small POSIX-sh wrapper (argv is passed as arguments, never interpolated). Cancellation and
timeouts stop it from a second exec that TERMs every process of the command, however it detached,
KILLs what is left after a grace period and confirms that none is left; the wrapper does the same
(KILL at once) to what a command leaves behind when it ends. Closing removes the container.

The Docker SDK is blocking: every call runs in a worker thread, and output comes back to the event
loop through `anyio.from_thread`.
"""

from __future__ import annotations

import io
import math
import os
import re
import tarfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import anyio
import anyio.from_thread
import anyio.to_thread

from .. import git, gitenv
from .images import KEEP_ALIVE
from ..core.spec import DEFAULT_IMAGE, SandboxSpec
from .base import (Completed, EngineGone, LineSink, Sandbox, SandboxContext, SandboxError,
                   SandboxProvider, Stop, StopSink)
from .engines import ContextError, Endpoint, discover, searched
from .lines import LineSplitter, Tail

RESOURCE_PREFIX = "container:"
LABEL_RACE = "outpost.race"
LABEL_KEY = "outpost.key"
LABEL_ATTEMPT = "outpost.attempt"
LABEL_REPOSITORY = "outpost.repository"
LABEL_ROLE = "outpost.role"  # "grading" for a grading checkout's container; none for the agent's
# Seconds between TERM and KILL to a cancelled command's process group (outpost uses 500 ms).
KILL_GRACE = 0.5
# Seconds to wait for a stopped command's output to end once its processes are confirmed gone;
# after that the stream is abandoned (the container's removal ends it).
STREAM_GRACE = 0.5
# Seconds a command may outlive its timeout inside the container before the backstop stops it.
BACKSTOP_MARGIN = 5.0
MARKER = "outpost-sandbox:"
ENGINE_INFO_TIMEOUT = 60.0  # seconds for the engine's /info and /version when a race connects

# Stops every process of the container but its init (pid 1), its keep-alive (the oldest other
# process: nothing a command starts can be older) and itself, and confirms they are gone. One
# command runs in a container at a time, so these are the command's processes however they
# detached (a new session, a double fork, closed output): a process group or a closed output
# stream says nothing about them. $1 pid file to wait for ("" none: cancellation can arrive while
# the command is still starting), $2 ticks of 50 ms to wait after TERM before KILL (0: KILL at
# once), $3 a pid to spare and $4 "roots" to spare every process started by an exec (parent
# outside the container, so pid 0; what a command starts has a parent inside): the wrapper
# sweeping after its command spares itself and a stopper the host may be running. Prints what it
# took: none, term or kill; exits 5 naming what it could not stop. TERM is ignored: it must outlive
# its own stop. (No single quote in here: the wrapper quotes it.)
STOPPER = """\
trap "" TERM
f=$1 ticks=$2 spare=${3:-} roots=${4:-}
if [ -n "$f" ]; then n=0; while [ ! -s "$f" ] && [ $n -lt 40 ]; do n=$((n+1)); sleep 0.05; done; fi
others() {
  all= keep= oldest=
  for d in /proc/[0-9]*; do
    q=${d#/proc/}
    [ "$q" = 1 ] || [ "$q" = $$ ] || [ "$q" = "$spare" ] && continue
    read -r l 2>/dev/null < "$d/stat" || continue
    set -- ${l##*) }
    [ "$1" = Z ] && continue
    [ -n "$roots" ] && [ "$2" = 0 ] && continue
    all="$all $q"
    if [ -z "$oldest" ] || [ "${20}" -lt "$oldest" ]; then oldest=${20} keep=$q; fi
  done
  procs=
  for q in $all; do [ "$q" != "$keep" ] && procs="$procs $q"; done
}
others
[ -z "$procs" ] && { echo none; exit 0; }
if [ "$ticks" -gt 0 ]; then
  kill -s TERM $procs 2>/dev/null
  n=0
  while [ $n -lt "$ticks" ]; do
    sleep 0.05; n=$((n+1)); others
    [ -z "$procs" ] && { echo term; exit 0; }
  done
fi
n=0
while [ $n -lt 100 ]; do
  kill -s KILL $procs 2>/dev/null
  others
  [ -z "$procs" ] && { echo kill; exit 0; }
  sleep 0.05; n=$((n+1))
done
echo "still running after KILL:$procs"
exit 5
"""
assert "'" not in STOPPER

# $1 pid file, $2 stdin file or "", $3 deadline in seconds or "", then argv; $OUTPOST_RUN is this
# script. The deadline is a backstop inside the container for when the coordinator that times
# commands out is gone (its containers outlive it until recovery): the stopper, which ignores
# TERM, so that it lives to send KILL. The wrapper leads the command's process group (runc makes
# every exec a session leader; elsewhere it re-executes itself under setsid) and records it, so
# that the stopper can wait until the command has started. It checks that the program exists
# (one clear error instead of a shell message that differs between images), unlinks the stdin
# file once open, runs the command, then kills whatever the command left running, in its group
# or not, so nothing an agent started in the background survives into validation. It outlives a
# TERM (a handler, which the command does not inherit, unlike an ignored signal) to report how the
# command ended: 128+15 when TERM ended it, 128+9 when it had to be KILLed.
WRAPPER = f"""\
p=$1 i=$2 t=$3; shift 3
stop='{STOPPER}'
pg() {{ g=; read -r l 2>/dev/null < "/proc/$1/stat" || return 1; set -- ${{l##*) }}; g=$3; }}
if pg $$ && [ "$g" != $$ ] && command -v setsid >/dev/null 2>&1; then
  exec setsid sh -c "$OUTPOST_RUN" "$0" "$p" "$i" "$t" "$@"
fi
unset OUTPOST_RUN
trap : TERM
echo $$ > "$p" || exit 125
case $1 in
  */*) [ -f "$1" ] || {{ echo "{MARKER} program not found: $1" >&2; exit 127; }}
       [ -x "$1" ] || {{ echo "{MARKER} program not executable: $1" >&2; exit 126; }} ;;
  *) command -v "$1" >/dev/null 2>&1 || {{ echo "{MARKER} program not found: $1" >&2; exit 127; }} ;;
esac
if [ -n "$i" ]; then exec 3< "$i"; rm -f "$i"; else exec 3< /dev/null; fi
if [ -n "$t" ]; then
  (sleep "$t"; exec sh -c "$stop" outpost-stop "" 20) </dev/null >/dev/null 2>&1 &
fi
"$@" 0<&3 3<&-
s=$?
sh -c "$stop" outpost-stop "" 0 $$ roots </dev/null >/dev/null 2>&1
exit $s
"""


def _docker():
    import docker  # imported lazily: local races never need it

    return docker


# -- the engine ---------------------------------------------------------------------------------

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
        raise SandboxError(f"{error} (switch with `docker context use default`, or set DOCKER_HOST)") \
            from None
    if found is None:
        raise SandboxError(
            f"no container engine found (looked at {searched(provider)}): set DOCKER_HOST (e.g. "
            "unix:///run/podman/podman.sock, ssh://user@host, tcp://host:2376) or [sandbox] "
            "endpoint, or start Docker or `podman system service`")
    return found


def connect(endpoint: str | None = None, provider: str | None = None, *,
            timeout: float = 60.0, pool: int = 128) -> tuple[Any, str]:
    """A Docker API client and the endpoint it talks to; SandboxError when there is none."""
    client, found = connect_endpoint(endpoint, provider, timeout=timeout, pool=pool)
    return client, found.url


def connect_endpoint(endpoint: str | None = None, provider: str | None = None, *,
                     timeout: float = 60.0, pool: int = 128) -> tuple[Any, Endpoint]:
    """connect(), also saying how the endpoint was chosen."""
    docker = _docker()
    found = find_endpoint(endpoint, provider)
    resolved = found.url
    # ssh:// goes through the ssh program (keys, agent and ~/.ssh/config as usual). The API version
    # is negotiated from /_ping below: the SDK's own negotiation asks /version, which takes
    # ~0.4 s on Podman, for every race.
    options: dict[str, Any] = {"timeout": timeout, "max_pool_size": pool,
                               "use_ssh_client": resolved.startswith("ssh://"),
                               "version": docker.constants.MINIMUM_DOCKER_API_VERSION}
    try:
        if found.why == "DOCKER_HOST":
            client = docker.from_env(**options)  # also honours DOCKER_TLS_VERIFY / DOCKER_CERT_PATH
        else:
            if found.tls and resolved.startswith("tcp://"):
                tls = found.tls
                options["tls"] = docker.tls.TLSConfig(
                    client_cert=(tls["cert"], tls["key"]) if tls.get("cert") and tls.get("key") else None,
                    ca_cert=tls.get("ca"), verify=bool(tls.get("verify")) and (tls.get("ca") or True))
            client = docker.DockerClient(base_url=resolved, **options)
        _negotiate(client)
    except Exception as error:  # requests, urllib3, ssh and docker errors alike
        docker_host = os.environ.get("DOCKER_HOST")
        where = found.describe()
        if found.why != "DOCKER_HOST":
            where += f"; DOCKER_HOST={docker_host} not used" if docker_host else "; DOCKER_HOST unset"
        raise SandboxError(f"cannot reach the container engine at {where}: "
                           f"{_first_line(error)}") from None
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
    return ({"user": "0:0"},
            f"rootless {name}: containers run as their root, which is the engine's user on the host")


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
    raise SandboxError(f"[sandbox] network = {network!r}: the engine has no such network "
                       f"(it has: {shown}); a container would start without any network")


def _negotiate(client) -> None:
    """Use the highest API version both the engine and the SDK speak."""
    docker = _docker()
    api = client.api
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


def _host_git_identity() -> dict[str, str]:
    """The operator's global git identity, which a container's empty home would not have."""
    identity: dict[str, str] = {}
    for key in ("user.name", "user.email"):
        try:
            status, out, _ = git.run("/", "config", "--global", "--get", key, timeout=10)
        except git.GitError:
            return identity
        if status == 0 and out.strip():
            identity[key.split(".")[1]] = out.strip()
    return identity


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
        if isinstance(current, (requests.exceptions.ConnectionError, urllib3.exceptions.ProtocolError,
                                ConnectionError, FileNotFoundError)):
            return True
        pending += [current.__cause__, current.__context__, *current.args]
    return False


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:300]


def _remove_quietly(container) -> None:
    try:
        container.remove(force=True)
    except Exception:  # already gone, or the engine is: replay finds it by label
        pass


def _memory(value: str | None) -> str | None:
    if value is None:
        return None
    text = str(value).strip().lower()
    if not re.fullmatch(r"\d+(\.\d+)?[bkmg]?", text):
        raise SandboxError(f"[sandbox] memory {value!r} is not a size like 512m or 2g")
    return text


def _info(container) -> dict[str, Any]:
    labels = container.labels or {}
    attrs = container.attrs or {}
    created = attrs.get("Created")
    return {
        "id": container.id,
        "name": container.name,
        "status": container.status,
        "image": (attrs.get("Config") or {}).get("Image") or attrs.get("Image"),
        "created": created if isinstance(created, str) else None,
        "race": labels.get(LABEL_RACE),
        "key": labels.get(LABEL_KEY),
        "attempt": int(labels[LABEL_ATTEMPT]) if str(labels.get(LABEL_ATTEMPT, "")).isdigit() else None,
        "repository": labels.get(LABEL_REPOSITORY),
        "role": labels.get(LABEL_ROLE) or "agent",
    }


def list_containers(race_id: str | None = None, endpoint: str | None = None,
                    repository: str | Path | None = None) -> list[dict[str, Any]]:
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
        return [_info(container)
                for container in client.containers.list(all=True, filters={"label": filters})]
    finally:
        client.close()


def remove_race_containers(race_id: str, endpoint: str | None = None,
                           repository: str | Path | None = None) -> int:
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
        for container in client.containers.list(all=True, filters={"label": filters}):
            try:
                container.remove(force=True)
                removed += 1
            except docker.errors.NotFound:
                continue
    finally:
        client.close()
    return removed


# -- the provider -------------------------------------------------------------------------------

class ContainerProvider(SandboxProvider):
    def __init__(self, spec: SandboxSpec, *, request_timeout: float = 60.0,
                 user: tuple[int, int] | None = None) -> None:
        """`user`: the uid and gid containers run as; the host user's by default, so that files
        written in a worktree belong to whoever owns it."""
        self.spec = spec
        self.user = user or (os.getuid(), os.getgid())
        self.name = spec.provider
        self.image = spec.image or DEFAULT_IMAGE
        self.request_timeout = request_timeout
        self._client: Any = None
        self.endpoint: str | None = None
        self._pumps: anyio.CapacityLimiter | None = None
        self._paths_checked = False
        self._checking: anyio.Lock | None = None
        self._connecting: anyio.Lock | None = None
        self._mapping: dict[str, Any] = {"user": f"{self.user[0]}:{self.user[1]}"}
        self.mapping_note = ""

    async def client(self) -> Any:
        if self._connecting is None:
            self._connecting = anyio.Lock()
        async with self._connecting:  # candidates start together: one connection for all
            if self._client is None:
                client, found = await anyio.to_thread.run_sync(
                    lambda: connect_endpoint(self.spec.endpoint, self.spec.provider,
                                             timeout=self.request_timeout))
                try:
                    await anyio.to_thread.run_sync(self._learn_engine, client, found.url)
                except BaseException:
                    client.close()
                    raise
                self._client, self.endpoint = client, found.url
        return self._client

    def _learn_engine(self, client: Any, endpoint: str) -> None:
        # Podman answers /info slowly (it walks its storage), slower still on a loaded machine: the
        # short request timeout a race may ask for is for commands' requests, not for this one.
        short, client.api.timeout = client.api.timeout, max(client.api.timeout or 0, ENGINE_INFO_TIMEOUT)
        try:
            try:
                kind = engine_kind(client, endpoint)
            except Exception as error:  # docker, requests errors alike
                raise SandboxError(f"the container engine did not describe itself: "
                                   f"{_first_line(error)}") from None
            self._mapping, self.mapping_note = user_mapping(kind, *self.user)
            check_network(client, self.spec.network or "none")
        finally:
            client.api.timeout = short

    @property
    def inside(self) -> tuple[int, int]:
        """The uid and gid containers run as (the user's; root under a rootless engine, which is
        the user on the host): files put into a container belong to them, or its command, with no
        capability to read another's, could not read its own stdin."""
        uid, gid = self._mapping["user"].split(":")
        return int(uid), int(gid)

    def pumps(self) -> anyio.CapacityLimiter:
        # Output pumps hold a thread for a command's whole run; their own limiter keeps them
        # from starving the default pool that short engine calls and git use.
        if self._pumps is None:
            self._pumps = anyio.CapacityLimiter(512)
        return self._pumps

    def owns(self, resource_id: str) -> bool:
        return resource_id.startswith(RESOURCE_PREFIX)

    async def acquire(self, context: SandboxContext) -> "ContainerSandbox":
        client = await self.client()
        docker = _docker()
        name = container_name(context.race_id, context.key, context.attempt, context.role)
        if context.register_resource is not None:
            await context.register_resource(RESOURCE_PREFIX + name)
        directory = str(Path(context.directory).resolve())
        git_dir = str(Path(context.git_common_dir).resolve())
        labels = {LABEL_RACE: context.race_id, LABEL_KEY: context.key,
                  LABEL_ATTEMPT: str(context.attempt),
                  LABEL_REPOSITORY: str(Path(context.repository).resolve())}
        if context.role:
            labels[LABEL_ROLE] = context.role
        # git's location variables would aim the agent's git elsewhere (the same rule as locally)
        environment = gitenv.scrubbed({"HOME": "/tmp", "LANG": "C.UTF-8", **dict(context.env)})
        options: dict[str, Any] = dict(
            name=name, labels=labels, detach=True, init=True, **self._mapping,
            cap_drop=["ALL"], security_opt=["no-new-privileges"],
            network_mode="none" if self.spec.network in ("none", "", None) else self.spec.network,
            volumes={directory: {"bind": directory, "mode": "rw"},
                     git_dir: {"bind": git_dir, "mode": "rw"},
                     **_read_only_git_settings(git_dir)},
            working_dir=directory, environment=environment,
        )
        if self.spec.memory:
            options["mem_limit"] = _memory(self.spec.memory)
        if self.spec.cpus:
            options["nano_cpus"] = int(float(self.spec.cpus) * 1e9)
        if self.spec.pids:
            options["pids_limit"] = int(self.spec.pids)
        identity = await anyio.to_thread.run_sync(_host_git_identity)

        timings: dict[str, float] = {}
        made: list[Any] = []  # the container, as soon as it exists

        def create():
            started = time.monotonic()
            try:
                container = client.containers.create(self.image, list(KEEP_ALIVE), **options)
            except docker.errors.ImageNotFound:
                raise SandboxError(
                    f"image {self.image!r} not found on {self.endpoint}: build one with "
                    f"`outpost-tui image build --tag {self.image}`") from None
            except docker.errors.APIError as error:
                # Docker says 409; Podman 4 says 500 "name ... is already in use"
                if error.status_code != 409 and "already in use" not in str(error.explanation):
                    raise SandboxError(f"cannot create container {name}: "
                                       f"{error.explanation or error}") from None
                # a leftover of this very attempt (same race, key and attempt): replace it
                old = client.containers.get(name)
                if (old.labels or {}).get(LABEL_RACE) != context.race_id:
                    raise SandboxError(f"a container named {name} exists and is not this race's") \
                        from None
                old.remove(force=True)
                container = client.containers.create(self.image, list(KEEP_ALIVE), **options)
            made.append(container)
            timings["create"] = time.monotonic() - started
            started = time.monotonic()
            try:
                container.start()
            except docker.errors.APIError as error:
                container.remove(force=True)
                raise SandboxError(f"cannot start container {name} from {self.image}: "
                                   f"{error.explanation or error}") from None
            timings["start"] = time.monotonic() - started
            if identity:
                gitconfig = "[user]\n" + "".join(f"\t{k} = {v}\n" for k, v in identity.items())
                try:
                    container.put_archive("/tmp", _tar({".gitconfig": gitconfig.encode()},
                                                       *self.inside))
                except docker.errors.APIError:
                    pass  # an image without a writable /tmp: commits then need the repo's identity
            return container

        # (a cancellation cannot land inside: waiting for a worker thread is shielded, and the
        # caller holds the sandbox before its next checkpoint)
        try:
            container = await anyio.to_thread.run_sync(create)
        except SandboxError:
            raise
        except Exception as error:  # docker, requests and ssh errors alike
            if made:  # created, then the engine failed us: nobody else would remove it
                await anyio.to_thread.run_sync(_remove_quietly, made[0])
            raise SandboxError(f"container engine at {describe_endpoint(self.endpoint)} failed: "
                               f"{_first_line(error)}") from None
        # The worktree may still be being checked out (a container is started while git works):
        # its paths are checked before the first command, not here.
        return ContainerSandbox(self, container, Path(directory), name, timings)

    async def check_paths(self, sandbox: "ContainerSandbox") -> None:
        """Before the race's first command: the engine sees the worktree at its host path and what a
        container writes there belongs to the user (once per race; later commands wait for it)."""
        if self._paths_checked:
            return
        if self._checking is None:
            self._checking = anyio.Lock()
        async with self._checking:
            if self._paths_checked:
                return
            await self._probe(sandbox)
            self._paths_checked = True

    async def _probe(self, sandbox: "ContainerSandbox") -> None:
        # A remote engine (tcp, ssh, or a unix socket forwarded from another machine) mounts
        # *its* paths: the worktree must exist there at the same path. Once per race: every
        # worktree lives in the same repository. The same probe writes a file there, to see
        # that what the container writes belongs to the user on the host.
        directory = str(sandbox.directory)
        marker = f".outpost-owner-{uuid.uuid4().hex[:8]}"
        probe = await sandbox.run_command(["sh", "-c", 'test -e "$1/.git" || exit 3; : > "$1/$2"',
                                           "sh", directory, marker], timeout=30)
        owner = await anyio.to_thread.run_sync(_owner_and_remove, Path(directory) / marker)
        if probe.exit_code == 3:
            raise SandboxError(
                f"the worktree {directory} is not visible to the engine at {self.endpoint}: "
                "a remote engine needs the repository at the same path (e.g. a shared filesystem)")
        if probe.exit_code != 0 or owner is None:
            raise SandboxError(f"a container cannot write in the worktree {directory} "
                               f"({self.mapping_note}): {probe.stderr_tail.strip()[:200]}")
        if owner != self.user:
            raise SandboxError(
                f"files written in the container belong to {owner[0]}:{owner[1]} on the host, not "
                f"to {self.user[0]}:{self.user[1]} ({self.mapping_note}): the engine's user "
                "namespace maps ids differently; `outpost-tui doctor` says more")

    async def recover(self, resource_id: str) -> bool:
        if not self.owns(resource_id):
            return False
        name = resource_id[len(RESOURCE_PREFIX):]
        client = await self.client()
        docker = _docker()

        def remove() -> bool:
            try:
                container = client.containers.get(name)
            except docker.errors.NotFound:
                return False
            if LABEL_RACE not in (container.labels or {}):
                return False  # same name, not ours: never touch it
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                return False
            return True

        return await anyio.to_thread.run_sync(remove)

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await anyio.to_thread.run_sync(client.close)


# -- one sandbox --------------------------------------------------------------------------------

@dataclass
class _Stream:
    """Output of one exec, fed from the pump thread on the event loop."""

    on_output: LineSink | None
    tail_bytes: int
    splitters: dict[str, LineSplitter] = field(default_factory=lambda: {
        "stdout": LineSplitter(), "stderr": LineSplitter()})
    tails: dict[str, Tail] = field(default_factory=dict)
    done: anyio.Event = field(default_factory=anyio.Event)
    error: BaseException | None = None
    sink_error: BaseException | None = None
    # set when run() returns: a stream still draining after a kill must not report any more
    closed: bool = False

    def __post_init__(self) -> None:
        self.tails = {"stdout": Tail(self.tail_bytes), "stderr": Tail(self.tail_bytes)}

    def feed(self, stream: str, chunk: bytes) -> None:
        if self.closed:
            return
        self.tails[stream].add(chunk)
        lines = self.splitters[stream].feed(chunk)
        if lines:
            self._emit(stream, lines)

    def _emit(self, stream: str, lines: list[str]) -> None:
        if self.on_output is None or self.sink_error is not None or self.closed:
            return
        try:
            self.on_output(stream, lines)
        except Exception as error:  # reported after the command, not inside the pump thread
            self.sink_error = error

    def finish(self, error: BaseException | None) -> None:
        self.error = error
        for stream, splitter in self.splitters.items():
            rest = splitter.flush()
            if rest:
                self._emit(stream, rest)
        self.done.set()


def _owner_and_remove(path: Path) -> tuple[int, int] | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    path.unlink()
    return info.st_uid, info.st_gid


def _read_only_git_settings(git_dir: str) -> dict[str, dict[str, str]]:
    """Mounts that keep the repository's configuration and hooks out of a contained agent's reach.

    Commits need the git directory writable (objects, refs, the worktree's index), but the host's
    git reads `config` and runs `hooks/*` as the operator: written from inside, they would run
    the agent's programs outside the container."""
    hooks = Path(git_dir) / "hooks"
    hooks.mkdir(exist_ok=True)  # a bind mount needs its source; git creates it anyway
    mounts = {str(hooks): {"bind": str(hooks), "mode": "ro"}}
    config = Path(git_dir) / "config"
    if config.is_file():
        mounts[str(config)] = {"bind": str(config), "mode": "ro"}
    return mounts


class ContainerSandbox(Sandbox):
    def __init__(self, provider: ContainerProvider, container: Any, directory: Path, name: str,
                 timings: dict[str, float]) -> None:
        self.provider = provider
        self.container = container
        self.directory = directory
        self.name = name
        self.resource_id = RESOURCE_PREFIX + name
        # create, start, first_exec, remove (seconds): the per-attempt overhead of a container
        self.timings = timings
        self._closed = False
        self._gone: EngineGone | None = None  # set once a call finds the engine gone
        # why the last stop could not confirm that a command's processes were gone, if it could not
        self._unconfirmed: str | None = None

    @property
    def _api(self):
        return self.container.client.api

    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        on_output: LineSink | None = None,
        timeout: float | None = None,
        tail_bytes: int = 64 * 1024,
        grace: float | None = None,
        on_stop: StopSink | None = None,
    ) -> Completed:
        if not argv:
            raise SandboxError("empty command")
        if self._closed:
            raise SandboxError(f"container {self.name} is closed")
        await self.provider.check_paths(self)
        return await self.run_command(argv, env=env, stdin=stdin, on_output=on_output,
                                      timeout=timeout, tail_bytes=tail_bytes, grace=grace,
                                      on_stop=on_stop)

    async def run_command(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        on_output: LineSink | None = None,
        timeout: float | None = None,
        tail_bytes: int = 64 * 1024,
        grace: float | None = None,
        on_stop: StopSink | None = None,
    ) -> Completed:
        """`run` without the once-per-race check of the paths (the check's own command)."""
        grace = KILL_GRACE if grace is None else grace
        started = time.monotonic()
        token = uuid.uuid4().hex[:16]
        pid_file = f"/tmp/.outpost-{token}.pid"
        stdin_file = f"/tmp/.outpost-{token}.stdin" if stdin is not None else ""
        # the host's timer acts first; the one inside only if the host is gone
        deadline = "" if timeout is None else str(math.ceil(timeout + KILL_GRACE + BACKSTOP_MARGIN))
        command = ["sh", "-c", WRAPPER, "outpost-run", pid_file, stdin_file, deadline,
                   *map(str, argv)]
        environment = [f"{key}={value}" for key, value in
                       gitenv.scrubbed({**(env or {}), "OUTPOST_RUN": WRAPPER}).items()]

        def create_exec() -> str:
            if stdin is not None:
                self.container.put_archive(
                    "/tmp", _tar({os.path.basename(stdin_file): stdin}, *self.provider.inside))
            return self._api.exec_create(self.container.id, command, stdout=True, stderr=True,
                                         environment=environment,
                                         workdir=str(self.directory))["Id"]

        try:
            exec_id = await anyio.to_thread.run_sync(create_exec)
        except Exception as error:  # docker, requests and ssh errors alike
            self._check_gone(error)
            raise SandboxError(f"cannot run {argv[0]!r} in container {self.name}: "
                               f"{_first_line(error)}") from None
        stream = _Stream(on_output, tail_bytes)

        def pump() -> None:
            failure: BaseException | None = None
            try:
                frames = self._api.exec_start(exec_id, stream=True, demux=True)
                for out, err in frames:
                    if out:
                        anyio.from_thread.run_sync(stream.feed, "stdout", out)
                    if err:
                        anyio.from_thread.run_sync(stream.feed, "stderr", err)
            except BaseException as error:  # delivered to the event loop below
                failure = error
            try:
                anyio.from_thread.run_sync(stream.finish, failure)
            except RuntimeError:
                pass  # the event loop is gone: nobody is waiting any more

        signalled: str | None = None
        timed_out = False
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._pump_thread, pump)
                with anyio.move_on_after(timeout) as deadline:
                    await stream.done.wait()
                if deadline.cancelled_caught:
                    timed_out = True
                    signalled = await self._stop(pid_file, stream, Stop("timeout", grace), on_stop)
                # a stream still open once the processes are confirmed gone is the engine's
                # lag: abandon it (removing the container ends it) rather than wait
                group.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            # the pump thread is abandoned, not stopped: it goes on feeding the stream, so what
            # the command prints while it stops is still read
            with anyio.CancelScope(shield=True):
                await self._stop(pid_file, stream, Stop("cancelled", grace), on_stop)
            raise
        finally:
            stream.closed = True
        if stream.error is not None:
            self._check_gone(stream.error)
        if self._gone is not None:
            self._unconfirmed = None
            raise self._gone
        if self._unconfirmed is not None:
            problem, self._unconfirmed = self._unconfirmed, None
            raise SandboxError(f"stopping {argv[0]!r} in container {self.name}: {problem}")
        if stream.error is not None:
            raise SandboxError(f"lost the output of {argv[0]!r} in container {self.name}: "
                               f"{_first_line(stream.error)}")

        try:
            exit_code = await anyio.to_thread.run_sync(self._exit_code, exec_id)
        except Exception as error:
            self._check_gone(error)
            raise SandboxError(f"lost the exit status of {argv[0]!r} in container {self.name}: "
                               f"{_first_line(error)}") from None
        if "first_exec" not in self.timings:
            self.timings["first_exec"] = time.monotonic() - started
        stderr_tail = stream.tails["stderr"].text()
        if signalled is None and exit_code in (126, 127) and MARKER in stderr_tail:
            line = next(line for line in stderr_tail.splitlines() if MARKER in line)
            what = "not executable" if exit_code == 126 else "not found"
            raise SandboxError(f"program {argv[0]!r} {what} in image {self.provider.image} "
                               f"({line.split(MARKER, 1)[1].strip()})")
        if exit_code is None:
            exit_code = -9 if signalled else 1  # no status: killed, or the engine lost it
        elif signalled and exit_code > 128:
            exit_code = -(exit_code - 128)  # the shell's 128+N for "killed by signal N"
        if stream.sink_error is not None:
            raise stream.sink_error
        return Completed(exit_code=exit_code, stdout_tail=stream.tails["stdout"].text(),
                         stderr_tail=stderr_tail, timed_out=timed_out,
                         duration=time.monotonic() - started)

    def _went_away(self, error: BaseException) -> EngineGone:
        return EngineGone(f"the container engine at {describe_endpoint(self.provider.endpoint)} "
                          f"went away ({_first_line(error)})")

    def _check_gone(self, error: BaseException) -> None:
        """Raise EngineGone when `error` says the engine itself is gone."""
        if _unreachable(error):
            self._gone = self._gone or self._went_away(error)
            raise self._gone from None

    async def _pump_thread(self, pump) -> None:
        # abandon_on_cancel: a cancelled run must not wait for the stream; it stops the command
        # instead, and the thread ends when the stream does (at the latest when the container goes)
        await anyio.to_thread.run_sync(pump, abandon_on_cancel=True,
                                       limiter=self.provider.pumps())

    def _exit_code(self, exec_id: str) -> int | None:
        # The stream can close a moment before the engine records the status
        for _ in range(50):
            info = self._api.exec_inspect(exec_id)
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            time.sleep(0.02)
        return None

    async def _stop_processes(self, pid_file: str, grace: float) -> tuple[str | None, str]:
        """Run the stopper: TERM, KILL after the grace, confirmed gone. Returns what it took
        (none, term, kill; None when it could not confirm) and, then, why."""
        ticks = str(max(1, round(grace / 0.05)))

        def stop() -> tuple[str | None, str]:
            exec_id = self._api.exec_create(self.container.id,
                                            ["sh", "-c", STOPPER, "outpost-stop", pid_file, ticks],
                                            stdout=True, stderr=True)["Id"]
            said = (self._api.exec_start(exec_id) or b"").decode(errors="replace").strip()
            if self._exit_code(exec_id) == 0:
                return said.splitlines()[-1] if said else "none", ""
            return None, said or "the stopper failed"

        try:
            return await anyio.to_thread.run_sync(stop)
        except Exception as error:  # docker, requests and ssh errors alike
            if _unreachable(error):
                self._gone = self._gone or self._went_away(error)
            return None, _first_line(error)

    async def _stop(self, pid_file: str, stream: _Stream, report: Stop,
                    on_stop: StopSink | None) -> str | None:
        """Stop the command and everything it started, confirmed gone; returns the last signal.

        The output stream is not the judge (a wrapper killed by TERM ends it while what ignores
        TERM lives on), nor waited for long once the stopper confirmed (Docker holds an exec's
        stream a few seconds after its processes are gone)."""
        if stream.done.is_set():
            return None
        if on_stop is not None:
            on_stop(report)
        began = time.monotonic()
        took, why = await self._stop_processes(pid_file, report.grace)
        report.seconds = time.monotonic() - began
        with anyio.move_on_after(STREAM_GRACE):
            await stream.done.wait()
        if took is None:
            self._unconfirmed = f"could not confirm that the command's processes are gone: {why}"
        report.ended_by = {"none": "exited", "term": "TERM"}.get(took or "", "KILL")
        if on_stop is not None:
            on_stop(report)
        return "KILL" if took in ("kill", None) else "TERM"

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        docker = _docker()

        def remove() -> None:
            started = time.monotonic()
            try:
                self.container.remove(force=True)
            except docker.errors.NotFound:
                pass
            self.timings["remove"] = time.monotonic() - started

        with anyio.CancelScope(shield=True):
            try:
                await anyio.to_thread.run_sync(remove)
            except Exception as error:  # docker, requests and ssh errors alike
                if _unreachable(error):
                    raise EngineGone(f"{self._went_away(error)}: container {self.name} is left; "
                                     "`outpost-tui worktrees --remove-containers` removes it once the "
                                     "engine is back") from None
                raise SandboxError(f"cannot remove container {self.name}: "
                                   f"{_first_line(error)}") from None
