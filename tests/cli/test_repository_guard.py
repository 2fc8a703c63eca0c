"""The user's repository as the race found it: refs, HEAD, git settings, checkout.

An unisolated candidate (`[sandbox] isolation = "none"`, or no bubblewrap) shares the repository's
.git directory: it can plant hooks, an fsmonitor or a filter in the shared config, move the user's
checked-out branch or any other ref. The guard is what then finds and undoes it; isolated, none of
it reaches the repository (the last test here, and tests/engine/test_isolation.py). Each test
runs a real race through the CLI with a real candidate doing that in a real repository."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from tests.cli.support import run_cli, write_race
from tests.conftest import git

VALIDATE = '[validate]\ncommand = ["sh", "-c", "test -f fix.txt"]\n'
UNISOLATED = '[sandbox]\nisolation = "none"\n'


def shell_candidate(key: str, script: str) -> str:
    argv = json.dumps(["sh", "-c", script])
    return f'\n[[candidates]]\nkey = "{key}"\nagent = "command"\nbrief = "b"\ncommand = {argv}\n'


def vandal_script(marker: Path) -> str:
    """Plants programs in the shared git directory and moves the user's refs, then fails."""
    m = shlex.quote(str(marker))
    common = '"$(git rev-parse --git-common-dir)"'
    return " && ".join(
        [
            f"common={common}",
            # the user's refs: the checked-out branch, another branch, a tag deleted, a tag created
            'git update-ref refs/heads/main "$(git commit-tree HEAD^{tree} -p HEAD -m moved)"',
            'git update-ref refs/heads/feature "$(git commit-tree HEAD^{tree} -m orphan)"',
            "git update-ref -d refs/tags/v1",
            "git update-ref refs/tags/planted HEAD",
            # then programs for everyone else's git (the vandal's own git above ran none of them)
            # hooks the next candidate's (and the engine's) git would run
            *(
                f"printf '#!/bin/sh\\necho {hook} >> {m}\\n' > \"$common/hooks/{hook}\" && "
                f'chmod +x "$common/hooks/{hook}"'
                for hook in ("pre-commit", "post-checkout", "reference-transaction")
            ),
            f"git config core.fsmonitor 'echo fsmonitor >> {m}; false'",
            f"git config filter.evil.clean 'sh -c \"echo clean >> {m}; cat\"'",
            f"git config filter.evil.smudge 'sh -c \"echo smudge >> {m}; cat\"'",
            "echo '* filter=evil' > \"$common/info/attributes\"",
            "exit 1",
        ]
    )


def honest_script() -> str:
    return "echo fixed > fix.txt && git add fix.txt && git commit -qm fix"


def user_repository(repo: Path) -> dict[str, str]:
    git(repo, "branch", "feature")
    git(repo, "tag", "v1")
    git(repo, "commit", "-q", "--allow-empty", "-m", "user work")
    return {
        name: git(repo, "rev-parse", name)
        for name in ("refs/heads/main", "refs/heads/feature", "refs/tags/v1")
    }


def test_a_candidate_that_plants_programs_and_moves_refs_is_reported_and_undone(repo, tmp_path):
    marker = tmp_path / "programs-ran"
    refs = user_repository(repo)
    config_before = (repo / ".git" / "config").read_bytes()
    race = write_race(
        tmp_path / "race.toml",
        repo,
        shell_candidate("vandal", vandal_script(marker)) + shell_candidate("honest", honest_script()),
        extra='mode = "fallback"',
        sections=VALIDATE + UNISOLATED,
    )

    done = run_cli("run", race, "--headless", "--json", cwd=repo)

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["winner"]["key"] == "honest"
    # nothing planted ever ran: not by the engine's git (status, worktree add and removal,
    # merge-tree), not by the next candidate's own commit, which came after it was put back
    assert not marker.exists(), marker.read_text()
    # settings are back as recorded, what was found is kept as evidence
    assert (repo / ".git" / "config").read_bytes() == config_before
    for hook in ("pre-commit", "post-checkout", "reference-transaction"):
        assert not (repo / ".git" / "hooks" / hook).exists()
    assert not (repo / ".git" / "info" / "attributes").exists()
    found = {(t["kind"], t["name"], t["change"]): t for t in result["tampering"]}
    assert all(t["candidate"] == "vandal" and t["attempt"] == 1 for t in result["tampering"])
    for name in ("config", "hooks/pre-commit", "hooks/post-checkout", "info/attributes"):
        entry = next(t for (kind, n, _), t in found.items() if kind == "setting" and n == name)
        assert entry["restored"] is True
        assert entry["evidence"] and Path(entry["evidence"]).exists()
    # refs are reported with the command that puts each back
    main = found[("ref", "refs/heads/main", "moved")]
    assert main["checkout"] is True and main["before"] == refs["refs/heads/main"]
    assert found[("ref", "refs/heads/feature", "moved")]["before"] == refs["refs/heads/feature"]
    assert found[("ref", "refs/tags/v1", "deleted")]["before"] == refs["refs/tags/v1"]
    assert ("ref", "refs/tags/planted", "created") in found
    # loudly, where a headless user looks
    assert "vandal#1 CHANGED YOUR REPOSITORY: moved refs/heads/main" in done.stderr
    assert "your repository was changed (vandal#1)" in done.stderr
    # the checked-out branch moved: the integration check cannot say "clean"
    assert result["integration"]["status"] == "blocked"
    assert "your checkout was changed during the race (while vandal ran)" in result["integration"]["reason"]
    # and the undo commands work
    for entry in result["tampering"]:
        if entry["undo"]:
            subprocess.run(entry["undo"], shell=True, check=True, capture_output=True)
    for name, oid in refs.items():
        assert git(repo, "rev-parse", name) == oid
    assert (
        subprocess.run(
            ["git", "rev-parse", "--verify", "-q", "refs/tags/planted"], cwd=repo, capture_output=True
        ).returncode
        != 0
    )


