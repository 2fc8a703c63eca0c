"""issue 25 point 5: the verdict's sealed paths cover every way pytest is configured.

A candidate that fixes nothing and only reconfigures pytest must not win, whichever file it
reaches for: a pyproject.toml that spells [tool.pytest.ini_options] some other way, a
configuration file deeper in the tree, an installed distribution's pytest11 entry point, files
planted above the grading checkout (possible with `isolation = "none"`), or the [score] command's
own script. Each attack is also run with the seal off (`protect_mode = "flag"` grades the commit
as written) or replayed by hand on plain pytest, which shows the attack works; real races, real
git, real pytest throughout."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from outpost_tui.engine import CandidateStatus, ScoreSpec, ValidateSpec, build_spec, git, run_race
from outpost_tui.engine.core.spec import SandboxSpec
from outpost_tui.engine.verdict import protect
from tests.conftest import git as run_git
from tests.engine.test_verdict import COMMIT, FIX, PYTEST, agent, project, race

DESELECT = "--deselect tests/test_calc.py::AddTest::test_add"
# A pytest plugin that reports every test passed: what an installed pytest11 entry point or a
# planted conftest.py loads.
PASS_ALL = """\
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


@pytest.fixture
def calc(tmp_path) -> Path:
    return project(tmp_path / "calc")


def payload(directory: Path, files: dict[str, str]) -> str:
    """The files written under `directory`; a shell command copying them into the current one."""
    for name, text in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(textwrap.dedent(text))
    return f"cp -r {directory}/. ."


def cheat(tmp_path: Path, files: dict[str, str], message: str = "make the tests pass") -> str:
    """An agent's script: the files committed, add() left broken."""
    return f"{payload(tmp_path / 'payload', files)} && {COMMIT} '{message}'"


# --- inside the commit ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["dist-info", "egg-info"])
def test_a_committed_distribution_whose_pytest11_entry_point_passes_every_test_is_not_graded(
    calc, tmp_path, kind
):
    # `python -m pytest` puts the checkout on sys.path; importlib.metadata finds the distribution
    # there and pytest autoloads its plugin
    meta = f"evil-1.0.{kind}"
    script = cheat(
        tmp_path,
        {
            "evilplug.py": PASS_ALL,
            f"{meta}/{'METADATA' if kind == 'dist-info' else 'PKG-INFO'}": (
                "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n"
            ),
            f"{meta}/entry_points.txt": "[pytest11]\nevil = evilplug\n",
        },
    )
    sealed = race(calc, agent("sly", script), validate=PYTEST).candidates[0]
    assert sealed.status is CandidateStatus.REJECTED
    assert f"{meta}/entry_points.txt (added)" in sealed.verdict["restored"]
    assert sealed.verdict["tests"]["failed"] == 1
    # control: graded as written, the plugin makes the broken add() pass the strict gate
    as_written = race(calc, agent("sly", script), validate=PYTEST, protect_mode="flag").candidates[0]
    assert as_written.status is CandidateStatus.WINNER
    assert f"{meta}/entry_points.txt (added)" in as_written.verdict["flagged"]
    assert as_written.verdict["tests"]["failed"] == 0


PROJECT = '[project]\nname = "calc"\nversion = "1"\n'
SPELLINGS = {
    "table": f'{PROJECT}\n[tool.pytest.ini_options]\naddopts = "{DESELECT}"\n',
    "dotted keys": f'tool.pytest.ini_options.addopts = "{DESELECT}"\n\n{PROJECT}',
    "inline table": f'tool = {{ pytest = {{ ini_options = {{ addopts = "{DESELECT}" }} }} }}\n\n{PROJECT}',
    "quoted table": f'{PROJECT}\n[tool."pytest".ini_options]\naddopts = "{DESELECT}"\n',
}


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_pytest_settings_in_pyproject_toml_are_sealed_however_toml_spells_them(calc, tmp_path, spelling):
    # the exit-code gate trusts the exit code: a deselected failure would pass it
    script = cheat(tmp_path, {"pyproject.toml": SPELLINGS[spelling]})
    sealed = race(calc, agent("sly", script), validate=PYTEST, gate="exit-code").candidates[0]
    assert sealed.status is CandidateStatus.REJECTED
    assert sealed.verdict["restored"] == ["pyproject.toml (sections)"]
    assert sealed.verdict["tests"]["failed"] == 1
    as_written = race(
        calc, agent("sly", script), validate=PYTEST, gate="exit-code", protect_mode="flag"
    ).candidates[0]
    assert as_written.status is CandidateStatus.WINNER
    assert as_written.verdict["tests"] == {"ran": 1, "passed": 1, "failed": 0, "errors": 0, "skipped": 0}


