"""`outpost-tui serve` for real: the server starts on 127.0.0.1, the page loads, and the app, run for
the browser's websocket, draws itself and answers a key."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time

import aiohttp
import pytest

from outpost_tui.samples import materialise


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def talk_to_the_app(port: int) -> tuple[str, bytes]:
    async with aiohttp.ClientSession() as http:
        deadline = time.monotonic() + 60
        while True:
            try:
                async with http.get(f"http://127.0.0.1:{port}/") as page:
                    html = await page.text()
                    if page.status == 200:
                        break
            except aiohttp.ClientConnectionError:
                pass
            assert time.monotonic() < deadline, "the server never answered"
            await asyncio.sleep(0.1)
        drawn = b""
        async with http.ws_connect(f"http://127.0.0.1:{port}/ws?width=100&height=30") as ws:
            deadline = time.monotonic() + 60
            sent_key = False
            while True:
                assert time.monotonic() < deadline, f"the app never drew the race: {drawn[-500:]!r}"
                try:
                    message = await ws.receive(timeout=1)
                except TimeoutError:
                    continue
                if message.type == aiohttp.WSMsgType.BINARY:
                    drawn += message.data
                elif message.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                    raise AssertionError(f"the app went away: {drawn[-500:]!r}")
                if not sent_key and b"ready: press s" in drawn:
                    await ws.send_str(json.dumps(["stdin", "?"]))  # the help screen answers the key
                    sent_key = True
                if sent_key and b"binding id" in drawn.lower():
                    return html, drawn


@pytest.mark.timeout(180)
def test_serve_loads_the_page_and_the_app_answers(tmp_path):
    race_file = materialise("race", tmp_path / "demo")
    port = free_port()
    env = {**os.environ, "OUTPOST_TUI_CONFIG_DIR": str(tmp_path / "config")}
    server = subprocess.Popen(
        [sys.executable, "-m", "outpost_tui.cli", "serve", str(race_file), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        html, drawn = asyncio.run(talk_to_the_app(port))
        assert "outpost-tui" in html and f"ws://127.0.0.1:{port}/ws" in html
        assert b"outpost-tui" in drawn and b"fixer" in drawn
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    assert server.returncode is not None
