"""Doctor's checks of the container engine: whether it answers, whether the race's image is there,
whether files a container writes are the user's on the host, whether the race's network exists,
and whether the image has the programs the race runs in it.

Separate from `doctor` because these talk to the engine (through the Docker SDK) and start short-
lived probe containers, while the rest of doctor reads the host; each probe container is network-
less, labelled `outpost.doctor` and removed afterwards.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..agents import adapter_for
from ..core.spec import RaceSpec
from ..sandbox.engines import engine_name
from .check import Check

ENGINE_TIMEOUT = 3.0
PROBE_TIMEOUT = 60.0  # a first container from an image can take a while on a loaded machine


def container_checks(
    spec: RaceSpec | None, *, required: bool, programs: Mapping[str, str] | None = None
) -> list[Check]:
    """The engine (and the race's image); with `programs`, whether the image has each of them."""
    from ..sandbox.base import SandboxError
    from ..sandbox.container_engine import connect_endpoint

    programs = dict(programs or {})
    sandbox = spec.sandbox if spec else None
    provider = sandbox.provider if sandbox and sandbox.provider != "local" else None
    image = sandbox.image if sandbox and provider else None

    def not_checked(why: str) -> list[Check]:
        return [Check(name, None, f"not checked: {why}", required) for name in programs]

    try:
        client, found = connect_endpoint(
            sandbox.endpoint if sandbox else None, provider, timeout=ENGINE_TIMEOUT, pool=1
        )
        endpoint = found.url
    except (SandboxError, ImportError) as error:
        return [
            Check("container engine", False, str(error), required),
            *not_checked("no container engine to ask"),
        ]
    # it answered /_ping within ENGINE_TIMEOUT; /version and /info may take seconds on a loaded Podman
    client.api.timeout = max(client.api.timeout or 0, PROBE_TIMEOUT)
    try:
        try:
            version = client.version()
        except Exception as error:  # the SDK raises requests/urllib3/docker errors alike
            detail = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
            return [
                Check("container engine", False, f"{endpoint} not reachable: {detail}", required),
                *not_checked(f"the container engine at {endpoint} is not reachable"),
            ]
        name = engine_name(version)
        detail = f"{name} {version.get('Version', '?')} at {endpoint}, chosen by {found.why}"
        ok: bool | None = True
        if provider and provider != name:
            detail += f" (the race asks for {provider}; the Docker API is the same, so it is used)"
        if image:
            try:
                client.images.get(image)
                detail += f"; image {image} present"
            except Exception:
                ok = False
                detail += f"; image {image} not found (build it: outpost-tui image build --tag {image})"
        checks = [
            Check("container engine", ok, detail, required),
            *engine_setting_checks(client, endpoint, spec, image if ok else None, required=required),
        ]
        if not programs:
            return checks
        if image is None:
            return checks + not_checked("the race names no image")
        if not ok:
            return checks + not_checked(f"image {image} not found")
        return checks + image_program_checks(client, image, programs, required=required)
    finally:
        with contextlib.suppress(Exception):
            client.close()


def engine_setting_checks(
    client: Any, endpoint: str, spec: RaceSpec | None, image: str | None, *, required: bool
) -> list[Check]:
    """Whether files containers write will be the user's on the host (checked with a real
    container when there is an image), and whether the network the race asks for exists."""
    from ..sandbox.base import SandboxError
    from ..sandbox.container_engine import check_network, engine_kind, user_mapping

    try:
        kind = engine_kind(client, endpoint)
    except Exception as error:  # docker, requests errors alike
        return [
            Check(
                "container files",
                None,
                f"not checked: the engine did not describe itself ({str(error)[:200]})",
                required,
            )
        ]
    uid, gid = os.getuid(), os.getgid()
    options, how = user_mapping(kind, uid, gid)
    if not endpoint.startswith("unix://"):
        owner_check = Check(
            "container files",
            None,
            f"{how}; ownership cannot be guaranteed: the engine at {endpoint} is "
            "not on this machine (files are written through its filesystem)",
            required,
        )
    elif image is None:
        owner_check = Check(
            "container files",
            None,
            f"{how}; ownership cannot be guaranteed until a container has written a "
            "file (no image to try it with: name one in the race file)",
            required,
        )
    else:
        try:
            owner = probe_ownership(client, image, options)
        except Exception as error:  # docker, requests and timeout errors alike
            owner_check = Check(
                "container files",
                None,
                f"{how}; ownership cannot be guaranteed: the probe failed "
                f"({str(error).strip()[:200] or type(error).__name__})",
                required,
            )
        else:
            if owner == (uid, gid):
                owner_check = Check(
                    "container files",
                    True,
                    f"{how}; a file written in a container belongs to you ({uid}:{gid})",
                    required,
                )
            else:
                owner_check = Check(
                    "container files",
                    False,
                    f"{how}; but a file written in a container belongs to "
                    f"{owner[0]}:{owner[1]} on the host, not to you ({uid}:{gid}): "
                    "the engine's user namespace maps ids differently",
                    required,
                )
    checks = [owner_check]
    network = spec.sandbox.network if spec is not None and spec.sandbox.provider != "local" else None
    if network and network != "none":
        try:
            check_network(client, network)
            checks.append(Check("container network", True, f"network {network!r} exists", required))
        except SandboxError as error:
            checks.append(Check("container network", False, str(error), required))
    return checks


def probe_ownership(
    client: Any, image: str, options: Mapping[str, Any], *, timeout: float = PROBE_TIMEOUT
) -> tuple[int, int]:
    """Who owns, on the host, a file a container run with options writes in a bind mount."""
    with tempfile.TemporaryDirectory(prefix="outpost-doctor-") as directory:
        os.chmod(directory, 0o777)  # whoever the container is mapped to may write here
        container = client.containers.create(
            image,
            ["sh", "-c", ": > /probe/written"],
            network_mode="none",
            volumes={directory: {"bind": "/probe", "mode": "rw"}},
            environment={"HOME": "/tmp"},
            labels={"outpost.doctor": "probe"},
            **options,
        )
        try:
            container.start()
            status = container.wait(timeout=timeout)
        finally:
            with contextlib.suppress(Exception):  # already gone, or the engine is
                container.remove(force=True)
        code = status.get("StatusCode") if isinstance(status, dict) else None
        written = Path(directory) / "written"
        if code != 0 or not written.exists():
            raise RuntimeError(f"the probe container could not write a file (exit code {code})")
        info = written.stat()
        return info.st_uid, info.st_gid


def container_check(spec: RaceSpec | None, *, required: bool) -> Check:
    return container_checks(spec, required=required)[0]


def image_program_checks(
    client: Any, image: str, programs: Mapping[str, str], *, required: bool, timeout: float = PROBE_TIMEOUT
) -> list[Check]:
    try:
        found = probe_image(client, image, sorted(set(programs.values())), timeout=timeout)
    except Exception as error:  # docker, requests and timeout errors alike
        text = str(error).strip()
        why = (text.splitlines()[0] if text else type(error).__name__)[:200]
        return [
            Check(name, None, f"not checked: probing image {image} failed: {why}", required)
            for name in programs
        ]
    checks = []
    for name, program in programs.items():
        where = found.get(program)
        if where:
            checks.append(Check(name, True, f"{where} in {image}", required))
            continue
        detail = f"`{program}` not found on the PATH of image {image}"
        kind = name.removeprefix("agent ").removesuffix(" in image")
        hint = getattr(adapter_for(kind), "install_hint", None) if name.startswith("agent ") else None
        checks.append(
            Check(name, False, detail + (f" (install it in the image: {hint})" if hint else ""), required)
        )
    return checks


# Prints "<program><TAB><where it is, or nothing>" for each program named after the script.
_PROBE_SCRIPT = 'for p in "$@"; do printf \'%s\\t%s\\n\' "$p" "$(command -v "$p" || true)"; done'


def probe_image(
    client: Any, image: str, programs: Sequence[str], *, timeout: float = PROBE_TIMEOUT
) -> dict[str, str | None]:
    """Where each program is on the image's PATH (None when absent), asked of a short-lived,
    network-less container that is removed afterwards.

    create/start/wait/logs rather than containers.run(): run() follows the logs of a container
    that may already have exited, and Podman sometimes never ends that stream.
    """
    container = client.containers.create(
        image,
        ["sh", "-c", _PROBE_SCRIPT, "outpost-doctor", *programs],
        network_mode="none",
        user=f"{os.getuid()}:{os.getgid()}",
        environment={"HOME": "/tmp"},
        labels={"outpost.doctor": "probe"},
    )
    try:
        container.start()
        status = container.wait(timeout=timeout)
        output = container.logs(stdout=True, stderr=True).decode(errors="replace")
    finally:
        with contextlib.suppress(Exception):  # already gone, or the engine is
            container.remove(force=True)
    code = status.get("StatusCode") if isinstance(status, dict) else None
    if code != 0:
        last = (output.strip().splitlines() or ["no output"])[-1][:200]
        raise RuntimeError(f"the probe exited with code {code}: {last}")
    found: dict[str, str | None] = dict.fromkeys(programs)
    for line in output.splitlines():
        program, _, where = line.partition("\t")
        if program in found and where.strip():
            found[program] = where.strip()
    return found
