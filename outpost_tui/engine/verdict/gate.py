"""The gate: whether one validation run's results make a candidate acceptable, against the baseline.

The exit code is only the first question. In strict mode a candidate is also refused when no test
ran, when every test was skipped, when fewer tests ran than on the baseline, and (when both sides
name their tests) when a test that passed on the baseline fails or did not run. With
`allow_baseline_failures` a non-zero exit is forgiven when every failing test already failed on
the baseline and the candidate fixes one of them or adds a passing test.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .protect import names as _names
from .reports import ERROR, FAILED, PASSED, SKIPPED, TestResults


@dataclass
class BaselineOutcome:
    """The baseline's validation: what the candidates are measured against."""

    status: str  # passed | failed | timeout | error | cancelled | not-run
    exit_code: int | None = None
    results: TestResults | None = None
    flaky: list[str] = field(default_factory=list)
    runs: int = 0
    reason: str | None = None
    duration: float | None = None

    def passing(self) -> set[str]:
        """Tests that passed on the baseline every time they ran."""
        if self.results is None:
            return set()
        return self.results.ids(PASSED) - set(self.flaky)

    def failing(self) -> set[str]:
        """Tests that failed on the baseline at least once (flaky ones included)."""
        if self.results is None:
            return set()
        return self.results.ids(FAILED, ERROR) | set(self.flaky)

    def to_json(self) -> dict[str, Any]:
        results = self.results
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "runs": self.runs,
            "duration": self.duration,
            "source": results.source if results else "none",
            "tests": results.counts() if results and results.known else None,
            "failing": sorted(self.failing()),
            "flaky": list(self.flaky),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> BaselineOutcome | None:
        if not data:
            return None
        tests = data.get("tests")
        results = None
        if tests is not None:
            results = TestResults(
                data.get("source") or "summary",
                tests.get("passed", 0),
                tests.get("failed", 0),
                tests.get("errors", 0),
                tests.get("skipped", 0),
            )
        return cls(
            data.get("status", "not-run"),
            data.get("exit_code"),
            results,
            list(data.get("flaky") or []),
            int(data.get("runs") or 0),
            data.get("reason"),
            data.get("duration"),
        )


@dataclass
class Decision:
    accepted: bool
    reason: str | None = None  # why not, or a note on why it was accepted anyway
    new_failures: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def decide(
    *,
    exit_code: int | None,
    timed_out: bool,
    results: TestResults,
    baseline: BaselineOutcome | None,
    strict: bool,
    allow_baseline_failures: bool,
) -> Decision:
    """The verdict of one run. `baseline` is None when it could not be run."""
    if timed_out:
        return Decision(False, "validation timed out")
    if not strict:
        if exit_code == 0:
            return Decision(True)
        return Decision(False, f"validation failed (exit code {exit_code})")
    base = baseline.results if baseline is not None and baseline.results is not None else None
    if not results.known:
        if base is not None and base.known:
            return Decision(
                False,
                f"no test results (exit code {exit_code}), though the baseline's run reported its tests",
            )
        if exit_code == 0:
            return Decision(True)  # nothing to compare, on either side: the exit code decides
        return Decision(False, f"validation failed (exit code {exit_code})")
    if results.total == 0 or (results.ran == 0 and results.skipped == 0):
        return Decision(False, "no test ran")
    if results.ran == 0:
        return Decision(False, f"every test was skipped ({results.skipped})")

    new_failures: list[str] = []
    missing: list[str] = []
    by_name = base is not None and base.cases is not None and results.cases is not None
    if by_name:
        assert base is not None and base.cases is not None and results.cases is not None
        passing = baseline.passing() if baseline else set()
        failing_now = results.ids(FAILED, ERROR)
        new_failures = sorted(passing & failing_now)
        ran_before = base.ids(PASSED, FAILED, ERROR)
        ran_now = results.ids(PASSED, FAILED, ERROR)
        missing = sorted(ran_before - ran_now)
    reasons: list[str] = []
    if new_failures:
        reasons.append(
            f"{len(new_failures)} test(s) that passed on the baseline fail: {_names(new_failures)}"
        )
    if missing:
        reasons.append(f"{len(missing)} test(s) that ran on the baseline did not run: {_names(missing)}")
    if base is not None and base.known and results.ran < base.ran:
        reasons.append(f"fewer tests ran than on the baseline ({results.ran} < {base.ran})")
    if reasons:
        return Decision(False, "; ".join(reasons), new_failures, missing)

    if exit_code == 0:
        if results.failed or results.errors:
            # a runner that exits 0 over failures is not trusted with them
            return Decision(
                False, f"{results.failed + results.errors} test(s) failed although the command exited 0"
            )
        return Decision(True)
    failing = results.failed + results.errors
    if not failing:
        return Decision(False, f"validation failed (exit code {exit_code}) with no failing test")
    if not allow_baseline_failures:
        return Decision(False, f"validation failed (exit code {exit_code}): {failing} test(s) failed")
    if not by_name:
        return Decision(
            False,
            f"validation failed (exit code {exit_code}): {failing} test(s) failed "
            "(pre-existing failures are only forgiven with a test report)",
        )
    assert baseline is not None and base is not None
    failing_now = results.ids(FAILED, ERROR)
    already = baseline.failing()
    fresh = sorted(failing_now - already)
    if fresh:
        return Decision(
            False,
            f"{len(fresh)} failing test(s) did not fail on the baseline: {_names(fresh)}",
            fresh,
            missing,
        )
    fixed = sorted(already & results.ids(PASSED))
    added = sorted(results.ids(PASSED) - base.ids(PASSED, FAILED, ERROR, SKIPPED))
    if not fixed and not added:
        return Decision(
            False,
            f"only the baseline's failures fail ({len(failing_now)}), but it fixes "
            "none of them and adds no passing test",
        )
    return Decision(
        True,
        f"accepted with {len(failing_now)} failure(s) that already failed on the "
        f"baseline (fixes {len(fixed)}, adds {len(added)} passing)",
    )
