"""The recovery wizard's two tables: the durable runs of a repository to choose from (keyed by
their checkpoint's key), and the attempts of the run it read, with their phase and what each holds."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from rich.cells import cell_len
from textual.widgets import DataTable

from ...engine.durable import recovery
from ...engine.durable.checkpoint import RunSummary


class _Table(DataTable[str]):
    """A table whose columns are as wide as their widest cell from the moment its rows are shown.
    Sized when the app is next idle instead (a table's own way), its header could be drawn, and
    kept, at the widths the columns had before their rows came."""

    LABELS: tuple[str, ...] = ()

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.add_columns(*self.LABELS)

    def _fill(self, rows: Sequence[tuple[tuple[str, ...], str | None]]) -> None:
        """`rows`: each row's cells and key."""
        widths = [cell_len(label) for label in self.LABELS]
        for cells, _ in rows:
            widths = [max(width, cell_len(cell)) for width, cell in zip(widths, cells, strict=True)]
        self.clear(columns=True)
        for label, width in zip(self.LABELS, widths, strict=True):
            self.add_column(label, width=width)
        for cells, key in rows:
            self.add_row(*cells, key=key)


class RunsTable(_Table):
    LABELS = ("run id", "status", "owner", "updated")

    def show(self, summaries: list[RunSummary]) -> None:
        rows = []
        for summary in summaries:
            owner = f"pid {summary.owner.pid} on {summary.owner.host}" if summary.owner else "—"
            updated = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(summary.updated_at))
            run_id = summary.run_id or f"(unreadable {summary.key})"
            rows.append(((run_id, summary.status, owner, updated), summary.key))
        self._fill(rows)


class AttemptsTable(_Table):
    LABELS = ("attempt", "phase", "status", "cleanup", "resources", "worktree")

    def show(self, view: recovery.RunView | None, repository: Path) -> None:
        rows = []
        for attempt in view.attempts if view else []:
            cells = (
                f"{attempt['key']}#{attempt['attempt']}",
                attempt["phase"],
                attempt["status"] or "—",
                attempt["cleanup"] or "—",
                ", ".join(attempt["resources"]) or "none",
                _short(attempt["directory"], repository),
            )
            rows.append((cells, None))
        self._fill(rows)


def _short(directory: str | None, repository: Path) -> str:
    # Worktrees live under the repository: the relative path is what fits in the column.
    if not directory:
        return "—"
    try:
        return str(Path(directory).relative_to(repository.absolute()))
    except ValueError:
        return directory
