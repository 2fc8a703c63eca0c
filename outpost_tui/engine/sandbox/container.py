"""Sandboxes in containers, through the Docker API of Docker or Podman.

One container per attempt. The host worktree is mounted at its host path, and so is what its
`.git` file (which holds an absolute host path) leads to: the checkout's view in place of the
repository's worktree git directories, holding its private repository, and the repository's
objects that repository borrows, read-only; git works inside and writes only that repository. The
container runs as the host user (files it writes belong to that user), with no network unless the
race file asks, every capability dropped, no-new-privileges, an init process, and the race file's
memory, CPU and pids limits. The host's Docker socket is never mounted.

Commands run through exec with their output streamed back frame by frame. Each command is started by
a small POSIX-sh wrapper (argv is passed as arguments, never interpolated). Cancellation and
timeouts stop it from a second exec that TERMs every process of the command, however it detached,
KILLs what is left after a grace period and confirms that none is left; the wrapper does the same
(KILL at once) to what a command leaves behind when it ends. Closing halts the container (pauses
it: the kernel's freezer) and removes it in the background, off the attempt's path: `drain` waits
for every removal, so none outlives the race.

The Docker SDK is blocking: every call runs in a worker thread, and output comes back to the event
loop through `anyio.from_thread`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.to_thread

from .. import git, gitenv
from ..core.spec import DEFAULT_IMAGE, SandboxSpec
from .base import SandboxContext, SandboxError, SandboxProvider
from .container_engine import (
    ENGINE_INFO_TIMEOUT,
    LABEL_ATTEMPT,
    LABEL_KEY,
    LABEL_RACE,
    LABEL_REPOSITORY,
    LABEL_ROLE,
    RESOURCE_PREFIX,
    _docker,
    _first_line,
    _remove_quietly,
    check_network,
    connect_endpoint,
    container_name,
    describe_endpoint,
    engine_kind,
    git_binds,
    user_mapping,
)
from .container_sandbox import ContainerSandbox, owner_and_remove
from .container_scripts import STOPPER
from .images import KEEP_ALIVE

if TYPE_CHECKING:
    from docker.models.containers import Container

assert "'" not in STOPPER


# The keep-alive of a race's first containers: $1 the marker to write (what it cannot write, it
# leaves: the probe command then says why), then it becomes the keep-alive itself (same process).
# `true`, not `:`: a failed redirection ends the shell on a special built-in.
MARKING = 'true 2>/dev/null > "$1"; exec ' + " ".join(KEEP_ALIVE)


# -- the engine ---------------------------------------------------------------------------------


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


def _gitconfig(identity: dict[str, str]) -> str:
    """The `~/.gitconfig` a container's first command writes (empty: none to write)."""
    if not identity:
        return ""
    return "[user]\n" + "".join(f"\t{key} = {value}\n" for key, value in identity.items())


def _memory(value: str | None) -> str | None:
    if value is None:
        return None
    text = str(value).strip().lower()
    if not re.fullmatch(r"\d+(\.\d+)?[bkmg]?", text):
        raise SandboxError(f"[sandbox] memory {value!r} is not a size like 512m or 2g")
    return text


# -- the provider -------------------------------------------------------------------------------


