"""Durable races: the checkpoint a coordinator saves at every transition, and resuming from it.

Saved before anything is allocated and at every phase change (waiting, running, validated,
settled), never with logs. Usage reports only mark the state dirty; a background task writes it at
most once a second, and every write carries a fresh heartbeat, so checkpoint writes do not grow with
agent chatter and a busy coordinator never looks dead.

When a write fails (storage gone or unwritable, or the run released under this coordinator), the race
is stopped: without a checkpoint it could not be recovered. Ownership stays held; `failure` keeps the
error (with its exit code) for the caller.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio

from ... import exitcodes
from .. import git
from ..core.events import Settled
from ..core.result import CandidateRecord, RaceResult, race_result_from_json
from ..core.statuses import CandidateStatus, Phase, RaceStatus
from ..core.usage import Usage
from ..racing.attempt import Attempt
from ..racing.budget import Accounting
from ..racing.coordinator import Race, RaceError, new_race_id
from ..sandbox.container_engine import remove_race_containers, resolve_endpoint
from ..sandbox.local import LocalProvider
from .checkpoint import CheckpointError, CheckpointStore, CorruptCheckpoint, race_identity, recover_command
from .checkpoint_state import interrupted
from .local_transport import LocalTransport
from .transport import TransportError

HOST_PROCESSES = LocalProvider()

FLUSH_EVERY = 1.0
HEARTBEAT_EVERY = 5.0
INTERRUPTED = "interrupted by coordinator failure"


class ReplayRequired(CheckpointError):
    exit_code = exitcodes.REPLAY_REQUIRED


class DurableRun:
    def __init__(self, race: Race, storage: Path) -> None:
        self.race = race
        spec = race.spec
        if not spec.run_id:
            raise RaceError("a durable race needs [race] run_id (a stable name for this run)")
        self.run_id: str = spec.run_id
        self.transport = LocalTransport(storage)
        self.store = CheckpointStore(self.transport, spec.run_id, repository=race.repository)
        self.identity = race_identity(spec)
        self._lock = anyio.Lock()
        self._dirty = False
        self._failed: str | None = None
        self.failure: CheckpointError | TransportError | None = None
        self._resumed_state: dict[str, Any] | None = None
        self._baseline_leftovers: list[str] = []
        self._last_write = time.monotonic()
        self.warnings: list[str] = []  # one line each, for the caller to show (best-effort cleanup)
        self.writes = 0  # checkpoint writes and the time spent in them, for benchmarks and notes
        self.write_seconds = 0.0

    # ------------------------------------------------------------------------- opening

    async def open(self) -> RaceResult | None:
        """Claim the run; returns the saved result when the race already finished."""
        race, spec = self.race, self.race.spec
        saved = await anyio.to_thread.run_sync(self.store.read)
        keys = [c.key for c in spec.candidates]
        if (
            saved is not None
            and saved.state.get("identity") == self.identity
            and saved.state["candidates"] != keys
        ):
            raise CorruptCheckpoint(
                f"{self.store.location}: invalid saved state: candidates {saved.state['candidates']} "
                f"differ from the race file's {keys} although the identity matches; the file was left "
                f"untouched"
            )
        if (
            saved is not None
            and saved.owner is None
            and interrupted(saved.state)
            and spec.durability.resume != "retry-incomplete"
            and saved.state.get("identity") == self.identity
        ):
            raise ReplayRequired(
                f"run {spec.run_id} was interrupted: replay it with "
                f"`{recover_command(self.run_id, race.repository, '--replay')}` (or `run --resume`) "
                "to restart its unfinished candidates"
            )
        race.id = new_race_id()
        for index, candidate in enumerate(spec.candidates):
            race.add_attempt(candidate, index, 1)
        state = await anyio.to_thread.run_sync(
            lambda: self.store.claim(self._state(), identity=self.identity)
        )
        if not self.store.resumed:
            return None
        return await self._resume(state)

    async def _resume(self, state: dict[str, Any]) -> RaceResult | None:
        race, spec = self.race, self.race.spec
        race.id = state["id"]
        race.baseline = state["baseline"]  # the original baseline, whatever the host did since
        # the interrupted run's baseline validation may still be running: stopped with the rest
        self._baseline_leftovers = [r for r in state.get("baseline_resources") or [] if isinstance(r, str)]
        race.attempts.clear()
        race.previous.clear()
        order = {c.key: i for i, c in enumerate(spec.candidates)}
        for saved in state["attempts"]:
            candidate = spec.candidate(saved["key"])
            record = CandidateRecord.from_json(saved["record"])
            attempt = Attempt(
                candidate=candidate,
                index=order[candidate.key],
                number=saved["attempt"],
                branch=saved["branch"],
                record=record,
                phase=Phase(saved["phase"]),
                cleanup=saved["cleanup"],
                directory=Path(saved["directory"]) if saved.get("directory") else None,
                accepted=bool(saved.get("accepted")),
                usage_seen=record.usage,
            )
            latest = race.attempts.get(candidate.key)
            if latest is not None:
                race.previous.append(latest)
            race.attempts[candidate.key] = attempt
        usage = state.get("usage") or {}
        race.accounting = Accounting(
            spec.budget, attempts=int(usage.get("attempts", 0)), usage=Usage.from_json(usage)
        )
        for attempt in race.attempts.values():
            if attempt.phase is Phase.SETTLED:
                race.model.restore(
                    attempt.record, attempts=race.accounting.attempts, usage=race.accounting.usage
                )
        if state.get("finished"):
            # Only a quota is not final: calling the race again reruns the candidates the quota
            # stopped, as new attempts. Any other finished race (aborted included) is its saved result.
            if state.get("status") == RaceStatus.QUOTA:
                for attempt in list(race.attempts.values()):
                    if attempt.record.status is CandidateStatus.QUOTA and attempt.phase is Phase.SETTLED:
                        self._supersede(attempt)
                    elif attempt.phase is Phase.WAITING:
                        attempt.record.error = None
                return None
            result = race_result_from_json(state["result"])
            if await self._stop_leftovers():
                # finished, but a cleanup never completed (its coordinator died after deciding):
                # done now, and the saved result says so
                for record in [*result.candidates, *result.previous_attempts]:
                    if record.cleanup == "pending":
                        record.cleanup = "done"
                await self.save(finished=True, status=state.get("status"), result=result.to_json())
                if self.failure is not None:
                    raise self.failure
            await anyio.to_thread.run_sync(self.store.release)
            return result
        self._resumed_state = state
        return None

    def _supersede(self, attempt: Attempt) -> Attempt:
        """Keep `attempt` as history and queue attempt n+1 of its candidate from the baseline."""
        race = self.race
        race.previous.append(attempt)
        return race.add_attempt(attempt.candidate, attempt.index, attempt.number + 1)

    async def _stop_leftovers(self) -> bool:
        """Stop the registered resources of every attempt whose cleanup is pending; True if any."""
        race, pending = self.race, False
        own = race.provider
        assert own is not None, "set when the race starts"
        for resource in self._baseline_leftovers:
            try:
                with anyio.move_on_after(race.spec.cleanup_timeout):
                    if own.owns(resource):
                        await own.recover(resource)
            except Exception as error:  # best effort, as for the candidates' leftovers
                self.warnings.append(
                    f"could not stop leftover {resource} of the baseline's validation: {_one_line(error)}"
                )
        self._baseline_leftovers = []
        for attempt in [*race.previous, *race.attempts.values()]:
            if attempt.cleanup != "pending":
                continue
            pending = True
            with anyio.move_on_after(race.spec.cleanup_timeout) as deadline:
                for resource in attempt.record.resources:
                    # the engine's own host processes (git allocating a worktree) are process
                    # groups whatever the sandbox
                    provider = next((p for p in (own, HOST_PROCESSES) if p.owns(resource)), None)
                    if provider is not None:
                        try:
                            await provider.recover(resource)
                        except (
                            Exception
                        ) as error:  # best effort: an unreachable engine must not stop the replay
                            self.warnings.append(
                                f"could not stop leftover {resource} of "
                                f"{attempt.key}#{attempt.number}: {_one_line(error)}"
                            )
            if deadline.cancelled_caught:
                self.warnings.append(
                    f"stopping the leftovers of {attempt.key}#{attempt.number} took "
                    f"longer than {race.spec.cleanup_timeout:g}s: some may still "
                    f"be running ({', '.join(attempt.record.resources)})"
                )
            attempt.cleanup = attempt.record.cleanup = "done"
        return pending

    async def reconcile(self) -> None:
        """After a crash: stop leftover resources, settle validated attempts, restart the rest."""
        if self._resumed_state is None:
            return
        race = self.race
        await self._stop_leftovers()
        await self._sweep_containers()
        for attempt in race.attempts.values():
            if attempt.phase is Phase.SETTLED and attempt.record.status is CandidateStatus.WINNER:
                race.restore_winner(attempt)  # decided before the crash: nothing more may start
        for attempt in list(race.attempts.values()):
            record = attempt.record
            if attempt.phase is Phase.VALIDATED:
                # Validated before the crash: its outcome stands, it is not run again.
                attempt.phase = Phase.SETTLED
                record.retained_directory = str(attempt.directory) if attempt.directory else None
                if attempt.accepted and race.spec.select == "first" and race.winner is None:
                    race.set_winner(attempt, "validation")
                    record.status = CandidateStatus.WINNER
                else:
                    record.status = CandidateStatus.REJECTED
                race.bus.publish(
                    Settled(
                        key=attempt.key,
                        attempt=attempt.number,
                        status=str(record.status),
                        reason="validated before the coordinator stopped",
                        commit=record.commit,
                    )
                )
            elif attempt.phase is Phase.RUNNING:
                record.status = CandidateStatus.CANCELLED
                record.error = INTERRUPTED
                record.usage = Usage.from_json({**record.usage.to_json(), "complete": False})
                if attempt.directory is None:
                    # Killed while allocating: the worktree may be on disk before it was saved.
                    assert race.repository is not None, "set when the race starts"
                    allocated = git.worktree_directory(race.repository, attempt.key, attempt.branch)
                    if allocated.is_dir():
                        attempt.directory = allocated
                        record.directory = str(allocated)
                record.retained_directory = str(attempt.directory) if attempt.directory else None
                if attempt.directory is not None:
                    await self._remove_grading(attempt, attempt.directory)
                record.finished_at = record.finished_at or time.time()
                attempt.phase = Phase.SETTLED
                race.accounting.usage = race.accounting.usage + Usage(complete=False)
                self._supersede(attempt)
        await self.save()

    async def _remove_grading(self, attempt: Attempt, directory: Path) -> None:
        """The grading checkout an interrupted attempt left (made as its agent started, removed
        only once its validation ended): its next attempt grades in a checkout of its own name, so
        nothing else would ever remove this one. It holds a checkout of a commit, nobody's work."""
        race = self.race
        assert race.repository is not None, "set when the race starts"
        repository, grading = race.repository, git.grading_directory(race.repository, directory.name)

        def remove() -> None:
            if os.path.lexists(grading):
                git.remove_grading_checkout(repository, grading)

        try:
            await anyio.to_thread.run_sync(remove)
        except (git.GitError, OSError) as error:  # best effort, as for the other leftovers
            self.warnings.append(
                f"could not remove the grading checkout {grading} of "
                f"{attempt.key}#{attempt.number}: {_one_line(error)}"
            )

    async def _sweep_containers(self) -> None:
        """Remove every container labelled with this race: one the crashed coordinator created but
        had not yet registered is found by its label, not by its resource id."""
        race, sandbox = self.race, self.race.spec.sandbox
        if sandbox.provider not in ("docker", "podman"):
            return
        endpoint = resolve_endpoint(sandbox.endpoint, sandbox.provider)
        try:
            assert race.id is not None, "the saved run's"
            with anyio.fail_after(race.spec.cleanup_timeout):
                await anyio.to_thread.run_sync(
                    remove_race_containers, race.id, endpoint, abandon_on_cancel=True
                )
        except TimeoutError:
            self.warnings.append(
                f"leftover containers of race {race.id} were not all removed within "
                f"{race.spec.cleanup_timeout:g}s"
            )
        except Exception as error:  # no engine reachable: warn, the replay itself does not need it yet
            self.warnings.append(
                f"could not remove leftover containers of race {race.id}: {_one_line(error)}"
            )

    # ---------------------------------------------------------------------------- saving

    def _state(self) -> dict[str, Any]:
        race = self.race
        state = race.state()
        state.update(
            {
                "format": 1,
                "candidates": [c.key for c in race.spec.candidates],
                "race_file": str(race.spec.path) if race.spec.path else None,
                "repository": str(race.repository),
                "name": race.spec.name,
                "mode": race.spec.mode,
                "select": race.spec.select,
                "before": race.host_before.to_json() if race.host_before else None,
                "finished": False,
                "status": None,
                "updated_at": time.time(),
            }
        )
        state["usage"] = {"attempts": race.accounting.attempts, **race.total_usage().to_json()}
        return state

    async def save(self, **extra: Any) -> None:
        if self._failed is not None or self.race.suspended:
            return  # a suspended race keeps the state it had when its coordinator was stopped
        async with self._lock:
            if self._failed is not None or self.race.suspended:
                return  # (re-checked: the stop may have come while this save waited its turn)
            state = {**self._state(), **extra}
            self._dirty = False
            started = time.perf_counter()
            try:
                await anyio.to_thread.run_sync(self.store.save, state)
            except (CheckpointError, TransportError) as error:
                self._fail(error)
                return
            self._last_write = time.monotonic()
            self.writes += 1
            self.write_seconds += time.perf_counter() - started

    def usage_changed(self) -> None:
        self._dirty = True

    async def heartbeat(self) -> None:
        while self._failed is None:
            await anyio.sleep(FLUSH_EVERY)
            if self._dirty:
                await self.save()  # carries a fresh heartbeat
            elif time.monotonic() - self._last_write >= HEARTBEAT_EVERY:
                async with self._lock:
                    if self._failed is not None:
                        return
                    try:
                        await anyio.to_thread.run_sync(self.store.heartbeat)
                    except (CheckpointError, TransportError) as error:
                        self._fail(error)
                        return
                    self._last_write = time.monotonic()

    def _fail(self, error: CheckpointError | TransportError) -> None:
        """A write failed: without a checkpoint the race is no longer recoverable, so it stops."""
        race = self.race
        self.failure = error
        if isinstance(error, CheckpointError):  # the run was released or taken over meanwhile
            self._failed = f"checkpoint not saved, race stopped: {error}"
        else:
            self._failed = (
                f"checkpoint storage failed, race stopped: {error}; run {race.spec.run_id} "
                f"stays owned: recover it with "
                f"`{recover_command(self.run_id, race.repository, '--inspect')}`"
            )
        race.abort(
            "cancelled: the run was released or taken over"
            if isinstance(error, CheckpointError)
            else "cancelled: checkpoint storage failed"
        )

    async def finish(self, result: RaceResult) -> None:
        race = self.race
        if race.suspended and self._failed is None:
            # As a crash leaves it, minus the owner: replay may start at once.
            try:
                await anyio.to_thread.run_sync(self.store.release)
            except (CheckpointError, TransportError) as error:
                self.failure = error
                result.error = f"could not release run {race.spec.run_id}: {error}"
            return
        if self._failed is None:
            settled = all(a.phase in (Phase.WAITING, Phase.SETTLED) for a in race.attempts.values())
            await self.save(finished=settled, status=str(result.status), result=result.to_json())
        if self._failed is not None:
            result.error = self._failed
            return
        if settled and all(a.cleanup == "done" for a in [*race.previous, *race.attempts.values()]):
            try:
                await anyio.to_thread.run_sync(self.store.release)
            except (CheckpointError, TransportError) as error:
                self.failure = error
                result.error = f"could not release run {race.spec.run_id}: {error}"


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300] or type(error).__name__
