"""engine/git/ against real repositories in temporary directories."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from outpost_tui.engine import git as g
from outpost_tui.engine.git import runner as git_runner
from outpost_tui.engine.git import worktrees as git_worktrees


@pytest.fixture(autouse=True)
def isolated_git_config(tmp_path_factory, monkeypatch):
    # The machine's global identity would hide the "no identity configured" path.
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in (
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "EMAIL",
    ):
        monkeypatch.delenv(name, raising=False)


def run(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def make_repo(path: Path, identity: bool = True) -> Path:
    path.mkdir()
    run(path, "init", "-q", "-b", "main")
    if identity:
        run(path, "config", "user.name", "Test User")
        run(path, "config", "user.email", "test@example.com")
    (path / "base.txt").write_text("base\n")
    run(path, "add", "base.txt")
    ident = [] if identity else ["-c", "user.name=Setup", "-c", "user.email=setup@example.com"]
    run(path, *ident, "commit", "-q", "-m", "base")
    return path


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_repo(tmp_path / "repo")


def commit_file(cwd: Path, name: str, text: str, message: str) -> str:
    (cwd / name).write_text(text)
    run(cwd, "add", name)
    run(cwd, "commit", "-q", "-m", message)
    return run(cwd, "rev-parse", "HEAD")


def new_worktree(repo: Path, key: str = "alpha", attempt: int = 1) -> tuple[str, Path, str]:
    branch = g.branch_name("race1", key, attempt)
    directory = g.worktree_directory(repo, key, branch)
    baseline = g.resolve_commit(repo)
    g.add_worktree(repo, branch, directory, baseline)
    return branch, directory, baseline


# --- layout --------------------------------------------------------------------------------


def test_repository_root_from_subdirectory_and_refusal(repo, tmp_path):
    (repo / "sub" / "deeper").mkdir(parents=True)
    assert g.repository_root(repo / "sub" / "deeper") == repo.resolve()
    outside = tmp_path / "plain"
    outside.mkdir()
    with pytest.raises(g.GitError, match=r"^not a git repository: .*plain$"):
        g.repository_root(outside)
    with pytest.raises(g.GitError, match="not a git repository"):
        g.repository_root(tmp_path / "missing")


def test_git_common_dir_is_shared_by_worktrees(repo):
    assert g.git_common_dir(repo) == (repo / ".git").resolve()
    _, directory, _ = new_worktree(repo)
    assert g.git_common_dir(directory) == (repo / ".git").resolve()


def test_ensure_outpost_dir_is_private_and_excluded_once(repo):
    exclude = repo / ".git" / "info" / "exclude"
    exclude.unlink()
    exclude.parent.rmdir()
    exclude.parent.mkdir()
    exclude.write_text("*.log")  # existing content without a final newline
    (repo / "scratch.log").write_text("kept ignored\n")
    outpost = g.ensure_outpost_dir(repo)
    g.ensure_outpost_dir(repo)
    assert outpost == repo / ".outpost"
    assert stat.S_IMODE(outpost.stat().st_mode) == 0o700
    assert exclude.read_text() == "*.log\n/.outpost/\n"
    (outpost / "state.json").write_text("{}")
    assert run(repo, "status", "--porcelain", "--untracked-files=all") == ""


def test_ensure_outpost_dir_creates_missing_info_directory(repo):
    info = repo / ".git" / "info"
    for child in info.iterdir():
        child.unlink()
    info.rmdir()
    g.ensure_outpost_dir(repo)
    assert (info / "exclude").read_text().splitlines().count("/.outpost/") == 1


# --- commits and snapshots -----------------------------------------------------------------------


def test_resolve_commit(repo):
    oid = run(repo, "rev-parse", "HEAD")
    assert g.resolve_commit(repo) == oid
    assert g.resolve_commit(repo, "main") == oid
    with pytest.raises(g.GitError, match="'nope' does not name a commit"):
        g.resolve_commit(repo, "nope")
    with pytest.raises(g.GitError, match="invalid revision"):
        g.resolve_commit(repo, "--all")


def test_host_snapshot_tracks_content_and_ignores_outpost(repo):
    clean = g.host_snapshot(repo)
    assert clean.head == run(repo, "rev-parse", "HEAD")
    assert clean.branch == "main" and not clean.dirty
    assert g.host_snapshot(repo) == clean  # deterministic
    # .outpost is never part of the host's state, even before it is excluded.
    (repo / ".outpost" / "runs").mkdir(parents=True)
    (repo / ".outpost" / "runs" / "x.jsonl").write_text("{}\n")
    assert g.host_snapshot(repo) == clean

    (repo / "new.txt").write_text("one\n")
    untracked = g.host_snapshot(repo)
    assert untracked.dirty and untracked.fingerprint != clean.fingerprint
    (repo / "new.txt").write_text("two\n")
    assert g.host_snapshot(repo).fingerprint != untracked.fingerprint
    (repo / "new.txt").chmod(0o755)
    assert g.host_snapshot(repo).fingerprint not in (untracked.fingerprint, clean.fingerprint)
    (repo / "new.txt").unlink()

    (repo / "base.txt").write_text("edited\n")
    edited = g.host_snapshot(repo)
    assert edited.dirty and edited.fingerprint != clean.fingerprint
    (repo / "base.txt").write_text("edited again\n")
    assert g.host_snapshot(repo).fingerprint != edited.fingerprint
    run(repo, "checkout", "-q", "base.txt")
    assert g.host_snapshot(repo) == clean

    run(repo, "checkout", "-q", "--detach")
    detached = g.host_snapshot(repo)
    assert detached.branch == "HEAD" and detached.head == clean.head
    assert detached.to_json() == {
        "head": clean.head,
        "branch": "HEAD",
        "dirty": False,
        "fingerprint": clean.fingerprint,
    }


# --- branches and worktrees --------------------------------------------------------------------


def test_branch_name_and_directory(repo):
    branch = g.branch_name("race1", "alpha", 2)
    assert branch == "outpost/speculation/race1/alpha/2"
    directory = g.worktree_directory(repo, "alpha", branch)
    assert directory.parent == repo / ".outpost" / "workspaces"
    assert directory.name.startswith("alpha-") and len(directory.name) == len("alpha-") + 12
    assert g.worktree_directory(repo, "alpha", g.branch_name("race1", "alpha", 3)) != directory
    for bad_key in ("../x", "a/b", "", "-x", "x" * 65):
        with pytest.raises(ValueError, match="invalid candidate key"):
            g.branch_name("race1", bad_key, 1)
        with pytest.raises(ValueError, match="invalid candidate key"):
            g.worktree_directory(repo, bad_key, branch)
    for bad_race in ("a/b", "..", "a..b", "x.lock"):
        with pytest.raises(ValueError, match="invalid race id"):
            g.branch_name(bad_race, "alpha", 1)
    with pytest.raises(ValueError, match="invalid attempt"):
        g.branch_name("race1", "alpha", 0)


def test_worktrees_keep_host_clean_and_baseline_pinned(repo):
    baseline = g.resolve_commit(repo)
    first = new_worktree(repo, "alpha")
    second = new_worktree(repo, "beta")
    for branch, directory, _ in (first, second):
        assert directory.is_dir()
        assert g.head(directory) == baseline
        assert run(directory, "rev-parse", "--abbrev-ref", "HEAD") == branch
        # autoSetupMerge=false: the candidate branch tracks nothing.
        assert subprocess.run(["git", "config", f"branch.{branch}.merge"], cwd=repo).returncode == 1
    assert run(repo, "status", "--porcelain", "--untracked-files=all") == ""
    assert not g.host_snapshot(repo).dirty

    moved = commit_file(repo, "host.txt", "host\n", "host moves on")
    assert moved != baseline
    assert g.head(first[1]) == baseline
    assert not (first[1] / "host.txt").exists()


def test_add_worktree_reuses_a_registered_worktree(repo):
    branch, directory, baseline = new_worktree(repo)
    commit_file(directory, "work.txt", "work\n", "candidate work")
    (directory / "notes.txt").write_text("uncommitted\n")
    g.add_worktree(repo, branch, directory, baseline)  # a durable replay
    assert (directory / "notes.txt").read_text() == "uncommitted\n"
    assert [c.subject for c in g.commits_since(directory, baseline)] == ["candidate work"]
    assert not (repo / ".outpost" / "recovery").exists()


def test_add_worktree_moves_a_stray_directory_aside(repo):
    branch = g.branch_name("race1", "alpha", 1)
    directory = g.worktree_directory(repo, "alpha", branch)
    directory.mkdir(parents=True)
    (directory / "precious.txt").write_text("keep me\n")
    g.add_worktree(repo, branch, directory, g.resolve_commit(repo))
    assert g.head(directory) == g.resolve_commit(repo)
    orphans = list((repo / ".outpost" / "recovery").iterdir())
    assert len(orphans) == 1
    assert orphans[0].name.startswith(f"orphan-{directory.name}-")
    assert (orphans[0] / "precious.txt").read_text() == "keep me\n"


def test_add_worktree_recreates_a_worktree_whose_directory_vanished(repo):
    branch, directory, baseline = new_worktree(repo)
    work = commit_file(directory, "work.txt", "work\n", "candidate work")
    # Simulate a directory deleted by hand: git still has the worktree registered.
    subprocess.run(["rm", "-rf", str(directory)], check=True)
    g.add_worktree(repo, branch, directory, baseline, resumed=True)
    assert g.head(directory) == work  # the existing branch is checked out again, not reset


def test_a_worktree_command_meeting_another_half_written_is_run_again(repo, monkeypatch):
    # git writes a new worktree's metadata file by file: for an instant its commondir exists,
    # empty, and a worktree command reading every worktree then stops having changed nothing
    inflight = repo / ".git" / "worktrees" / "inflight"
    inflight.mkdir(parents=True)
    (inflight / "gitdir").write_text(f"{repo.parent / 'inflight' / '.git'}\n")
    (inflight / "HEAD").write_text(g.resolve_commit(repo) + "\n")
    (inflight / "commondir").write_text("")
    errors = []
    once = git_runner._execute_once

    def the_other_add_finishes(command, **options):
        status, out, err = once(command, **options)
        if status != 0:
            errors.append(err)
            (inflight / "commondir").write_text("../..\n")
        return status, out, err

    monkeypatch.setattr(git_runner, "_execute_once", the_other_add_finishes)
    branch = g.branch_name("race1", "alpha", 1)
    directory = g.worktree_directory(repo, "alpha", branch)
    g.add_worktree(repo, branch, directory, g.resolve_commit(repo))
    assert "failed to read" in errors[0] and "commondir" in errors[0], errors
    # (the branch it had made before it stopped is the one checked out on the next try)
    assert run(directory, "rev-parse", "--abbrev-ref", "HEAD") == branch
    assert not (repo / ".outpost" / "recovery").exists()  # nothing was taken for a stray


def test_a_removal_meeting_another_worktree_removed_at_that_instant_is_run_again(repo, monkeypatch):
    # git's words when a worktree listed a moment before is gone as it reads it (six removals at
    # once under load); the instant cannot be made on demand, so the first answer is git's words
    # and the second the real removal
    _, directory, _ = new_worktree(repo)
    once = git_runner._execute_once
    answers = []

    def another_removed_meanwhile(command, **options):
        if command[4:6] == ["worktree", "remove"] and not any(a.startswith("fatal") for a in answers):
            gone = repo / ".git" / "worktrees" / "other-0123"
            answers.append(f"fatal: Invalid path '{gone}': No such file or directory\n")
            return 128, "", answers[-1]
        answers.append("ran")
        return once(command, **options)

    monkeypatch.setattr(git_runner, "_execute_once", another_removed_meanwhile)
    assert g.remove_worktree(repo, directory) is True
    assert not directory.exists()
    refused = [n for n, a in enumerate(answers) if a.startswith("fatal: Invalid path")]
    assert len(refused) == 1 and answers[refused[0] + 1 :] == ["ran"]  # the removal, run again


def test_a_worktree_command_waits_out_another_add_that_a_loaded_machine_holds_up(repo, monkeypatch):
    # the other add's next file comes only after several tries: immediate retries all met it
    # half-written on a loaded machine, so they wait a little longer each time
    inflight = repo / ".git" / "worktrees" / "inflight"
    inflight.mkdir(parents=True)
    (inflight / "gitdir").write_text(f"{repo.parent / 'inflight' / '.git'}\n")
    (inflight / "HEAD").write_text(g.resolve_commit(repo) + "\n")
    (inflight / "commondir").write_text("")
    failures = []
    once = git_runner._execute_once

    def written_after_seven_tries(command, **options):
        status, out, err = once(command, **options)
        if status != 0:
            failures.append(time.monotonic())
            if len(failures) == 7:
                (inflight / "commondir").write_text("../..\n")
        return status, out, err

    monkeypatch.setattr(git_runner, "_execute_once", written_after_seven_tries)
    branch = g.branch_name("race1", "alpha", 1)
    directory = g.worktree_directory(repo, "alpha", branch)
    g.add_worktree(repo, branch, directory, g.resolve_commit(repo))
    assert len(failures) == 7  # more than the immediate retries there were, which gave up
    assert run(directory, "rev-parse", "--abbrev-ref", "HEAD") == branch
    # the tries were spread out (0.005 s more each time) rather than all in the same instant
    assert failures[-1] - failures[0] >= git_runner.METADATA_PAUSE * sum(range(1, 7)) * 0.5, failures


def test_worktrees_are_allocated_and_removed_concurrently(repo):
    import threading

    baseline = g.resolve_commit(repo)
    inside: list[int] = []
    most = [0]
    once = git_runner._execute_once
    guard = threading.Lock()

    def watched(command, **options):
        adding = command[4:6] == ["worktree", "add"]
        if adding:
            with guard:
                inside.append(1)
                most[0] = max(most[0], len(inside))
        try:
            return once(command, **options)
        finally:
            if adding:
                with guard:
                    inside.pop()

    git_runner._execute_once = watched
    failures = []
    start = threading.Barrier(6)

    def attempt(n: int) -> None:
        branch = g.branch_name("race1", f"c{n}", 1)
        directory = g.worktree_directory(repo, f"c{n}", branch)
        try:
            start.wait()
            for _ in range(3):
                g.add_worktree(repo, branch, directory, baseline)
                assert g.remove_worktree(repo, directory)
        except Exception as error:  # reported below, with the others'
            failures.append(repr(error))

    try:
        threads = [threading.Thread(target=attempt, args=(n,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        git_runner._execute_once = once
    assert failures == []
    assert len(git_worktrees._registered_worktrees(repo)) == 1  # every one removed, only the checkout left
    assert most[0] >= 2  # adds overlapped: none waited for another's to finish


def test_add_worktree_checks_out_into_the_empty_directory_made_for_it(repo):
    branch = g.branch_name("race1", "alpha", 1)
    directory = g.worktree_directory(repo, "alpha", branch)
    assert g.make_worktree_directory(repo, directory)
    before = directory.stat().st_ino  # what a sandbox started meanwhile has mounted
    g.add_worktree(repo, branch, directory, g.resolve_commit(repo), made_empty=True)
    assert directory.stat().st_ino == before
    assert (directory / "base.txt").read_text() == "base\n"
    assert not (repo / ".outpost" / "recovery").exists()
    assert not g.make_worktree_directory(repo, directory)  # something is there: nothing made


def test_an_empty_directory_made_for_a_worktree_is_never_taken_for_a_replays(repo):
    branch, directory, baseline = new_worktree(repo)
    work = commit_file(directory, "work.txt", "work\n", "candidate work")
    subprocess.run(["rm", "-rf", str(directory)], check=True)  # registered, its directory gone
    assert g.make_worktree_directory(repo, directory)
    g.add_worktree(repo, branch, directory, baseline, made_empty=True, resumed=True)
    assert g.head(directory) == work  # checked out again into the made directory, not reused empty
    assert (directory / "work.txt").read_text() == "work\n"


def test_branch_tips_read_many_branches_at_once(repo):
    first = new_worktree(repo, "alpha")
    second = new_worktree(repo, "beta")
    moved = commit_file(second[1], "b.txt", "b\n", "beta works")
    tips = g.branch_tips(repo, [first[0], second[0], "outpost/speculation/none/x/1"])
    assert tips == {first[0]: first[2], second[0]: moved}


def test_commits_since_and_head(repo):
    _branch, directory, baseline = new_worktree(repo)
    assert g.commits_since(directory, baseline) == []
    one = commit_file(directory, "a.txt", "a\n", "first change")
    two = commit_file(directory, "b.txt", "b\n", "second: with spaces")
    assert g.head(directory) == two
    commits = g.commits_since(directory, baseline)
    assert [(c.oid, c.subject) for c in commits] == [(one, "first change"), (two, "second: with spaces")]
    assert commits[0].to_json() == {"oid": one, "subject": "first change"}


def test_has_changes_and_commit_all(repo):
    _, directory, baseline = new_worktree(repo)
    assert not g.has_changes(directory)
    assert g.commit_all(directory, "nothing") is None
    assert g.head(directory) == baseline
    (directory / ".gitignore").write_text("*.tmp\n")
    run(directory, "add", ".gitignore")
    run(directory, "commit", "-q", "-m", "ignore tmp")
    (directory / "cache.tmp").write_text("ignored\n")
    assert not g.has_changes(directory)
    (directory / "new.txt").write_text("new\n")
    (directory / "base.txt").write_text("changed\n")
    assert g.has_changes(directory)
    oid = g.commit_all(directory, "outpost: uncommitted work")
    assert oid == g.head(directory)
    assert (
        run(directory, "log", "-1", "--format=%s|%an|%ae")
        == "outpost: uncommitted work|Test User|test@example.com"
    )
    assert set(run(directory, "show", "--name-only", "--format=", oid).split()) == {"new.txt", "base.txt"}
    assert not g.has_changes(directory)
    assert (directory / "cache.tmp").exists()


def test_commit_all_uses_its_own_identity_only_when_none_is_configured(tmp_path):
    bare = make_repo(tmp_path / "anon", identity=False)
    (bare / "x.txt").write_text("x\n")
    oid = g.commit_all(bare, "on behalf")
    assert (
        run(bare, "log", "-1", "--format=%an <%ae>|%cn <%ce>", oid)
        == "outpost-tui <outpost-tui@localhost>|outpost-tui <outpost-tui@localhost>"
    )
    assert subprocess.run(["git", "config", "user.email"], cwd=bare).returncode == 1  # not persisted

    run(bare, "config", "user.email", "only-email@example.com")
    (bare / "y.txt").write_text("y\n")
    g.commit_all(bare, "partial identity")
    assert run(bare, "log", "-1", "--format=%an <%ae>") == "outpost-tui <only-email@example.com>"


def test_is_clean(repo):
    _, directory, _ = new_worktree(repo)
    assert g.is_clean(directory)
    (directory / "untracked.txt").write_text("x\n")
    assert not g.is_clean(directory)
    (directory / "untracked.txt").unlink()

    (directory / ".gitignore").write_text("build/\n")
    run(directory, "add", ".gitignore")
    run(directory, "commit", "-q", "-m", "ignore build")
    assert g.is_clean(directory)
    (directory / "build").mkdir()
    (directory / "build" / "out.o").write_text("object\n")
    assert not g.is_clean(directory)
    (directory / "build" / "out.o").unlink()
    (directory / "build").rmdir()

    (directory / "base.txt").write_text("modified\n")
    assert not g.is_clean(directory)
    run(directory, "checkout", "-q", "base.txt")
    assert g.is_clean(directory)

    run(directory, "checkout", "-q", "--detach")
    assert not g.is_clean(directory)


def test_remove_worktree_refuses_dirty_and_keeps_branch(repo, tmp_path):
    branch, directory, _ = new_worktree(repo)
    work = commit_file(directory, "work.txt", "work\n", "work")
    (directory / "scratch.txt").write_text("unsaved\n")
    assert g.remove_worktree(repo, directory) is False
    assert (directory / "scratch.txt").read_text() == "unsaved\n"

    (directory / "scratch.txt").unlink()
    assert g.remove_worktree(repo, directory) is True
    assert not directory.exists()
    assert g.resolve_commit(repo, branch) == work
    assert str(directory) not in run(repo, "worktree", "list", "--porcelain")

    # Only worktrees under .outpost/workspaces are ever removed.
    elsewhere = tmp_path / "elsewhere"
    run(repo, "worktree", "add", "-q", "-b", "other", str(elsewhere))
    assert g.remove_worktree(repo, elsewhere) is False
    assert elsewhere.is_dir()


# --- integration check -------------------------------------------------------------------------


def test_integration_clean_and_conflict(repo):
    branch, directory, _ = new_worktree(repo)
    candidate = commit_file(directory, "feature.txt", "feature\n", "feature")
    result = g.integration_check(repo, branch, expected_commit=candidate)
    assert result == g.Integration("clean", host_head=g.resolve_commit(repo), candidate_commit=candidate)
    assert result.to_json()["status"] == "clean" and result.to_json()["conflicts"] == []

    commit_file(directory, "base.txt", "candidate side\n", "candidate edits base")
    commit_file(repo, "base.txt", "host side\n", "host edits base")
    commit_file(directory, "other.txt", "x\n", "unrelated")
    index = repo / ".git" / "index"
    index_before = (index.read_bytes(), index.stat().st_mtime_ns)
    conflict = g.integration_check(repo, branch)
    assert conflict.status == "conflict"
    assert conflict.conflicts == ("base.txt",)
    assert conflict.reason is None
    # Never touches the host's files or index.
    assert (index.read_bytes(), index.stat().st_mtime_ns) == index_before
    assert (repo / "base.txt").read_text() == "host side\n"
    assert run(repo, "status", "--porcelain", "--untracked-files=all") == ""
    assert not (repo / "feature.txt").exists()


def test_integration_blocked(repo):
    branch, directory, _ = new_worktree(repo)
    validated = commit_file(directory, "feature.txt", "feature\n", "feature")

    (repo / "stray.txt").write_text("dirty\n")
    assert g.integration_check(repo, branch).reason == "Host has uncommitted changes"
    (repo / "stray.txt").unlink()

    run(repo, "checkout", "-q", "--detach")
    detached = g.integration_check(repo, branch)
    assert (detached.status, detached.reason) == ("blocked", "Host HEAD is detached")
    run(repo, "checkout", "-q", "main")

    commit_file(directory, "later.txt", "later\n", "after validation")
    moved = g.integration_check(repo, branch, expected_commit=validated)
    assert (moved.status, moved.reason) == ("blocked", "Candidate branch changed since validation")

    missing = g.integration_check(repo, "outpost/speculation/race1/ghost/1")
    assert missing.status == "blocked"
    assert "outpost/speculation/race1/ghost/1" in missing.reason


def test_integration_blocked_when_merge_tree_fails(repo):
    run(repo, "checkout", "-q", "--orphan", "unrelated")
    commit_file(repo, "other.txt", "other\n", "unrelated root")
    run(repo, "checkout", "-q", "main")
    result = g.integration_check(repo, "unrelated")
    assert result.status == "blocked"
    assert result.reason == "Git merge-tree preflight failed: refusing to merge unrelated histories"
    assert result.candidate_commit == g.resolve_commit(repo, "unrelated")


def test_relative_paths_are_taken_from_the_current_directory(repo, monkeypatch):
    monkeypatch.chdir(repo.parent)
    assert g.resolve_commit("repo") == run(repo, "rev-parse", "HEAD")
    assert g.is_clean("repo")
    assert g.repository_root("repo") == repo.resolve()


# --- review ------------------------------------------------------------------------------------


def test_diff_and_list_worktrees(repo):
    branch, directory, baseline = new_worktree(repo, "alpha", 2)
    candidate = commit_file(directory, "base.txt", "base\nmore\n", "extend")
    text = g.diff(repo, baseline, candidate)
    assert "diff --git a/base.txt b/base.txt" in text and "+more\n" in text and text.endswith("\n")

    _, other, _ = new_worktree(repo, "beta", 1)
    (other / "junk.txt").write_text("junk\n")
    listed = {entry["key"]: entry for entry in g.list_worktrees(repo)}
    assert set(listed) == {"alpha", "beta"}  # the host checkout itself is not listed
    alpha = listed["alpha"]
    assert os.path.realpath(alpha["path"]) == os.path.realpath(directory)
    assert (alpha["branch"], alpha["head"], alpha["clean"]) == (branch, candidate, True)
    assert (alpha["race_id"], alpha["attempt"]) == ("race1", 2)
    assert listed["beta"]["clean"] is False


# --- what an agent leaves in its worktree cannot make the engine's git run its programs --------


def plant_repository(path: Path, marker: Path) -> Path:
    """A git directory of the agent's own whose configuration runs a program when git reads it."""
    fake = make_repo(path)
    run(fake, "config", "core.fsmonitor", f"touch {marker}; false")
    run(fake, "config", "filter.evil.clean", f"sh -c 'touch {marker}; cat'")
    run(fake, "config", "core.hooksPath", str(path / "hooks"))
    return fake / ".git"


