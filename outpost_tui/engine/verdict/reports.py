"""Structured test results: a JUnit XML report when there is one, else the runners' summary lines.

A report names every test, which is what lets the gate compare a candidate with the baseline test
by test; summary lines only give counts. `with_report` adds the report option to the two runners
the engine knows how to ask: pytest (`--junitxml`) and `python -m unittest` (run through a small
result class that writes the same XML, since unittest has no such option).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath

PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"
# When one test appears twice (a teardown error after a pass), the worse outcome is the test's.
_SEVERITY = {PASSED: 0, SKIPPED: 1, FAILED: 2, ERROR: 3}
MAX_REPORT_BYTES = 64 * 1024 * 1024

# `python -m unittest ARGS` run as `python -c UNITTEST_JUNIT REPORT ARGS`: the same discovery and
# options, and a JUnit report of every test. Only unittest and sys are imported, so a module that
# shadows anything else cannot reach it (the shadow check catches one that shadows unittest).
UNITTEST_JUNIT = r"""
import sys, time, unittest
report = sys.argv.pop(1)
def _esc(text):
    text = "".join(c if c in "\t\n\r" or ord(c) >= 32 else "?" for c in str(text))
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))
class _Result(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cases, self._started = {}, {}
    def startTest(self, test):
        self._started[test.id()] = time.perf_counter()
        super().startTest(test)
    def _case(self, test, status, detail=""):
        name = test.id()
        took = time.perf_counter() - self._started.get(name, time.perf_counter())
        old = self.cases.get(name)
        if old is None or old[0] == "passed" or status in ("failed", "error"):
            self.cases[name] = (status, detail, took)
    def addSuccess(self, test):
        super().addSuccess(test); self._case(test, "passed")
    def addFailure(self, test, err):
        super().addFailure(test, err); self._case(test, "failed", self._exc_info_to_string(err, test))
    def addError(self, test, err):
        super().addError(test, err); self._case(test, "error", self._exc_info_to_string(err, test))
    def addSkip(self, test, reason):
        super().addSkip(test, reason); self._case(test, "skipped", reason)
    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err); self._case(test, "passed")
    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test); self._case(test, "failed", "unexpected success")
    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            self._case(test, "failed" if failed else "error", self._exc_info_to_string(err, test))
class _Runner(unittest.TextTestRunner):
    resultclass = _Result
program = unittest.main(module=None, argv=["python -m unittest", *sys.argv[1:]],
                        testRunner=_Runner, exit=False)
result = program.result
lines = []
for name, (status, detail, took) in result.cases.items():
    classname, _, method = name.rpartition(".")
    if " (" in name:
        classname, method = "", name
    lines.append(f'<testcase classname="{_esc(classname)}" name="{_esc(method)}" time="{took:.4f}">')
    tag = {"failed": "failure", "error": "error", "skipped": "skipped"}.get(status)
    if tag:
        lines.append(f'<{tag} message="{_esc(detail.splitlines()[-1] if detail else status)}">'
                     f"{_esc(detail)}</{tag}>")
    lines.append("</testcase>")
with open(report, "w", encoding="utf-8") as handle:
    handle.write('<?xml version="1.0" encoding="utf-8"?>\n<testsuites><testsuite name="unittest">\n'
                 + "\n".join(lines) + "\n</testsuite></testsuites>\n")
if result.testsRun == 0 and not result.skipped:
    sys.exit(5)
