"""The verdict's parts on real inputs: reports and summary lines from real pytest and unittest runs
(and recorded lines of runners this machine lacks), the race-file keys with their located errors,
`check`'s summary, protected-path plans on real git trees, shadowing modules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from outpost_tui.engine import git as engine_git
from outpost_tui.engine.racefile import RaceFileError, dump_race, load_race
from outpost_tui.engine.verdict import protect
from outpost_tui.engine.verdict.reports import read_junit, read_summary, with_report
from tests.cli.support import run_cli
from tests.conftest import git, make_repo

TESTS = """\
import unittest


class T(unittest.TestCase):
    def test_pass(self):
        pass

    def test_fail(self):
        self.assertEqual(1, 2)

    def test_error(self):
        raise RuntimeError("boom")

    @unittest.skip("later")
    def test_skip(self):
        pass

    def test_subtests(self):
        for n in (1, 2):
            with self.subTest(n=n):
                self.assertEqual(n, 1)
"""


@pytest.fixture
def suite(tmp_path) -> Path:
    (tmp_path / "test_it.py").write_text(TESTS)
    return tmp_path


def run(argv, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("runner", ["unittest", "pytest"])
def test_the_engines_report_option_names_every_test_as_the_runner_judged_it(suite, runner):
    report = suite / "report.xml"
    argv = with_report((sys.executable, "-B", "-m", runner, "-q"), str(report))
    done = run(argv, suite)
    assert done.returncode == 1
    results = read_junit(report)
    assert results is not None and results.source == "junit"
    # pytest calls an exception raised by a test a failure; unittest calls it an error
    raised = "error" if runner == "unittest" else "failed"
    assert results.cases == {
        "test_it.T::test_pass": "passed",
        "test_it.T::test_fail": "failed",
        "test_it.T::test_error": raised,
        "test_it.T::test_skip": "skipped",
        "test_it.T::test_subtests": "failed",
    }
    assert (results.passed, results.failed + results.errors, results.skipped) == (1, 3, 1)


def test_unittest_through_the_engines_writer_keeps_its_exit_codes_and_output(suite):
    report = suite / "r.xml"
    plain = run((sys.executable, "-B", "-m", "unittest", "-q", "test_it.T.test_pass"), suite)
    wrapped = run(
        with_report((sys.executable, "-B", "-m", "unittest", "-q", "test_it.T.test_pass"), str(report)), suite
    )
    assert plain.returncode == wrapped.returncode == 0
    assert "Ran 1 test" in wrapped.stderr and "OK" in wrapped.stderr
    empty = suite / "empty"
    empty.mkdir()
    nothing = run(with_report((sys.executable, "-B", "-m", "unittest"), str(report)), empty)
    assert nothing.returncode == 5 and read_junit(report).total == 0


def test_summary_lines_of_real_runs_give_the_counts(suite):
    pytest_out = run((sys.executable, "-B", "-m", "pytest", "-q", "-p", "no:cacheprovider"), suite)
    found = read_summary(pytest_out.stdout)
    assert (found.source, found.passed, found.failed, found.errors, found.skipped) == (
        "summary",
        1,
        3,
        0,
        1,
    )  # pytest counts a test's exception as a failure
    unittest_out = run((sys.executable, "-B", "-m", "unittest", "-q"), suite)
    found = read_summary(unittest_out.stderr)
    # unittest counts a failing subtest as a failure of its own (5 ran: 1 pass, 2 failures)
    assert (found.passed, found.failed, found.errors, found.skipped) == (1, 2, 1, 1)


@pytest.mark.parametrize(
    "output, counts",
    [
        (
            "test result: ok. 5 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s\n"
            "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out",
            (7, 1, 0, 1),
        ),
        (
            "Test Suites: 1 failed, 2 passed, 3 total\nTests:       1 failed, 2 skipped, 5 passed, 8 total",
            (5, 1, 0, 2),
        ),
        (
            " Test Files  1 failed | 2 passed (3)\n      Tests  1 failed | 9 passed | 1 skipped (11)",
            (9, 1, 0, 1),
        ),
        (
            "=== RUN   TestA\n--- PASS: TestA (0.00s)\n=== RUN   TestB\n--- FAIL: TestB (0.00s)\n"
            "--- SKIP: TestC (0.00s)\nFAIL\tcalc\t0.01s",
            (1, 1, 0, 1),
        ),
        ("Ran 0 tests in 0.000s\n\nNO TESTS RAN", (0, 0, 0, 0)),
        ("no tests ran in 0.01s", (0, 0, 0, 0)),
    ],
)
def test_summary_lines_of_other_runners(output, counts):
    found = read_summary(output)
    assert found.source == "summary"
    assert (found.passed, found.failed, found.errors, found.skipped) == counts


def test_output_without_a_summary_has_no_results():
    assert read_summary("all good\n").source == "none"


def test_a_report_that_is_not_one_is_not_read(tmp_path):
    (tmp_path / "bad.xml").write_text("<not closed")
    (tmp_path / "real.xml").write_text("<testsuite><testcase classname='a' name='b'/></testsuite>")
    (tmp_path / "link.xml").symlink_to(tmp_path / "real.xml")
    assert read_junit(tmp_path / "bad.xml") is None
    assert read_junit(tmp_path / "missing.xml") is None
    assert read_junit(tmp_path / "link.xml") is None  # a candidate's symlink is not a report
    assert read_junit(tmp_path / "real.xml").cases == {"a::b": "passed"}


# --- race file and check -----------------------------------------------------------------------


def race_file(tmp_path: Path, validate: str) -> Path:
    repo = make_repo(tmp_path / "repo")
    path = tmp_path / "race.toml"
    path.write_text(
        f'[race]\nrepository = "{repo}"\n\n[validate]\ncommand = ["pytest"]\n{validate}'
        '\n[[candidates]]\nkey = "a"\nagent = "command"\ncommand = ["true"]\nbrief = "b"\n'
    )
    return path


def test_the_verdict_keys_are_read_and_written_back(tmp_path):
    path = race_file(
        tmp_path,
        'junit = "out/junit.xml"\ngate = "exit-code"\n'
        "allow_baseline_failures = true\nrepeat = 2\n"
        'protect = ["spec/**", "Makefile"]\nprotect_mode = "flag"\n',
    )
    spec = load_race(path)
    validate = spec.validate
    assert (
        validate.junit,
        validate.gate,
        validate.allow_baseline_failures,
        validate.repeat,
        validate.protect,
        validate.protect_mode,
    ) == ("out/junit.xml", "exit-code", True, 2, ("spec/**", "Makefile"), "flag")
    path.write_text(dump_race(spec))
    assert load_race(path).validate == validate


@pytest.mark.parametrize(
    "line, key, message",
    [
        ('gate = "loose"', "validate.gate", '"loose" is not one of: strict, exit-code'),
        ("repeat = -1", "validate.repeat", "must be between 0 and 20"),
        ('repeat = "2"', "validate.repeat", "expected an integer"),
        ('allow_baseline_failures = "yes"', "validate.allow_baseline_failures", "expected a boolean"),
        ('protect = "tests/**"', "validate.protect", "expected a list of globs"),
        ('protect = ["../outside"]', "validate.protect[0]", "must be a glob relative to the repository"),
        ('protect_mode = "ignore"', "validate.protect_mode", "is not one of: restore, reject, flag"),
        ('junit = "/tmp/junit.xml"', "validate.junit", "must be a path inside the checkout"),
        ('juint = "x.xml"', "validate.juint", "did you mean 'junit'"),
    ],
)
def test_bad_verdict_keys_name_file_line_and_key(tmp_path, line, key, message):
    path = race_file(tmp_path, line + "\n")
    with pytest.raises(RaceFileError) as caught:
        load_race(path)
    assert caught.value.key == key and message in caught.value.message
    assert caught.value.line == 6 and caught.value.path == str(path)


def test_check_says_how_the_verdict_is_reached(tmp_path):
    path = race_file(tmp_path, "allow_baseline_failures = true\nrepeat = 1\n")
    done = run_cli("check", path)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.strip().startswith("verdict"))
    assert "gate strict" in line and "baseline failures allowed" in line
    assert "repeated up to 1x" in line and "the engine adds --junitxml" in line
    as_json = json.loads(run_cli("check", path, "--json").stdout)["validate"]
    assert as_json["protect"] is None and as_json["protect_mode"] == "restore"
    assert as_json["results"] == "JUnit report (the engine adds --junitxml)"


# --- protected paths and shadows on real trees --------------------------------------------------


def trees(repo: Path, before: str, after: str):
    def entries(rev):
        return {p: protect.Entry(m, o) for p, (m, o) in engine_git.tree(repo, rev).items()}

    return entries(before), entries(after)


def test_only_the_test_sections_of_shared_config_files_are_protected(tmp_path):
    repo = make_repo(tmp_path / "repo")
    (repo / "setup.cfg").write_text("[metadata]\nname = calc\n\n[tool:pytest]\naddopts = -q\n")
    (repo / "package.json").write_text(
        json.dumps({"name": "calc", "scripts": {"test": "jest", "build": "tsc"}})
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "config")
    before = git(repo, "rev-parse", "HEAD")
    (repo / "setup.cfg").write_text("[metadata]\nname = calc2\n")  # only its metadata changed...
    git(repo, "commit", "-qam", "rename")
    renamed = git(repo, "rev-parse", "HEAD")
    base, tree = trees(repo, before, renamed)
    plan = protect.plan(base, tree, None, ("pytest",))
    protect.settle_sections(plan, base, tree, lambda oid: engine_git.blob(repo, oid))
    # ...and its [tool:pytest] went too: that section is restored, the rename is kept
    assert plan.paths == ["setup.cfg (sections)"]
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    protect.restore(plan, checkout, base, tree, lambda oid: engine_git.blob(repo, oid))
    assert (checkout / "setup.cfg").read_text() == "[metadata]\nname = calc2\n[tool:pytest]\naddopts = -q\n"

    (repo / "package.json").write_text(
        json.dumps({"name": "calc", "scripts": {"test": "exit 0", "build": "vite"}})
    )
    git(repo, "commit", "-qam", "scripts")
    base, tree = trees(repo, renamed, git(repo, "rev-parse", "HEAD"))
    plan = protect.plan(base, tree, None, ("npm", "test"))
    protect.settle_sections(plan, base, tree, lambda oid: engine_git.blob(repo, oid))
    protect.restore(plan, checkout, base, tree, lambda oid: engine_git.blob(repo, oid))
    graded = json.loads((checkout / "package.json").read_text())
    assert graded["scripts"] == {"test": "jest", "build": "vite"}


def test_restoring_never_writes_through_a_symlinked_directory(tmp_path):
    repo = make_repo(tmp_path / "repo")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_a.py").write_text("assert True\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "tests")
    before = git(repo, "rev-parse", "HEAD")
    outside = tmp_path / "outside"
    outside.mkdir()
    git(repo, "rm", "-rq", "tests")
    (repo / "tests").symlink_to(outside)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "tests elsewhere")
    checkout = tmp_path / "checkout"
    git(repo, "worktree", "add", "-q", "--detach", str(checkout), "HEAD")
    base, tree = trees(repo, before, "HEAD")
    plan = protect.plan(base, tree, None, ())
    protect.restore(plan, checkout, base, tree, lambda oid: engine_git.blob(repo, oid))
    assert list(outside.iterdir()) == []
    assert not (checkout / "tests").is_symlink()
    assert (checkout / "tests" / "test_a.py").read_text() == "assert True\n"


def test_new_modules_named_like_the_stdlib_or_runner_are_shadows_old_ones_are_not(tmp_path):
    repo = make_repo(tmp_path / "repo")
    for path in ("json.py", "tests/test_x.py", "src/app/__init__.py"):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "project")
    before = git(repo, "rev-parse", "HEAD")
    for path in (
        "pytest.py",
        "tests/random.py",
        "src/typing/__init__.py",
        "helpers/os.py",
        "calc_utils.py",
        "test/test_more.py",
        "org/__init__.py",  # `copy` tries `from org.python.core import ...` (Jython)
        "pygments/__init__.py",  # pytest imports it to colour its output
    ):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("\n")
    # links are imported as what they lead to, under their own name (a package directory here)
    (repo / "tests" / "logging").symlink_to("../helpers")
    (repo / "readme-link").symlink_to("calc_utils.py")
    (tmp_path / "outside.txt").write_text("\n")
    (repo / "secrets").symlink_to(tmp_path / "outside.txt")  # a file: `import secrets` never finds it
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "more")
    base, tree = trees(repo, before, "HEAD")
    # json.py was the project's already; helpers/ is not where tests import from; a new test/
    # directory holds tests, it is not the standard library's regression suite
    assert protect.shadows(base, tree, repo) == [
        "org",
        "pygments",
        "pytest",
        "src/typing",
        "tests/logging",
        "tests/random",
    ]
    # without the checkout to look in, every link counts
    assert "secrets" in protect.shadows(base, tree)
