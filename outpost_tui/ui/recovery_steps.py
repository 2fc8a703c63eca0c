"""What the recovery wizard (f4) says at each of its four steps about the run it read: who owns it
and whether that coordinator runs (stop), what was saved (inspect), whether it can be released
(release), and what a replay would do (replay), each ending with the key that goes on."""

from __future__ import annotations

from ..engine.durable import recovery
from ..engine.durable.ownership import describe_age

STEPS = (("stop", "1 Stop"), ("inspect", "2 Inspect"), ("release", "3 Release"), ("replay", "4 Replay"))
ORDER = [name for name, _ in STEPS]


def step_text(step: str, view: recovery.RunView, *, now: float, stop_timeout: float) -> str:
    """The wizard's words for `step` (one of ORDER) about `view`, as of `now`."""
    if step == "stop":
        return _stop_text(view, now, stop_timeout)
    if step == "inspect":
        return _inspect_text(view, now)
    return _release_text(view) if step == "release" else _replay_text(view)


def _owner_line(view: recovery.RunView, now: float) -> str:
    owner = view.owner or {}
    age = describe_age(now - float(owner.get("heartbeat_at", now)))
    return f"Coordinator: pid {owner.get('pid')} on {owner.get('host')}, last heartbeat {age} ago"


def _stop_text(view: recovery.RunView, now: float, stop_timeout: float) -> str:
    if view.owner is None:
        return (
            f"No coordinator owns run {view.run_id} (status {view.status}): nothing to stop.\n\n"
            f"enter: next step (inspect)"
        )
    status = view.coordinator
    lines = [_owner_line(view, now), status.reason if status else "", ""]
    if status is not None and status.alive:
        lines.append(
            f"It is running. s: stop it (TERM, then KILL if it is still there after "
            f"{stop_timeout:.0f} s; asks first)."
        )
    elif status is None or status.alive is None:
        lines.append(
            f"It cannot be checked or stopped from here: stop pid {view.owner.get('pid')} on "
            f"{view.owner.get('host')} yourself, then press enter to continue."
        )
    else:
        lines.append("It is not running: this step is done.\n\nenter: next step (inspect)")
    return "\n".join(lines)


def _inspect_text(view: recovery.RunView, now: float) -> str:
    state = view.state
    baseline = str(state.get("baseline") or "?")[:12]
    lines = [
        f"Run {view.run_id}: {view.status} · revision {view.revision}",
        f"Race {state.get('id') or '?'} from baseline {baseline}",
        f"Race file: {state.get('race_file') or '(none on record)'}",
    ]
    if view.owner is not None:
        lines.append(_owner_line(view, now))
    lines += ["", "enter: next step (release)"]
    return "\n".join(lines)


def _release_text(view: recovery.RunView) -> str:
    if view.owner is None:
        return (
            f"Run {view.run_id} is not owned by any coordinator: nothing to release.\n\n"
            f"enter: next step (replay)"
        )
    if view.coordinator is not None and view.coordinator.alive:
        return (
            f"The coordinator (pid {view.owner.get('pid')}) is still running: go back (escape) and "
            f"stop it first."
        )
    lines = [
        f"Release run {view.run_id} at revision {view.revision}: clears its owner so the run can "
        f"be replayed. Stops and deletes nothing."
    ]
    if view.coordinator is None or view.coordinator.alive is None:
        lines.append(
            f"Careful: {view.coordinator.reason if view.coordinator else 'the owner cannot be checked'}"
        )
    lines += ["", "l / enter: release (asks first)"]
    return "\n".join(lines)


def _replay_text(view: recovery.RunView) -> str:
    if view.owner is not None:
        return f"Run {view.run_id} is still owned: release it first (l)."
    race_file = view.state.get("race_file") or "(no race file on record)"
    lines = [
        f"Replay run {view.run_id} from {race_file}: interrupted attempts start again as new "
        f"attempts; settled ones are kept."
    ]
    if view.state.get("finished") and view.status == "quota":
        lines.append(
            "The run ended quota: replaying it reruns the candidates the quota stopped, as new attempts."
        )
    elif view.state.get("finished"):
        lines.append(f"The run already finished ({view.status}): replaying it shows its result again.")
    lines += ["", "p / enter: replay (asks first)"]
    return "\n".join(lines)
