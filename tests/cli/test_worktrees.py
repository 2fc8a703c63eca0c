"""`outpost-tui worktrees`: one worktree whose git link was tampered with is marked, not fatal."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.support import run_cli
from tests.conftest import git, make_repo


def add_candidate_worktree(repo: Path, key: str) -> Path:
    path = repo / ".outpost" / "workspaces" / f"{key}-1"
    git(repo, "worktree", "add", "-q", "-b", f"outpost/speculation/r1/{key}/1", str(path))
    return path


def test_a_tampered_worktree_is_listed_and_marked_and_the_others_still_inspected(tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    good = add_candidate_worktree(repo, "good")
    tampered = add_candidate_worktree(repo, "bad")
    elsewhere = make_repo(tmp_path / "elsewhere")
    # What a hostile agent could do: lead git to a repository (and configuration) of its own.
    (tampered / ".git").write_text(f"gitdir: {elsewhere / '.git'}\n")

    done = run_cli("worktrees", repo, "--json")
    assert done.returncode == 0, done.stderr
    listed = {Path(w["path"]).name: w for w in json.loads(done.stdout)["worktrees"]}
    assert set(listed) == {"good-1", "bad-1"}
    assert listed["good-1"]["clean"] is True and listed["good-1"]["link_changed"] is False
    assert listed["bad-1"]["link_changed"] is True and listed["bad-1"]["clean"] is False
    assert "git link" in listed["bad-1"]["problem"]

    races = json.loads(done.stdout)["races"]
    rows = {row["key"]: row for row in races[0]["attempts"]}
    assert rows["good"]["holds"] == {
        "uncommitted": 0,
        "untracked": 0,
        "ignored": 0,
        "ignored_bytes": 0,
        "hidden": 0,
    }
    assert rows["bad"]["link_changed"] is True and rows["bad"]["holds"] is None

    text = run_cli("worktrees", repo)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[lines.index("  good#1 unknown: no recorded result for this attempt") + 1] == f"      {good}"
    bad = lines[lines.index("  bad#1 unknown: no recorded result for this attempt") + 2]
    assert "not inspected: " in bad and "git link" in bad


def test_help_lists_exit_codes():
    done = run_cli("worktrees", "--help")
    assert done.returncode == 0 and "exit codes: 0 done" in done.stdout


# --- archive, restore, prune, branches --------------------------------------------------------------

import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402

from tests.cli.support import CLI, one_line_error  # noqa: E402
from tests.engine.test_archive import tree_of  # noqa: E402
from tests.retention import kept_race  # noqa: E402


def test_archive_then_restore_from_the_command_line(tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    kept = kept_race(repo)
    win = Path(kept["win"])
    (win / "debug.log").write_text("x" * 3000)
    before = tree_of(win, skip_ignored={"debug.log"})
    ident = f"{kept['race_id']}/win/1"

    dry = run_cli("worktrees", repo, "--archive", ident, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["ignored_left_out"]["files"] == 1 and plan["ignored_left_out"]["bytes"] >= 3000
    assert win.is_dir()

    done = run_cli("worktrees", repo, "--archive", ident)
    assert done.returncode == 0, done.stderr
    assert f"refs/outpost/archive/{ident}" in done.stdout and "ignored files not archived: 1" in done.stdout
    assert not win.exists()
    listed = json.loads(run_cli("worktrees", repo, "--json").stdout)["races"][0]["attempts"]
    assert {r["key"]: r["present"] for r in listed} == {"lose": True, "win": False}
    assert [r["archive"] is not None for r in listed if r["key"] == "win"] == [True]

    restored = run_cli("worktrees", repo, "--restore", ident, "--json")
    assert restored.returncode == 0, restored.stderr
    assert json.loads(restored.stdout)["directory"] == str(win)
    assert tree_of(win) == before


def test_bad_ids_and_option_mixes_are_one_line(tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    kept_race(repo)
    assert "no retained attempt 'nope'" in one_line_error(run_cli("worktrees", repo, "--archive", "nope"))
    assert "--older-than goes with --prune" in one_line_error(run_cli("worktrees", repo, "--older-than", "3"))
    assert "no archive of" in one_line_error(run_cli("worktrees", repo, "--restore", "r/k/1"))
    refused = run_cli("worktrees", repo, "--prune")  # no terminal, no --yes
    assert refused.returncode == 1 and "needs confirmation" in one_line_error(refused)
    assert "has no branches" in one_line_error(run_cli("worktrees", repo, "--delete-branches", "norace"))


def test_delete_branches_refuses_unmerged_and_archives_on_request(tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    kept = kept_race(repo)
    assert run_cli("worktrees", repo, "--prune", "--yes").returncode == 0
    # the archives hold every commit, so both branches may go; delete the archive refs to see refusal
    for key in ("lose", "win"):
        git(repo, "update-ref", "-d", f"refs/outpost/archive/{kept['race_id']}/{key}/1")
    dry = run_cli("worktrees", repo, "--delete-branches", kept["race_id"], "--dry-run", "--json")
    assert {b["deletable"] for b in json.loads(dry.stdout)["branches"]} == {False}
    refused = run_cli("worktrees", repo, "--delete-branches", kept["race_id"], "--yes")
    assert refused.returncode == 1 and "reachable from nothing else" in refused.stderr
    assert len(git(repo, "branch", "--list", "outpost/*").splitlines()) == 2
    done = run_cli("worktrees", repo, "--delete-branches", kept["race_id"], "--archive-unmerged", "--yes")
    assert done.returncode == 0, done.stderr
    assert git(repo, "branch", "--list", "outpost/*") == ""
    assert len(git(repo, "for-each-ref", "refs/outpost/archive/").splitlines()) == 2


def many_worktrees(repo: Path, count: int) -> dict[Path, dict]:
    """A finished race, plus `count` more retained attempts of it, each with a few MB of work."""
    kept = kept_race(repo)
    base = Path(kept["win"])
    for n in range(2, count + 1):
        branch = f"outpost/speculation/{kept['race_id']}/win/{n}"
        path = base.parent / f"win-extra-{n}"
        git(repo, "worktree", "add", "-q", "-b", branch, str(path))
    for path in base.parent.iterdir():
        (path / "blob.bin").write_bytes(os.urandom(2 * 1024 * 1024))
        (path / "script.sh").write_text("#!/bin/sh\n")
        (path / "script.sh").chmod(0o750)
        os.symlink("blob.bin", path / "link")
    return {path: tree_of(path) for path in base.parent.iterdir()}


def assert_nothing_lost(repo: Path, before: dict[Path, dict]) -> tuple[int, int]:
    """Every worktree is either intact or restorable byte for byte from its archive."""
    intact = restored = 0
    for path, tree in before.items():
        if path.exists():
            assert tree_of(path) == tree, path
            intact += 1
            continue
        branch = git(
            path.parent.parent.parent, "for-each-ref", "--format=%(refname:short)", "refs/heads/outpost/"
        )  # the branch of each attempt is still there
        assert branch
        ident = next(
            r["id"]
            for race in json.loads(run_cli("worktrees", repo, "--json").stdout)["races"]
            for r in race["attempts"]
            if r["path"] is None
            and r["archive"]
            and json.loads(run_cli("worktrees", repo, "--restore", r["id"], "--dry-run", "--json").stdout)[
                "directory"
            ]
            == str(path)
        )
        done = run_cli("worktrees", repo, "--restore", ident)
        assert done.returncode == 0, done.stderr
        assert tree_of(path) == tree, path
        restored += 1
    return intact, restored


def start_prune(repo: Path) -> subprocess.Popen:
    # its own process group, as a terminal's foreground job: Ctrl-C reaches git's children too
    return subprocess.Popen(
        [*CLI, "worktrees", str(repo), "--prune", "--yes"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_double_ctrl_c_during_prune_loses_nothing(tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    before = many_worktrees(repo, 4)
    prune = start_prune(repo)
    first = prune.stderr.readline()
    assert first.startswith("archiving "), first
    os.killpg(prune.pid, signal.SIGINT)  # what a terminal does on Ctrl-C, twice
    os.killpg(prune.pid, signal.SIGINT)
    out, err = prune.communicate(timeout=120)
    assert prune.returncode == 130, err
    assert "stopping after the worktree being archived" in err
    assert "Traceback" not in err
    assert "prune was stopped before it" in out
    intact, _restored = assert_nothing_lost(repo, before)
    assert intact >= 1  # it stopped early, leaving the rest in place
    assert not list((repo / ".outpost" / "recovery").glob("removing-*"))


def test_prune_killed_outright_loses_nothing_and_the_next_prune_finishes(tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    before = many_worktrees(repo, 3)
    prune = start_prune(repo)
    assert prune.stderr.readline().startswith("archiving ")
    os.killpg(
        prune.pid, signal.SIGKILL
    )  # no handler can run: the order of the steps alone must keep the work
    prune.communicate(timeout=60)
    assert_nothing_lost(repo, before)
    again = run_cli("worktrees", repo, "--prune", "--yes", "--json")
    assert again.returncode == 0, again.stderr
    assert not list((repo / ".outpost" / "recovery").glob("removing-*"))
    assert not any(path.exists() for path in before)
