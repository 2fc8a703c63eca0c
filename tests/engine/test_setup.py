"""[setup] on real repositories: a venv built offline, the user's untracked files, the setup cache,
setup failure, and ports held by two candidates' servers at once."""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from outpost_tui.engine import CandidateStatus, EventKind, RaceStatus, build_spec, run_race
from outpost_tui.engine.core.spec import CandidateSpec, SetupSpec
from outpost_tui.engine.racing import setup as setups
from tests.agents.replay import path_with, write_fake
from tests.conftest import cmd, git
from tests.projects import bump_dependency, python_project

VENV_SETUP = SetupSpec(
    command=("sh", "setup.sh"), cache=(".venv",), cache_key=("requirements*.txt", "wheels/*.whl")
)
CHECK = (".venv/bin/python", "check.py")


@pytest.fixture(autouse=True)
def nothing_left_running():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert left == [], [(p.pid, p.name(), p.status()) for p in left]


def best_of(repo: Path, *candidates: CandidateSpec, setup: SetupSpec = VENV_SETUP, **options):
    """Every candidate runs to its verdict (select best), so each one's setup can be checked."""
    return build_spec(
        repository=repo,
        candidates=candidates,
        validate=list(CHECK),
        score=["echo", "1"],
        setup=setup,
        **options,
    )


def record(result, key):
    return next(c for c in result.candidates if c.key == key)