class ContainerProvider(SandboxProvider):
    def __init__(
        self, spec: SandboxSpec, *, request_timeout: float = 60.0, user: tuple[int, int] | None = None
    ) -> None:
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
        self._repository_sign = ""  # a path of the repository a container must see (check_paths)
        self._checking: anyio.Lock | None = None
        self._connecting: anyio.Lock | None = None
        self._mapping: dict[str, Any] = {"user": f"{self.user[0]}:{self.user[1]}"}
        self.mapping_note = ""
        # Removals outlive the close that starts them (the attempt goes on meanwhile), so they run
        # in threads of their own rather than in a task of the caller's; `drain` joins them.
        self._removals: concurrent.futures.ThreadPoolExecutor | None = None
        self._retiring: dict[str, concurrent.futures.Future[None]] = {}
        # the operator's git identity as a ~/.gitconfig, read once with the connection
        self.gitconfig = ""
        # agents' containers being started, and the event set once none is (see `_turn`)
        self._agents_starting = 0
        self._agents_started: anyio.Event | None = None
        # `warm_up`'s connection, made in a thread of its own while the race gets ready
        self._warming: concurrent.futures.Future[tuple[Any, str, str]] | None = None

    def warm_up(self) -> None:
        """Connect now, in a thread of its own, while the race reads its repository: importing the
        Docker SDK, reaching the engine, learning what kind it is and reading the operator's git
        identity took 0.2-0.4 s on every first attempt's path. Its failure is raised by `client`,
        where a connection that failed then would have been."""
        if self._warming is not None or self._client is not None:
            return
        warming = self._warming = concurrent.futures.Future()

        def connect() -> None:
            try:
                warming.set_result(self._connect())
            except BaseException as error:  # raised where the connection is awaited
                warming.set_exception(error)

        threading.Thread(target=connect, name="outpost-connect", daemon=True).start()

    def _connect(self) -> tuple[Any, str, str]:
        """(client, endpoint, gitconfig): blocking, in a worker thread."""
        client, found = connect_endpoint(self.spec.endpoint, self.spec.provider, timeout=self.request_timeout)
        try:
            self._learn_engine(client, found.url)
            return client, found.url, _gitconfig(_host_git_identity())
        except BaseException:
            client.close()
            raise

    async def client(self) -> Any:
        if self._connecting is None:
            self._connecting = anyio.Lock()
        async with self._connecting:  # candidates start together: one connection for all
            if self._client is None:
                warming, self._warming = self._warming, None
                if warming is not None:
                    made = await anyio.to_thread.run_sync(warming.result, abandon_on_cancel=True)
                else:
                    made = await anyio.to_thread.run_sync(self._connect)
                self._client, self.endpoint, self.gitconfig = made
        return self._client

    def _learn_engine(self, client: Any, endpoint: str) -> None:
        # Podman answers /info slowly (it walks its storage), slower still on a loaded machine: the
        # short request timeout a race may ask for is for commands' requests, not for this one.
        short, client.api.timeout = client.api.timeout, max(client.api.timeout or 0, ENGINE_INFO_TIMEOUT)
        try:
            try:
                kind = engine_kind(client, endpoint)
            except Exception as error:  # docker, requests errors alike
                raise SandboxError(
                    f"the container engine did not describe itself: {_first_line(error)}"
                ) from None
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

    @property
    def isolates_git(self) -> bool:
        return True  # a container mounts no writable part of the user's .git: see git_binds

    def owns(self, resource_id: str) -> bool:
        return resource_id.startswith(RESOURCE_PREFIX)

    async def acquire(self, context: SandboxContext) -> ContainerSandbox:
        client = await self.client()
        docker = _docker()
        name = container_name(context.race_id, context.key, context.attempt, context.role)
        if context.register_resource is not None:
            await context.register_resource(RESOURCE_PREFIX + name)
        # resolving reads the filesystem, the view is made: off the event loop
        directory, git_dir, repository = await anyio.to_thread.run_sync(
            lambda: tuple(
                str(Path(path).resolve())
                for path in (context.directory, context.git_common_dir, context.repository)
            )
        )
        binds, writes_in = await anyio.to_thread.run_sync(git_binds, directory, git_dir)
        labels = {
            LABEL_RACE: context.race_id,
            LABEL_KEY: context.key,
            LABEL_ATTEMPT: str(context.attempt),
            LABEL_REPOSITORY: repository,
        }
        if context.role:
            labels[LABEL_ROLE] = context.role
        # git's location variables would aim the agent's git elsewhere (the same rule as locally)
        environment = gitenv.scrubbed({"HOME": "/tmp", "LANG": "C.UTF-8", **dict(context.env)})
        limits: dict[str, Any] = {}
        if self.spec.memory:
            limits["mem_limit"] = _memory(self.spec.memory)
        if self.spec.cpus:
            limits["nano_cpus"] = int(float(self.spec.cpus) * 1e9)
        if self.spec.pids:
            limits["pids_limit"] = int(self.spec.pids)
        api = client.api
        host_config = api.create_host_config(
            init=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            network_mode="none" if self.spec.network in ("none", "", None) else self.spec.network,
            binds=binds,
            **limits,
        )
        # The race's first containers write a marker where they may write beside their checkout
        # (its view) as they start (no exec of their own): that the engine sees the repository at
        # its host path, and that what a container writes there belongs to the user, are then
        # read on the host before the first command (`check_paths`)
        marked = f".outpost-owner-{uuid.uuid4().hex[:8]}"
        marker = None if self._paths_checked else Path(writes_in[0]) / marked
        # what git made in the repository, there in a container only if the engine mounts the
        # host's paths (a remote engine makes a missing bind source, empty)
        self._repository_sign = os.path.join(git_dir, "objects", "pack")
        main = (
            list(KEEP_ALIVE)
            if marker is None
            else ["sh", "-c", MARKING, "outpost-keep-alive", os.path.join(writes_in[1], marked)]
        )
        options: dict[str, Any] = dict(
            name=name,
            labels=labels,
            detach=True,
            **self._mapping,
            working_dir=directory,
            environment=environment,
            volumes=[bind["bind"] for bind in binds.values()],
            host_config=host_config,
        )

        timings: dict[str, float] = {}
        made: list[Any] = []  # the container, as soon as it exists

        def made_one() -> Container:
            # the engine's answer names the container: the SDK's model would inspect it again
            container: Container = client.containers.prepare_model(
                {"Id": api.create_container(self.image, main, **options)["Id"]}
            )
            return container

        def create() -> Container:
            started = time.monotonic()
            try:
                container = made_one()
            except docker.errors.ImageNotFound:
                raise SandboxError(
                    f"image {self.image!r} not found on {self.endpoint}: build one with "
                    f"`outpost-tui image build --tag {self.image}`"
                ) from None
            except docker.errors.APIError as error:
                # Docker says 409; Podman 4 says 500 "name ... is already in use"
                if error.status_code != 409 and "already in use" not in str(error.explanation):
                    raise SandboxError(
                        f"cannot create container {name}: {error.explanation or error}"
                    ) from None
                # a leftover of this very attempt (same race, key and attempt): replace it
                old = client.containers.get(name)
                if (old.labels or {}).get(LABEL_RACE) != context.race_id:
                    raise SandboxError(f"a container named {name} exists and is not this race's") from None
                old.remove(force=True)
                container = made_one()
            made.append(container)
            timings["create"] = time.monotonic() - started
            started = time.monotonic()
            try:
                container.start()
            except docker.errors.APIError as error:
                container.remove(force=True)
                raise SandboxError(
                    f"cannot start container {name} from {self.image}: {error.explanation or error}"
                ) from None
            timings["start"] = time.monotonic() - started
            return container

        # (a cancellation cannot land inside: waiting for a worker thread is shielded, and the
        # caller holds the sandbox before its next checkpoint)
        try:
            async with self._turn(context):
                container = await anyio.to_thread.run_sync(create)
        except Exception as error:  # docker, requests and ssh errors alike
            if made and not isinstance(error, SandboxError):
                # created, then the engine failed us: nobody else would remove it
                await anyio.to_thread.run_sync(_remove_quietly, made[0])
            if marker is not None:  # removed with its container: nothing writes it any more
                await anyio.to_thread.run_sync(owner_and_remove, marker)
            if isinstance(error, SandboxError):
                raise
            raise SandboxError(
                f"container engine at {describe_endpoint(self.endpoint)} failed: {_first_line(error)}"
            ) from None
        return ContainerSandbox(self, container, Path(directory), name, timings, marker, writes_in[1])

    @contextlib.asynccontextmanager
    async def _turn(self, context: SandboxContext) -> AsyncIterator[None]:
        """Agents' containers start first. A grading container is needed once its agent is done
        and the baseline's only by the gate: while an agent's container is being created and
        started, theirs wait, rather than share the engine and the cores with it (and delay
        every agent)."""
        if context.role or context.attempt == 0:  # attempts count from 1: 0 is the baseline
            while self._agents_starting and self._agents_started is not None:
                await self._agents_started.wait()
            yield
            return
        if not self._agents_starting:
            self._agents_started = anyio.Event()
        self._agents_starting += 1
        try:
            yield
        finally:
            self._agents_starting -= 1
            if not self._agents_starting and self._agents_started is not None:
                self._agents_started.set()

    async def check_paths(self, sandbox: ContainerSandbox) -> None:
        """Before the race's first command: the engine sees the repository at its host path and
        what a container writes there belongs to the user (once per race; other commands wait).
        Read from the marker the sandbox's keep-alive wrote as it started; a probe command when
        there is none (yet)."""
        if self._paths_checked:
            return
        if self._checking is None:
            self._checking = anyio.Lock()
        async with self._checking:
            if self._paths_checked:
                return
            # acquired while the paths were unchecked, so it has a marker
            assert sandbox.marker is not None, "a sandbox of an unchecked provider has its marker"
            owner = await sandbox.take_marker()
            if owner is None:  # not written: a command says why
                owner = await self._probe(sandbox, str(sandbox.marker.parent), sandbox.marker_inside)
            if owner != self.user:
                raise SandboxError(
                    f"files written in the container belong to {owner[0]}:{owner[1]} on the host, "
                    f"not to {self.user[0]}:{self.user[1]} ({self.mapping_note}): the engine's user "
                    "namespace maps ids differently; `outpost-tui doctor` says more"
                )
            self._paths_checked = True

    async def _probe(self, sandbox: ContainerSandbox, writes_in: str, inside: str) -> tuple[int, int]:
        """The owner of a file a command writes beside its checkout (`writes_in` on the host,
        `inside` in the container)."""
        # A remote engine (tcp, ssh, or a unix socket forwarded from another machine) mounts
        # *its* paths: the repository must exist there at the same path. Once per race: every
        # worktree lives in the same repository. The same probe writes a file beside the
        # checkout, to see that what the container writes belongs to the user on the host. Not
        # in the worktree: a container is started while git checks the worktree out (into a
        # directory that must stay empty until it does).
        marker = f".outpost-owner-{uuid.uuid4().hex[:8]}"
        sign = self._repository_sign
        probe = await sandbox.execute(
            ["sh", "-c", 'test -d "$1" || exit 3; : > "$2/$3"', "sh", sign, inside, marker], timeout=30
        )
        owner = await anyio.to_thread.run_sync(owner_and_remove, Path(writes_in) / marker)
        if probe.exit_code == 3:
            raise SandboxError(
                f"the repository's git directory {os.path.dirname(os.path.dirname(sign))} is not "
                f"visible to the engine at {self.endpoint}: a remote engine needs the repository "
                "at the same path (e.g. a shared filesystem)"
            )
        if probe.exit_code != 0 or owner is None:
            raise SandboxError(
                f"a container cannot write in {writes_in} ({self.mapping_note}): "
                f"{probe.stderr_tail.strip()[:200]}"
            )
        return owner

    async def recover(self, resource_id: str) -> bool:
        if not self.owns(resource_id):
            return False
        name = resource_id[len(RESOURCE_PREFIX) :]
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

    def retire(self, sandbox: ContainerSandbox) -> None:
        """Remove a halted sandbox's container in the background."""
        if self._removals is None:
            self._removals = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="outpost-remove")
        self._retiring[sandbox.resource_id] = self._removals.submit(_removal, sandbox)

    async def drain(self, timeout: float | None = None) -> dict[str, str]:
        pending, self._retiring = self._retiring, {}
        if not pending:
            return {}
        await anyio.to_thread.run_sync(
            lambda: concurrent.futures.wait(pending.values(), timeout), abandon_on_cancel=True
        )
        left: dict[str, str] = {}
        for resource_id, removal in pending.items():
            name = resource_id.removeprefix(RESOURCE_PREFIX)
            if not removal.done():
                self._retiring[resource_id] = removal  # still going: a later drain waits again
                left[resource_id] = f"container {name} was not removed within {timeout:g}s (it is paused)"
            elif (error := removal.exception()) is not None:
                left[resource_id] = _first_line(error)
        return left

    async def aclose(self) -> None:
        await self.drain()
        warming, self._warming = self._warming, None
        if warming is not None:  # warmed up, never used: its connection is still this one's
            with contextlib.suppress(Exception):
                self._client, self.endpoint, _ = await anyio.to_thread.run_sync(warming.result)
        if self._removals is not None:
            self._removals.shutdown(wait=False)
            self._removals = None
        if self._client is not None:
            client, self._client = self._client, None
            await anyio.to_thread.run_sync(client.close)


# -- one sandbox --------------------------------------------------------------------------------


def _removal(sandbox: ContainerSandbox) -> None:
    try:
        sandbox.remove()
    except Exception as error:  # docker, requests and ssh errors alike: one line for the race
        raise sandbox.not_removed(error) from None
