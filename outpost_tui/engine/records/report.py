"""A finished race told for people: the leaderboard (one row per attempt) and the race report as
Markdown, from the result document (`RaceResult.to_json()`, what `run --json` prints).

The app's result screen shows the same rows; the export writes the report beside the JSON, so a
report and the result it was made from never disagree. Fields this module does not know (a later
`verdict`, say) are carried as they are: the report reads the document, it does not define it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.usage import cost_text
from ..files import write_atomically
from ..git import OUTPOST_DIR, repository_root
from ..verdict.record import describe_tests

TOKEN_DIMENSIONS = (("input", "in"), ("cached", "cached"), ("cache_write", "written"), ("output", "out"))
# Best first: how an attempt ended says more than any number beside it.
STATUS_RANK = {"winner": 0, "rejected": 1, "quota": 2, "failed": 3, "cancelled": 4, "skipped": 5}


def count(n: int | None) -> str:
    """A token count in at most five characters: 950, 12.3k, 200k, 1.5M."""
    n = int(n or 0)
    if n < 1000:
        return str(n)
    value, unit = (n / 1000, "k") if round(n / 1000, 1) < 1000 else (n / 1_000_000, "M")
    text = f"{value:.1f}"
    return (text[:-2] if text.endswith(".0") else text) + unit


def seconds(value: float | None) -> str:
    if value is None:
        return "–"
    whole = max(0, round(value))
    if whole < 60:
        return f"{whole}s"
    minutes, rest = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def money(usage: dict[str, Any]) -> str:
    """The cost as usage says it ("$0.0123", "cost unknown", "$0.0123 + unknown"); `~` marks an
    estimate, `+` usage that is incomplete (an agent stopped before it reported all of it)."""
    text = cost_text(float(usage.get("cost_usd") or 0.0), bool(usage.get("cost_unknown")))
    if usage.get("estimated"):
        text += "~"
    if usage.get("complete") is False:
        text += "+"
    return text


def verdict_text(verdict: Any) -> str:
    """The test verdict of an attempt, when the result carries one: counts, then the gate's reason."""
    if not verdict:
        return ""
    if not isinstance(verdict, dict):
        return str(verdict)
    parts = []
    if isinstance(verdict.get("tests"), dict):  # the engine's verdict (engine/verdict/record.py)
        parts.append(describe_tests(verdict["tests"]))
    counts = found if isinstance(found := verdict.get("counts"), dict) else verdict
    for name in ("passed", "failed", "errors", "skipped"):
        if isinstance(counts.get(name), int):
            parts.append(f"{counts[name]} {name}")
    for name in ("reason", "gate", "status"):
        if isinstance(verdict.get(name), str) and verdict[name]:
            parts.append(verdict[name])
            break
    return ", ".join(parts) or json.dumps(verdict, sort_keys=True)[:80]


@dataclass(frozen=True)
class Row:
    """One attempt on the leaderboard."""

    key: str
    attempt: int
    agent: str
    status: str
    reason: str
    tokens: dict[str, int]
    cost: str
    time: str
    score: str
    tests: str
    review: tuple[str, ...]
    branch: str | None
    commit: str | None
    directory: str | None
    superseded: bool  # a previous attempt (a replay or a quota rerun followed it)

    @property
    def tokens_text(self) -> str:
        return " ".join(f"{label} {count(self.tokens.get(name))}" for name, label in TOKEN_DIMENSIONS)


def _row(record: dict[str, Any], superseded: bool) -> Row:
    usage = record.get("usage") or {}
    validation = record.get("validation") or {}
    reason = record.get("error") or validation.get("reason") or ""
    if record.get("decided_by") and record.get("status") == "winner":
        reason = {
            "validation": "passed validation",
            "score": "highest score",
            "operator": "accepted by operator",
        }.get(record["decided_by"], record["decided_by"])
    tests = verdict_text(record.get("verdict"))
    if not tests and validation.get("status") not in (None, "not-run"):
        tests = str(validation["status"]) + (
            f" (exit {validation['exit_code']})" if validation.get("exit_code") not in (None, 0) else ""
        )
    score = record.get("score")
    return Row(
        key=record["key"],
        attempt=int(record.get("attempt") or 0),
        agent=record.get("agent", "?"),
        status=str(record.get("status")),
        reason=" ".join(str(reason).split()),
        tokens={name: int(usage.get(name) or 0) for name, _ in TOKEN_DIMENSIONS},
        cost=money(usage),
        time=seconds(record.get("duration")),
        score="" if score is None else f"{score:g}",
        tests=tests,
        review=tuple(record.get("review") or ()),
        branch=record.get("branch"),
        commit=record.get("commit"),
        directory=record.get("retained_directory") or record.get("directory"),
        superseded=superseded,
    )


