"""Whether the race about to be started has a durable run that waits for recovery: one that was
interrupted, or is owned by a coordinator that is gone. Such a race cannot simply start; the race
screen says why and offers the recovery wizard (f4)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..engine.core.spec import RaceSpec


def waiting_for_recovery(spec: RaceSpec) -> str | None:
    """Why the spec's saved durable run needs the wizard first, or None (not durable, never saved,
    or free to start). Blocks on the checkpoint's files: call it from a thread."""
    if not spec.durability.enabled or not spec.run_id:
        return None
    # the recovery machinery is only loaded for a durable race
    from ..engine.durable import recovery
    from ..engine.errors import OutpostError

    try:
        view = recovery.inspect(spec.repository, spec.run_id)
    except (OutpostError, OSError, ValueError):
        return None  # never saved (a first run), or unreadable: starting says why
    coordinator = view.coordinator
    if view.status == "interrupted":
        return f"durable run {spec.run_id} was interrupted"
    if view.status == "owned" and coordinator is not None and coordinator.alive is False:
        return f"durable run {spec.run_id} is owned by a coordinator that is gone ({coordinator.reason})"
    return None
