"""Where each agent keeps its own state: what an isolating sandbox lets it write besides its
worktree (its sessions, settings and caches), computed from the environment it runs with."""

from __future__ import annotations

from pathlib import Path

import pytest

from outpost_tui.engine.agents import adapter_for
from outpost_tui.engine.agents.base import LaunchContext
from outpost_tui.engine.core.spec import CandidateSpec


def state(agent: str, env: dict[str, str], tmp_path: Path) -> tuple[str, ...]:
    candidate = CandidateSpec("k", agent, "brief", env=env)
    context = LaunchContext(directory=tmp_path, git_common_dir=tmp_path / ".git")
    return adapter_for(agent).launch(candidate, "brief", context).state


@pytest.mark.parametrize(
    ("agent", "env", "expected"),
    [
        ("claude", {}, ["home/.claude", "home/.claude.json"]),
        ("claude", {"CLAUDE_CONFIG_DIR": "{t}/elsewhere"}, ["elsewhere", "home/.claude.json"]),
        ("codex", {}, ["home/.codex"]),
        ("codex", {"CODEX_HOME": "{t}/codex-home"}, ["codex-home"]),
        ("gemini", {}, ["home/.gemini"]),
        ("aider", {}, ["home/.aider"]),
        (
            "opencode",
            {"XDG_DATA_HOME": "{t}/data"},
            ["data/opencode", "home/.config/opencode", "home/.local/state/opencode", "home/.cache/opencode"],
        ),
    ],
)
def test_each_agent_names_its_state_and_its_directories_exist(tmp_path, monkeypatch, agent, env, expected):
    for variable in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    env = {"HOME": str(tmp_path / "home"), **{k: v.format(t=tmp_path) for k, v in env.items()}}
    found = state(agent, env, tmp_path)
    assert [str(Path(path).relative_to(tmp_path)) for path in found] == expected
    for path in found:
        if not path.endswith(".json"):
            assert Path(path).is_dir()  # made: a sandbox binds only what exists


def test_a_relative_state_variable_is_not_taken(tmp_path):
    # CODEX_HOME=relative would name a directory inside wherever the agent happens to run
    found = state("codex", {"HOME": str(tmp_path / "home"), "CODEX_HOME": "relative"}, tmp_path)
    assert found == (str(tmp_path / "home" / ".codex"),)