sys.exit(0 if result.wasSuccessful() else 1)
"""


@dataclass
class TestResults:
    """One validation run's tests: per test when a report named them, else only counts."""

    source: str  # "junit" | "summary" | "none"
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    cases: dict[str, str] | None = None  # test id -> passed | failed | error | skipped

    @property
    def ran(self) -> int:
        """Tests that ran (skipped ones did not)."""
        return self.passed + self.failed + self.errors

    @property
    def total(self) -> int:
        return self.ran + self.skipped

    @property
    def known(self) -> bool:
        return self.source != "none"

    def ids(self, *statuses: str) -> set[str]:
        return {name for name, status in (self.cases or {}).items() if status in statuses}

    def counts(self) -> dict[str, int]:
        return {
            "ran": self.ran,
            "passed": self.passed,
            "failed": self.failed,
            "errors": self.errors,
            "skipped": self.skipped,
        }

    @classmethod
    def from_cases(cls, cases: dict[str, str], source: str = "junit") -> TestResults:
        values = list(cases.values())
        return cls(
            source,
            values.count(PASSED),
            values.count(FAILED),
            values.count(ERROR),
            values.count(SKIPPED),
            dict(cases),
        )


NO_RESULTS = TestResults("none")


# --- asking the runner for a report --------------------------------------------------------------

_PYTHON = re.compile(r"^(python|pypy)(\d+(\.\d+)?)?$")


def runner_of(argv: Sequence[str]) -> str | None:
    """'pytest' or 'unittest' when the command runs one of them directly, else None."""
    if not argv:
        return None
    program = PurePath(argv[0]).name
    if program in ("pytest", "py.test"):
        return "pytest"
    if _PYTHON.match(program):
        for index, word in enumerate(argv[1:], 1):
            if word == "-m" and index + 1 < len(argv):
                return argv[index + 1] if argv[index + 1] in ("pytest", "unittest") else None
            if word in ("-c",) or not word.startswith("-"):
                return None  # a script or inline code: not a runner we can ask
    return None


def with_report(argv: Sequence[str], report: str) -> tuple[str, ...] | None:
    """argv changed to also write a JUnit report to `report`, or None when the engine cannot."""
    runner = runner_of(argv)
    if runner == "pytest":
        return (*argv, f"--junitxml={report}")
    if runner == "unittest":
        at = list(argv).index("-m")
        return (*argv[:at], "-c", UNITTEST_JUNIT, report, *argv[at + 2 :])
    return None


def report_source(command: Sequence[str] | None, junit: str | None) -> str:
    """Where a race's test results will come from, in words (for `check` and the app)."""
    if not command:
        return "none (no validation command)"
    if junit:
        return f"JUnit report {junit}"
    runner = runner_of(command)
    if runner == "pytest":
        return "JUnit report (the engine adds --junitxml)"
    if runner == "unittest":
        return "JUnit report (the engine runs unittest with its own result writer)"
    return "the runner's summary lines (counts only)"


# --- reading results -------------------------------------------------------------------------------


def read_junit(path: Path) -> TestResults | None:
    """The tests in a JUnit XML report; None when there is no readable report at `path`."""
    import xml.etree.ElementTree as ElementTree  # only graded races read reports

    try:
        if os.path.islink(path) or not path.is_file() or path.stat().st_size > MAX_REPORT_BYTES:
            return None
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError):
        return None
    cases: dict[str, str] = {}
    for case in root.iter("testcase"):
        name = case.get("name") or "?"
        classname = case.get("classname") or ""
        test_id = f"{classname}::{name}" if classname else name
        tags = {child.tag for child in case}
        status = (
            ERROR
            if "error" in tags
            else FAILED
            if "failure" in tags
            else SKIPPED
            if "skipped" in tags
            else PASSED
        )
        if test_id not in cases or _SEVERITY[status] > _SEVERITY[cases[test_id]]:
            cases[test_id] = status
    if not cases and root.tag not in ("testsuites", "testsuite"):
        return None
    return TestResults.from_cases(cases)


_PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)\b")
_PYTEST_LINE = re.compile(r"^=*\s*(no tests ran|(\d+ \w+(, )?)+)( in [\d.]+s.*)?\s*=*$")
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in [\d.]+s$")
_UNITTEST_END = re.compile(r"^(OK|FAILED|NO TESTS RAN)(?: \((.*)\))?$")
_CARGO = re.compile(r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored")
_JEST = re.compile(r"^Tests:\s+(.*\d+ total)$")
_VITEST = re.compile(r"^\s*Tests\s+(.*)\((\d+)\)\s*$")
_GO = re.compile(r"^\s*--- (PASS|FAIL|SKIP): ")


def read_summary(output: str) -> TestResults:
    """Counts from the summary lines of pytest, unittest, cargo test, jest, vitest or go test -v."""
    lines = [line.strip() for line in output.splitlines()]
    for parse in (_pytest, _unittest, _cargo, _jest, _vitest, _go):
        found = parse(lines)
        if found is not None:
            return found
    return NO_RESULTS


def _pytest(lines: list[str]) -> TestResults | None:
    for line in reversed(lines):
        if not _PYTEST_LINE.match(line) or (" in " not in line and "no tests ran" not in line):
            continue
        counts = {
            kind.rstrip("s") if kind.startswith("error") else kind: int(n)
            for n, kind in _PYTEST_COUNT.findall(line)
        }
        if not counts and "no tests ran" not in line:
            continue
        return TestResults(
            "summary",
            counts.get("passed", 0) + counts.get("xfailed", 0),
            counts.get("failed", 0) + counts.get("xpassed", 0),
            counts.get("error", 0),
            counts.get("skipped", 0),
        )
    return None


def _unittest(lines: list[str]) -> TestResults | None:
    for index in range(len(lines) - 1, -1, -1):
        ran = _UNITTEST_RAN.match(lines[index])
        if not ran:
            continue
        end = next(
            (_UNITTEST_END.match(line) for line in lines[index + 1 :] if _UNITTEST_END.match(line)), None
        )
        details = dict(re.findall(r"([a-z ]+)=(\d+)", end.group(2) or "")) if end else {}
        number = {name.strip(): int(value) for name, value in details.items()}
        total = int(ran.group(1))
        failed = number.get("failures", 0) + number.get("unexpected successes", 0)
        errors, skipped = number.get("errors", 0), number.get("skipped", 0)
        return TestResults("summary", max(0, total - failed - errors - skipped), failed, errors, skipped)
    return None


def _cargo(lines: list[str]) -> TestResults | None:
    found = [m for m in (_CARGO.match(line) for line in lines) if m]
    if not found:
        return None
    return TestResults(
        "summary",
        sum(int(m.group(1)) for m in found),
        sum(int(m.group(2)) for m in found),
        0,
        sum(int(m.group(3)) for m in found),
    )


def _jest(lines: list[str]) -> TestResults | None:
    for line in reversed(lines):
        match = _JEST.match(line)
        if match:
            counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (\w+)", match.group(1))}
            return TestResults(
                "summary",
                counts.get("passed", 0),
                counts.get("failed", 0),
                0,
                counts.get("skipped", 0) + counts.get("todo", 0),
            )
    return None


def _vitest(lines: list[str]) -> TestResults | None:
    for line in reversed(lines):
        match = _VITEST.match(line)
        if match and re.search(r"\d+ (passed|failed|skipped)", match.group(1)):
            counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (\w+)", match.group(1))}
            return TestResults(
                "summary",
                counts.get("passed", 0),
                counts.get("failed", 0),
                0,
                counts.get("skipped", 0) + counts.get("todo", 0),
            )
    return None


def _go(lines: list[str]) -> TestResults | None:
    marks = [m.group(1) for m in map(_GO.match, lines) if m]
    if not marks:
        return None
    return TestResults("summary", marks.count("PASS"), marks.count("FAIL"), 0, marks.count("SKIP"))


@dataclass
class Runs:
    """Every run of one validation (reruns included): which tests ever passed and ever failed."""

    results: list[TestResults] = field(default_factory=list)

    def add(self, results: TestResults) -> None:
        self.results.append(results)

    def flaky(self) -> list[str]:
        passed: set[str] = set()
        failed: set[str] = set()
        for results in self.results:
            passed |= results.ids(PASSED)
            failed |= results.ids(FAILED, ERROR)
        return sorted(passed & failed)
