"""The connection to a local engine: one pool of connections for every container and exec (the SDK
kept one per request URL, a new connection to the engine for each container and each exec), none
of them a stream's, and no environment read per request."""

from __future__ import annotations

import os

import pytest

from outpost_tui.engine.sandbox.container_engine import connect

from .conftest import IMAGE

pytestmark = [pytest.mark.container]


@pytest.fixture
def local_client(engine):
    client, endpoint = connect(timeout=60)
    if not endpoint.startswith("unix://"):
        pytest.skip(f"the engine at {endpoint} is not reached through a local socket")
    yield client
    client.close()


def test_requests_for_every_container_and_exec_share_one_pool(local_client):
    api = local_client.api
    adapter = api.get_adapter(api.base_url)
    paths = ("/v1.41/containers/a/start", "/v1.41/containers/b/json", "/v1.41/exec/c/json")
    pools = {id(adapter.get_connection(api.base_url + path)) for path in paths}
    assert len(pools) == 1
    assert api.trust_env is False  # no proxy or netrc lookup per request: a socket has neither


def test_a_streamed_exec_leaves_the_next_requests_intact(local_client, race_id):
    """An exec's output stream takes its connection over: requests after many streams, on the one
    pool, still get their own answers."""
    api = local_client.api
    container = api.create_container(
        IMAGE,
        ["sleep", "2147483647"],
        host_config=api.create_host_config(init=True, network_mode="none", cap_drop=["ALL"]),
        user=f"{os.getuid()}:{os.getgid()}",
        labels={"outpost.race": race_id},
    )
    try:
        api.start(container)
        for number in range(12):
            command = api.exec_create(container, ["sh", "-c", f"echo out{number}; echo err{number} >&2"])
            frames = list(api.exec_start(command, stream=True, demux=True))
            out = b"".join(chunk for chunk, _ in frames if chunk)
            err = b"".join(chunk for _, chunk in frames if chunk)
            assert (out, err) == (f"out{number}\n".encode(), f"err{number}\n".encode())
            assert api.exec_inspect(command)["ExitCode"] == 0
            assert api.inspect_container(container)["Id"] == container["Id"]
    finally:
        api.remove_container(container, force=True)