@pytest.mark.parametrize("how", ["gitdir", "commondir", "symlink"])
def test_a_rewritten_worktree_link_is_refused_before_git_runs(repo, tmp_path, how):
    _, directory, baseline = new_worktree(repo)
    marker = tmp_path / "ran"
    planted = plant_repository(tmp_path / "planted", marker)
    (directory / ".gitattributes").write_text("* filter=evil\n")
    (directory / "new.txt").write_text("work\n")
    link = directory / ".git"
    if how == "gitdir":
        link.write_text(f"gitdir: {planted}\n")
    elif how == "commondir":  # the worktree's own git directory now names another repository
        git_dir = Path(link.read_text().split(":", 1)[1].strip())
        (git_dir / "commondir").write_text(f"{planted}\n")
    else:
        link.unlink()
        link.symlink_to(planted)
    for operation in (
        lambda: g.head(directory),
        lambda: g.commits_since(directory, baseline),
        lambda: g.has_changes(directory),
        lambda: g.is_clean(directory),
        lambda: g.commit_all(directory, "on behalf"),
    ):
        with pytest.raises(g.GitError, match=r"refusing to run git in that worktree|git link"):
            operation()
    assert not marker.exists()


def test_settings_in_the_repository_cannot_start_programs_from_the_engine(repo, tmp_path):
    """Even with its link intact, the engine's git in a worktree starts no fsmonitor or hook."""
    _, directory, _ = new_worktree(repo)
    marker = tmp_path / "ran"
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "post-commit").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (hooks / "post-commit").chmod(0o755)
    run(repo, "config", "core.hooksPath", str(hooks))
    run(repo, "config", "core.fsmonitor", f"touch {marker}; false")
    (directory / "new.txt").write_text("work\n")
    assert g.has_changes(directory)
    assert g.commit_all(directory, "on behalf") == g.head(directory)
    assert g.is_clean(directory)
    assert not marker.exists()


