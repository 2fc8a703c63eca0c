"""Race rules not covered elsewhere, each on a real repository with real processes: the flight log
while a race runs, validation timeouts, stubborn losers, the environment, score failures, the
concurrency cap, cancelling during validation, fallback isolation and quota reset times."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import anyio
import psutil
import pytest

from outpost_tui.engine import (
    CandidateSpec,
    CandidateStatus,
    EventKind,
    RaceError,
    RaceStatus,
    build_spec,
    run_race,
    run_race_async,
)
from outpost_tui.engine.agents.command import ProtocolDecoder
from outpost_tui.engine.core.spec import SandboxSpec, ValidateSpec
from outpost_tui.engine.racefile import load_race
from tests.conftest import HOST_PID, alive, cmd, git, pids

DEADLINE = 30  # seconds a condition may take on a loaded machine before the test fails


async def until(condition, what: str, seconds: float = DEADLINE) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await anyio.sleep(0.01)


def jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(autouse=True)
def no_orphan_or_zombie_after_a_race():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert left == [], [(p.pid, p.name(), p.status()) for p in left]


# --- the flight log --------------------------------------------------------------------------


def test_flight_log_is_written_while_the_agent_still_runs(repo, tmp_path):
    ready, release = tmp_path / "ready", tmp_path / "release"
    seen: dict[str, list[dict]] = {}

    async def scenario():
        holder = {}

        async def inspect_then_release():
            await until(ready.exists, "the agent to start")
            run_dir = repo / ".outpost" / "runs" / holder["race"].id
            attempt_log = run_dir / "a.1.jsonl"

            def has_log_line() -> bool:
                return any("fake agent started" in event.get("lines", ()) for event in jsonl(attempt_log))

            # The agent printed its line and now sits silent: the line is flushed within a second.
            await until(has_log_line, "the agent's log line in the flight log", seconds=10)
            seen["attempt"] = jsonl(attempt_log)
            seen["race"] = jsonl(run_dir / "race.jsonl")
            release.touch()

        async with anyio.create_task_group() as group:
            group.start_soon(inspect_then_release)
            result = await run_race_async(
                build_spec(
                    repository=repo,
                    candidates=[
                        cmd(
                            "a",
                            "--ready",
                            str(ready),
                            "--wait-file",
                            str(release),
                            "--write",
                            "a.txt",
                            "--commit",
                        )
                    ],
                    validate=["true"],
                ),
                on_start=lambda race: holder.setdefault("race", race),
            )
        return result

    result = anyio.run(scenario)
    assert result.status is RaceStatus.WINNER
    kinds = [event["kind"] for event in seen["attempt"]]
    assert kinds[:3] == ["admitted", "worktree-ready", "agent-started"]
    assert "settled" not in kinds and "agent-exited" not in kinds  # it really was still running
    assert [event["kind"] for event in seen["race"]][:1] == ["race-started"]


def test_every_directory_the_flight_log_creates_is_private(repo):
    old = os.umask(0o022)
    try:
        result = run_race(
            build_spec(repository=repo, candidates=[cmd("a", "--write", "a", "--commit")], validate=["true"])
        )
    finally:
        os.umask(old)
    runs = repo / ".outpost" / "runs"
    for directory in (repo / ".outpost", runs, runs / result.id):
        assert oct(directory.stat().st_mode & 0o777) == "0o700", directory


# --- validation, cancellation, environment ------------------------------------------------------


def test_validation_timeout_rejects_the_candidate_with_the_reason(repo, tmp_path):
    started = time.monotonic()
    result = run_race(
        build_spec(
            repository=repo,
            candidates=[cmd("a", "--write", "a", "--commit")],
            validate=ValidateSpec(command=("sleep", "300"), timeout=1),
        )
    )
    record = result.candidates[0]
    assert result.status is RaceStatus.NO_WINNER
    assert record.status is CandidateStatus.REJECTED
    assert record.validation.status == "timeout"
    assert "validation timed out after 1s" in record.error
    assert time.monotonic() - started < 60


@pytest.mark.alone  # times the TERM grace and the KILL to within seconds
def test_a_loser_ignoring_term_is_killed(repo, tmp_path):
    pidfile, got_term, loser_ready = tmp_path / "loser.pid", tmp_path / "got-term", tmp_path / "ready"
    settled_at: dict[str, float] = {}

    def on_event(event) -> None:
        if event.kind is EventKind.SETTLED:
            settled_at[event.key] = time.monotonic()

    result = run_race(
        build_spec(
            repository=repo,
            candidates=[
                cmd(
                    "stubborn",
                    "--ignore-term",
                    str(got_term),
                    "--pidfile",
                    str(pidfile),
                    "--spawn-child",
                    "--touch",
                    str(loser_ready),
                    "--hang",
                ),
                cmd("winner", "--wait-file", str(loser_ready), "--write", "fix.txt", "--commit"),
            ],
            validate=["true"],
        ),
        on_event=on_event,
    )
    assert result.winner.key == "winner"
    loser = result.candidates[0]
    assert loser.status is CandidateStatus.CANCELLED
    assert got_term.exists()  # it was asked politely first, and refused
    assert not any(alive(pid) for pid in pids(pidfile))  # then killed, with its child
    assert settled_at["stubborn"] - settled_at["winner"] < 6  # TERM, a 2 s grace, then KILL


def test_candidate_env_and_tz_reach_the_agent_and_validation(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("TZ", "America/Recife")  # the engine must set UTC, not inherit this
    agent_seen, validation_seen = tmp_path / "agent-env", tmp_path / "validation-env"
    agent = (
        "import os, subprocess\n"
        f"open({str(agent_seen)!r}, 'w').write(os.environ.get('RACE_VAR', '') + '|' + os.environ['TZ'])\n"
        "open('a.txt', 'w').write('a')\n"
        "subprocess.run(['git', 'add', '-A'], check=True)\n"
        "subprocess.run(['git', '-c', 'user.name=t', '-c', 'user.email=t@e.invalid', 'commit', "
        "'-qm', 'a'], check=True)\n"
    )
    # the candidate's validation writes what it saw; the baseline's, run alongside, does not
    check = f'test -n "$OUTPOST_CANDIDATE" || exit 0; printf "%s|%s" "$RACE_VAR" "$TZ" > {validation_seen}'
    race_file = tmp_path / "race.toml"
    race_file.write_text(f"""
