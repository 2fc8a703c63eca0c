"""An attempt's work compared: against the race's baseline (a diff stat), or with another attempt's
work (the patch, the paths touched), commits and trees alike.

Separate from `retained` because these are the comparisons the review screen and the command line
run on demand, on trees `retained.whole_work` gives them; the listing itself only needs the stat.
A diff that reads contents runs with external diff drivers and textconv off: a candidate's
`.gitattributes` must not make the engine's git run a program.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import git


def diff_stat(root: Path | str, baseline: str, tree: str) -> dict[str, Any]:
    out = str(
        git.output(
            "git diff --numstat",
            root,
            "diff",
            "--numstat",
            "-z",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            baseline,
            tree,
            "--",
            strip=False,
        )
    )
    files = insertions = deletions = 0
    for record in out.split("\0"):
        parts = record.split("\t")
        if len(parts) < 3:
            continue
        files += 1
        insertions += int(parts[0]) if parts[0].isdigit() else 0
        deletions += int(parts[1]) if parts[1].isdigit() else 0
    return {"files": files, "insertions": insertions, "deletions": deletions}


def work_diff(root: Path | str, old: str, new: str) -> str:
    """The patch from `old` to `new` (commits or trees), as text for the diff view."""
    return str(
        git.output(
            "git diff",
            root,
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "-M",
            old,
            new,
            "--",
            strip=False,
        )
    )


def touched(root: Path | str, old: str, new: str) -> list[str]:
    out = str(
        git.output(
            "git diff --name-only",
            root,
            "diff",
            "--name-only",
            "-z",
            "--no-renames",
            old,
            new,
            "--",
            strip=False,
        )
    )
    return [p for p in out.split("\0") if p]