def test_a_pyproject_toml_without_test_settings_is_graded_as_the_candidate_wrote_it(calc, tmp_path):
    payload_ = payload(tmp_path / "payload", {"pyproject.toml": PROJECT + '\n[tool.other]\nkey = "x"\n'})
    honest = race(calc, agent("fix", f"{FIX} && {payload_} && {COMMIT} 'fix add'"), validate=PYTEST)
    record = honest.candidates[0]
    assert record.status is CandidateStatus.WINNER
    assert record.verdict["restored"] == []


@pytest.mark.parametrize(
    ("name", "text", "change"),
    [
        ("pytest.ini", f"[pytest]\naddopts = {DESELECT}\n", "added"),
        (".pytest.ini", f"[pytest]\naddopts = {DESELECT}\n", "added"),
        ("tox.ini", f"[pytest]\naddopts = {DESELECT}\n", "added"),
        ("setup.cfg", f"[metadata]\nname = calc\n\n[tool:pytest]\naddopts = {DESELECT}\n", "sections"),
    ],
)
def test_a_configuration_file_deeper_in_the_tree_is_sealed(tmp_path, name, text, change):
    # the tests live in suite/ and the command names it: pytest's search starts there, so a
    # configuration file in suite/ (no test-directory glob covers it) is the one pytest reads
    repo = project(tmp_path / "calc")
    run_git(repo, "mv", "tests", "suite")
    run_git(repo, "commit", "-qm", "tests in suite/")
    deselect = text.replace("tests/test_calc.py", "test_calc.py")  # relative to suite/, its rootdir
    script = cheat(tmp_path, {f"suite/{name}": deselect})
    validate = (*PYTEST, "suite")
    sealed = race(repo, agent("sly", script), validate=validate, gate="exit-code").candidates[0]
    assert sealed.status is CandidateStatus.REJECTED
    assert sealed.verdict["restored"] == [f"suite/{name} ({change})"]
    as_written = race(
        repo, agent("sly", script), validate=validate, gate="exit-code", protect_mode="flag"
    ).candidates[0]
    assert as_written.status is CandidateStatus.WINNER
    assert as_written.verdict["tests"]["ran"] == 1


# --- above the checkout -----------------------------------------------------------------------

PLANTED = {".outpost/pytest.ini": "[pytest]\n", ".outpost/conftest.py": PASS_ALL}


def plant(repo: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)


def planting(tmp_path: Path, repo: Path, files: dict[str, str]) -> str:
    """An unisolated agent's script: the files written into the user's repository above its own
    worktree, a note committed, add() left broken."""
    source = tmp_path / "planted"
    for name, text in files.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text)
    return f"cp -r {source}/. {repo}/ && echo notes > notes.txt && {COMMIT} notes"


def run_pytest(argv, directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=directory, capture_output=True, text=True, timeout=120, check=False)


def checkout_below(tmp_path: Path, files: dict[str, str]) -> tuple[Path, Path]:
    """A repository with the calculator checked out where the engine puts a grading checkout,
    `files` planted relative to the repository."""
    repo = tmp_path / "repo"
    checkout = project(repo / ".outpost" / "workspaces" / "c-grading")
    plant(repo, files)
    return repo, checkout


def test_pytest_left_alone_reads_what_lies_above_the_checkout_and_pinned_does_not(tmp_path):
    # the mechanism both race tests below rely on, on plain pytest
    repo, checkout = checkout_below(tmp_path, PLANTED)
    steered = run_pytest(PYTEST, checkout)
    assert steered.returncode == 0, steered.stdout  # the planted conftest.py passed the broken add()
    argv, contained = protect.pinned(PYTEST, checkout)
    assert contained
    assert argv == (*PYTEST[:4], "--rootdir=.", "--confcutdir=.", "-c", "/dev/null", *PYTEST[4:])
    pinned = run_pytest(argv, checkout)
    assert pinned.returncode == 1 and "1 failed, 1 passed" in pinned.stdout
    # what cannot be pinned is named instead
    named = protect.outside_configuration(checkout, repo, contained=False)
    assert named == [str(repo / ".outpost" / "pytest.ini"), str(repo / ".outpost" / "conftest.py")]
    assert protect.outside_configuration(checkout, repo, contained=True) == []
    (repo / ".outpost" / "pytest.ini").unlink()
    (repo / ".outpost" / "conftest.py").unlink()
    assert protect.outside_configuration(checkout, repo, contained=False) == []


