"""`outpost-tui image build`: images without any registry, from this machine's programs, from a
root filesystem archive, or from a Dockerfile with a local context."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid

import pytest

from outpost_tui.engine.sandbox.host_image import host_rootfs

pytestmark = pytest.mark.container


def outpost(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "outpost_tui.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def tag(engine):
    client, _ = engine
    name = f"local/outpost-test-{uuid.uuid4().hex[:8]}:1"
    yield name
    with contextlib.suppress(Exception):  # a test that failed before building leaves nothing to remove
        client.images.remove(name, force=True)


def run_in(client, image: str, *argv: str) -> str:
    # Not containers.run(): it follows the logs of a container that may already have exited, and
    # Podman sometimes never ends that stream. Wait for the exit, then read the finished logs.
    container = client.containers.create(
        image, list(argv), network_mode="none", user=f"{os.getuid()}:{os.getgid()}"
    )
    try:
        container.start()
        status = container.wait(timeout=120)
        out = container.logs(stdout=True, stderr=True).decode()
        assert status["StatusCode"] == 0, out
        return out
    finally:
        container.remove(force=True)


def test_default_build_has_python_and_git(engine, tag):
    client, _ = engine
    done = outpost("image", "build", "--tag", tag)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"built {tag} ")
    assert "python 3." in done.stderr and "git from" in done.stderr
    out = run_in(
        client,
        tag,
        "sh",
        "-c",
        "python3 -c 'import json, sqlite3, unittest; print(\"py ok\")' && git --version "
        "&& cd /tmp && git init -q r && cd r && git -c user.name=a -c user.email=a@b "
        "commit -q --allow-empty -m x && git log --format=%s",
    )
    assert "py ok" in out and "git version" in out and out.strip().endswith("x")


def test_build_from_a_root_filesystem_archive(engine, tag, tmp_path):
    client, _ = engine
    rootfs = host_rootfs(tmp_path / "rootfs.tar", with_python=False, with_git=False, with_tools=False)
    assert rootfs.bytes < 20_000_000  # a shell and sleep, not a distribution
    done = outpost("image", "build", "--tag", tag, "--from-rootfs", str(rootfs.archive))
    assert done.returncode == 0, done.stderr
    assert run_in(client, tag, "sh", "-c", "echo from-rootfs").strip() == "from-rootfs"
    # the image's default command keeps a sandbox container alive
    assert client.images.get(tag).attrs["Config"]["Cmd"][0] == "sleep"


def test_build_from_a_dockerfile_with_a_local_context(engine, tag, tmp_path):
    client, _ = engine
    context = tmp_path / "image"
    context.mkdir()
    host_rootfs(context / "rootfs.tar", with_python=False, with_git=False, with_tools=False)
    (context / "marker.txt").write_text("from the local context\n")
    (context / "Dockerfile").write_text(
        'FROM scratch\nADD rootfs.tar /\nCOPY marker.txt /etc/marker.txt\nCMD ["sleep", "2147483647"]\n'
    )
    done = outpost("image", "build", "--tag", tag, "--dockerfile", str(context))
    assert done.returncode == 0, done.stderr
    assert run_in(client, tag, "cat", "/etc/marker.txt") == "from the local context\n"


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for args, expected in (
        (["--from-rootfs", str(tmp_path / "missing.tar")], "no such file"),
        (["--dockerfile", str(tmp_path)], "no Dockerfile"),
        (["--tag", "Not A Tag"], "not a valid name"),
    ):
        done = outpost("image", "build", *args)
        assert done.returncode == 2, done
        assert expected in done.stderr and len(done.stderr.strip().splitlines()) == 1
        assert "Traceback" not in done.stderr


def test_no_engine_is_one_line_and_exit_9(tmp_path):
    done = outpost("image", "build", env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
    assert done.returncode == 9
    assert f"unix://{tmp_path}/none.sock" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
