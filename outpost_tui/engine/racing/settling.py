"""How attempts and the race end: a sandbox closed, the winner chosen (first acceptable result,
the operator's accept, or the best score), each attempt settled with its status and its worktree
kept or removed, the user's repository checked for tampering, and the race's result written."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from .. import git
from ..core.events import RaceFinished, Settled, Warned
from ..core.result import CandidateRecord, RaceResult
from ..core.statuses import CandidateStatus, Phase, RaceStatus
from ..sandbox import EngineGone
from ..verdict import Verdict
from ..verdict.review import review
from . import setup as setups
from .attempt import Attempt
from .guarding import Guarding
from .state import _one_line

CANCELLED_BY_WINNER = "cancelled: another candidate won"


class Settling(Guarding):
    """Closing attempts, choosing the winner, settling attempts and the race."""

    async def _close_sandbox(self, attempt: Attempt) -> bool:
        """Close the attempt's sandbox; False (and the record says why) when it did not close."""
        sandbox, attempt.sandbox = attempt.sandbox, None
        if sandbox is None:
            return True
        record = attempt.record
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(self.spec.cleanup_timeout) as deadline:
                try:
                    await sandbox.close()
                except EngineGone as error:
                    attempt.cleanup_failed = True
                    # why the attempt ended, if that was already the engine, stays its reason
                    if not (record.error or "").startswith("the container engine at "):
                        record.error = _one_line(error)
                    self._engine_gone(error)
                except Exception as error:  # a provider failing to close: the attempt cannot win
                    attempt.cleanup_failed = True
                    record.error = f"cleanup failed: {_one_line(error)}"
            if deadline.cancelled_caught:
                attempt.cleanup_failed = True
                record.error = f"cleanup did not finish within {self.spec.cleanup_timeout:g}s"
        return not attempt.cleanup_failed

    async def _claim_victory(self, attempt: Attempt) -> None:
        # Let results that became acceptable in the same instant arrive before the choice.
        await anyio.lowlevel.checkpoint()
        # one that passed and then failed (reading its HEAD) or was cancelled is out of the running
        eligible = [
            a
            for a in self._accepted_pending
            if a.record.error is None and a.cancel_reason is None and a.phase is not Phase.SETTLED
        ]
        if self._winner is None and eligible:
            self.set_winner(min(eligible, key=lambda a: a.index), "validation")

    async def _accept_by_operator(self, attempt: Attempt) -> None:
        directory = attempt.directory
        if directory is None:
            return
        record = attempt.record
        if not attempt.result_fixed:
            assert self.baseline is not None, "a started attempt's race has its baseline"
            record.commit, commits = await anyio.to_thread.run_sync(
                git.head_and_commits, directory, self.baseline
            )
            record.commits = [c.to_json() for c in commits]
        attempt.accepted = True
        self.set_winner(attempt, "operator")

    def _said_skipped(self, attempt: Attempt) -> None:
        """Watchers hear that an attempt that never ran is over, with the reason on its record."""
        self.bus.publish(
            Settled(
                key=attempt.key,
                attempt=attempt.number,
                status="skipped",
                reason=attempt.record.error,
                commit=None,
            )
        )

    def restore_winner(self, attempt: Attempt) -> None:
        """A winner decided before the coordinator stopped (a replay): nothing more may start."""
        self._winner = attempt
        self._admissions_closed = True

    def set_winner(self, attempt: Attempt, decided_by: str) -> None:
        """Make `attempt` the winner: admissions close and every other running attempt is
        cancelled (a validated one only closing keeps its outcome)."""
        self._winner = attempt
        attempt.record.decided_by = decided_by
        self._admissions_closed = True
        for other in self.attempts.values():
            # A validated attempt has finished its work and is only closing: it keeps its outcome.
            if other is not attempt and other.scope is not None and other.phase is not Phase.VALIDATED:
                other.cancel_reason = other.cancel_reason or CANCELLED_BY_WINNER
                other.scope.cancel()

    def _engine_gone(self, error: EngineGone) -> None:
        """Say once, for the race, that its container engine went away and what is left to do."""
        if self._engine_gone_said:
            return
        self._engine_gone_said = True
        what = str(error).split(": container ", 1)[0]
        command = f"outpost-tui worktrees {shlex.quote(str(self.repository))} --remove-containers"
        if self.spec.sandbox.endpoint:
            command += f" --endpoint {shlex.quote(self.spec.sandbox.endpoint)}"
        self.bus.publish(
            Warned(
                message=(
                    f"{what}: the candidates running on it are settled as failed; their containers are left "
                    f"until `{command}` removes them once the engine is back"
                )
            )
        )

    async def _settle_attempt(self, attempt: Attempt, *, cancelled: bool) -> None:
        record = attempt.record
        await self._close_sandbox(attempt)
        if attempt.ports is not None:
            attempt.ports.release()  # only now: validation may start the candidate's server too
        attempt.cleanup = "pending" if attempt.cleanup_failed else "done"
        record.cleanup = attempt.cleanup

        if attempt.cleanup_failed:
            record.status = CandidateStatus.FAILED
        elif attempt is self._winner and record.error is None:
            record.status = CandidateStatus.WINNER
        elif (
            attempt.phase is Phase.VALIDATED
            and attempt.accepted
            and self._winner is None
            and attempt.cancel_reason is not None
        ):
            # it passed, but the race was stopped (an abort, its checkpoint not saved) before a
            # winner was chosen: not rejected, and the record says why
            record.status = CandidateStatus.CANCELLED
            record.error = record.error or attempt.cancel_reason
        elif attempt.phase is Phase.VALIDATED and record.error is None and not attempt.operator_accept:
            record.status = CandidateStatus.REJECTED
            if attempt.accepted and self.spec.select == "first" and self._winner is not None:
                record.error = f"validation passed, but {self._winner.key} won first"
            elif not attempt.accepted:
                record.error = record.error or record.validation.reason
        elif cancelled or attempt.cancel_reason is not None:
            record.status = CandidateStatus.CANCELLED
            record.error = record.error or attempt.cancel_reason or "cancelled"
        elif record.quota is not None:
            record.status = CandidateStatus.QUOTA
        elif record.error is not None:
            record.status = CandidateStatus.FAILED
        else:
            record.status = CandidateStatus.REJECTED
            if not attempt.accepted:
                record.error = record.validation.reason
        # its processes are gone: what it changed in the user's repository is known now, and the
        # settings it wrote are put back before any more git runs there
        await self._check_repository(attempt)
        await self._retain(attempt)
        record.finished_at = time.time()
        attempt.phase = Phase.SETTLED
        await self._save()
        shown, why = str(record.status), record.error
        if self._awaits_decision(attempt):
            # Best of N: it passed and waits for the others' scores; the decision settles it.
            shown, why = "passed", f"score {record.score:g}, waiting for the decision"
        self.bus.publish(
            Settled(
                key=attempt.key,
                attempt=attempt.number,
                status=shown,
                reason=why,
                commit=record.commit,
                retained_directory=record.retained_directory,
            )
        )
        attempt.settled.set()

    async def _retain(self, attempt: Attempt) -> None:
        """Remove the worktree only when it is fully clean; the branch always stays."""
        record, directory = attempt.record, attempt.directory
        if directory is None or not directory.exists():
            return
        keep = (
            self.spec.durability.enabled or attempt.cleanup_failed or record.status is CandidateStatus.FAILED
        )
        if not keep:
            repository = self.repository
            assert repository is not None, "a started attempt's race has its repository"

            def clear_and_remove() -> bool:
                self._clear_setup(attempt, directory)
                if not git.remove_worktree(repository, directory):
                    return False
                git.remove_view(directory)  # its private repository: its branch holds its result
                return True

            try:
                removed = await anyio.to_thread.run_sync(clear_and_remove)
            except git.GitError:
                removed = False
            if removed:
                return
        record.retained_directory = str(directory)

    @staticmethod
    def _clear_setup(attempt: Attempt, directory: Path) -> None:
        # Setup's files would keep every worktree; they go only when they are exactly what setup
        # left and the candidate left nothing else uncommitted.
        state = attempt.setup
        if state is None or state.products is None:
            return
        try:
            if not git.has_changes(directory, state.leave_out):
                setups.remove_products(directory, state)
        except OSError:
            pass  # what cannot be removed keeps the worktree, which is then retained

    def _awaits_decision(self, attempt: Attempt) -> bool:
        record = attempt.record
        return (
            self.spec.select == "best"
            and attempt.accepted
            and record.score is not None
            and record.status is CandidateStatus.REJECTED
            and record.error is None
        )

    def _select_best(self) -> None:
        if self.spec.select != "best":
            return
        waiting = [
            a for a in sorted(self.attempts.values(), key=lambda a: a.index) if self._awaits_decision(a)
        ]
        best: Attempt | None = None
        if self._winner is None and not self._aborted and not self.accounting.stops_race:
            best_score = 0.0
            for attempt in waiting:
                score = attempt.record.score
                if (
                    attempt.record.cleanup == "done"
                    and score is not None
                    and (best is None or score > best_score)
                ):
                    best, best_score = attempt, score
        if best is not None:
            self.set_winner(best, "score")
            best.record.status = CandidateStatus.WINNER
            self.bus.publish(
                Settled(
                    key=best.key,
                    attempt=best.number,
                    status="winner",
                    reason=f"highest score {best.record.score:g}",
                    commit=best.record.commit,
                )
            )
        for attempt in waiting:
            if attempt is best:
                continue
            record = attempt.record
            if best is not None:
                record.error = f"passed with score {record.score:g}; {best.key} scored {best.record.score:g}"
            else:
                record.error = f"passed with score {record.score:g}, but no winner was chosen"
            self.bus.publish(
                Settled(
                    key=attempt.key,
                    attempt=attempt.number,
                    status=str(record.status),
                    reason=record.error,
                    commit=record.commit,
                )
            )

    def _race_status(self) -> RaceStatus:
        records = [a.record for a in self.attempts.values()]
        if any(r.status is CandidateStatus.WINNER for r in records):
            return RaceStatus.WINNER
        if self._aborted:
            return RaceStatus.ABORTED
        if self.accounting.exhausted is not None:
            return RaceStatus.BUDGET_EXHAUSTED
        if any(r.status is CandidateStatus.QUOTA for r in records):
            return RaceStatus.QUOTA
        return RaceStatus.NO_WINNER

    async def _settle_race(self) -> RaceResult:
        assert self.id is not None and self.repository is not None and self.baseline is not None, (
            "set when the race starts"
        )
        # From here the outcome is being written: a hand accept would contradict it.
        self._settling = True
        self._select_best()
        for attempt in self._pending:
            if attempt.record.status is CandidateStatus.SKIPPED and attempt.record.error is None:
                attempt.record.error = self._skip_reason()
                # its phase stays waiting (it never took an attempt), but watchers see it end
                self._said_skipped(attempt)
        self._pending.clear()
        status = self._race_status()
        records = [self.attempts[c.key].record for c in self.spec.candidates]
        await self._check_repository(None)
        # the check has just taken the checkout's snapshot (when the race recorded one)
        host_after = self._record.latest_host if self._record is not None else None
        host_error = None
        if host_after is None:
            try:
                host_after = await anyio.to_thread.run_sync(git.host_snapshot, self.repository)
            except git.GitError as error:
                host_error = _one_line(error)
        winner = next((r for r in records if r.status is CandidateStatus.WINNER), None)
        integration = None
        # Three reads of the repository that do not wait on each other: at once.
        check: git.Integration | None = None
        reviewed: list[str] | None = None
        repository, baseline = self.repository, self.baseline

        failed: Exception | None = None

        async def integrate(winner: CandidateRecord) -> None:
            nonlocal check, failed
            # the validated commit is what merges, wherever its branch went since
            rev = winner.commit or winner.branch
            assert rev is not None, "a winner has its commit or its branch"
            try:
                check = await anyio.to_thread.run_sync(
                    lambda: git.integration_check(repository, rev, winner.commit, host=host_after)
                )
            except Exception as error:  # raised below as it is, not inside a task group's
                failed = error

        async def look(winner: CandidateRecord, commit: str) -> None:
            nonlocal reviewed
            setup = self.attempts[winner.key].setup
            leave_out = setup.leave_out if setup is not None else ()
            try:
                reviewed = await anyio.to_thread.run_sync(review, repository, baseline, commit, leave_out)
            except git.GitError as error:
                reviewed = [f"could not be reviewed: {_one_line(error)}"]

        async with anyio.create_task_group() as reading:
            reading.start_soon(self._note_branches_moved, records)
            if winner is not None:
                reading.start_soon(integrate, winner)
                if winner.commit:
                    reading.start_soon(look, winner, winner.commit)
        if failed is not None:
            raise failed
        if winner is not None:
            assert check is not None, "checked above"
            integration = check.to_json()
            checkout = [t for t in self.tampering if t["checkout"]]
            if checkout and integration["status"] != "blocked":
                # merge-tree compared against a HEAD or checkout that changed during the race:
                # a candidate's doing, or the user's own (the record cannot tell which)
                who = sorted({t["candidate"] or "no candidate" for t in checkout})
                integration.update(
                    status="blocked",
                    conflicts=[],
                    reason=(
                        f"your checkout was changed during the race (while {', '.join(who)} ran): "
                        f"{checkout[0]['description']}; if that was you, check again with "
                        f"`git merge-tree --write-tree HEAD {winner.branch}`"
                    ),
                )
            if reviewed is not None:
                winner.review = reviewed
                verdict = Verdict.from_json(winner.verdict)  # with where its branch went since
                if verdict is not None:
                    winner.review.extend(verdict.review_flags())
        result = RaceResult(
            id=self.id,
            status=status,
            baseline=self.baseline,
            name=self.spec.name,
            mode=self.spec.mode,
            select=self.spec.select,
            candidates=records,
            previous_attempts=[a.record for a in self.previous],
            attempts=self.accounting.attempts,
            usage=self.total_usage(),
            integration=integration,
            host=self._host_json(host_after, host_error),
            error=self.accounting.exhausted if status is RaceStatus.BUDGET_EXHAUSTED else None,
            quota=self._race_quota(records) if status is RaceStatus.QUOTA else None,
            run_id=self.spec.run_id,
            repository=str(self.repository),
            started_at=self._started_at,
            finished_at=time.time(),
            tampering=list(self.tampering),
            isolation=self.isolation,
            baseline_validation=self.baseline_outcome.to_json() if self.baseline_outcome else None,
        )
        self._finished = True
        if self._durable is not None:
            await self._durable.finish(result)
        self.bus.publish(
            RaceFinished(status=str(status), winner=winner.key if winner else None, result=result.to_json())
        )
        return result

    async def _note_branches_moved(self, records: list[CandidateRecord]) -> None:
        """A branch moved after its commit was graded is reported; the graded commit still wins."""
        graded = [
            (record, verdict, branch)
            for record in records
            if (verdict := Verdict.from_json(record.verdict)) is not None and (branch := record.branch)
        ]
        if not graded:
            return
        assert self.repository is not None, "set when the race starts"
        try:
            tips = await anyio.to_thread.run_sync(
                git.branch_tips, self.repository, [branch for _, _, branch in graded]
            )
        except git.GitError as error:
            self.bus.publish(Warned(message=f"could not read the candidates' branches: {_one_line(error)}"))
            return
        for record, verdict, branch in graded:
            tip = tips.get(branch)
            if tip != verdict.commit:
                verdict.branch_moved_to = tip or "(deleted)"
                record.verdict = verdict.to_json()

    def _skip_reason(self) -> str:
        if self._winner is not None:
            return f"not started: {self._winner.key} won"
        if self._aborted:
            return "not started: race aborted"
        if self.accounting.exhausted:
            return f"not started: {self.accounting.exhausted}"
        return "not started"

    @staticmethod
    def _race_quota(records: list[CandidateRecord]) -> dict[str, Any] | None:
        quotas = [r.quota for r in records if r.quota]
        timed = sorted((q for q in quotas if q.get("reset_at")), key=lambda q: q["reset_at"])
        return timed[0] if timed else (quotas[0] if quotas else None)

    def _host_json(self, after: git.HostSnapshot | None, error: str | None) -> dict[str, Any]:
        before = self._host_before
        changed = after is None or before is None or after != before
        return {
            "before": before.to_json() if before else None,
            "after": after.to_json() if after else None,
            "changed": changed,
            "error": error,
        }
