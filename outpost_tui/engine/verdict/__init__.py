"""The verdict: which commit a candidate's result is, how it is graded, and whether it may win.

reports (JUnit XML and runner summary lines), gate (the results against the baseline's), protect
(paths a candidate may not change for grading, shadowing modules), grading (the clean checkout and
its runs) and record (the verdict in the result JSON).
"""

from .gate import BaselineOutcome
from .grading import Checkout, grade, grade_baseline
from .record import Verdict

__all__ = ["BaselineOutcome", "Checkout", "Verdict", "grade", "grade_baseline"]