def test_a_link_borrowed_from_another_worktree_is_refused(repo, tmp_path):
    """Pointing a candidate at the user's own linked worktree would commit onto the user's branch."""
    run(repo, "worktree", "add", "-q", "-b", "feature", str(tmp_path / "feat"))
    _, directory, _ = new_worktree(repo)
    (directory / ".git").write_text(f"gitdir: {repo / '.git' / 'worktrees' / 'feat'}\n")
    (directory / "evil").write_text("x\n")
    before = run(repo, "rev-parse", "feature")
    with pytest.raises(g.GitError, match="another worktree"):
        g.commit_all(directory, "on behalf")
    assert run(repo, "rev-parse", "feature") == before


def test_a_planted_per_worktree_config_is_refused(repo, tmp_path):
    _, directory, _ = new_worktree(repo)
    marker = tmp_path / "ran"
    git_dir = Path((directory / ".git").read_text().split(":", 1)[1].strip())
    (git_dir / "config.worktree").write_text(f"[filter \"x\"]\n\tclean = sh -c 'touch {marker}; cat'\n")
    (directory / ".gitattributes").write_text("* filter=x\n")
    for operation in (lambda: g.has_changes(directory), lambda: g.commit_all(directory, "x")):
        with pytest.raises(g.GitError, match=r"config\.worktree"):
            operation()
    assert not marker.exists()


