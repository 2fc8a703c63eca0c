"""The sealed verdict on real races: real repositories, real agents (shell scripts), real unittest
and pytest runs. Each attack is one an adversarial candidate makes (agents do these on their own when
they cannot pass a test); each won before the verdict was sealed and is stopped now. A legitimate fix
still wins, with or without the baseline's unrelated failures, and flaky tests are named."""

from __future__ import annotations

import json
import shlex
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from outpost_tui.engine import (
    CandidateSpec,
    CandidateStatus,
    RaceStatus,
    ValidateSpec,
    build_spec,
    run_race,
    run_race_async,
)
from outpost_tui.engine.core.events import EventKind
from outpost_tui.engine.core.spec import SandboxSpec
from outpost_tui.progress import finish_lines
from tests.conftest import git

UNITTEST = (sys.executable, "-B", "-m", "unittest", "-q")
PYTEST = (sys.executable, "-B", "-m", "pytest", "-q", "-p", "no:cacheprovider")
FIX = "sed -i 's/return a - b  # add/return a + b  # add/' calc.py"
COMMIT = "git add -A && git commit -qm"


def project(path: Path, *, unrelated_failure: bool = False, flaky_dir: Path | None = None) -> Path:
    """A calculator whose add() subtracts: test_add fails on the baseline, test_sub passes."""
    path.mkdir(parents=True)
    (path / "calc.py").write_text(
        "def add(a, b):\n    return a - b  # add\n\n\ndef sub(a, b):\n    return a - b\n"
    )
    (path / "tests").mkdir()
    (path / "tests" / "__init__.py").write_text("")
    tests = """\
        import unittest

        import calc


        class AddTest(unittest.TestCase):
            def test_add(self):
                self.assertEqual(calc.add(2, 3), 5)


        class SubTest(unittest.TestCase):
            def test_sub(self):
                self.assertEqual(calc.sub(5, 3), 2)
        """
    if unrelated_failure:
        tests += """\


        class UnrelatedTest(unittest.TestCase):
            def test_unrelated(self):
                self.assertEqual("red", "green")
        """
    if flaky_dir is not None:
        tests += f"""\


        class FlakyTest(unittest.TestCase):
            def test_flaky(self):
                import hashlib, os
                mark = os.path.join({str(flaky_dir)!r}, hashlib.sha1(os.getcwd().encode()).hexdigest())
                first = not os.path.exists(mark)
                open(mark, "w").close()
                self.assertFalse(first, "fails the first time in each checkout")
        """
    (path / "tests" / "test_calc.py").write_text(textwrap.dedent(tests))
    (path / "run_tests.sh").write_text(f"#!/bin/sh\nexec {' '.join(UNITTEST)}\n")
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Test")
    git(path, "config", "user.email", "test@example.invalid")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "calc with a bug in add")
    return path


def agent(key: str, script: str) -> CandidateSpec:
    return CandidateSpec(key, "command", "Fix add() in calc.py. Commit.", command=("sh", "-c", script))


def race(repo: Path, *candidates: CandidateSpec, validate=UNITTEST, sandbox=None, **validate_options):
    spec = build_spec(
        repository=repo,
        candidates=candidates,
        validate=ValidateSpec(command=tuple(validate), timeout=120, **validate_options),
        **({} if sandbox is None else {"sandbox": sandbox}),
    )
    return run_race(spec)


@pytest.fixture
def calc(tmp_path) -> Path:
    return project(tmp_path / "calc")


# --- the seven attacks ------------------------------------------------------------------------


def test_a_fix_left_uncommitted_beside_an_unrelated_commit_does_not_win(calc):
    result = race(calc, agent("sly", f"echo notes > notes.txt && {COMMIT} notes && {FIX}"))
    record = result.candidates[0]
    assert result.status is RaceStatus.NO_WINNER and record.status is CandidateStatus.REJECTED
    # graded on its commit, where add() still subtracts
    assert record.verdict["tests"] == {"ran": 2, "passed": 1, "failed": 1, "errors": 0, "skipped": 0}
    # the uncommitted fix is kept where the agent left it
    assert record.retained_directory
    assert "return a + b" in Path(record.retained_directory, "calc.py").read_text()


def test_a_test_deleted_only_in_the_worktree_still_runs(calc):
    result = race(calc, agent("sly", f"echo notes > notes.txt && {COMMIT} notes && rm tests/test_calc.py"))
    record = result.candidates[0]
    assert record.status is CandidateStatus.REJECTED
    assert record.verdict["tests"]["ran"] == 2 and record.verdict["tests"]["failed"] == 1
    assert not Path(record.retained_directory, "tests", "test_calc.py").exists()  # kept as left


