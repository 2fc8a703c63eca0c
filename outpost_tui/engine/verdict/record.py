"""A candidate's verdict as the result JSON carries it (`verdict` on each candidate)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


def describe_tests(tests: dict[str, Any] | None) -> str:
    """A verdict's test counts in one phrase: "9 ran: 8 passed, 1 failed, 2 skipped"."""
    if not tests:
        return ""
    text = f"{tests.get('ran', 0)} ran: {tests.get('passed', 0)} passed, {tests.get('failed', 0)} failed"
    if tests.get("errors"):
        text += f", {tests['errors']} errors"
    return text + f", {tests.get('skipped', 0)} skipped"


@dataclass
class Verdict:
    commit: str  # the result commit that was graded (and the only one that can win)
    gate: str  # strict | exit-code
    accepted: bool = False
    reason: str | None = None
    source: str = "none"  # where the test counts come from: junit | summary | none
    tests: dict[str, Any] | None = None  # ran, passed, failed, errors, skipped (None: no results)
    new_failures: list[str] = field(default_factory=list)  # passed on the baseline, fail here
    missing: list[str] = field(default_factory=list)  # ran on the baseline, not here
    flaky: list[str] = field(default_factory=list)  # both passed and failed across reruns
    restored: list[str] = field(default_factory=list)  # protected paths graded as the baseline's
    rejected: list[str] = field(default_factory=list)  # protected paths that failed it (reject)
    flagged: list[str] = field(default_factory=list)  # protected paths graded as written (flag)
    shadows: list[str] = field(default_factory=list)  # new modules named like a runner or stdlib
    runs: int = 0
    branch_moved_to: str | None = None  # the branch's tip when it no longer is `commit`

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Verdict | None:
        if not data or not data.get("commit"):
            return None
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        return cls(**known)

    def review_flags(self) -> list[str]:
        """What the verdict adds to a winner's review."""
        from .protect import names

        flags = []
        if self.restored:
            flags.append(
                f"graded with the baseline's protected paths (the candidate's change was "
                f"not tested): {names(self.restored)}"
            )
        if self.flagged:
            flags.append(f"changed protected paths, graded as written: {names(self.flagged)}")
        if self.shadows:
            flags.append(
                f"new modules named like the test runner or the standard library: {names(self.shadows)}"
            )
        if self.flaky:
            flags.append(f"flaky tests (passed and failed across reruns): {names(self.flaky)}")
        if self.accepted and self.reason and self.gate == "strict":  # accepted, with a note
            flags.append(self.reason)
        if self.branch_moved_to:
            flags.append(
                f"the branch moved after validation to {self.branch_moved_to[:12]}: merge "
                f"the validated commit {self.commit[:12]}, not the branch"
            )
        return flags
