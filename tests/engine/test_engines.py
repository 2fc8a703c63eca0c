"""Engine discovery as users have their engines: DOCKER_HOST, the current Docker context, rootless
Docker's and rootless Podman's sockets, and the reason `doctor` gives for its choice.

Sockets here are real listening unix sockets in temporary directories; the Docker context is the
Docker CLI's own file layout (config.json, contexts/meta/<sha256 of the name>/meta.json)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path

import pytest

from outpost_tui.engine.sandbox.base import SandboxError
from outpost_tui.engine.sandbox.container_engine import find_endpoint, resolve_endpoint, user_mapping
from outpost_tui.engine.sandbox.engines import ContextError, discover, sockets


@pytest.fixture
def listening(tmp_path):
    """Create a real listening unix socket at a path; all closed at the end."""
    opened = []

    def make(path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        server.listen()
        opened.append(server)
        return path

    yield make
    for server in opened:
        server.close()


def write_context(config_dir: Path, name: str, host: str, *, current: bool = True) -> Path:
    digest = hashlib.sha256(name.encode()).hexdigest()
    meta = config_dir / "contexts" / "meta" / digest / "meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(
        json.dumps(
            {"Name": name, "Metadata": {}, "Endpoints": {"docker": {"Host": host, "SkipTLSVerify": False}}}
        )
    )
    if current:
        (config_dir / "config.json").write_text(json.dumps({"auths": {}, "currentContext": name}))
    return meta


def only_here(tmp_path: Path, **extra: str) -> dict[str, str]:
    """An environment whose home and runtime directory are the test's own."""
    (tmp_path / "home").mkdir(exist_ok=True)
    return {"HOME": str(tmp_path / "home"), "XDG_RUNTIME_DIR": str(tmp_path / "run"), **extra}


def skip_if_host_has(path: str) -> None:
    if os.path.exists(path):
        pytest.skip(f"{path} exists on this machine and is looked at first")


def test_the_race_file_then_docker_host_come_first(tmp_path):
    env = only_here(tmp_path, DOCKER_HOST="tcp://build:2376")
    assert discover("unix:///x.sock", "docker", env).why == "[sandbox] endpoint in the race file"
    chosen = discover(None, "docker", env)
    assert (chosen.url, chosen.why) == ("tcp://build:2376", "DOCKER_HOST")


def test_the_current_docker_context_is_honoured(tmp_path, listening):
    env = only_here(tmp_path)
    config = Path(env["HOME"]) / ".docker"
    remote = listening(tmp_path / "remote.sock")
    write_context(config, "colima", f"unix://{remote}")
    chosen = discover(None, "docker", env)
    assert chosen.url == f"unix://{remote}"
    assert (
        chosen.why == f"Docker context 'colima', from the current Docker context in {config / 'config.json'}"
    )
    # DOCKER_CONTEXT picks another one, DOCKER_CONFIG moves the whole directory
    write_context(config, "other", "tcp://other:2376", current=False)
    assert discover(None, "docker", {**env, "DOCKER_CONTEXT": "other"}).url == "tcp://other:2376"
    moved = tmp_path / "elsewhere"
    write_context(moved, "ci", "ssh://me@ci")
    assert discover(None, "docker", {**env, "DOCKER_CONFIG": str(moved)}).url == "ssh://me@ci"
    # "default" means the sockets, as `docker context use default` does
    (config / "config.json").write_text(json.dumps({"currentContext": "default"}))
    skip_if_host_has("/var/run/docker.sock")
    assert discover(None, "docker", env) is None


def test_a_broken_current_context_is_one_clear_error(tmp_path):
    env = only_here(tmp_path)
    config = Path(env["HOME"]) / ".docker"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"currentContext": "gone"}))
    with pytest.raises(ContextError, match=r"Docker context 'gone'.*has no readable endpoint"):
        discover(None, "docker", env)


def test_rootless_docker_socket_is_found_with_its_reason(tmp_path, listening):
    skip_if_host_has("/var/run/docker.sock")
    env = only_here(tmp_path)
    path = listening(tmp_path / "run" / "docker.sock")
    chosen = discover(None, "docker", env)
    assert chosen.url == f"unix://{path}"
    assert chosen.why == f"rootless Docker's socket, found at {path}"


def test_rootless_podman_socket_first_when_the_race_asks_for_podman(tmp_path, listening):
    env = only_here(tmp_path)
    podman = listening(tmp_path / "run" / "podman" / "podman.sock")
    listening(tmp_path / "run" / "docker.sock")
    chosen = discover(None, "podman", env)
    assert (chosen.url, chosen.why) == (f"unix://{podman}", f"rootless Podman's socket, found at {podman}")
    # a plain file where a socket would be is not an engine
    assert next(path for path, _ in sockets("podman", env)) == str(podman)


def test_nothing_found_says_where_it_looked(tmp_path, monkeypatch):
    skip_if_host_has("/var/run/docker.sock")
    skip_if_host_has("/run/podman/podman.sock")
    env = only_here(tmp_path)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert resolve_endpoint(None, "docker") is None
    with pytest.raises(SandboxError) as caught:
        find_endpoint(None, "docker")
    assert f"{tmp_path}/run/docker.sock" in str(caught.value)
    assert "the current Docker context" in str(caught.value)


def test_user_mapping_keeps_files_the_users():
    assert user_mapping({"name": "docker", "rootless": False}, 1000, 100)[0] == {"user": "1000:100"}
    for name in ("docker", "podman"):
        options, how = user_mapping({"name": name, "rootless": True}, 1000, 100)
        # a rootless engine's container root is the user on the host; any other id is not
        assert options == {"user": "0:0"}
        assert how.startswith("rootless ")
