"""The private attributes of pinned libraries outpost-tui reads or writes, each with the role it is
used for: an upgrade that renames or repurposes one fails here, loudly, rather than in a race.

- docker (Docker SDK): `APIClient._get` (GET /_ping, whose headers name the engine and its API
  version without the seconds /version takes on a loaded Podman) and `APIClient._version` (written
  by sandbox/container.py's `_negotiate`: the API version every later request's URL carries).
- textual: the Log's `_lines` (the lines it shows), `_width` (its widest line, its scrollable
  width), `_render_line_cache` (drawn lines by index) and `_process_line` (control codes and tabs
  as drawn), and `Widget._scroll_update` (the scrollbars to a new scrollable size without a
  layout, as Textual's own `_size_updated(layout=False)` does): ui/widgets/panel_log.py writes a
  panel's log through them (tests/ui/test_heavy_logs.py draws it against a Log line for line).
"""

from __future__ import annotations

import inspect
from importlib.metadata import version

import docker
import pytest
from textual.widget import Widget
from textual.widgets import Log


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