def test_an_isolated_vandal_changes_nothing_and_the_guard_has_nothing_to_report(repo, tmp_path):
    # the same vandal in bubblewrap: each write fails (its git writes its own repository, the
    # user's .git is read-only), so there is nothing to undo, nothing to report, nothing ran
    marker = tmp_path / "programs-ran"
    refs = user_repository(repo)
    config_before = (repo / ".git" / "config").read_bytes()
    race = write_race(
        tmp_path / "race.toml",
        repo,
        shell_candidate("vandal", vandal_script(marker)) + shell_candidate("honest", honest_script()),
        extra='mode = "fallback"',
        sections=VALIDATE + '[sandbox]\nisolation = "bubblewrap"\n',
    )

    done = run_cli("run", race, "--headless", "--json", cwd=repo)

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["winner"]["key"] == "honest"
    assert result["tampering"] == [] and "CHANGED YOUR REPOSITORY" not in done.stderr
    assert not marker.exists()
    assert (repo / ".git" / "config").read_bytes() == config_before
    assert not any((repo / ".git" / "hooks" / hook).exists() for hook in ("pre-commit", "post-checkout"))
    for name, oid in refs.items():
        assert git(repo, "rev-parse", name) == oid
    assert result["integration"]["status"] == "clean"


def test_a_winner_that_moved_the_checked_out_branch_does_not_report_integration_clean(repo, tmp_path):
    """Moving main to a commit with the same tree leaves the checkout clean: merge-tree alone
    would call the winner's branch clean against a HEAD the candidate chose."""
    before = git(repo, "rev-parse", "HEAD")
    script = (
        honest_script() + " && git update-ref refs/heads/main "
        '"$(git commit-tree HEAD~1^{tree} -p HEAD~1 -m sneaky)"'
    )
    race = write_race(
        tmp_path / "race.toml",
        repo,
        shell_candidate("sneaky", script),
        sections=VALIDATE + UNISOLATED,
    )

    done = run_cli("run", race, "--headless", "--json", cwd=repo)

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["winner"]["key"] == "sneaky"
    assert result["integration"]["status"] == "blocked"
    assert "integration clean" not in done.stderr
    [entry] = result["tampering"]
    assert (entry["kind"], entry["name"], entry["candidate"]) == ("ref", "refs/heads/main", "sneaky")
    assert entry["undo"] == shlex.join(
        ["git", "-C", str(repo), "update-ref", "refs/heads/main", before, entry["after"]]
    )


def test_a_candidate_writing_into_the_users_checkout_is_named(repo, tmp_path):
    script = honest_script() + ' && echo stray > "$(git rev-parse --git-common-dir)/../stray.txt"'
    race = write_race(
        tmp_path / "race.toml",
        repo,
        shell_candidate("messy", script),
        sections=VALIDATE + UNISOLATED,
    )

    done = run_cli("run", race, "--headless", "--json", cwd=repo)

    result = json.loads(done.stdout)
    assert result["integration"]["status"] == "blocked"
    [entry] = result["tampering"]
    assert (entry["kind"], entry["candidate"], entry["checkout"]) == ("working-tree", "messy", True)
    assert "messy#1 CHANGED YOUR REPOSITORY: your working tree was written to" in done.stderr
    assert (repo / "stray.txt").read_text() == "stray\n"  # the user's to judge: never deleted


def test_an_honest_race_reports_no_tampering(repo, tmp_path):
    git(repo, "tag", "v1")
    race = write_race(tmp_path / "race.toml", repo, shell_candidate("honest", honest_script()))
    done = run_cli("run", race, "--headless", "--json", cwd=repo)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["tampering"] == []
    assert result["integration"]["status"] == "clean"
    assert "CHANGED YOUR REPOSITORY" not in done.stderr
    assert not (repo / ".outpost" / "recovery" / "tampering").exists()


def test_a_hook_planted_in_a_submodules_git_directory_is_put_back(repo, tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    git(sub, "init", "-q", "-b", "main")
    (sub / "lib.txt").write_text("lib\n")
    git(sub, "add", "lib.txt")
    git(sub, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "lib")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "lib")
    git(repo, "commit", "-qm", "submodule")
    hook = repo / ".git" / "modules" / "lib" / "hooks" / "post-checkout"
    script = (
        f"printf '#!/bin/sh\\ntrue\\n' > {shlex.quote(str(hook))} && "
        f"chmod +x {shlex.quote(str(hook))} && exit 1"
    )
    race = write_race(tmp_path / "race.toml", repo, shell_candidate("planter", script), sections=UNISOLATED)

    done = run_cli("run", race, "--headless", "--json", cwd=repo)

    result = json.loads(done.stdout)
    [entry] = result["tampering"]
    assert (entry["name"], entry["change"], entry["restored"]) == (
        "modules/lib/hooks/post-checkout",
        "added",
        True,
    )
    assert not hook.exists()