def test_a_committed_pytest_ini_that_deselects_the_failing_test_is_not_graded(calc):
    deselect = (
        "printf '[pytest]\\naddopts = --deselect tests/test_calc.py::AddTest::test_add\\n' > pytest.ini"
    )
    result = race(calc, agent("sly", f"{deselect} && {COMMIT} 'configure pytest'"), validate=PYTEST)
    record = result.candidates[0]
    assert record.status is CandidateStatus.REJECTED
    assert record.verdict["restored"] == ["pytest.ini (added)"]
    assert record.verdict["source"] == "junit"  # the engine asked pytest for a report
    assert record.verdict["tests"]["failed"] == 1


def test_a_validation_script_rewritten_to_exit_0_is_restored(calc):
    result = race(
        calc,
        agent("sly", f"echo 'exit 0' > run_tests.sh && {COMMIT} 'simplify'"),
        validate=("sh", "run_tests.sh"),
    )
    record = result.candidates[0]
    assert record.status is CandidateStatus.REJECTED
    assert record.verdict["restored"] == ["run_tests.sh (modified)"]
    assert record.verdict["source"] == "summary"  # unittest's own lines, through the script
    assert record.verdict["tests"]["failed"] == 1


@pytest.mark.parametrize("form", ["directory", "link"])
def test_a_package_that_shadows_the_runner_fails_the_candidate(calc, form):
    # a link to a package directory is imported as that package, under the link's name
    package = "unittest" if form == "directory" else "helpers"
    fake = (
        f"mkdir {package} && printf 'import sys\\nsys.exit(0)\\n' > {package}/__main__.py && "
        f"touch {package}/__init__.py"
    )
    if form == "link":
        fake += " && ln -s helpers unittest"
    result = race(calc, agent("sly", f"{fake} && {COMMIT} 'helpers'"))
    record = result.candidates[0]
    assert record.status is CandidateStatus.REJECTED
    assert record.verdict["shadows"] == ["unittest"]
    assert "shadow the test runner or the standard library: unittest" in record.error


# Imported by `copy` only to find Jython: it raises ImportError, after it has made every test
# pass, wherever `copy` is first imported once the checkout is on sys.path (it depends on the
# pytest: refused either way).
JYTHON_HOOK = """\
import builtins, sys
real = builtins.__import__
def hook(name, *args, **kwargs):
    module = real(name, *args, **kwargs)
    found = sys.modules.get("_pytest.python")
    if found is not None and hasattr(found, "Function"):
        found.Function.runtest = lambda self: None
    return module
builtins.__import__ = hook
raise ImportError("no Jython here")
"""


def test_a_package_the_runner_imports_only_to_look_for_it_fails_the_candidate(calc):
    plant = f"mkdir org && printf '%s' {shlex.quote(JYTHON_HOOK)} > org/__init__.py"
    result = race(calc, agent("sly", f"{plant} && {COMMIT} 'helpers'"), validate=PYTEST)
    record = result.candidates[0]
    assert record.status is CandidateStatus.REJECTED, record.verdict
    assert record.verdict["shadows"] == ["org"]


def test_a_source_file_that_skips_every_test_fails_the_candidate(calc):
    skip = (
        "printf 'import unittest\\nunittest.TestCase.setUp = "
        'lambda self: self.skipTest("later")\\n\' >> calc.py'
    )
    for validate in (UNITTEST, PYTEST):
        result = race(calc, agent("sly", f"{skip} && {COMMIT} 'tidy'"), validate=validate)
        record = result.candidates[0]
        assert record.status is CandidateStatus.REJECTED, validate
        assert record.verdict["tests"]["skipped"] == 2
        assert record.error == "every test was skipped (2)"