def test_configuration_planted_above_the_checkout_is_never_read_by_a_pinned_pytest(calc, tmp_path):
    script = planting(tmp_path, calc, PLANTED)
    result = race(calc, agent("sly", script), validate=PYTEST, sandbox=SandboxSpec(isolation="none"))
    record = result.candidates[0]
    assert (calc / ".outpost" / "conftest.py").read_text() == PASS_ALL  # the plant happened
    assert record.status is CandidateStatus.REJECTED
    assert record.verdict["tests"]["failed"] == 1


SABOTAGE = {**PLANTED, ".outpost/conftest.py": PASS_ALL.replace('"passed"', '"failed"')}


def test_a_rival_planting_above_the_checkout_cannot_sink_an_honest_fix(calc):
    # planted before the race (as a rival would while the others run): a conftest.py that fails
    # every test, beside a configuration file that roots pytest there
    plant(calc, SABOTAGE)
    result = race(calc, agent("fix", f"{FIX} && {COMMIT} 'fix add'"), validate=PYTEST)
    record = result.candidates[0]
    assert record.status is CandidateStatus.WINNER
    assert record.verdict["tests"] == {"ran": 2, "passed": 2, "failed": 0, "errors": 0, "skipped": 0}
    # control: pytest left alone, in a checkout below the same plant, fails every test
    _, checkout = checkout_below(calc.parent / "control", SABOTAGE)
    control = run_pytest(PYTEST, checkout)
    assert control.returncode == 1 and "passed" not in control.stdout


SHELL_PYTEST = ("sh", "-c", " ".join(PYTEST))  # pytest the engine cannot pin: it does not see it


def test_a_command_that_runs_pytest_indirectly_is_refused_when_something_above_would_steer_it(calc, tmp_path):
    script = planting(tmp_path, calc, PLANTED)
    result = race(calc, agent("sly", script), validate=SHELL_PYTEST, sandbox=SandboxSpec(isolation="none"))
    record = result.candidates[0]
    assert record.status is CandidateStatus.REJECTED
    assert record.error.startswith("pytest would read files outside the grading checkout: ")
    assert str(calc / ".outpost" / "pytest.ini") in record.error
    assert "\n" not in record.error
    # control: the same command with nothing planted grades an honest fix
    honest = project(tmp_path / "honest")
    result = race(honest, agent("fix", f"{FIX} && {COMMIT} 'fix add'"), validate=SHELL_PYTEST)
    assert result.candidates[0].status is CandidateStatus.WINNER


NEUTER = "import unittest\nunittest.TestCase.assertEqual = lambda *args, **kwargs: None\n"


def test_a_package_chain_never_reaches_above_the_checkout(calc, tmp_path):
    # pytest imports a test module as part of the package its __init__.py files make, walking up
    # while each directory has one and is named like an identifier: a grading checkout is named
    # `<name>.grading`, so an __init__.py at the commit's top and one planted in
    # .outpost/workspaces/ never make pytest import the planted one
    proof = tmp_path / "ran.txt"
    planted = {".outpost/workspaces/__init__.py": f"open({str(proof)!r}, 'w').write('ran')\n{NEUTER}"}
    script = f"touch __init__.py && {planting(tmp_path, calc, planted)}"
    result = race(calc, agent("sly", script), validate=PYTEST, sandbox=SandboxSpec(isolation="none"))
    record = result.candidates[0]
    assert (calc / ".outpost" / "workspaces" / "__init__.py").is_file()  # the plant happened
    assert record.status is CandidateStatus.REJECTED
    assert record.verdict["tests"]["failed"] == 1
    assert not proof.exists()
    assert not git.grading_directory(calc, "sly").name.isidentifier()
    # control: below a checkout named like an identifier, pinned pytest imports the planted code,
    # which neuters the failing test
    repo = tmp_path / "by-hand"
    checkout = project(repo / ".outpost" / "workspaces" / "sly_grading")
    plant(repo, planted)
    (checkout / "__init__.py").write_text("")
    assert run_pytest(protect.pinned(PYTEST, checkout)[0], checkout).returncode == 0
    assert proof.read_text() == "ran"


# --- pinning leaves an honest run as it was ---------------------------------------------------

