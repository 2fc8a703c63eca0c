"""In a container too, a stopped agent's output is read until its processes are confirmed gone:
what it reports after TERM is counted, and the result says how it was stopped. Real engine."""

from __future__ import annotations

import pytest

from outpost_tui.engine.core.spec import SandboxSpec
from outpost_tui.engine.sandbox.container_scripts import KILL_GRACE
from tests.stubborn import BEFORE, IN_GRACE, calc_repo, figures, plus, race, stubborn_record

from .conftest import IMAGE

pytestmark = pytest.mark.container


def test_a_cancelled_agent_in_a_container_that_ignores_term_has_its_grace_output_counted(engine, tmp_path):
    result, warnings = race(calc_repo(tmp_path), "ignore", SandboxSpec(provider="podman", image=IMAGE))

    assert result["winner"]["key"] == "fixer"
    stubborn = stubborn_record(result)
    assert stubborn["status"] == "cancelled"
    assert figures(stubborn["usage"]) == plus(BEFORE, IN_GRACE)
    assert stubborn["usage"]["complete"] is False
    assert figures(result["usage"]) == plus(BEFORE, IN_GRACE)
    stop = stubborn["stop"]
    assert (stop["why"], stop["ended_by"], stop["grace"]) == ("cancelled", "KILL", KILL_GRACE)
    # its four lines, and the wrapper shell's "Killed" when that is read before the stream ends
    assert stop["lines_after_term"] in (4, 5) and figures(stop["usage_after_term"]) == IN_GRACE
    assert len(warnings) == 1 and "python3 ignored TERM and was killed 0.5s later" in warnings[0]


def test_a_timed_out_agent_in_a_container_has_what_it_printed_in_the_grace_counted(engine, tmp_path):
    result, warnings = race(
        calc_repo(tmp_path), "ignore", SandboxSpec(provider="podman", image=IMAGE), timeout=8
    )

    stubborn = stubborn_record(result)
    assert stubborn["status"] == "failed" and stubborn["error"] == "agent timed out after 8s"
    assert figures(stubborn["usage"]) == plus(BEFORE, IN_GRACE)
    assert (stubborn["stop"]["why"], stubborn["stop"]["ended_by"]) == ("timeout", "KILL")
    assert figures(result["usage"]) == plus(BEFORE, IN_GRACE)
    assert len(warnings) == 1 and "ignored TERM" in warnings[0]