def leaderboard(result: dict[str, Any]) -> list[Row]:
    """Every attempt, best first: the winner, then by how each ended, then by score, then as
    declared; a candidate's earlier attempts follow its latest."""
    latest = [_row(record, False) for record in result.get("candidates", [])]
    earlier = [_row(record, True) for record in result.get("previous_attempts", [])]
    order = {row.key: index for index, row in enumerate(latest)}

    def rank(row: Row) -> tuple[int, float, int, int]:
        score = -float(row.score) if row.score else 0.0
        return (STATUS_RANK.get(row.status, 9), score, order.get(row.key, 99), -row.attempt)

    rows: list[Row] = []
    for row in sorted(latest, key=rank):
        rows.append(row)
        rows.extend(sorted((e for e in earlier if e.key == row.key), key=lambda e: -e.attempt))
    rows.extend(e for e in earlier if e.key not in order)
    return rows


def headline(result: dict[str, Any]) -> str:
    """One line: how the race ended, with whom, what it cost and how long it took."""
    winner = result.get("winner")
    usage = result.get("usage") or {}
    parts = [f"winner {winner['key']} (attempt {winner['attempt']})" if winner else str(result.get("status"))]
    if result.get("error"):
        parts.append(str(result["error"]))
    integration = result.get("integration") or {}
    if integration.get("status"):
        parts.append(f"integration {integration['status']}")
    parts.append(f"{usage.get('attempts', 0)} attempt(s)")
    parts.append(money(usage))
    parts.append(seconds(result.get("duration")))
    return " · ".join(parts)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ") if text not in (None, "") else ""


def markdown(result: dict[str, Any]) -> str:
    """The race report: what ran, who won, every attempt, what to look at before merging."""
    started = result.get("started_at")
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)) if started else "?"
    lines = [
        f"# Race {result.get('name', 'race')} ({result.get('id')})",
        "",
        f"- **Outcome:** {headline(result)}",
        f"- **Started:** {when}",
        f"- **Mode:** {result.get('mode')}, select {result.get('select')}",
        f"- **Repository:** {result.get('repository') or '?'}",
        f"- **Baseline:** `{str(result.get('baseline') or '?')[:12]}`",
    ]
    isolation = result.get("isolation") or {}
    if isolation.get("mode"):
        lines.append(f"- **Isolation:** {isolation['mode']}")
    if isolation.get("warning"):
        lines.append(f"- **Warning:** {isolation['warning']}")
    winner = result.get("winner")
    if winner:
        lines.append(
            f"- **Winner:** {winner['key']} on `{winner['branch']}` at `{str(winner['commit'])[:12]}`"
            f" (decided by {winner.get('decided_by')})"
        )
        lines.append(f"- **Merge it:** `git merge {winner['commit']}` (nothing was merged or pushed)")
    integration = result.get("integration") or {}
    if integration.get("status") == "conflict":
        lines.append(
            f"- **Conflicts with the current branch in:** {', '.join(integration.get('conflicts') or [])}"
        )
    elif integration.get("status") == "blocked":
        lines.append(f"- **Integration check blocked:** {integration.get('reason')}")
    lines += [
        "",
        "## Leaderboard",
        "",
        "| candidate | attempt | status | reason | in | cached | written | out | cost | time "
        "| score | tests | review |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for row in leaderboard(result):
        name = row.key + (" (earlier)" if row.superseded else "")
        lines.append(
            "| "
            + " | ".join(
                _cell(v)
                for v in (
                    name,
                    row.attempt,
                    row.status,
                    row.reason,
                    *(count(row.tokens[n]) for n, _ in TOKEN_DIMENSIONS),
                    row.cost,
                    row.time,
                    row.score,
                    row.tests,
                    "; ".join(row.review),
                )
            )
            + " |"
        )
    flagged = [row for row in leaderboard(result) if row.review]
    if flagged:
        lines += ["", "## Review before merging", ""]
        for row in flagged:
            lines += [f"- **{row.key}** (attempt {row.attempt}): {flag}" for flag in row.review]
    return "\n".join(lines) + "\n"


def reports_directory(repository: str | Path) -> Path:
    return repository_root(repository) / OUTPOST_DIR / "reports"


def export(result: dict[str, Any], repository: str | Path) -> tuple[Path, Path]:
    """Write the race report (Markdown) and its result JSON under `.outpost/reports/`; both paths."""
    directory = reports_directory(repository)
    directory.mkdir(parents=True, exist_ok=True)
    stem = directory / str(result.get("id") or "race")
    md, js = stem.with_suffix(".md"), stem.with_suffix(".json")
    write_atomically(md, markdown(result).encode("utf-8"))
    write_atomically(js, (json.dumps(result, indent=2, sort_keys=False) + "\n").encode("utf-8"))
    return md, js
