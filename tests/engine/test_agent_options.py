"""Each adapter's declared `options` (what the configure screen offers for its agent) match what its
launch does: a declared option changes the command line; any other is refused or has no effect."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from outpost_tui.engine import agents
from outpost_tui.engine.core.spec import CandidateSpec

VALUES = {"model": "some-model", "max_turns": 3, "allowed_tools": ("Read",), "args": ("--extra-flag",)}


@pytest.mark.parametrize("agent", agents.known_agents())
def test_declared_options_are_the_ones_launch_uses(agent, tmp_path: Path):
    script = tmp_path / "script.toml"
    script.write_text("")
    base = CandidateSpec(
        key="k",
        agent=agent,
        brief="b",
        command=("true",) if agent == "command" else None,
        script=script if agent == "demo" else None,
    )
    adapter = agents.adapter_for(agent)
    context = agents.LaunchContext(directory=tmp_path, git_common_dir=tmp_path)
    plain = adapter.launch(base, "b", context).argv
    assert {"command", "script"} & set(adapter.options) == (
        {"command"} if agent == "command" else {"script"} if agent == "demo" else set()
    )
    for option, value in VALUES.items():
        candidate = dataclasses.replace(base, **{option: value})
        try:
            argv = adapter.launch(candidate, "b", context).argv
        except ValueError:
            assert option not in adapter.options, f"{agent} refuses {option}, yet declares it"
            continue
        if option in adapter.options:
            assert argv != plain, f"{agent} declares {option} but its command line ignores it"
        else:
            assert argv == plain, f"{agent} uses {option} without declaring it"
