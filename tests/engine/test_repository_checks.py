"""The user's repository is checked as attempts end: attempts that end while a check runs share the
next one, which starts after all of them are gone, and the race's own check at its end is skipped
only when nothing could have changed the repository since the last one. Real repositories, the
real guard; the spy only counts the compares it passes through."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from outpost_tui.engine import build_spec, new_race
from outpost_tui.engine import git as engine_git
from outpost_tui.engine.core.events import EventKind
from tests.conftest import cmd, git


@pytest.fixture
def compares(monkeypatch):
    seen: list[str] = []
    real = engine_git.guard_changes

    def counted(record: engine_git.GuardRecord, who: str) -> list[engine_git.GuardChange]:
        seen.append(who)
        return real(record, who)

    monkeypatch.setattr(engine_git, "guard_changes", counted)  # where the race looks it up
    return seen


def _race(repo):
    """A race over `repo` with two attempts taken and the repository recorded, as `run` leaves it
    once the candidates start."""
    spec = build_spec(repository=repo, candidates=[cmd("a"), cmd("b")])
    race = new_race(spec)
    race.id, race.repository = "checks", repo
    first, second = (race.add_attempt(c, n, 1) for n, c in enumerate(spec.candidates))
    race._record = engine_git.guard_record(repo, race.id, None)
    return race, first, second


def test_attempts_that_end_during_a_check_share_the_next_one(repo, compares):
    race, first, second = _race(repo)
    race._admitted = 2
    tampering = []
    race.bus.subscribe(lambda e: tampering.append(e) if e.kind is EventKind.TAMPERING else None)

    async def scenario():
        lock = race._record_lock
        await lock.acquire()  # a check in flight while both attempts end
        git(repo, "branch", "side")  # what one of them did to the user's refs
        async with anyio.create_task_group() as ending:
            ending.start_soon(race._check_repository, first)
            ending.start_soon(race._check_repository, second)
            await anyio.lowlevel.checkpoint()
            await anyio.wait_all_tasks_blocked()
            lock.release()

    anyio.run(scenario)
    assert compares == ["a-1"]  # one look for both, after both had ended
    [entry] = race.tampering
    assert (entry["name"], entry["change"], entry["candidate"]) == ("refs/heads/side", "created", "a")
    assert entry["ended_with"] == ["b#1"]
    assert [e.key for e in tampering] == ["a"]


def test_the_race_end_check_is_skipped_only_when_nothing_ran_since_a_quiet_check(repo, compares):
    race, first, second = _race(repo)
    race._admitted = 2

    async def settle_both_then_end():
        await race._check_repository(first)
        await race._check_repository(second)  # nothing else running: this check is the last word
        await race._check_repository(None)

    anyio.run(settle_both_then_end)
    assert compares == ["a-1", "b-1"]

    # An attempt started after that check could have changed the repository: the end looks again.
    race._admitted += 1
    git(repo, "branch", "late")
    anyio.run(race._check_repository, None)
    assert compares == ["a-1", "b-1", "race"]
    assert [(t["name"], t["candidate"]) for t in race.tampering] == [("refs/heads/late", None)]


def test_a_check_while_another_attempt_runs_does_not_stand_for_the_race_end(repo, compares):
    race, first, second = _race(repo)
    race._admitted = 2

    async def one_ends_while_the_other_runs():
        with anyio.CancelScope() as running:
            second.scope = running  # still running: it may write after the first one's check
            await race._check_repository(first)
            second.scope = None
        git(repo, "tag", "written-later")
        await race._check_repository(None)

    anyio.run(one_ends_while_the_other_runs)
    assert compares == ["a-1", "race"]
    assert [(t["name"], t["candidate"]) for t in race.tampering] == [("refs/tags/written-later", None)]


def test_attempts_whose_shared_check_failed_each_look_for_themselves(repo, compares):
    race, first, second = _race(repo)
    race._admitted = 2
    warned = []
    race.bus.subscribe(lambda e: warned.append(e.key) if e.kind is EventKind.WARNING else None)
    away = repo.with_name("moved-away")

    async def scenario():
        lock = race._record_lock
        await lock.acquire()
        repo.rename(away)  # git cannot list the refs now: the check fails
        try:
            async with anyio.create_task_group() as ending:
                ending.start_soon(race._check_repository, first)
                ending.start_soon(race._check_repository, second)
                await anyio.lowlevel.checkpoint()
                await anyio.wait_all_tasks_blocked()
                lock.release()
        finally:
            away.rename(repo)

    anyio.run(scenario)
    # the first check would have served both; it failed, so the second attempt looked again
    assert compares == ["a-1", "b-1"]
    assert warned == ["a", "b"]
