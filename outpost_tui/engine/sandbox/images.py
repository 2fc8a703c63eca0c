"""Container images for the sandbox, built without any registry.

Three sources, all through the engine's Docker-compatible API:
- this machine's own python3 and git (the default, host_image.py): their binaries, shared libraries
  and the Python standard library are copied into a root filesystem archive and imported. A few
  megabytes, a few seconds, no download; enough to run the sample project's tests and git inside.
- a root filesystem archive (a tar, e.g. from debootstrap), imported as it is;
- a Dockerfile with a local build context (`FROM scratch` + `ADD rootfs.tar /` needs nothing else).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ... import exitcodes
from ..core.spec import DEFAULT_IMAGE
from ..errors import OutpostError

if TYPE_CHECKING:
    from docker import DockerClient

# The main process of a sandbox container only has to stay alive; `sleep` with a number works with
# coreutils and busybox alike (not every `sleep` knows "infinity").
KEEP_ALIVE = ("sleep", "2147483647")

Progress = Callable[[str], None]


class ImageError(OutpostError):
    """An image could not be built; the message is one line for the operator."""

    exit_code = exitcodes.BUILD_FAILED


class InvalidTag(ImageError):
    """An image name that is not one (a wrong argument, not a failed build)."""

    exit_code = exitcodes.BAD_INPUT


def parse_tag(tag: str) -> tuple[str, str]:
    """`repo/name:tag` → (`repo/name`, `tag`); a registry port is not a tag."""
    slash = tag.rfind("/")
    colon = tag.rfind(":")
    if colon > slash:
        repository, version = tag[:colon], tag[colon + 1 :]
    else:
        repository, version = tag, "latest"
    if (
        not repository
        or not re.fullmatch(r"[a-z0-9]+([._/:-][a-z0-9]+)*", repository)
        or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", version)
    ):
        raise InvalidTag(f"image tag {tag!r} is not a valid name (e.g. {DEFAULT_IMAGE})")
    return repository, version


# -- importing and building through the engine ---------------------------------------------


def import_rootfs(client: DockerClient, archive: Path, tag: str, command: Iterable[str] = KEEP_ALIVE) -> str:
    """Import a root filesystem archive as image `tag`; returns the image id."""
    if not archive.is_file():
        raise ImageError(f"root filesystem archive {archive} does not exist")
    repository, version = parse_tag(tag)
    changes = [f"CMD {json.dumps(list(command))}", "ENV PATH=/usr/local/bin:/usr/bin:/bin"]
    from docker.errors import APIError

    try:
        # Imported untagged, then tagged: Podman's compat API ignores the import's tag parameter
        response = client.api.import_image_from_file(str(archive), changes=changes)
        image_id = _imported_id(response)
        client.images.get(image_id).tag(repository, version)
        return image_id
    except APIError as error:
        raise ImageError(f"importing {archive} as {tag} failed: {error.explanation or error}") from None


def _imported_id(response: str | bytes) -> str:
    text = response.decode() if isinstance(response, bytes) else str(response)
    found = None
    for line in text.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if "error" in message:
            raise ImageError(f"import failed: {str(message['error']).strip()}")
        for value in (message.get("id"), message.get("status")):
            if isinstance(value, str) and value.startswith("sha256:"):
                found = value
    if found is None:
        raise ImageError(f"the engine did not say which image it imported: {text.strip()[:200]}")
    return found


def build_dockerfile(
    client: DockerClient, directory: Path, tag: str, progress: Progress | None = None
) -> str:
    """Build `directory`/Dockerfile with that directory as the context; never pulls by itself."""
    if not (directory / "Dockerfile").is_file():
        raise ImageError(f"{directory} has no Dockerfile")
    parse_tag(tag)
    from docker.errors import APIError, BuildError

    say = progress or (lambda text: None)
    try:
        image_id: str | None = None
        for chunk in client.api.build(
            path=str(directory), tag=tag, pull=False, rm=True, forcerm=True, decode=True
        ):
            if "error" in chunk:
                raise ImageError(f"building {directory} failed: {str(chunk['error']).strip()}")
            text = str(chunk.get("stream", "")).strip()
            if text:
                say(text)
            if "aux" in chunk and isinstance(chunk["aux"], dict):
                image_id = str(chunk["aux"].get("ID", image_id))
        image_id = image_id or client.images.get(tag).id
        if image_id is None:
            raise ImageError(f"building {directory} left no image {tag}")
        return image_id
    except (APIError, BuildError) as error:
        raise ImageError(
            f"building {directory} failed: {getattr(error, 'explanation', None) or error}"
        ) from None
