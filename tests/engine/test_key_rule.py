"""One candidate-key rule (spec.valid_key, said as spec.KEY_RULE): the race file, the Python API,
and git's branch and worktree names refuse the same keys the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from outpost_tui.engine import RaceError, build_spec, run_race
from outpost_tui.engine import git as engine_git
from outpost_tui.engine.core.spec import KEY_RULE, valid_key
from outpost_tui.engine.racefile import RaceFileError, load_race
from tests.conftest import cmd

BAD = ["../x", "-leading-dash", "has space", "a/b", "x" * 65, "", "dot.ted", "ünï"]
GOOD = ["a", "claude-1", "A_b-9", "x" * 64]


def test_the_rule_itself():
    assert all(valid_key(key) for key in GOOD)
    assert not any(valid_key(key) for key in BAD)
    assert not valid_key(None) and not valid_key(7)


@pytest.mark.parametrize("key", BAD)
def test_every_place_refuses_a_bad_key_with_the_same_rule(key: str, repo: Path, tmp_path: Path):
    race = tmp_path / "race.toml"
    race.write_text(
        f'[race]\nrepository = "{repo}"\n\n[[candidates]]\nkey = {key!r}\n'
        'agent = "command"\nbrief = "b"\ncommand = ["true"]\n'.replace("'", '"')
    )
    with pytest.raises(RaceFileError) as refused:
        load_race(race)
    assert refused.value.key == "candidates[0].key" and KEY_RULE in refused.value.message

    spec = build_spec(repository=repo, candidates=[cmd(key)], validate=["true"])
    with pytest.raises(RaceError) as refused_by_race:
        run_race(spec)
    assert KEY_RULE in str(refused_by_race.value)
    assert engine_git.run(repo, "branch", "--list", "outpost/*")[1] == ""  # refused before anything

    for make in (
        lambda: engine_git.branch_name("20260101-000000-abcdef", key, 1),
        lambda: engine_git.worktree_directory(repo, key, "b"),
    ):
        with pytest.raises(ValueError) as refused_by_git:
            make()
        assert KEY_RULE in str(refused_by_git.value)