def test_drivers_named_by_attributes_never_run_in_the_engines_git(repo, tmp_path):
    """Filters, textconv and merge drivers a candidate could name (info/attributes is shared)
    and define (in an included file the config already names) run in no call of the engine."""
    marker = tmp_path / "ran"
    extra = tmp_path / "included.gitconfig"
    extra.write_text("")
    run(repo, "config", "include.path", str(extra))
    _, directory, baseline = new_worktree(repo)
    assert g.is_clean(directory)  # the runner has now read the configuration once
    # planted after that first read: the runner must notice the included file changed
    extra.write_text(
        f"[filter \"evil\"]\n\tclean = sh -c 'echo clean >> {marker}; cat'\n"
        f"\tsmudge = sh -c 'echo smudge >> {marker}; cat'\n\trequired = true\n"
        f"[diff \"evil\"]\n\ttextconv = sh -c 'echo textconv >> {marker}; cat'\n"
        f"[merge \"evil\"]\n\tdriver = sh -c 'echo merge >> {marker}; false'\n"
    )
    (repo / ".git" / "info" / "attributes").write_text("* filter=evil diff=evil merge=evil\n")
    # the candidate's change and a competing change on the host: a real three-way merge
    (directory / "base.txt").write_text("candidate\n")
    run(directory, "-c", "filter.evil.clean=", "-c", "filter.evil.required=false", "add", "base.txt")
    run(
        directory,
        "-c",
        "filter.evil.clean=",
        "-c",
        "filter.evil.required=false",
        "commit",
        "-q",
        "-m",
        "candidate",
    )
    candidate = run(directory, "rev-parse", "HEAD")
    (repo / "base.txt").write_text("host\n")
    os.utime(repo / "base.txt", (1, 1))  # stat data git must re-check by content
    run(repo, "-c", "filter.evil.clean=", "-c", "filter.evil.required=false", "commit", "-qam", "host")
    (repo / "base.txt").write_text("host, edited\n")

    g.host_snapshot(repo)
    g.diff(repo, baseline, candidate)
    g.changes(repo, baseline, candidate)
    g.has_changes(directory)
    g.is_clean(directory)
    run(repo, "-c", "filter.evil.clean=", "-c", "filter.evil.required=false", "checkout", "--", "base.txt")
    check = g.integration_check(repo, g.branch_name("race1", "alpha", 1), candidate)
    _, other, _ = new_worktree(repo, "beta")
    g.remove_worktree(repo, other)

    assert not marker.exists(), marker.read_text()
    assert check.status == "conflict"  # the driver is replaced by one that always conflicts


