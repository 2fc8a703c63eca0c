"""Run a race's validation again on one kept attempt, in the kind of sandbox the race used.

The race records its validation command and sandbox settings in its race-started event (the
flight log), so a worktree can be judged again long after the race: after the operator touched it
in a shell, say. A Python-callable validation (API only) is not recorded and cannot be rerun.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import anyio

from .. import git
from ..core.events import RaceStarted
from ..core.result import Validation
from ..core.spec import RaceSpec, SandboxSpec, ValidateSpec
from ..errors import OutpostError
from ..records import history
from ..sandbox import SandboxContext, SandboxError
from ..sandbox.providers import provider_for
from ..verdict.validation import ValidationContext, validate


def recorded_validation(spec: RaceSpec) -> dict[str, Any] | None:
    """What the race-started event keeps of the validation: enough to run it again."""
    if not spec.validate.command:
        return None
    return {
        "command": list(spec.validate.command),
        "timeout": spec.validate.timeout,
        "sandbox": asdict(spec.sandbox),
    }


class NotRecorded(OutpostError):
    """The race recorded no validation command (a callable, or an older version); one line."""


def _recorded(repository: Path, race_id: str) -> dict[str, Any]:
    for event in history.iter_events(repository, race_id):
        if isinstance(event, RaceStarted):
            found = event.validate
            if isinstance(found, dict) and isinstance(found.get("command"), list) and found["command"]:
                return found
            break
    raise NotRecorded(
        f"race {race_id} recorded no validation command (a Python callable, or a race run "
        "before outpost-tui recorded it): validate by hand in a shell"
    )


def revalidate(
    repository: Path | str, race_id: str, key: str, attempt: int, directory: Path | str
) -> Validation:
    """Run the race's validation in `directory` now; its verdict (never changes the recorded result)."""
    root = git.repository_root(repository)
    recorded = _recorded(root, race_id)
    git.check_worktree_link(directory)
    sandbox = SandboxSpec(
        **{k: v for k, v in (recorded.get("sandbox") or {}).items() if k in SandboxSpec.__dataclass_fields__}
    )
    spec = ValidateSpec(
        command=tuple(str(a) for a in recorded["command"]),
        timeout=recorded.get("timeout"),
        require_commits=False,
    )
    return anyio.run(_run, root, race_id, key, attempt, Path(directory), sandbox, spec)


async def _run(
    root: Path,
    race_id: str,
    key: str,
    attempt: int,
    directory: Path,
    sandbox: SandboxSpec,
    spec: ValidateSpec,
) -> Validation:
    env = {"TZ": "UTC", "OUTPOST_CANDIDATE": key, "OUTPOST_ATTEMPT": str(attempt), "OUTPOST_RACE_ID": race_id}
    context = SandboxContext(
        repository=root,
        directory=directory,
        git_common_dir=git.git_common_dir(root),
        race_id=race_id,
        key=key,
        attempt=attempt,
        env=env,
    )
    provider = provider_for(sandbox)
    try:
        if await anyio.to_thread.run_sync(lambda: provider.isolates_git):  # (may probe bubblewrap)
            # a fenced check's git is the worktree's private repository: the race's, or (a
            # worktree kept from an unfenced race) one made now
            await anyio.to_thread.run_sync(_make_private, root, directory)
        box = await provider.acquire(context)
    except (SandboxError, git.GitError) as error:
        return Validation("error", None, "", f"validation could not start: {error}")
    try:
        checked = ValidationContext(
            key=key, attempt=attempt, directory=directory, branch="", baseline="", commits=[], sandbox=box
        )
        return await validate(spec, checked, lambda *_: None)
    finally:
        await box.close()
        await provider.drain()  # its container is removed before this returns


def _make_private(root: Path, directory: Path) -> None:
    if not git.private_git_dir(directory).is_dir():
        git.make_private(git.private_template(root, git.listed_refs(root)), directory)