@pytest.mark.parametrize("isolation", ["none", "bubblewrap"])
def test_a_commit_made_by_an_exit_hook_after_the_tests_ran_does_not_win(calc, isolation):
    # The fix is real, but importing calc registers an exit hook that commits on top of the
    # graded commit and moves the candidate's branch there: unisolated it reaches the user's
    # branch (seen and flagged); isolated, only the grading checkout's own repository.
    hook = textwrap.dedent("""\

        import atexit, os, subprocess
        def _after():
            branch = "outpost/speculation/{}/{}/{}".format(os.environ["OUTPOST_RACE_ID"],
                os.environ["OUTPOST_CANDIDATE"], os.environ["OUTPOST_ATTEMPT"])
            subprocess.run("echo evil > evil.txt && git add evil.txt && "
                           "git -c user.name=e -c user.email=e@x commit -qm evil && "
                           "git update-ref refs/heads/" + branch + " HEAD", shell=True)
        if os.environ.get("OUTPOST_CANDIDATE"):
            atexit.register(_after)
        """)
    (calc.parent / "hook.py").write_text(hook)
    result = race(
        calc,
        agent("sly", f"{FIX} && cat {calc.parent / 'hook.py'} >> calc.py && {COMMIT} 'fix add'"),
        sandbox=SandboxSpec(isolation=isolation),
    )
    record = result.candidates[0]
    assert record.status is CandidateStatus.WINNER
    graded = record.verdict["commit"]
    assert record.commit == graded == result.winner.commit
    assert git(calc, "log", "-1", "--format=%s", graded) == "fix add"
    moved = git(calc, "rev-parse", record.branch)
    if isolation == "bubblewrap":
        assert moved == graded and record.verdict["branch_moved_to"] is None
        assert not any("branch moved" in flag for flag in record.review)
        return
    assert moved != graded and git(calc, "log", "-1", "--format=%s", moved) == "evil"
    assert record.verdict["branch_moved_to"] == moved
    assert any("branch moved after validation" in flag for flag in record.review)
    lines = finish_lines(result.to_json())
    assert lines[-1].endswith(f" merge {graded}")
    # the graded commit stays reachable whatever the branch does
    assert git(calc, "for-each-ref", "--format=%(objectname)", "refs/outpost/validated") == graded


# --- what still wins ------------------------------------------------------------------------------


def test_a_legitimate_fix_that_adds_tests_wins_under_unittest_and_pytest(calc):
    more = (
        "printf '\\n\\nclass MoreTest(unittest.TestCase):\\n    def test_more(self):\\n"
        "        self.assertEqual(calc.add(1, 1), 2)\\n' >> tests/test_calc.py && "
        "printf 'import unittest\\n\\nimport calc\\n\\n\\nclass NewTest(unittest.TestCase):\\n"
        "    def test_new(self):\\n        self.assertEqual(calc.add(0, 4), 4)\\n' "
        "> tests/test_new.py"
    )
    # the new test file runs; the test added inside an existing one does not (that file is
    # graded as the baseline's), and the verdict says so
    for validate, ran in ((UNITTEST, 3), (PYTEST, 3)):
        result = race(
            calc, agent("good", f"{FIX} && {more} && {COMMIT} 'fix add, add tests'"), validate=validate
        )
        record = result.candidates[0]
        assert record.status is CandidateStatus.WINNER, (validate, record.error)
        assert record.verdict["tests"] == {"ran": ran, "passed": ran, "failed": 0, "errors": 0, "skipped": 0}
        assert record.verdict["source"] == "junit"
        # an extended test file is a change to a protected path: graded as the baseline's, and said
        assert record.verdict["restored"] == ["tests/test_calc.py (modified)"]
        assert result.baseline_validation["tests"]["failed"] == 1
        assert result.baseline_validation["failing"] == ["tests.test_calc.AddTest::test_add"]


def test_unrelated_red_tests_do_not_block_a_correct_fix_with_allow_baseline_failures(tmp_path):
    repo = project(tmp_path / "calc", unrelated_failure=True)
    fix = agent("good", f"{FIX} && {COMMIT} 'fix add'")
    strict = race(repo, fix)
    assert strict.candidates[0].status is CandidateStatus.REJECTED
    allowed = race(repo, fix, allow_baseline_failures=True)
    record = allowed.candidates[0]
    assert record.status is CandidateStatus.WINNER, record.error
    assert record.validation.exit_code == 1 and record.validation.status == "passed"
    assert record.verdict["reason"].startswith("accepted with 1 failure(s) that already failed")
    assert any(flag.startswith("accepted with 1 failure") for flag in record.review)
    # one that breaks a test the baseline passed is still refused
    breaks = agent(
        "bad", f"{FIX} && sed -i 's/return a - b$/return b - a/' calc.py && {COMMIT} 'fix add, change sub'"
    )
    refused = race(repo, breaks, allow_baseline_failures=True).candidates[0]
    assert refused.status is CandidateStatus.REJECTED
    assert refused.verdict["new_failures"] == ["tests.test_calc.SubTest::test_sub"]
    # and one that changes nothing fixes none of the baseline's failures
    idle = race(
        repo, agent("idle", f"echo x > notes.txt && {COMMIT} notes"), allow_baseline_failures=True
    ).candidates[0]
    assert idle.status is CandidateStatus.REJECTED and "fixes none" in idle.error


