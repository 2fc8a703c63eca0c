"""The recovery wizard's two tables: the durable runs of a repository to choose from (keyed by
their checkpoint's key), and the attempts of the run it read, with their phase and what each holds."""

from __future__ import annotations

import time
from pathlib import Path

from textual.widgets import DataTable

from ...engine.durable import recovery
from ...engine.durable.checkpoint import RunSummary


class RunsTable(DataTable[str]):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.add_columns("run id", "status", "owner", "updated")

    def show(self, summaries: list[RunSummary]) -> None:
        self.clear()
        for summary in summaries:
            owner = f"pid {summary.owner.pid} on {summary.owner.host}" if summary.owner else "—"
            updated = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(summary.updated_at))
            run_id = summary.run_id or f"(unreadable {summary.key})"
            self.add_row(run_id, summary.status, owner, updated, key=summary.key)


class AttemptsTable(DataTable[str]):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.add_columns("attempt", "phase", "status", "cleanup", "resources", "worktree")

    def show(self, view: recovery.RunView | None, repository: Path) -> None:
        self.clear()
        for attempt in view.attempts if view else []:
            self.add_row(
                f"{attempt['key']}#{attempt['attempt']}",
                attempt["phase"],
                attempt["status"] or "—",
                attempt["cleanup"] or "—",
                ", ".join(attempt["resources"]) or "none",
                _short(attempt["directory"], repository),
            )


def _short(directory: str | None, repository: Path) -> str:
    # Worktrees live under the repository: the relative path is what fits in the column.
    if not directory:
        return "—"
    try:
        return str(Path(directory).relative_to(repository.absolute()))
    except ValueError:
        return directory
