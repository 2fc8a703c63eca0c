"""Container tests run against a real Docker-compatible engine (Podman in CI, see .ci/podman-setup.sh).

Without an engine they skip with the reason; under CI=true a missing engine or image is a failure,
so CI can never pass by skipping them. The test image (python3 + git) is OUTPOST_TEST_IMAGE, by
default local/outpost-sample:latest; when it is missing locally it is built from this machine's
python3 and git (a few seconds, no registry).
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from outpost_tui.engine import git as engine_git
from outpost_tui.engine.core.spec import DEFAULT_IMAGE, SandboxSpec
from outpost_tui.engine.sandbox.base import SandboxContext, SandboxError
from outpost_tui.engine.sandbox.container import ContainerProvider
from outpost_tui.engine.sandbox.container_engine import LABEL_RACE, connect
from outpost_tui.engine.sandbox.host_image import build_sample_image
from tests.conftest import git, make_repo

IMAGE = os.environ.get("OUTPOST_TEST_IMAGE", DEFAULT_IMAGE)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str):
    if IN_CI:
        pytest.fail(f"CI=true and the container tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def engine():
    """(client, endpoint) of the engine the tests use."""
    try:
        client, endpoint = connect(timeout=120)
    except SandboxError as error:
        unavailable(f"no container engine: {error}")
    try:
        client.images.get(IMAGE)
    except Exception:
        try:
            build_sample_image(client, endpoint, IMAGE)
        except Exception as error:  # any reason the image cannot exist means no container tests
            unavailable(f"test image {IMAGE} is missing and could not be built: {error}")
    yield client, endpoint
    client.close()


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def race_id():
    return f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def leftovers(engine, race_id):
    """Containers of this test's race still present after it (the test asserts none), as the
    engine's summaries (Id, Names, State): one request, which a removal under way cannot fail."""
    client, _ = engine

    def left() -> list[dict]:
        return client.api.containers(all=True, filters={"label": f"{LABEL_RACE}={race_id}"})

    yield left
    for container in left():  # never let one test's leftovers leak into the next
        client.api.remove_container(container["Id"], force=True)


async def close(sandbox) -> None:
    """Close a container sandbox and wait for its removal (which its provider finishes later)."""
    await sandbox.close()
    assert await sandbox.provider.drain() == {}


@pytest.fixture
def provider(engine):
    return ContainerProvider(SandboxSpec(provider="podman", image=IMAGE))


def worktree(repo: Path, name: str = "wt") -> Path:
    """A worktree as the engine makes one: its branch, and the private repository its container's
    git writes (engine/git/private.py)."""
    directory = repo / ".outpost" / "workspaces" / name
    git(repo, "worktree", "add", "-q", "-b", f"outpost/test/{name}", str(directory), "HEAD")
    engine_git.make_private(engine_git.private_template(repo, engine_git.listed_refs(repo)), directory)
    return directory


@pytest.fixture
def attempt(tmp_path, race_id):
    """A real repository with a worktree, and the SandboxContext of one attempt on it."""
    repo = make_repo(tmp_path / "repo")
    directory = worktree(repo)
    return SandboxContext(
        repository=repo,
        directory=directory,
        git_common_dir=repo / ".git",
        race_id=race_id,
        key="alpha",
        attempt=1,
    )


CALC = Path(__file__).resolve().parents[2] / "sample-races" / "projects" / "calc"

# Agents live in the repository, so every worktree (and so every container) has them.
AGENTS = {
    "fix.py": """\
import json, os, socket, subprocess, sys, time
gate = os.environ.get("WAIT_FOR")
if gate:
    while not os.path.exists(gate):
        time.sleep(0.01)
print(json.dumps({"kind": "text", "text": f"container {socket.gethostname()} brief {sys.stdin.read()!r}"}))
with open("calc.py") as handle:
    source = handle.read()
with open("calc.py", "w") as handle:
    handle.write(source.replace("return a - b", os.environ.get("FIX", "return a + b"), 1))
subprocess.run(["git", "commit", "-qam", "fix add"], check=True)
""",
    "hang.py": """\
import json, socket, subprocess, time
subprocess.Popen(["sleep", "1000"])
print(json.dumps({"kind": "text", "text": f"ready in {socket.gethostname()}"}), flush=True)
while True:
    time.sleep(1)
""",
    "reach.py": """\
import socket, sys
try:
    socket.create_connection(("1.1.1.1", 53), timeout=5).close()
except OSError as error:
    print(f"network blocked: {error}", file=sys.stderr)
    sys.exit(3)
print("network reached")
""",
}


@pytest.fixture
def calc_repo(tmp_path) -> Path:
    repo = tmp_path / "calc"
    shutil.copytree(CALC, repo, ignore=shutil.ignore_patterns("__pycache__"))
    agents = repo / "agents"
    agents.mkdir()
    for name, source in AGENTS.items():
        (agents / name).write_text(source)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Test")
    git(repo, "config", "user.email", "test@example.invalid")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "calc with a bug in add")
    return repo