[race]
repository = {json.dumps(str(repo))}
brief = "go"

[validate]
command = {json.dumps(["sh", "-c", check])}

[[candidates]]
key = "a"
agent = "command"
command = {json.dumps([sys.executable, "-c", agent])}
env = {{ RACE_VAR = "from the race file" }}
""")
    result = run_race(load_race(race_file))
    assert result.status is RaceStatus.WINNER
    assert agent_seen.read_text() == "from the race file|UTC"
    assert validation_seen.read_text() == "from the race file|UTC"


def test_cancelling_during_validation_leaves_no_validation_process(repo, tmp_path):
    pidfile = tmp_path / "validation.pid"
    # the shell and its sleep, as the tests see them (a pid namespace has its own numbers)
    # only the candidate's validation (the baseline's runs the same command at the same time,
    # and two writers of one file leave it holed)
    script = (
        'test -n "$OUTPOST_CANDIDATE" || exit 0; '
        f"sleep 300 & {{ python3 {HOST_PID}; python3 {HOST_PID} --siblings; }} > {pidfile}.tmp"
        f" && mv {pidfile}.tmp {pidfile}; wait"
    )

    async def scenario():
        holder = {}

        async def cancel_once_validating():
            await until(pidfile.exists, "validation to start")
            holder["race"].cancel("a")

        async with anyio.create_task_group() as group:
            group.start_soon(cancel_once_validating)
            return await run_race_async(
                build_spec(
                    repository=repo,
                    candidates=[cmd("a", "--write", "a.txt", "--commit")],
                    validate=["sh", "-c", script],
                ),
                on_start=lambda race: holder.setdefault("race", race),
            )

    result = anyio.run(scenario)
    assert result.candidates[0].status is CandidateStatus.CANCELLED
    validation_pids = pids(pidfile)
    assert len(validation_pids) == 2  # the shell and its background child
    assert not any(alive(pid) for pid in validation_pids)


# --- scoring ---------------------------------------------------------------------------------------


def test_score_command_failures_fail_only_that_candidate(repo):
    score = ["sh", "-c", 'if [ "$(cat score.txt)" = crash ]; then exit 3; fi; cat score.txt']
    result = run_race(
        build_spec(
            repository=repo,
            candidates=[
                cmd("crash", "--write", "score.txt", "--content", "crash", "--commit"),
                cmd("words", "--write", "score.txt", "--content", "quite a lot", "--commit"),
                cmd("number", "--write", "score.txt", "--content", "4", "--commit"),
            ],
            validate=["true"],
            score=score,
        )
    )
    by_key = {record.key: record for record in result.candidates}
    assert result.status is RaceStatus.WINNER and result.winner.key == "number"
    assert by_key["number"].score == 4
    assert by_key["crash"].status is CandidateStatus.FAILED
    assert by_key["crash"].error == "score command failed (exit code 3)"
    assert by_key["words"].status is CandidateStatus.FAILED
    assert by_key["words"].error == "score must be a number, got 'quite a lot'"


def test_a_score_callable_that_raises_fails_only_that_candidate(repo):
    def score(context):
        if context.key == "raises":
            raise RuntimeError("boom")
        return 1

    result = run_race(
        build_spec(
            repository=repo,
            candidates=[
                cmd("raises", "--write", "a.txt", "--commit"),
                cmd("fine", "--write", "b.txt", "--commit"),
            ],
            validate=["true"],
            score=score,
        )
    )
    by_key = {record.key: record for record in result.candidates}
    assert result.winner.key == "fine"
    assert by_key["raises"].status is CandidateStatus.FAILED
    assert by_key["raises"].error == "score raised RuntimeError: boom"


# --- admission -------------------------------------------------------------------------------------


def test_concurrency_cap_holds_and_admits_in_declared_order(repo, tmp_path):
    release = tmp_path / "release"
    started: set[str] = set()
    running: set[str] = set()
    most = [0]
    admitted: list[str] = []

    def on_event(event) -> None:
        if event.kind is EventKind.ADMITTED:
            admitted.append(event.key)
            running.add(event.key)
            most[0] = max(most[0], len(running))
        elif event.kind is EventKind.SETTLED:
            running.discard(event.key)
        elif event.kind is EventKind.AGENT_STARTED:
            started.add(event.key)
            # The first two hold until both run: the cap of 2 is reached for certain, and a
            # third admitted meanwhile would show up as three running.
            if {"a", "b"} <= started:
                release.touch()

    hold = ("--wait-file", str(release))
    result = run_race(
        build_spec(
            repository=repo,
            concurrency=2,
            candidates=[
                cmd("a", *hold, "--write", "a", "--commit"),
                cmd("b", *hold, "--write", "b", "--commit"),
                cmd("c", "--write", "c", "--commit"),
                cmd("d", "--write", "d", "--commit"),
            ],
            validate=["false"],
        ),
        on_event=on_event,
    )
    assert result.status is RaceStatus.NO_WINNER
    assert admitted == ["a", "b", "c", "d"]
    assert most[0] == 2


def test_fallback_attempts_start_from_the_baseline(repo):
    result = run_race(
        build_spec(
            repository=repo,
            mode="fallback",
            candidates=[
                cmd("first", "--write", "first.txt", "--content", "x", "--commit"),
                cmd("second", "--write", "second.txt", "--content", "y", "--commit"),
            ],
            validate=["sh", "-c", "test -f second.txt"],
        )
    )
    first, second = result.candidates
    assert first.status is CandidateStatus.REJECTED and second.status is CandidateStatus.WINNER
    assert len(second.commits) == 1
    assert git(repo, "rev-parse", f"{second.commit}^") == result.baseline
    files = git(repo, "ls-tree", "-r", "--name-only", second.commit).split()
    assert "second.txt" in files and "first.txt" not in files


# --- quota reset times from the command protocol -------------------------------------------------


def test_command_quota_reset_time_is_made_absolute_utc(repo):
    result = run_race(
        build_spec(
            repository=repo,
            candidates=[cmd("a", "--quota", "limit reached", "--reset-at", "2030-01-01T07:00:00+02:00")],
        )
    )
    assert result.status is RaceStatus.QUOTA
    assert result.candidates[0].quota == {"message": "limit reached", "reset_at": "2030-01-01T05:00:00Z"}


@pytest.mark.parametrize(
    "reset_at, expected",
    [
        (1893474000, "2030-01-01T05:00:00Z"),
        ("2030-01-01T05:00:00Z", "2030-01-01T05:00:00Z"),
        ("2030-01-01 05:00", "2030-01-01T05:00:00Z"),
    ],
)
def test_command_quota_reset_time_forms(reset_at, expected):
    decoder = ProtocolDecoder(CandidateSpec("a", "command", "b", command=("x",), env={}))
    decoder.decode([json.dumps({"kind": "quota", "message": "limit", "reset_at": reset_at})])
    assert decoder.quota.reset_at == expected and decoder.quota.message == "limit"


@pytest.mark.parametrize("reset_at", ["whenever the moon is full", "2030-13-45T00:00:00Z", True])
def test_an_unreadable_quota_reset_time_is_dropped_and_kept_as_text(reset_at):
    decoder = ProtocolDecoder(CandidateSpec("a", "command", "b", command=("x",), env={}))
    events = decoder.decode([json.dumps({"kind": "quota", "message": "limit", "reset_at": reset_at})])
    assert decoder.quota.reset_at is None
    assert decoder.quota.message == f"limit (reset time not understood: {reset_at})"
    assert events[0].data == {"message": decoder.quota.message, "reset_at": None}


@pytest.mark.parametrize("in_the_way", ["workspaces", "runs"])
def test_a_file_where_the_race_writes_is_refused_before_anything_starts(repo, in_the_way):
    (repo / ".outpost").mkdir(mode=0o700)
    (repo / ".outpost" / in_the_way).write_text("not a directory\n")
    spec = build_spec(
        repository=repo, candidates=[cmd("a", "--write", "a.txt", "--commit")], validate=["true"]
    )
    with pytest.raises(RaceError, match=f"cannot use .*{in_the_way}: exists and is not a directory"):
        run_race(spec)
    assert git(repo, "branch", "--list", "outpost/*") == ""


@pytest.mark.parametrize("where", ["validate", "score"])
def test_a_missing_validation_or_score_program_is_refused_before_any_agent_runs(repo, tmp_path, where):
    started = tmp_path / "agent-ran"
    options = (
        {"validate": ["no-such-test-runner-xyz"]}
        if where == "validate"
        else {"validate": ["true"], "select": "best", "score": ["no-such-scorer-xyz"]}
    )
    spec = build_spec(repository=repo, candidates=[cmd("a", "--touch", str(started), "--commit")], **options)
    refused = rf"{where}.command: program 'no-such-[a-z-]+-xyz' not found"
    with pytest.raises(RaceError, match=refused):
        run_race(spec)
    assert not started.exists()


def test_a_validation_program_missing_in_the_sandbox_is_not_called_an_agent(repo):
    """A program that vanishes from the sandbox is reported as the validation's, not an agent's."""
    spec = build_spec(
        repository=repo, candidates=[cmd("a", "--write", "a.txt", "--commit")], validate=["./run-tests.sh"]
    )
    record = run_race(spec).candidates[0]
    assert record.validation.status == "error"
    assert "program './run-tests.sh' not found" in record.validation.reason
    assert "agent program" not in record.validation.reason


@pytest.mark.parametrize("isolation", ["none", "bubblewrap"])
def test_a_validation_that_breaks_its_checkout_cannot_change_the_graded_result(repo, tmp_path, isolation):
    """`a`'s validation rewrites the git link of the checkout it runs in (unisolated; isolated,
    the link is read-only and the write fails). Its result was fixed before grading, in a
    checkout of the engine's own: `a` still wins with the commit it was graded on, its own
    worktree is intact, and the grading checkout is gone."""
    breaks_it = 'if [ "$OUTPOST_CANDIDATE" = a ]; then echo "gitdir: /nonexistent" > .git; fi; exit 0'
    spec = build_spec(
        repository=repo,
        candidates=[cmd("a", "--write", "a.txt", "--commit")],
        validate=["sh", "-c", breaks_it],
        sandbox=SandboxSpec(isolation=isolation),
    )
    result = run_race(spec)
    a = result.candidates[0]
    assert a.status is CandidateStatus.WINNER and a.error is None
    assert a.commit == a.verdict["commit"] == git(repo, "rev-parse", a.branch)
    assert (
        "gitdir:" in (Path(a.directory) / ".git").read_text()
        if Path(a.directory).exists()
        else a.retained_directory is None
    )
    assert not list((repo / ".outpost" / "workspaces").glob("*.grading"))
