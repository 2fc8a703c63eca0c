"""The private attributes of pinned libraries outpost-tui reads or writes, each with the role it is
used for: an upgrade that renames or repurposes one fails here, loudly, rather than in a race.

- docker (Docker SDK): `APIClient._get` (GET /_ping, whose headers name the engine and its API
  version without the seconds /version takes on a loaded Podman) and `APIClient._version` (written
  by sandbox/container.py's `_negotiate`: the API version every later request's URL carries).
- anyio: `Process._transport` (read by sandbox/local.py's `_pipe_ids`: this process's own ends of a
  command's stdout and stderr pipes, still there after a quick command has exited).
- textual: the Log's `_lines` (the lines it shows), `_width` (its widest line, its scrollable
  width), `_render_line_cache` (drawn lines by index) and `_process_line` (control codes and tabs
  as drawn), and `Widget._scroll_update` (the scrollbars to a new scrollable size without a
  layout, as Textual's own `_size_updated(layout=False)` does): ui/widgets/panel_log.py writes a
  panel's log through them (tests/ui/test_heavy_logs.py draws it against a Log line for line).
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from importlib.metadata import version

import anyio
import docker
import pytest
from textual.widget import Widget
from textual.widgets import Log

from outpost_tui.engine.sandbox.local import _pipe_ids


def test_the_pins_are_the_versions_these_roles_were_checked_against():
    # A new version of either library: check each attribute's role again, then move the pin and
    # this line together.
    assert version("docker") == "7.2.0"
    assert version("anyio") == "4.16.0"
    assert version("textual") == "8.2.8"


def test_textual_log_keeps_its_lines_width_and_drawn_lines_where_panel_log_writes_them():
    assert "return self._lines" in inspect.getsource(Log.lines.fget)
    assert "self.virtual_size = Size(self._width, self.line_count)" in inspect.getsource(
        Log._update_maximum_width
    )
    drawn = inspect.getsource(Log._render_line_strip)
    assert "self._render_line_cache[y]" in drawn and "self._process_line(self._lines[y])" in drawn
    assert Log._process_line("a\tb\x07") == "a       b\ufffd"
    resized = inspect.getsource(Widget._size_updated)
    assert "self.set_reactive(Widget.virtual_size, virtual_size)" in resized
    assert "self._scroll_update(virtual_size)" in resized


def test_docker_api_version_is_the_private_attribute_every_url_carries():
    api = docker.APIClient(base_url="unix:///nonexistent/docker.sock", version="1.41")
    assert api._version == "1.41" and api.api_version == "1.41"
    api._version = "1.40"  # what _negotiate does once /_ping has named the engine's version
    assert api.api_version == "1.40"
    assert api._url("/containers/json") == "http+docker://localhost/v1.40/containers/json"
    assert docker.constants.DEFAULT_DOCKER_API_VERSION.count(".") == 1


def test_docker_get_is_the_private_plain_get_of_a_url():
    api = docker.APIClient(base_url="unix:///nonexistent/docker.sock", version="1.41")
    # a GET of a full URL, as the SDK's own ping does: no engine here, so it fails to connect
    # rather than with a TypeError or an AttributeError
    with pytest.raises(Exception) as failed:
        api._get(api.base_url + "/_ping", timeout=1)
    assert not isinstance(failed.value, (TypeError, AttributeError))
    # the SDK's own ping is the same call: the role stays what the SDK itself relies on
    assert "self._get(self._url('/_ping'))" in inspect.getsource(docker.api.client.APIClient.ping)


@pytest.mark.anyio
async def test_anyio_process_transport_holds_our_ends_of_the_pipes():
    # the child waits for its stdin to close: its pipes are all open while we look
    process = await anyio.open_process(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    async with process:
        transport = process._transport
        ours = {
            f"pipe:[{os.fstat(transport.get_pipe_transport(fd).get_extra_info('pipe').fileno()).st_ino}]"
            for fd in (1, 2)
        }
        childs = {os.readlink(f"/proc/{process.pid}/fd/{fd}") for fd in (1, 2)}
        assert len(ours) == 2 and ours == childs  # the same two pipes, seen from our end
        assert _pipe_ids(process) == ours
        await process.stdin.aclose()
        assert await process.wait() == 0
