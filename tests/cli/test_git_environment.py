"""A race started from inside a git hook behaves exactly like one started from a shell.

git runs a hook with GIT_INDEX_FILE (and, when the user named it, GIT_DIR and GIT_WORK_TREE) set;
inherited by the engine and the candidates, those would make a candidate's `git commit` write the
user's index and move the user's branch. Each test really commits in a real repository whose real
pre-commit hook runs `outpost-tui run ... --headless --json`."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.cli.support import CLI, write_race
from tests.conftest import git

# A candidate that does what agents do: edit, stage, commit, and it reports what git showed it.
AGENT = (
    "echo fixed > fix.txt && git add fix.txt && git commit -qm 'candidate fix' "
    '&& git rev-parse --git-dir --show-toplevel > "$REPORT"'
)


def candidate(key: str, report: Path) -> str:
    argv = json.dumps(["sh", "-c", f"REPORT={shlex.quote(str(report))}; {AGENT}"])
    return f'\n[[candidates]]\nkey = "{key}"\nagent = "command"\nbrief = "b"\ncommand = {argv}\n'


def install_hook(repo: Path, race: Path, out: Path) -> None:
    hook = repo / ".git" / "hooks" / "pre-commit"
    # the environment git gives its hook, saved so the test can show the race really ran in it
    # the candidates' own commits run the repository's hooks too: only the user's commit races
    hook.write_text(
        "#!/bin/sh\n"
        '[ -n "$OUTPOST_CANDIDATE" ] && exit 0\n'
        f"env | grep '^GIT_' > {shlex.quote(str(out))}.env\n"
        f"{shlex.join(CLI)} run {shlex.quote(str(race))} --headless --json "
        f"> {shlex.quote(str(out))} 2> {shlex.quote(str(out))}.err\n"
        "exit 0\n"
    )
    hook.chmod(0o755)


@pytest.mark.parametrize(
    "how",
    [
        ("commit", "-qm", "user commit"),
        # the user named the repository: the hook also gets GIT_DIR and GIT_WORK_TREE
        ("--git-dir=.git", "--work-tree=.", "commit", "-qm", "user commit"),
        # a commit of named paths: git builds a temporary index and hands the hook its path
        ("commit", "-qm", "user commit", "--", "user.txt"),
    ],
    ids=["plain", "git-dir", "only-paths"],
)
def test_a_race_run_from_a_pre_commit_hook_leaves_the_users_commit_alone(repo, tmp_path, how):
    report, out = tmp_path / "candidate-saw", tmp_path / "result.json"
    race = write_race(
        tmp_path / "race.toml",
        repo,
        candidate("a", report),
        sections='[validate]\ncommand = ["sh", "-c", "test -f fix.txt"]\n',
    )
    install_hook(repo, race, out)
    baseline = git(repo, "rev-parse", "HEAD")
    (repo / "user.txt").write_text("the user's own change\n")
    git(repo, "add", "user.txt")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", *how], cwd=repo, check=True, env=env, capture_output=True, timeout=120)

    assert "GIT_INDEX_FILE=" in (tmp_path / "result.json.env").read_text()  # it ran inside the hook
    result = json.loads(out.read_text())
    assert result["status"] == "winner", (tmp_path / "result.json.err").read_text()
    branch = result["winner"]["branch"]
    # the user's commit holds exactly the user's change, on top of the baseline
    assert git(repo, "rev-parse", "HEAD~1") == baseline
    assert git(repo, "show", "--name-only", "--format=", "HEAD").splitlines() == ["user.txt"]
    assert git(repo, "log", "-1", "--format=%s", "HEAD") == "user commit"
    # the user's index and working tree hold no trace of the candidate
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    assert not (repo / "fix.txt").exists()
    assert git(repo, "ls-files", "fix.txt") == ""
    # the candidate's commit is on its own branch, from the baseline, and saw its own worktree
    assert git(repo, "rev-parse", f"{branch}~1") == baseline
    assert git(repo, "show", "--name-only", "--format=", branch).splitlines() == ["fix.txt"]
    git_dir, toplevel = report.read_text().split()
    assert "/.git/worktrees/" in git_dir and ".outpost/workspaces" in toplevel


def test_git_variables_exported_in_a_shell_do_not_reach_the_engine_or_agents(repo, tmp_path):
    """A relative GIT_INDEX_FILE, GIT_DIR and config through GIT_CONFIG_* exported by a shell."""
    report, seen = tmp_path / "candidate-saw", tmp_path / "validation-env"
    marker = tmp_path / "hook-ran"
    race = write_race(
        tmp_path / "race.toml",
        repo,
        candidate("a", report),
        sections=f'[validate]\ncommand = ["sh", "-c", "test -f fix.txt && env > {seen}"]\n',
    )
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "reference-transaction").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (hooks / "reference-transaction").chmod(0o755)
    baseline = git(repo, "rev-parse", "HEAD")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
        "GIT_DIR": str(repo / ".git"),
        "GIT_WORK_TREE": str(repo),
        "GIT_INDEX_FILE": ".git/index",
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "core.hooksPath",
        "GIT_CONFIG_VALUE_0": str(hooks),
        "GIT_AUTHOR_NAME": "Kept Author",
    }
    done = subprocess.run(
        [*CLI, "run", str(race), "--headless", "--json"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    branch = result["winner"]["branch"]
    assert git(repo, "rev-parse", "HEAD") == baseline
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    assert git(repo, "rev-parse", f"{branch}~1") == baseline
    assert not marker.exists()  # GIT_CONFIG_* did not install hooks for anyone
    # identity is the user's to choose: kept
    assert git(repo, "log", "-1", "--format=%an", branch) == "Kept Author"
    seen_env = seen.read_text()
    assert "GIT_DIR=" not in seen_env and "GIT_INDEX_FILE=" not in seen_env
    assert "GIT_AUTHOR_NAME=Kept Author" in seen_env