LAYOUTS = {
    # name: (files, pytest arguments, whether a configuration file above would steer pytest)
    "bare": ({"tests/test_a.py": "def test_a(): pass\n"}, (), True),
    "pyproject without pytest": (
        {"pyproject.toml": PROJECT, "tests/test_a.py": "def test_a(): pass\n"},
        (),
        True,
    ),
    "pyproject with pytest": (
        {
            "pyproject.toml": PROJECT + '\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
            "tests/test_a.py": "def test_a(): pass\n",
            "other/test_b.py": "def test_b(): pass\n",
        },
        (),
        False,
    ),
    "setup.py": ({"setup.py": "", "tests/test_a.py": "def test_a(): pass\n"}, ("tests",), True),
    "nested config": (
        {
            "sub/pytest.ini": "[pytest]\npython_files = check_*.py\n",
            "sub/check_a.py": "def test_a(): pass\n",
            "sub/test_b.py": "def test_b(): pass\n",
        },
        ("sub",),
        False,
    ),
    "config beside a second argument": (
        {
            "a/test_a.py": "def test_a(): pass\n",
            "b/tox.ini": "[pytest]\npython_functions = check_*\n",
            "b/test_b.py": "def test_b(): pass\ndef check_b(): pass\n",
        },
        ("a", "b"),
        True,
    ),
}
STEER = "[pytest]\npython_files = nothing.py\n"


def collected(argv, directory: Path) -> list[str]:
    done = run_pytest((*argv, "--collect-only"), directory)
    return sorted(line for line in done.stdout.splitlines() if "::" in line)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_pinned_pytest_collects_what_pytest_alone_collects_with_nothing_above(tmp_path, layout):
    files, words, exposed = LAYOUTS[layout]
    clean, planted = tmp_path / "clean" / "project", tmp_path / "planted" / "project"
    for root in (clean, planted):
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
    (planted.parent / "pytest.ini").write_text(STEER)
    argv = (*PYTEST, *words)
    alone = collected(argv, clean)
    assert alone  # each layout collects something
    assert collected(protect.pinned(argv, clean)[0], clean) == alone
    assert collected(protect.pinned(argv, planted)[0], planted) == alone
    # control: left alone, pytest climbs to the planted file wherever the project has none on its way
    assert (collected(argv, planted) != alone) is exposed


def test_a_command_that_chooses_its_own_configuration_is_left_as_written(tmp_path):
    for words, contained in (
        (("-c", "cfg.ini"), True),
        (("--config-file=cfg.ini",), True),
        (("--rootdir=.",), False),
        (("--confcutdir", "."), False),
    ):
        argv = (*PYTEST, *words)
        assert protect.pinned(argv, tmp_path) == (argv, contained)
    assert protect.pinned(("make", "test"), tmp_path) == (("make", "test"), False)
    assert protect.pinned(("pytest", "-q"), tmp_path)[0] == (
        "pytest",
        "--rootdir=.",
        "--confcutdir=.",
        "-c",
        "/dev/null",
        "-q",
    )


# --- the [score] command's own files ------------------------------------------------------------

SCORE = "import calc\nprint(getattr(calc, 'QUALITY', 0))\n"


def scored(repo: Path, *candidates, **validate_options):
    spec = build_spec(
        repository=repo,
        candidates=candidates,
        validate=ValidateSpec(command=PYTEST, timeout=120, **validate_options),
        score=ScoreSpec(command=(sys.executable, "-B", "score.py"), timeout=60),
    )
    return run_race(spec)


@pytest.fixture
def scoring(tmp_path) -> Path:
    repo = project(tmp_path / "calc")
    (repo / "score.py").write_text(SCORE)
    run_git(repo, "add", "score.py")
    run_git(repo, "commit", "-qm", "score")
    return repo


HONEST = agent("honest", f"{FIX} && echo 'QUALITY = 5' >> calc.py && {COMMIT} 'fix add, well'")


def test_a_score_script_the_candidate_rewrote_is_graded_as_the_baseline_has_it(scoring):
    rigged = agent("rigged", f"{FIX} && echo 'print(1000)' > score.py && {COMMIT} 'fix add'")
    result = scored(scoring, rigged, HONEST)
    by_key = {record.key: record for record in result.candidates}
    assert by_key["rigged"].verdict["restored"] == ["score.py (modified)"]
    assert by_key["rigged"].score == 0 and by_key["honest"].score == 5
    assert result.winner is not None and result.winner.key == "honest"
    # control: graded as written, the rewritten script wins the race
    result = scored(scoring, rigged, HONEST, protect_mode="flag")
    assert result.winner is not None and result.winner.key == "rigged"
    assert {record.key: record.score for record in result.candidates}["rigged"] == 1000


