"""The exported report says how candidates were isolated, and an unisolated race's warning."""

from __future__ import annotations

import pytest

from outpost_tui.engine import build_spec, run_race
from outpost_tui.engine.core.spec import SandboxSpec
from outpost_tui.engine.records import report
from outpost_tui.engine.sandbox import isolation
from tests.conftest import cmd


@pytest.mark.parametrize("mode", ["none", "bubblewrap"])
def test_the_report_names_the_isolation_and_warns_when_there_was_none(repo, mode):
    if mode == "bubblewrap" and isolation.probe().program is None:
        pytest.skip(f"bubblewrap cannot run here: {isolation.probe().why}")
    spec = build_spec(
        repository=repo,
        candidates=[cmd("a", "--commit")],
        validate=["true"],
        sandbox=SandboxSpec(isolation=mode),
    )
    text = report.markdown(run_race(spec).to_json())
    assert f"- **Isolation:** {mode}\n" in text
    if mode == "none":
        assert "- **Warning:** candidates run unisolated" in text
    else:
        assert "**Warning:**" not in text
