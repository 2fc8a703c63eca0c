"""`outpost-tui doctor RACE.toml` for a container race: the agents are looked for in the image."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from outpost_tui import exitcodes
from outpost_tui.engine.machine.containers import probe_image
from tests.agents.replay import path_with, write_fake
from tests.conftest import make_repo

from .conftest import IMAGE

pytestmark = pytest.mark.container

PROBE_LABEL = "outpost.doctor=probe"


def probes_left(client) -> list:
    return client.containers.list(all=True, filters={"label": PROBE_LABEL}, ignore_removed=True)


def test_the_probe_finds_what_the_image_has_and_leaves_no_container(engine):
    client, _ = engine
    before = {c.id for c in probes_left(client)}
    found = probe_image(client, IMAGE, ["python3", "git", "claude", "no-such-program-42"], timeout=120)
    assert found["python3"] and found["python3"].endswith("/python3")
    assert found["git"] and found["git"].endswith("/git")
    assert found["claude"] is None and found["no-such-program-42"] is None
    assert {c.id for c in probes_left(client)} <= before


def test_doctor_names_the_agents_missing_from_the_image_not_from_the_host(engine, tmp_path):
    client, endpoint = engine
    make_repo(tmp_path / "repo")
    bin_dir = tmp_path / "bin"
    # Installed on the host, which a container race does not use.
    for name in ("claude", "codex"):
        write_fake(bin_dir, name, record=tmp_path / f"{name}.json")
    race = tmp_path / "race.toml"
    race.write_text(f"""\
[race]
repository = "repo"

[sandbox]
provider = "podman"
image = "{IMAGE}"

[validate]
command = ["python3", "-m", "unittest", "-q"]

[[candidates]]
key = "claude"
agent = "claude"
brief = "Fix add()."

[[candidates]]
key = "codex"
agent = "codex"
brief = "Fix add()."

[[candidates]]
key = "tool"
agent = "command"
command = ["python3", "agents/fix.py"]
brief = "Fix add()."
""")
    env = {key: value for key, value in os.environ.items() if not key.endswith("_API_KEY")}
    env.update(PATH=path_with(bin_dir), HOME=str(tmp_path), DOCKER_HOST=endpoint)
    before = {c.id for c in probes_left(client)}
    done = subprocess.run(
        [sys.executable, "-m", "outpost_tui.cli", "doctor", str(race), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == exitcodes.MISSING_REQUIREMENT, done.stderr
    report = json.loads(done.stdout)
    checks = {check["name"]: check for check in report["checks"]}
    assert report["missing"] == ["agent claude in image", "agent codex in image"]
    assert checks["container engine"]["ok"] is True
    assert f"image {IMAGE} present" in checks["container engine"]["detail"]
    assert checks["agent claude in image"]["detail"] == (
        f"`claude` not found on the PATH of image {IMAGE} "
        "(install it in the image: npm install -g @anthropic-ai/claude-code)"
    )
    assert checks["command tool in image"]["ok"] is True
    assert checks["command tool in image"]["detail"].endswith(f"/python3 in {IMAGE}")
    # The host's programs and logins are reported, not needed.
    assert checks["agent claude"]["ok"] is True and checks["agent claude"]["required"] is False
    assert checks["login codex"]["required"] is False
    assert {c.id for c in probes_left(client)} <= before
