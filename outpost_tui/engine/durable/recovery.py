"""Crash recovery in four steps, as an API the CLI and the app's wizard both drive.

1. Stop: is the recorded coordinator still alive? Stop it (TERM, then KILL) and confirm it is gone.
2. Inspect: read the saved run and keep its revision.
3. Release: clear ownership if the revision still matches; deletes and stops nothing.
4. Replay: run the race again with resume authorised (stops leftovers, restarts interrupted attempts).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import git
from ..core.result import CandidateRecord
from ..core.usage import Usage
from .checkpoint import CheckpointError, RunSummary, UnknownRun, list_runs, read_run, release_run
from .checkpoint_state import run_status
from .local_transport import LocalTransport
from .ownership import CoordinatorStatus, Owner, coordinator_status, stop_coordinator

if TYPE_CHECKING:
    from ..core.model import RaceModel
    from ..core.spec import RaceSpec


def storage_directory(repository: str | Path) -> Path:
    return git.repository_root(repository) / git.OUTPOST_DIR / "storage"


def transport_for(repository: str | Path) -> LocalTransport:
    return LocalTransport(storage_directory(repository))


@dataclass(frozen=True)
class RunView:
    run_id: str
    revision: str
    status: str
    owner: dict[str, Any] | None
    coordinator: CoordinatorStatus | None
    state: dict[str, Any]

    @property
    def attempts(self) -> list[dict[str, Any]]:
        return [
            {
                "key": a["key"],
                "attempt": a["attempt"],
                "branch": a["branch"],
                "phase": a["phase"],
                "cleanup": a["cleanup"],
                "resources": a.get("resources", []),
                "directory": a.get("directory"),
                "status": self._attempt_status(a),
                "error": a["record"].get("error"),
            }
            for a in self.state.get("attempts", [])
        ]

    def _attempt_status(self, attempt: dict[str, Any]) -> str:
        """A settled attempt's outcome; for an unsettled one, what its phase means now (its record
        still holds the default "skipped" until it settles)."""
        phase = str(attempt["phase"])
        if phase == "settled":
            return str(attempt["record"]["status"])
        if phase == "waiting":
            return "waiting"
        if self.coordinator is not None and self.coordinator.alive is not False:
            return phase  # its coordinator is (or may be) still working on it
        return f"{phase} (interrupted)"

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "revision": self.revision,
            "status": self.status,
            "owner": self.owner,
            "coordinator": None
            if self.coordinator is None
            else {"alive": self.coordinator.alive, "reason": self.coordinator.reason},
            "race_id": self.state.get("id"),
            "baseline": self.state.get("baseline"),
            "race_file": self.state.get("race_file"),
            "finished": bool(self.state.get("finished")),
            "usage": self.state.get("usage"),
            "attempts": self.attempts,
        }


def runs(repository: str | Path) -> list[RunSummary]:
    directory = storage_directory(repository)
    if not directory.exists():
        return []
    return list_runs(LocalTransport(directory))


def inspect(repository: str | Path, run_id: str) -> RunView:
    directory = storage_directory(repository)
    if not directory.exists():
        raise UnknownRun(f"no durable runs in {git.repository_root(repository)} (no {directory})")
    saved = read_run(LocalTransport(directory), run_id)
    state = saved.state
    status = run_status(state, saved.owner is not None)
    return RunView(
        run_id=run_id,
        revision=saved.revision,
        status=status,
        owner=saved.owner.to_json() if saved.owner else None,
        coordinator=coordinator_status(saved.owner) if saved.owner else None,
        state=state,
    )


def stop(repository: str | Path, run_id: str, *, timeout: float = 10.0) -> tuple[bool, str]:
    """Stop the run's coordinator; (True, why) only when it is verified gone."""
    view = inspect(repository, run_id)
    if view.owner is None:
        return True, f"run {run_id} has no owner: nothing to stop"
    owner = Owner.from_json(view.owner)
    status = coordinator_status(owner)
    if status.alive is False:
        return True, status.reason
    gone = stop_coordinator(owner, timeout=timeout)
    if gone:
        return True, f"coordinator pid {owner.pid} stopped"
    return False, f"coordinator pid {owner.pid} is still running after TERM and KILL"


def release(repository: str | Path, run_id: str, revision: str) -> str | None:
    """Clear the run's owner; the new revision, or None when nobody owns it at `revision` (nothing
    is written: a release that changes nothing must not bump the revision others may hold). A stale
    revision is refused as always (RevisionChanged), owned or not."""
    view = inspect(repository, run_id)
    if view.owner is None and view.revision == revision:
        return None
    return release_run(transport_for(repository), run_id, revision)


def replay_spec(repository: str | Path, run_id: str, race_file: str | Path | None = None) -> RaceSpec:
    """The run's race spec with replay authorised, from its saved race file (or the one given)."""
    from ..racefile import RaceFileError, load_race

    view = inspect(repository, run_id)
    path = race_file or view.state.get("race_file")
    if not path:
        raise UnknownRun(f"run {run_id} has no race file on record: pass --race-file")
    spec = load_race(path)
    if spec.run_id is None:
        raise RaceFileError(str(path), None, None, "has no [race] run_id (a durable race needs one)")
    if spec.run_id != run_id:
        raise UnknownRun(f"{path} is for run {spec.run_id!r}, not {run_id!r}")
    return spec.replay_authorised()


def restore_model(model: RaceModel, repository: str | Path, run_id: str) -> None:
    """Fill a replay's model from the saved run before it runs: a candidate that settled before
    the crash shows how it ended from the first frame. Nothing saved yet: nothing to restore."""

    try:
        view = inspect(repository, run_id)
    except (CheckpointError, git.GitError, OSError, ValueError):
        return  # the replay itself says what is wrong with the saved run
    latest: dict[str, dict[str, Any]] = {}
    for saved in view.state.get("attempts", []):
        latest[saved["key"]] = saved
    usage = view.state.get("usage") or {}
    for saved in latest.values():
        if saved["phase"] == "settled":
            model.restore(
                CandidateRecord.from_json(saved["record"]),
                attempts=int(usage.get("attempts", 0)),
                usage=Usage.from_json(usage),
            )