def test_venv_cache_is_built_once_copied_into_each_worktree_and_rebuilt_when_its_key_changes(tmp_path):
    repo = python_project(tmp_path / "project")
    events = []
    spec = best_of(repo, cmd("a", "--write", "a.txt", "--commit"), cmd("b", "--write", "b.txt", "--commit"))

    first = run_race(spec, on_event=events.append)
    assert first.status is RaceStatus.WINNER, [c.error for c in first.candidates]
    a, b = record(first, "a"), record(first, "b")
    # the project's own check ran in each worktree's venv and read the copied .env: both passed
    assert a.validation.status == b.validation.status == "passed"
    # built once per key: by whichever checkout took it first (the baseline's grading checkout,
    # set up beside the candidates, or one of theirs), and a hit everywhere else
    built = [e for e in events if e.kind is EventKind.SETUP_FINISHED and e.cache == "built"]
    assert len(built) == 1
    assert sorted([a.setup["cache"], b.setup["cache"]]) in (["built", "hit"], ["hit", "hit"])
    assert a.setup["status"] == b.setup["status"] == "passed"
    assert a.setup["copied"] == b.setup["copied"] == [".env"]  # never private.key
    entries = [p for p in (repo / ".outpost" / "cache").iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1 and (entries[0] / ".venv" / "bin").is_dir()
    # the setup command's output is in the candidate's log
    setup_lines = [
        line for e in events if e.kind is EventKind.LOG and e.stream == "setup" for line in e.lines
    ]
    assert any(line.startswith("setup done in ") for line in setup_lines)
    # nothing setup put there was committed, and the worktrees holding only setup's files went
    for candidate in (a, b):
        tree = git(repo, "ls-tree", "-r", "--name-only", candidate.commit).split("\n")
        assert ".env" not in tree and not any(path.startswith(".venv") for path in tree)
        assert candidate.retained_directory is None
        assert not Path(candidate.directory).exists()

    second = run_race(spec)
    assert [record(second, k).setup["cache"] for k in "ab"] == ["hit", "hit"]
    assert all(c.validation.status == "passed" for c in second.candidates)

    bump_dependency(repo, "2.0", 7)
    events.clear()
    third = run_race(spec, on_event=events.append)
    assert len([e for e in events if e.kind is EventKind.SETUP_FINISHED and e.cache == "built"]) == 1
    # the copied venv holds the new version: the check (expecting 7) passed in both worktrees
    assert all(c.validation.status == "passed" for c in third.candidates), [
        c.validation.output for c in third.candidates
    ]
    entries = [p for p in (repo / ".outpost" / "cache").iterdir() if not p.name.startswith(".")]
    assert len(entries) == 2
    # old keys' caches are pruned: the newest few stay
    for version, value in (("3.0", 3), ("4.0", 4)):
        bump_dependency(repo, version, value)
        events.clear()
        run_race(spec, on_event=events.append)  # built once, by the baseline's checkout or one of theirs
        assert [e.cache for e in events if e.kind is EventKind.SETUP_FINISHED].count("built") == 1
    entries = [p for p in (repo / ".outpost" / "cache").iterdir() if not p.name.startswith(".")]
    assert len(entries) == setups.CACHES_KEPT


def test_a_copied_venv_runs_its_own_scripts_not_the_builders(tmp_path):
    """A venv's scripts name their interpreter by absolute path: the copy must name its own."""
    repo = python_project(tmp_path / "project")
    script = ".venv/bin/where"
    setup = SetupSpec(
        command=(
            "sh",
            "-c",
            f"sh setup.sh && printf '#!%s/.venv/bin/python\\n"
            f'import sys; print(sys.prefix)\\n\' "$PWD" > {script} '
            f"&& chmod +x {script}",
        ),
        cache=(".venv",),
        cache_key=("requirements.txt",),
    )
    # build the cache with one race, then check a copy in another
    build = build_spec(
        repository=repo,
        candidates=[cmd("a", "--write", "a.txt", "--commit")],
        validate=["sh", "-c", f'test "$({script})" = "$PWD/.venv"'],
        setup=setup,
    )
    events = []
    run_race(build, on_event=events.append)  # by the baseline's grading checkout or the candidate's
    assert [e.cache for e in events if e.kind is EventKind.SETUP_FINISHED].count("built") == 1
    hit = run_race(build).candidates[0]
    assert hit.setup["cache"] == "hit"
    assert hit.validation.status == "passed", hit.validation.output


def test_setup_failure_fails_the_candidate_with_its_exit_and_output_and_its_agent_never_runs(repo, tmp_path):
    marker = tmp_path / "agent-ran"
    setup = SetupSpec(command=("sh", "-c", "echo preparing; echo 'cannot find libfoo' >&2; exit 3"))
    events = []
    spec = build_spec(
        repository=repo, candidates=[cmd("a", "--touch", str(marker))], validate=["true"], setup=setup
    )
    result = run_race(spec, on_event=events.append)

    candidate = result.candidates[0]
    assert result.status is RaceStatus.NO_WINNER
    assert candidate.status is CandidateStatus.FAILED
    assert candidate.error.startswith("setup failed (exit 3): ")
    assert "cannot find libfoo" in candidate.error
    assert candidate.setup["status"] == "failed" and candidate.setup["exit_code"] == 3
    assert "preparing" in candidate.setup["output"]
    assert not marker.exists()
    assert EventKind.AGENT_STARTED not in [e.kind for e in events]
    assert candidate.usage.tokens == 0 and candidate.validation.status == "not-run"
    assert candidate.retained_directory  # a failed attempt's worktree is kept to look at


def baseline_setup_outlived_by_the_race(marker: Path) -> SetupSpec:
    """Setup that hangs in the baseline's grading checkout, and fails a candidate's once the
    baseline's is under way: the race ends while the baseline's setup still runs."""
    script = (
        f'if [ "$OUTPOST_BASELINE" = 1 ]; then : > {marker}; exec sleep 120; fi; '
        f"while [ ! -e {marker} ]; do sleep 0.05; done; exit 4"
    )
    return SetupSpec(command=("sh", "-c", script))


def test_a_race_ending_during_the_baselines_setup_leaves_no_grading_checkout(repo, tmp_path):
    # The checkout was entered only once its setup was over: cancelled during setup, it was never
    # exited, so its directory (and its sandbox, a container under a container sandbox) stayed.
    marker = tmp_path / "baseline-setting-up"
    spec = build_spec(
        repository=repo,
        candidates=[cmd("a")],
        validate=["true"],
        setup=baseline_setup_outlived_by_the_race(marker),
    )
    result = run_race(spec)
    assert marker.exists()  # the baseline's setup was running when the candidate failed
    assert record(result, "a").error.startswith("setup failed (exit 4)")
    assert not list((repo / ".outpost" / "workspaces").glob("*.grading"))
    assert ".grading" not in git(repo, "worktree", "list")
    # and nothing it started is left (the autouse fixture checks this process's children)


def test_setup_timeout_and_missing_program_fail_clearly(repo):
    timed = run_race(
        build_spec(
            repository=repo,
            candidates=[cmd("a")],
            validate=["true"],
            setup=SetupSpec(command=("sleep", "30"), timeout=0.5),
        )
    )
    assert timed.candidates[0].error == "setup timed out after 0.5s"
    assert timed.candidates[0].setup["status"] == "timeout"


def test_copied_files_are_never_committed_on_the_candidates_behalf(tmp_path):
    """Codex leaves its edit uncommitted and outpost-tui commits it: never the copied .env, which
    this project does not even ignore."""
    repo = python_project(tmp_path / "project")
    (repo / ".gitignore").write_text(".venv/\n")
    git(repo, "commit", "-qam", ".env is not ignored here")
    bin_dir = tmp_path / "bin"
    write_fake(
        bin_dir,
        "codex",
        record=tmp_path / "codex.json",
        transcript_name="codex_fix.jsonl",
        edits={"fix.txt": "fixed\n"},
    )
    codex = CandidateSpec("codex", "codex", "Fix it.", env={"PATH": path_with(bin_dir)})
    spec = build_spec(repository=repo, candidates=[codex], validate=["true"], setup=SetupSpec(copy=(".env",)))
    result = run_race(spec)
    winner = result.candidates[0]
    assert winner.status is CandidateStatus.WINNER, winner.error
    assert winner.committed_on_behalf is True
    assert git(repo, "show", "--name-only", "--format=", winner.commit).split() == ["fix.txt"]
    assert winner.review == []
    # the copy is not the candidate's work, but it is in the worktree unchanged: kept, since git
    # status shows it (untracked, not ignored) and only an unchanged copy may go with the worktree
    assert winner.setup["copied"] == [".env"]


def test_a_candidate_that_commits_a_copied_file_itself_is_flagged_for_review(tmp_path):
    repo = python_project(tmp_path / "project")
    (repo / ".gitignore").write_text(".venv/\n")
    git(repo, "commit", "-qam", ".env is not ignored here")
    spec = build_spec(
        repository=repo,
        candidates=[cmd("a", "--write", "a.txt", "--commit")],
        validate=["true"],
        setup=SetupSpec(copy=(".env",)),
    )
    winner = run_race(spec).candidates[0]
    assert winner.status is CandidateStatus.WINNER
    assert ".env" in git(repo, "show", "--name-only", "--format=", winner.commit).split()
    assert any(
        flag.startswith("commits files setup put in its worktree") and ".env" in flag
        for flag in winner.review
    ), winner.review


def test_a_worktree_whose_copied_file_changed_is_kept(tmp_path):
    repo = python_project(tmp_path / "project")
    spec = build_spec(
        repository=repo,
        candidates=[
            cmd("edits-env", "--write", ".env", "--content", "API_TOKEN=changed\n"),
        ],
        validate=["false"],
        setup=SetupSpec(copy=(".env",)),
    )
    result = run_race(spec)
    candidate = result.candidates[0]
    assert candidate.status is CandidateStatus.REJECTED
    kept = Path(candidate.retained_directory)
    assert (kept / ".env").read_text() == "API_TOKEN=changed\n"


def test_two_candidates_servers_listen_on_their_own_ports_at_once(repo, tmp_path):
    server = tmp_path / "server.py"
    server.write_text(
        textwrap.dedent("""\
        import json, os, socket, subprocess, sys, time
        key = os.environ["OUTPOST_CANDIDATE"]
        ports = [int(os.environ["OUTPOST_PORT"]), int(os.environ["OUTPOST_PORT_1"])]
        servers = []
        for port in ports:
            server = socket.socket()
            server.bind(("127.0.0.1", port))   # fails if anyone else holds it
            server.listen()
            servers.append(server)
        out = sys.argv[1]
        with open(os.path.join(out, key + ".tmp"), "w") as handle:
            json.dump(ports, handle)
        os.replace(os.path.join(out, key + ".tmp"), os.path.join(out, key + ".json"))
        other = "b" if key == "a" else "a"
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(out, other + ".json")):   # both up at once
            if time.monotonic() > deadline:
                sys.exit("the other server never came up")
            time.sleep(0.01)
        for port in ports:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        open("served.txt", "w").write(str(ports))
        subprocess.run(["git", "add", "served.txt"], check=True)
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
                       check=True)
        """)
    )
    out = tmp_path / "out"
    out.mkdir()
    candidates = [
        CandidateSpec(key, "command", "serve", command=(sys.executable, str(server), str(out)))
        for key in "ab"
    ]
    spec = build_spec(
        repository=repo,
        candidates=candidates,
        validate=["true"],
        score=["echo", "1"],
        setup=SetupSpec(ports=2),
    )
    result = run_race(spec)
    assert all(c.validation.status == "passed" for c in result.candidates), [
        (c.key, c.error) for c in result.candidates
    ]
    a, b = (json.loads((out / f"{key}.json").read_text()) for key in "ab")
    assert len(set(a + b)) == 4
    assert record(result, "a").setup["ports"] == a and record(result, "b").setup["ports"] == b
    # released with the attempts: each port can be bound again
    assert setups._reserved == set()
    for port in a + b:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))


