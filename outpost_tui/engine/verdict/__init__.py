"""The verdict: which commit a candidate's result is, how it is graded, and whether it may win.

reports (JUnit XML and runner summary lines), gate (the results against the baseline's), protect
(paths a candidate may not change for grading, shadowing modules), grading (the clean checkout and
its runs) and record (the verdict in the result JSON).
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the checker sees every public name where it lives; the program imports it late
    from .gate import BaselineOutcome
    from .grading import Checkout, grade, grade_baseline, sealed_score
    from .record import Verdict

# Imported on first use (PEP 562): `check` reads verdict.reports without loading grading's sandboxes.
_PUBLIC = {
    "BaselineOutcome": "gate",
    "Checkout": "grading",
    "grade": "grading",
    "grade_baseline": "grading",
    "sealed_score": "grading",
    "Verdict": "record",
}

__all__ = ["BaselineOutcome", "Checkout", "Verdict", "grade", "grade_baseline", "sealed_score"]


def __getattr__(name: str) -> object:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