def test_the_engines_git_ignores_git_variables_of_its_environment(repo, tmp_path, monkeypatch):
    elsewhere = make_repo(tmp_path / "elsewhere")
    monkeypatch.setenv("GIT_DIR", str(elsewhere / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(elsewhere))
    monkeypatch.setenv("GIT_INDEX_FILE", ".git/index")
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'core.hooksPath'='/nonexistent'")
    head = run(repo, "--git-dir", str(repo / ".git"), "rev-parse", "HEAD")
    assert g.resolve_commit(repo) == head
    _branch, directory, _ = new_worktree(repo)
    assert g.head(directory) == head
    assert g.repository_root(directory) == directory


def test_a_driver_whose_name_holds_an_equals_sign_is_switched_off_too(repo, tmp_path):
    """`-c filter.a=b.clean=` would split at the wrong "=": the settings travel by key and value."""
    marker = tmp_path / "ran"
    _, directory, _ = new_worktree(repo)
    run(repo, "config", "filter.a=b.clean", f"sh -c 'echo clean >> {marker}; cat'")
    (repo / ".git" / "info" / "attributes").write_text("*.txt filter=a=b\n")
    (directory / "new.txt").write_text("work\n")
    assert g.has_changes(directory)
    assert g.commit_all(directory, "on behalf")
    assert g.is_clean(directory)
    g.host_snapshot(repo)
    assert not marker.exists(), marker.read_text()


def test_drivers_of_the_users_own_configuration_still_apply(repo, tmp_path):
    """A global filter (Git LFS's smudge is one) is the user's, out of a contained candidate's
    reach: the engine's checkout keeps applying it, while the repository's own are off."""
    home = Path(os.environ["HOME"])
    (home / ".gitconfig").write_text('[filter "upper"]\n\tsmudge = tr a-z A-Z\n\tclean = cat\n')
    (repo / ".gitattributes").write_text("*.txt filter=upper\n")
    run(repo, "add", ".gitattributes")
    run(repo, "commit", "-qm", "attributes")
    _, directory, _ = new_worktree(repo)
    assert (directory / "base.txt").read_text() == "BASE\n"


def test_an_attempt_never_starts_on_a_branch_planted_ahead_of_the_baseline(repo):
    baseline = g.resolve_commit(repo)
    branch = g.branch_name("race1", "next", 1)
    # what a candidate of the unisolated sandbox can do to the next fallback candidate
    (repo / "planted.txt").write_text("a result nobody raced for\n")
    run(repo, "add", "planted.txt")
    run(repo, "commit", "-qm", "planted")
    planted = run(repo, "rev-parse", "HEAD")
    run(repo, "reset", "-q", "--hard", baseline)
    run(repo, "branch", branch, planted)
    directory = g.worktree_directory(repo, "next", branch)
    with pytest.raises(g.GitError, match=f"already exists at {planted[:12]}, not at the baseline"):
        g.add_worktree(repo, branch, directory, baseline)
    assert run(repo, "rev-parse", branch) == planted  # left as found, for the operator to look at
    assert not directory.exists()
    # control: the same branch at the baseline (an allocation a crash cut short) is taken
    run(repo, "branch", "-f", branch, baseline)
    g.add_worktree(repo, branch, directory, baseline)
    assert g.head(directory) == baseline
