"""The race, fallback and best-of-N semantics, on real repositories with real processes."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from pathlib import Path

import anyio
import psutil
import pytest

from outpost_tui.engine import (
    BudgetSpec,
    CandidateSpec,
    CandidateStatus,
    EventKind,
    RaceError,
    RaceStatus,
    TokenLimits,
    build_spec,
    run_race,
    run_race_async,
)
from outpost_tui.engine.core.spec import SandboxSpec, ValidateSpec
from tests.conftest import alive, cmd, git, pids


def our_children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def children_left(before: set[int]) -> list[tuple[int, str, list[str], str]]:
    """This process's children that were not there `before` (an earlier test's git session may
    linger up to its idle time in the same worker): pid, name, command line, status."""
    found = []
    for child in psutil.Process().children(recursive=True):
        if child.pid not in before:
            with contextlib.suppress(psutil.Error):
                found.append((child.pid, child.name(), child.cmdline(), child.status()))
    return found


@pytest.fixture(autouse=True)
def no_orphan_or_zombie_after_a_race():
    """After every race in this file, no process it started is left: not running, not a zombie."""
    before = our_children()
    yield
    assert children_left(before) == []


def test_first_acceptable_wins_and_losers_are_gone_at_once(repo, tmp_path):
    before = our_children()
    signal_file = tmp_path / "loser-started"
    loser_pids = tmp_path / "loser.pid"
    spec = build_spec(
        repository=repo,
        candidates=[
            cmd(
                "loser", "--pidfile", str(loser_pids), "--spawn-child", "--touch", str(signal_file), "--hang"
            ),
            cmd("winner", "--wait-file", str(signal_file), "--write", "fix.txt", "--commit"),
        ],
        validate=["git", "diff", "--quiet", "HEAD"],
    )
    started = time.monotonic()
    result = run_race(spec)
    elapsed = time.monotonic() - started

    assert result.status is RaceStatus.WINNER
    assert result.winner.key == "winner"
    loser = result.candidates[0]
    assert loser.status is CandidateStatus.CANCELLED
    assert "another candidate won" in loser.error
    # Both the loser and the child it started in the background are gone, right away.
    assert not any(alive(pid) for pid in pids(loser_pids))
    assert elapsed < 20
    assert children_left(before) == []


def test_result_records_branch_commit_commits_and_integration(repo):
    spec = build_spec(
        repository=repo, candidates=[cmd("a", "--write", "a.txt", "--commit")], validate=["true"]
    )
    result = run_race(spec)
    winner = result.candidates[0]
    assert winner.branch == f"outpost/speculation/{result.id}/a/1"
    assert git(repo, "rev-parse", winner.branch) == winner.commit
    assert [c["subject"] for c in winner.commits] == ["fake agent change"]
    assert result.baseline == git(repo, "rev-parse", "HEAD")
    assert result.integration["status"] == "clean"
    data = result.to_json()
    for field in (
        "id",
        "status",
        "baseline",
        "winner",
        "candidates",
        "previous_attempts",
        "usage",
        "integration",
    ):
        assert field in data
    for field in (
        "key",
        "attempt",
        "status",
        "branch",
        "commit",
        "commits",
        "usage",
        "validation",
        "retained_directory",
        "cleanup",
        "error",
        "quota",
    ):
        assert field in data["candidates"][0]
    json.dumps(data)  # serialisable as it is


def test_no_winner_keeps_every_attempt_and_reason(repo):
    spec = build_spec(
        repository=repo,
        candidates=[
            cmd("crashes", "--exit", "3"),
            cmd("no-commit", "--write", "x.txt"),
            cmd("bad", "--write", "x.txt", "--commit"),
        ],
        validate=["false"],
    )
    result = run_race(spec)
    assert result.status is RaceStatus.NO_WINNER
    assert result.winner is None
    statuses = {c.key: (c.status, c.error) for c in result.candidates}
    assert statuses["crashes"][0] is CandidateStatus.FAILED
    assert "exited with code 3" in statuses["crashes"][1]
    assert statuses["no-commit"][0] is CandidateStatus.REJECTED
    assert "no commits" in statuses["no-commit"][1]
    assert statuses["bad"][0] is CandidateStatus.REJECTED
    assert "validation failed" in statuses["bad"][1]
    assert result.candidates[2].validation.exit_code == 1


def test_earlier_declared_slot_wins_a_tie(repo, tmp_path):
    gate = anyio.Event()
    arrived: list[str] = []

    async def check(context):
        arrived.append(context.key)
        # "first" finishes its work only once "second" is being validated: the order of
        # arrival does not depend on how fast either attempt's checkout is made
        (tmp_path / "go").touch()
        if len(arrived) == 2:
            gate.set()
        await gate.wait()
        return True

    spec = build_spec(
        repository=repo,
        concurrency=2,
        candidates=[
            cmd("first", "--wait-file", str(tmp_path / "go"), "--write", "a.txt", "--commit"),
            cmd("second", "--write", "b.txt", "--commit"),
        ],
        validate=check,
    )
    result = run_race(spec)
    assert arrived == ["second", "first"]  # the later slot was accepted first...
    assert result.winner.key == "first"  # ...but the tie goes to the earlier slot
    assert result.candidates[1].status is CandidateStatus.REJECTED
    assert "first won" in result.candidates[1].error


def test_never_started_candidates_are_skipped(repo):
    spec = build_spec(
        repository=repo,
        concurrency=1,
        candidates=[cmd("a", "--write", "a.txt", "--commit"), cmd("b"), cmd("c")],
        validate=["true"],
    )
    result = run_race(spec)
    assert [c.status for c in result.candidates] == [
        CandidateStatus.WINNER,
        CandidateStatus.SKIPPED,
        CandidateStatus.SKIPPED,
    ]
    assert result.candidates[1].branch is None
    assert "a won" in result.candidates[1].error
    assert result.attempts == 1
    assert git(repo, "branch", "--list", "outpost/*/b/*") == ""


def test_brief_reaches_the_agent_byte_for_byte(repo):
    brief = "fix it: 'quotes' \"double\" $(rm -rf /) `id` ; && | > \n\tnewline\n émoji 🚀 \\ %s\n"
    spec = build_spec(
        repository=repo,
        candidates=[cmd("a", "--write", "brief.txt", "--commit", brief=brief)],
        validate=["true"],
    )
    result = run_race(spec)
    assert git(repo, "show", f"{result.winner.commit}:brief.txt") + "\n" == brief.rstrip("\n") + "\n"
    raw = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "blob", f"{result.winner.commit}:brief.txt"],
        capture_output=True,
        check=True,
    ).stdout
    assert raw == brief.encode()


def test_invalid_key_is_refused_before_git_is_touched(repo):
    refs_before = git(repo, "for-each-ref")
    spec = build_spec(repository=repo, candidates=[cmd("../x")])
    with pytest.raises(RaceError, match="invalid"):
        run_race(spec)
    assert git(repo, "for-each-ref") == refs_before
    assert not (repo / ".outpost").exists()


def test_commits_made_during_validation_do_not_count_nor_do_uncommitted_edits(repo):
    seen = {}

    async def check(context):
        seen["directory"] = context.directory
        done = await context.run(
            [
                "sh",
                "-c",
                "echo v > during.txt && git add during.txt && "
                "git -c user.name=v -c user.email=v@x commit -qm during-validation "
                "&& echo dirty > uncommitted.txt",
            ]
        )
        return done.exit_code == 0

    spec = build_spec(
        repository=repo, candidates=[cmd("a", "--write", "a.txt", "--commit", "--dirty")], validate=check
    )
    result = run_race(spec)
    winner = result.winner
    # graded in a checkout of its own: the commit fixed when the agent ended is the one that won
    assert [c["subject"] for c in winner.commits] == ["fake agent change"]
    assert git(repo, "rev-parse", winner.branch) == winner.commit == winner.verdict["commit"]
    files = git(repo, "ls-tree", "--name-only", winner.commit).split()
    assert "during.txt" not in files and "uncommitted.txt" not in files
    assert seen["directory"] != Path(winner.directory) and not seen["directory"].exists()
    # The agent's uncommitted edit stays in its worktree, which is kept, not deleted.
    assert winner.retained_directory and Path(winner.retained_directory, "untracked-notes.txt").exists()


def test_clean_worktrees_are_removed_dirty_ones_kept_branches_always_kept(repo):
    spec = build_spec(
        repository=repo,
        candidates=[
            cmd("clean", "--write", "a.txt", "--commit"),
            cmd("dirty", "--write", "b.txt", "--commit", "--dirty"),
        ],
        validate=["false"],
    )
    result = run_race(spec)
    clean, dirty = result.candidates
    assert clean.retained_directory is None and not Path(clean.directory).exists()
    assert dirty.retained_directory == dirty.directory
    assert Path(dirty.directory, "untracked-notes.txt").exists()
    for record in (clean, dirty):
        assert git(repo, "rev-parse", record.branch) == record.commit
    # The host checkout stays clean: .outpost/ is excluded.
    assert git(repo, "status", "--porcelain") == ""
    assert "/.outpost/" in (repo / ".git" / "info" / "exclude").read_text()


def test_token_budget_reached_exactly_cancels_everyone(repo, tmp_path):
    spec = build_spec(
        repository=repo,
        budget=BudgetSpec(tokens=TokenLimits(output=30)),
        candidates=[
            cmd(
                "spender",
                "--wait-file",
                str(tmp_path / "b.pid"),
                "--usage",
                "1",
                "0",
                "0",
                "10",
                "--usage-times",
                "3",
                "--hang",
            ),
            cmd("bystander", "--pidfile", str(tmp_path / "b.pid"), "--hang"),
        ],
        validate=["true"],
    )
    result = run_race(spec)
    assert result.status is RaceStatus.BUDGET_EXHAUSTED
    assert "output 30 >= 30" in result.error
    assert all(c.status is CandidateStatus.CANCELLED for c in result.candidates)
    assert result.usage.output == 30
    assert not alive(pids(tmp_path / "b.pid")[0])


def test_zero_attempts_is_budget_exhausted_at_once(repo):
    spec = build_spec(repository=repo, budget=BudgetSpec(attempts=0), candidates=[cmd("a")])
    result = run_race(spec)
    assert result.status is RaceStatus.BUDGET_EXHAUSTED
    assert result.attempts == 0
    assert result.candidates[0].status is CandidateStatus.SKIPPED


def test_attempt_budget_stops_admissions_only(repo):
    spec = build_spec(
        repository=repo,
        concurrency=1,
        budget=BudgetSpec(attempts=1),
        candidates=[cmd("a", "--exit", "1"), cmd("b", "--write", "b", "--commit")],
        validate=["true"],
    )
    result = run_race(spec)
    assert result.status is RaceStatus.BUDGET_EXHAUSTED
    assert [c.status for c in result.candidates] == [CandidateStatus.FAILED, CandidateStatus.SKIPPED]
    assert "attempt budget" in result.candidates[1].error


def test_quota_ends_candidate_and_race_with_reset_time(repo):
    spec = build_spec(
        repository=repo,
        candidates=[
            cmd("a", "--quota", "You've hit your usage limit", "--reset-at", "2030-01-01T05:00:00+00:00"),
            cmd("b", "--exit", "2"),
        ],
        validate=["true"],
    )
    result = run_race(spec)
    assert result.status is RaceStatus.QUOTA
    assert result.candidates[0].status is CandidateStatus.QUOTA
    assert result.quota == {"message": "You've hit your usage limit", "reset_at": "2030-01-01T05:00:00Z"}


def test_winner_beats_quota(repo):
    spec = build_spec(
        repository=repo,
        candidates=[cmd("a", "--quota", "limit"), cmd("b", "--write", "b", "--commit")],
        validate=["true"],
    )
    result = run_race(spec)
    assert result.status is RaceStatus.WINNER
    assert result.quota is None


def test_candidate_timeout_fails_the_attempt_and_kills_it(repo, tmp_path):
    spec = build_spec(
        repository=repo,
        candidates=[cmd("slow", "--pidfile", str(tmp_path / "p"), "--hang", timeout=1.0)],
        validate=["true"],
    )
    result = run_race(spec)
    record = result.candidates[0]
    assert record.status is CandidateStatus.FAILED
    assert "timed out after 1s" in record.error
    assert not alive(pids(tmp_path / "p")[0])


def test_fallback_chain_tries_in_order_and_stops_at_first_success(repo):
    spec = build_spec(
        repository=repo,
        mode="fallback",
        candidates=[
            CandidateSpec("missing", "command", "b", command=("no-such-agent-program-xyz",)),
            cmd("rejected", "--write", "a.txt", "--content", "bad", "--commit"),
            cmd("wins", "--write", "a.txt", "--content", "good", "--commit"),
            cmd("never", "--write", "a.txt", "--commit"),
        ],
        validate=["sh", "-c", "grep -q good a.txt"],
    )
    events = []
    result = run_race(spec, on_event=events.append)
    assert [c.status for c in result.candidates] == [
        CandidateStatus.FAILED,
        CandidateStatus.REJECTED,
        CandidateStatus.WINNER,
        CandidateStatus.SKIPPED,
    ]
    assert "not found on PATH" in result.candidates[0].error
    assert "validation failed" in result.candidates[1].error
    admitted = [e.key for e in events if e.kind is EventKind.ADMITTED]
    assert admitted == ["missing", "rejected", "wins"]
    # One at a time: each candidate settled before the next was admitted.
    order = [(e.kind, e.key) for e in events if e.kind in (EventKind.ADMITTED, EventKind.SETTLED)]
    assert order == [
        (EventKind.ADMITTED, "missing"),
        (EventKind.SETTLED, "missing"),
        (EventKind.ADMITTED, "rejected"),
        (EventKind.SETTLED, "rejected"),
        (EventKind.ADMITTED, "wins"),
        (EventKind.SETTLED, "wins"),
        (EventKind.SETTLED, "never"),
    ]  # never admitted: it ends skipped


def test_best_of_n_highest_score_wins_ties_to_earliest(repo):
    scores = {"a": 2.0, "b": 5.0, "c": 5.0, "d": float("nan")}
    spec = build_spec(
        repository=repo,
        candidates=[cmd(k, "--write", f"{k}.txt", "--commit") for k in "abcd"],
        validate=["true"],
        score=lambda context: scores[context.key],
    )
    settled = []
    result = run_race(
        spec,
        on_event=lambda e: (
            settled.append((e.key, e.status, e.reason)) if e.kind is EventKind.SETTLED else None
        ),
    )
    assert result.status is RaceStatus.WINNER
    assert result.winner.key == "b"
    assert result.winner.decided_by == "score"
    by_key = {c.key: c for c in result.candidates}
    assert by_key["a"].status is CandidateStatus.REJECTED and by_key["a"].score == 2.0
    assert by_key["a"].error == "passed with score 2; b scored 5"
    assert by_key["c"].status is CandidateStatus.REJECTED
    assert by_key["d"].status is CandidateStatus.FAILED and "finite" in by_key["d"].error
    # While the others are scored, one that passed is shown as passed, never "rejected" first.
    for key, score in (("a", 2), ("b", 5), ("c", 5)):
        shown = [(status, reason) for k, status, reason in settled if k == key]
        assert shown[0] == ("passed", f"score {score}, waiting for the decision")
    assert [s for k, s, _ in settled if k == "b"] == ["passed", "winner"]
    assert [s for k, s, _ in settled if k == "a"] == ["passed", "rejected"]


def test_best_of_n_score_command(repo):
    spec = build_spec(
        repository=repo,
        candidates=[
            cmd("short", "--write", "out.txt", "--content", "ab", "--commit"),
            cmd("long", "--write", "out.txt", "--content", "abcdef", "--commit"),
        ],
        validate=["true"],
        score=["sh", "-c", "wc -c < out.txt"],
    )
    result = run_race(spec)
    assert result.winner.key == "long"
    assert result.winner.score == 6


def test_operator_cancel_accept_and_abort(repo, tmp_path):
    async def scenario():
        holder = {}
        events = []

        def on_event(event):
            events.append(event)
            if event.kind is EventKind.AGENT_STARTED and event.key == "keep":
                holder["race"].cancel("drop")

        async def accept_when_committed():
            while not (tmp_path / "keep-done").exists():
                await anyio.sleep(0.01)
            holder["accept"] = await holder["race"].accept("keep")

        async with anyio.create_task_group() as group:
            group.start_soon(accept_when_committed)
            result = await run_race_async(
                build_spec(
                    repository=repo,
                    candidates=[
                        cmd(
                            "keep",
                            "--write",
                            "k.txt",
                            "--commit",
                            "--touch",
                            str(tmp_path / "keep-done"),
                            "--hang",
                        ),
                        cmd("drop", "--hang"),
                    ],
                    validate=["false"],
                ),
                on_event=on_event,
                on_start=lambda r: holder.setdefault("race", r),
            )
        return result, holder, events

    result, holder, events = anyio.run(scenario)
    assert holder["accept"] is None
    assert result.status is RaceStatus.WINNER
    keep, drop = result.candidates
    assert keep.status is CandidateStatus.WINNER and keep.decided_by == "operator"
    assert keep.commit == git(repo, "rev-parse", keep.branch)
    assert drop.status is CandidateStatus.CANCELLED and drop.error == "cancelled by operator"
    assert [e.action for e in events if e.kind is EventKind.OPERATOR] == ["cancel", "accept"]


def test_abort_stops_everything(repo, tmp_path):
    async def scenario():
        holder = {}

        def on_event(event):
            if event.kind is EventKind.AGENT_STARTED and len(holder.setdefault("started", [])) == 0:
                holder["started"].append(event.key)

        async def abort_soon():
            while not (tmp_path / "a.pid").exists():
                await anyio.sleep(0.01)
            holder["race"].abort()

        async with anyio.create_task_group() as group:
            group.start_soon(abort_soon)
            return await run_race_async(
                build_spec(
                    repository=repo,
                    concurrency=1,
                    candidates=[cmd("a", "--pidfile", str(tmp_path / "a.pid"), "--hang"), cmd("b")],
                ),
                on_event=on_event,
                on_start=lambda r: holder.setdefault("race", r),
            )

    result = anyio.run(scenario)
    assert result.status is RaceStatus.ABORTED
    assert [c.status for c in result.candidates] == [CandidateStatus.CANCELLED, CandidateStatus.SKIPPED]
    assert not alive(pids(tmp_path / "a.pid")[0])


def test_flight_log_has_every_attempt_event(repo):
    spec = build_spec(
        repository=repo,
        candidates=[cmd("a", "--usage", "5", "1", "0", "7", "--lines", "3", "--write", "a", "--commit")],
        validate=["true"],
    )
    result = run_race(spec)
    run_dir = repo / ".outpost" / "runs" / result.id
    lines = [json.loads(line) for line in (run_dir / "a.1.jsonl").read_text().splitlines()]
    kinds = [line["kind"] for line in lines]
    for kind in (
        "admitted",
        "worktree-ready",
        "agent-started",
        "log",
        "usage",
        "tool",
        "agent-exited",
        "validation-started",
        "validation-finished",
        "settled",
    ):
        assert kind in kinds
    logged = [text for line in lines if line["kind"] == "log" for text in line["lines"]]
    assert "log line 2" in logged
    race_kinds = [json.loads(row)["kind"] for row in (run_dir / "race.jsonl").read_text().splitlines()]
    assert race_kinds[0] == "race-started" and race_kinds[-1] == "race-finished"
    assert oct(run_dir.stat().st_mode & 0o777) == "0o700"
    assert oct((run_dir / "a.1.jsonl").stat().st_mode & 0o777) == "0o600"


def test_baseline_stays_pinned_while_the_host_moves(repo, tmp_path):
    async def scenario():
        async def move_host():
            while not (tmp_path / "started").exists():
                await anyio.sleep(0.01)
            (repo / "host.txt").write_text("host\n")
            git(repo, "add", "host.txt")
            git(repo, "commit", "-qm", "host moved")
            (tmp_path / "go").touch()

        async with anyio.create_task_group() as group:
            group.start_soon(move_host)
            return await run_race_async(
                build_spec(
                    repository=repo,
                    candidates=[
                        cmd(
                            "a",
                            "--ready",
                            str(tmp_path / "started"),
                            "--wait-file",
                            str(tmp_path / "go"),
                            "--write",
                            "a.txt",
                            "--commit",
                        )
                    ],
                    validate=["true"],
                )
            )

    baseline = git(repo, "rev-parse", "HEAD")
    result = anyio.run(scenario)
    assert result.baseline == baseline
    assert git(repo, "rev-parse", f"{result.winner.commit}~1") == baseline
    assert result.host["changed"] is True
    # the engine cannot tell the user's commit from a candidate's: it says what moved, and while
    # whom ran, and leaves the integration check to be made again
    [moved] = result.tampering
    assert (moved["name"], moved["before"], moved["candidate"]) == ("refs/heads/main", baseline, "a")
    assert result.integration["status"] == "blocked"
    assert "git merge-tree --write-tree HEAD" in result.integration["reason"]


def test_no_validation_configured_accepts_a_committing_agent(repo):
    spec = build_spec(repository=repo, candidates=[cmd("a", "--write", "a", "--commit")])
    assert run_race(spec).status is RaceStatus.WINNER
    spec = build_spec(
        repository=repo, candidates=[cmd("a", "--write", "a")], validate=ValidateSpec(require_commits=False)
    )
    assert run_race(spec).status is RaceStatus.WINNER


def test_a_failing_event_consumer_does_not_fail_the_race(repo):
    def broken(event):
        raise RuntimeError("consumer bug")

    spec = build_spec(repository=repo, candidates=[cmd("a", "--write", "a", "--commit")], validate=["true"])
    from outpost_tui.engine import EventBus, Race

    bus = EventBus()
    bus.subscribe(broken)
    result = anyio.run(Race(spec, bus=bus).run)
    assert result.status is RaceStatus.WINNER
    assert bus.errors and "consumer bug" in bus.errors[0]
    assert len(bus.errors) <= EventBus.MAX_ERRORS


def test_cost_budget_reached_exactly_stops_the_race(repo):
    spec = build_spec(
        repository=repo,
        budget=BudgetSpec(cost_usd=0.5),
        candidates=[
            cmd("a", "--usage", "1", "0", "0", "1", "--cost", "0.25", "--usage-times", "2", "--hang")
        ],
        validate=["true"],
    )
    result = run_race(spec)
    assert result.status is RaceStatus.BUDGET_EXHAUSTED
    assert "cost budget" in result.error
    assert result.usage.cost_usd == 0.5


def test_operator_accepts_a_rejected_candidate_while_others_run(repo, tmp_path):
    async def scenario():
        holder = {}

        def on_event(event):
            if event.kind is EventKind.SETTLED and event.key == "rejected":
                holder["settled"].set()

        async def accept_after_rejection():
            await holder["settled"].wait()
            holder["answer"] = await holder["race"].accept("rejected")

        holder["settled"] = anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(accept_after_rejection)
            return await run_race_async(
                build_spec(
                    repository=repo,
                    candidates=[
                        cmd("rejected", "--write", "r.txt", "--commit"),
                        cmd("running", "--pidfile", str(tmp_path / "p"), "--hang"),
                    ],
                    validate=["false"],
                ),
                on_event=on_event,
                on_start=lambda r: holder.setdefault("race", r),
            ), holder

    result, holder = anyio.run(scenario)
    assert holder["answer"] is None
    rejected, running = result.candidates
    assert rejected.status is CandidateStatus.WINNER and rejected.decided_by == "operator"
    assert rejected.commit == git(repo, "rev-parse", rejected.branch)
    assert running.status is CandidateStatus.CANCELLED
    assert result.integration["status"] == "clean"


def test_never_started_candidates_end_in_the_event_stream_and_the_model(repo):
    """Watchers (the app's panels, the headless lines, the flight log) see a skipped candidate end."""
    settled: list[tuple[str, str]] = []

    def on_event(event):
        if event.kind is EventKind.SETTLED:
            settled.append((event.key, event.status))

    holder = {}
    result = anyio.run(
        lambda: run_race_async(
            build_spec(
                repository=repo,
                concurrency=1,
                candidates=[cmd("a", "--write", "a.txt", "--commit"), cmd("b"), cmd("c")],
                validate=["true"],
            ),
            on_event=on_event,
            on_start=lambda race: holder.setdefault("race", race),
        )
    )
    assert result.status is RaceStatus.WINNER
    assert settled == [("a", "winner"), ("b", "skipped"), ("c", "skipped")]
    model = holder["race"].model
    assert [model.candidates[key].state for key in ("b", "c")] == ["skipped", "skipped"]


def test_an_accept_while_the_outcome_is_being_written_is_refused(repo):
    """A hand accept arriving as the race settles would contradict its recorded status."""

    async def scenario():
        holder = {"settling": anyio.Event()}

        def on_event(event):
            # the skipped candidate's end is announced while the race writes its outcome
            if event.kind is EventKind.SETTLED and event.status == "skipped":
                holder["settling"].set()

        async def accept_while_settling():
            await holder["settling"].wait()
            holder["answer"] = await holder["race"].accept("a")

        async with anyio.create_task_group() as group:
            group.start_soon(accept_while_settling)
            result = await run_race_async(
                build_spec(
                    repository=repo,
                    concurrency=1,
                    budget=BudgetSpec(attempts=1),
                    candidates=[cmd("a", "--write", "a.txt", "--commit"), cmd("b")],
                    validate=["false"],
                ),
                on_event=on_event,
                on_start=lambda race: holder.setdefault("race", race),
            )
        return result, holder

    result, holder = anyio.run(scenario)
    assert holder["answer"] == "the race is over"
    assert result.status is RaceStatus.BUDGET_EXHAUSTED and result.winner is None
    assert [c.status for c in result.candidates] == [CandidateStatus.REJECTED, CandidateStatus.SKIPPED]


def test_a_candidate_cancelled_while_validating_says_so(repo, tmp_path):
    started = tmp_path / "validating"

    async def scenario():
        holder = {}

        async def cancel_once_validating():
            with anyio.fail_after(30):
                while not started.exists():
                    await anyio.sleep(0.01)
            holder["race"].cancel("a")

        async with anyio.create_task_group() as group:
            group.start_soon(cancel_once_validating)
            return await run_race_async(
                build_spec(
                    repository=repo,
                    candidates=[cmd("a", "--write", "a.txt", "--commit")],
                    validate=["sh", "-c", f'test -z "$OUTPOST_CANDIDATE" || touch {started}; sleep 300'],
                ),
                on_start=lambda race: holder.setdefault("race", race),
            )

    result = anyio.run(scenario)
    record = result.candidates[0]
    assert record.status is CandidateStatus.CANCELLED
    assert record.validation.status == "cancelled"


@pytest.mark.parametrize("isolation", ["none", "bubblewrap"])
def test_an_agent_that_rewrites_its_git_link_fails_and_runs_nothing_on_the_host(repo, tmp_path, isolation):
    marker = tmp_path / "ran-on-host"
    planted = tmp_path / "planted"
    subprocess.run(["git", "init", "-q", str(planted)], check=True)
    subprocess.run(
        ["git", "-C", str(planted), "config", "core.fsmonitor", f"touch {marker}; false"], check=True
    )
    agent = CandidateSpec(
        "sly",
        "command",
        "do the task",
        command=("sh", "-c", f"echo 'gitdir: {planted}/.git' > .git; echo work > new.txt"),
    )
    spec = build_spec(
        repository=repo, candidates=[agent], validate=["true"], sandbox=SandboxSpec(isolation=isolation)
    )
    result = run_race(spec)
    record = result.candidates[0]
    assert result.status is RaceStatus.NO_WINNER
    assert record.retained_directory  # kept for the operator to look at, never cleaned blindly
    assert not marker.exists()
    if isolation == "none":
        # unisolated, the link is rewritten on the host: found, and git never runs there
        assert record.status is CandidateStatus.FAILED
        assert "git link" in record.error
    else:
        # isolated, the link it sees is a read-only copy: the host's never changes
        assert record.status is CandidateStatus.REJECTED
        link = Path(record.retained_directory, ".git").read_text()
        assert link.startswith("gitdir: ") and str(planted) not in link


@pytest.mark.parametrize("options", [{"select": "best", "score": ["echo", "1"]}, {"concurrency": 2}])
def test_the_api_refuses_fallback_options_that_contradict_it(repo, options):
    spec = build_spec(
        repository=repo, mode="fallback", candidates=[cmd("a"), cmd("b")], validate=["true"], **options
    )
    with pytest.raises(RaceError, match="one candidate at a time"):
        run_race(spec)
    assert git(repo, "branch", "--list", "outpost/*") == ""  # refused before anything was made
