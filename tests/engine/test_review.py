"""What a winner is flagged for beside its test verdict, on real races whose agents do the thing."""

from __future__ import annotations

import anyio

from outpost_tui.engine import CandidateSpec, CandidateStatus, build_spec, run_race_async
from outpost_tui.engine.verdict.review import review
from outpost_tui.progress import finish_lines
from tests.conftest import git


def shell_agent(script: str) -> CandidateSpec:
    return CandidateSpec("w", "command", "do the task", command=("sh", "-c", script))


def race(repo, script: str):
    holder = {}
    result = anyio.run(
        lambda: run_race_async(
            build_spec(repository=repo, candidates=[shell_agent(script)], validate=["true"]),
            on_start=lambda r: holder.setdefault("race", r),
        )
    )
    assert result.candidates[0].status is CandidateStatus.WINNER, result.candidates[0].error
    return result, holder["race"].model


def test_a_plain_fix_has_nothing_to_review(repo):
    result, model = race(repo, "echo fixed > fix.txt && git add fix.txt && git commit -qm fix")
    assert result.candidates[0].review == []
    assert model.candidates["w"].review == []
    assert not any(line.startswith("review") for line in finish_lines(result.to_json()))


def test_weakened_tests_ci_and_an_escaping_symlink_are_flagged(repo):
    (repo / "tests").mkdir()
    (repo / "tests" / "test_calc.py").write_text("assert 1 + 1 == 2\n")
    (repo / "tests" / "test_old.py").write_text("assert True\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "tests")
    result, model = race(
        repo,
        (
            "echo 'assert True' > tests/test_calc.py && git rm -q tests/test_old.py && "
            "mkdir -p .github/workflows && echo 'on: push' > .github/workflows/ci.yml && "
            "ln -s /etc/passwd secrets && ln -s ../../outside up && ln -s fix.txt inside && "
            "echo fix > fix.txt && git add -A && git commit -qm 'fix (trust me)'"
        ),
    )
    flags = result.candidates[0].review
    assert flags == [
        "changed tests (deleted 1): tests/test_calc.py, tests/test_old.py",
        "changed build or CI files: .github/workflows/ci.yml",
        "symlinks pointing out of the repository: secrets -> /etc/passwd, up -> ../../outside",
        "graded with the baseline's protected paths (the candidate's change was not tested): "
        "tests/test_calc.py (modified), tests/test_old.py (deleted)",
    ]
    lines = finish_lines(result.to_json())
    assert [line for line in lines if line.startswith("review before merging")] == [
        f"review before merging: {flag}" for flag in flags
    ]
    assert lines[-1].startswith("merge it with:")  # the flags come before the merge hint
    assert model.candidates["w"].review == flags
    assert f"⚑ review before merging: {flags[0]}" in model.candidates["w"].log


def test_a_branch_that_no_longer_descends_from_the_baseline_is_flagged(repo):
    baseline = git(repo, "rev-parse", "HEAD")
    result, _ = race(
        repo,
        (
            "git reset -q --soft $(git commit-tree 'HEAD^{tree}' -m 'history rewritten') && "
            "echo fix > fix.txt && git add fix.txt && git commit -qm fix"
        ),
    )
    assert result.candidates[0].review[0] == (
        f"does not descend from the baseline {baseline[:12]}: history was rewritten"
    )


def test_review_reads_renames_and_paths_with_spaces(repo):
    (repo / "tests").mkdir()
    (repo / "tests" / "test a.py").write_text("assert True\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a test")
    baseline = git(repo, "rev-parse", "HEAD")
    git(repo, "mv", "tests/test a.py", "tests/test b.py")
    git(repo, "commit", "-qm", "rename")
    assert review(repo, baseline, git(repo, "rev-parse", "HEAD")) == [
        "changed tests: tests/test a.py -> tests/test b.py"
    ]
    # moving a test out of the test paths disables it: flagged from its old name
    git(repo, "mv", "tests/test b.py", "notes.txt")
    git(repo, "commit", "-qm", "hide the test")
    assert review(repo, baseline, git(repo, "rev-parse", "HEAD")) == [
        "changed tests: tests/test a.py -> notes.txt"
    ]