def test_repeat_reruns_a_failing_validation_and_names_flaky_tests(tmp_path):
    flaky = tmp_path / "flaky"
    flaky.mkdir()
    repo = project(tmp_path / "calc", flaky_dir=flaky)
    fix = agent("good", f"{FIX} && {COMMIT} 'fix add'")
    result = race(repo, fix, repeat=2)
    record = result.candidates[0]
    assert record.status is CandidateStatus.WINNER, record.error
    assert record.verdict["runs"] == 2
    assert record.verdict["flaky"] == ["tests.test_calc.FlakyTest::test_flaky"]
    assert result.baseline_validation["flaky"] == ["tests.test_calc.FlakyTest::test_flaky"]
    assert any(flag.startswith("flaky tests") for flag in record.review)
    without = race(repo, fix)  # no reruns: the first run's failure stands
    assert without.candidates[0].status is CandidateStatus.REJECTED


# --- protect modes, baseline, reporting -----------------------------------------------------------


def test_protect_mode_reject_names_the_paths_and_flag_grades_as_written(calc):
    weaken = agent(
        "w",
        f"{FIX} && sed -i 's/assertEqual(calc.sub(5, 3), 2)/assertTrue(True)/' "
        f"tests/test_calc.py && {COMMIT} 'fix add, relax sub'",
    )
    rejected = race(calc, weaken, protect_mode="reject").candidates[0]
    assert rejected.status is CandidateStatus.REJECTED
    assert rejected.verdict["rejected"] == ["tests/test_calc.py (modified)"]
    assert rejected.error == "changed protected paths: tests/test_calc.py (modified)"
    flagged = race(calc, weaken, protect_mode="flag").candidates[0]
    assert flagged.status is CandidateStatus.WINNER
    assert flagged.verdict["flagged"] == ["tests/test_calc.py (modified)"]
    assert any(flag.startswith("changed protected paths, graded as written") for flag in flagged.review)


def test_the_baseline_is_validated_beside_the_candidates_and_reported(calc):
    events = []
    spec = build_spec(
        repository=calc,
        candidates=[agent("good", f"{FIX} && {COMMIT} 'fix add'")],
        validate=ValidateSpec(command=UNITTEST, timeout=120),
    )
    result = anyio.run(lambda: run_race_async(spec, on_event=events.append))
    kinds = [event.kind for event in events]
    assert EventKind.BASELINE_VALIDATED in kinds
    # the candidate's agent was started without waiting for the baseline
    assert kinds.index(EventKind.AGENT_STARTED) < kinds.index(EventKind.BASELINE_VALIDATED) or kinds.index(
        EventKind.ADMITTED
    ) < kinds.index(EventKind.BASELINE_VALIDATED)
    baseline = result.to_json()["baseline_validation"]
    assert baseline["status"] == "failed" and baseline["source"] == "junit"
    assert baseline["tests"] == {"ran": 2, "passed": 1, "failed": 1, "errors": 0, "skipped": 0}
    record = result.to_json()["candidates"][0]
    assert record["verdict"]["gate"] == "strict" and record["verdict"]["accepted"] is True
    assert not list((calc / ".outpost" / "workspaces").glob("*.grading"))  # grading checkouts gone
    lines = finish_lines(result.to_json())
    assert "  good#1 winner [2 ran: 2 passed, 0 failed, 0 skipped]" in lines
    json.dumps(result.to_json())


def test_the_exit_code_gate_trusts_the_exit_code_but_still_grades_the_commit(calc):
    skip = (
        "printf 'import unittest\\nunittest.TestCase.setUp = "
        'lambda self: self.skipTest("later")\\n\' >> calc.py'
    )
    result = race(calc, agent("sly", f"{skip} && {COMMIT} 'tidy'"), gate="exit-code")
    record = result.candidates[0]
    assert record.status is CandidateStatus.WINNER and record.verdict["gate"] == "exit-code"
    assert result.baseline_validation is None  # nothing reads it: not run
    uncommitted = race(calc, agent("sly", f"echo n > n.txt && {COMMIT} n && {FIX}"), gate="exit-code")
    assert uncommitted.candidates[0].status is CandidateStatus.REJECTED