def test_a_score_script_rewritten_while_the_tests_ran_is_sealed_again_before_the_score(scoring, tmp_path):
    # the candidate's code runs in the grading checkout during validation (the tests import it)
    # and rewrites the score's script there; it leaves a copy of what it wrote as proof
    proof = tmp_path / "proof.txt"
    rewrite = (
        "\nopen('score.py', 'w').write('print(1000)\\n')\n"
        f"open({str(proof)!r}, 'w').write(open('score.py').read())\n"
    )
    (tmp_path / "rewrite.py").write_text(rewrite)
    sly = agent("sly", f"{FIX} && cat {tmp_path / 'rewrite.py'} >> calc.py && {COMMIT} 'fix add'")
    result = scored(scoring, sly, HONEST)
    by_key = {record.key: record for record in result.candidates}
    assert proof.read_text() == "print(1000)\n"  # the checkout's score.py was rewritten meanwhile
    assert by_key["sly"].verdict["restored"] == []  # its commit left score.py alone
    assert by_key["sly"].score == 0 and by_key["honest"].score == 5
    assert result.winner is not None and result.winner.key == "honest"


# --- what the plan covers ---------------------------------------------------------------------


def _trees(before: dict[str, str], after: dict[str, str]):
    blobs = {f"oid-{text}": text.encode() for text in (*before.values(), *after.values())}

    def tree(files: dict[str, str]) -> protect.Tree:
        return {path: protect.Entry("100644", f"oid-{text}") for path, text in files.items()}

    return tree(before), tree(after), blobs.__getitem__


@pytest.mark.parametrize(
    "path",
    [
        "pytest.toml",
        ".pytest.toml",
        "pkg/sub/pytest.toml",
        "docs/.pytest.ini",
        "lib/tox.ini",
        "deep/conftest.py",
        "evil-1.0.dist-info/entry_points.txt",
        "src/evil.egg-info/entry_points.txt",
        "evil.egg-link",
        "site/evil.pth",
        "sitecustomize.py",
        "lib/usercustomize.py",
    ],
)
def test_every_file_that_configures_pytest_or_loads_a_plugin_is_a_change_when_added(path):
    base, cand, _ = _trees({"calc.py": "x"}, {"calc.py": "x", path: "[pytest]\n"})
    assert protect.plan(base, cand, None, None).paths == [f"{path} (added)"]


def test_a_new_source_file_is_not_a_change_and_the_score_commands_files_are():
    base, cand, _ = _trees(
        {"bench.py": "a", "calc.py": "x"}, {"bench.py": "b", "calc.py": "x", "pkg/mod.py": "m"}
    )
    assert protect.plan(base, cand, None, None).paths == []
    assert protect.plan(base, cand, None, None, ("python", "bench.py")).paths == ["bench.py (modified)"]
    assert protect.plan(base, cand, None, ("python", "-m", "bench")).paths == ["bench.py (modified)"]


@pytest.mark.parametrize(
    ("name", "before", "after", "changed"),
    [
        ("pyproject.toml", PROJECT, PROJECT + '\n[project.entry-points.pytest11]\nevil = "evilplug"\n', True),
        ("pyproject.toml", PROJECT, PROJECT + 'entry-points.pytest11.evil = "evilplug"\n', True),
        ("pyproject.toml", PROJECT, PROJECT + '\n[tool.poetry.plugins.pytest11]\nevil = "evilplug"\n', True),
        (
            "setup.cfg",
            "[metadata]\nname = a\n",
            "[metadata]\nname = a\n[options.entry_points]\npytest11 = e = x\n",
            True,
        ),
        ("pyproject.toml", PROJECT, PROJECT.replace('"1"', '"2"'), None),
        ("setup.cfg", "[metadata]\nname = a\n", "[metadata]\nname = b\n", None),
    ],
)
def test_entry_points_that_register_a_pytest_plugin_are_test_settings(name, before, after, changed):
    base, cand, read = _trees({f"sub/{name}": before}, {f"sub/{name}": after})
    found = protect.plan(base, cand, None, None)
    protect.settle_sections(found, base, cand, read)
    assert found.paths == ([] if changed is None else [f"sub/{name} (sections)"])