def test_ports_are_distinct_across_reservations_while_held():
    first = setups.PortReservation.take(3)
    second = setups.PortReservation.take(3)
    try:
        assert len(set(first.ports + second.ports)) == 6
        assert setups.port_environment(first.ports) == {
            "OUTPOST_PORT": str(first.ports[0]),
            "OUTPOST_PORT_1": str(first.ports[1]),
            "OUTPOST_PORT_2": str(first.ports[2]),
        }
    finally:
        first.release()
        second.release()
    assert setups._reserved == set()


def test_worktreeinclude_copies_ignored_files_it_names_and_nothing_tracked(tmp_path):
    repo = python_project(tmp_path / "project")
    (repo / "config").mkdir()
    (repo / "config" / "local.toml").write_text("debug = true\n")
    (repo / ".gitignore").write_text(".venv/\n.env\n*.key\nconfig/local.toml\n")
    (repo / ".worktreeinclude").write_text(".env\nconfig/\n# comments are fine\nexpected.txt\n")
    git(repo, "commit", "-qam", "include config")
    assert setups.files_to_copy(repo, ()) == [".env", "config/local.toml"]
    # [setup] copy takes untracked files that are not ignored too, by git glob
    (repo / "notes.txt").write_text("mine\n")
    assert setups.files_to_copy(repo, ("*.txt",)) == [".env", "config/local.toml", "notes.txt"]


def test_a_fresh_clone_of_the_cache_is_independent_of_it(tmp_path):
    """Candidates' writes never reach the cache or another worktree (no hard links)."""
    source = tmp_path / "src"
    (source / "bin").mkdir(parents=True)
    (source / "bin" / "tool").write_text("v1\n")
    os.symlink("tool", source / "bin" / "link")
    target = tmp_path / "dst"
    setups.clone_tree(source, target)
    (target / "bin" / "tool").write_text("changed\n")
    assert (source / "bin" / "tool").read_text() == "v1\n"
    assert os.readlink(target / "bin" / "link") == "tool"
    assert os.stat(source / "bin" / "tool").st_ino != os.stat(target / "bin" / "tool").st_ino


def test_setup_runs_concurrently_across_candidates(repo, tmp_path):
    """Each candidate's setup waits for the other's to have started: only concurrent setups pass."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    wait_for_both = (
        f"touch {barrier}/$OUTPOST_CANDIDATE; i=0; "
        f'while [ "$(ls {barrier} | wc -l)" -lt 2 ]; do i=$((i+1)); '
        f"[ $i -gt 3000 ] && exit 9; sleep 0.01; done"
    )
    spec = build_spec(
        repository=repo,
        candidates=[cmd("a", "--write", "a", "--commit"), cmd("b", "--write", "b", "--commit")],
        validate=["true"],
        score=["echo", "1"],
        setup=SetupSpec(command=("sh", "-c", wait_for_both)),
    )
    started = time.monotonic()
    result = run_race(spec)
    assert [c.setup["status"] for c in result.candidates] == ["passed", "passed"]
    assert time.monotonic() - started < 60


def test_the_review_of_a_kept_worktree_never_shows_setup_files_as_its_work(tmp_path):
    """A kept worktree's whole work (the review screen's diff) leaves out what setup put there."""
    from outpost_tui.engine.kept.comparison import touched
    from outpost_tui.engine.kept.retained import retained, whole_work

    repo = python_project(tmp_path / "project")
    (repo / ".gitignore").write_text(".venv/\n")  # .env is untracked and not ignored here
    git(repo, "commit", "-qam", ".env is not ignored here")
    spec = build_spec(
        repository=repo,
        candidates=[cmd("a", "--write", "notes.txt", "--dirty")],
        validate=["true"],
        setup=SetupSpec(copy=(".env",)),
    )
    result = run_race(spec)
    candidate = result.candidates[0]
    assert candidate.setup["files"] == [".env"]
    assert candidate.retained_directory  # it left uncommitted work
    row = next(a for race in retained(repo) for a in race.attempts if a.key == "a")
    assert row.setup_files == [".env"]
    changed = touched(repo, result.baseline, whole_work(repo, row))
    assert sorted(changed) == ["notes.txt", "untracked-notes.txt"]
