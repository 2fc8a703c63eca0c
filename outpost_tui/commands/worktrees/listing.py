"""`outpost-tui worktrees` without an action: the review screen in a terminal, else a listing of
what races kept (or all of it as JSON); and finding one attempt by its name."""

from __future__ import annotations

import json
import sys


def list_kept(root, args) -> int:
    from ...engine import git
    from ...engine.kept.retained import human_age, human_bytes, retained

    if not args.json and sys.stdin.isatty() and sys.stdout.isatty():
        from ...ui import launch

        return launch(screen="worktrees", repository=root)
    containers, engine_error = race_containers(root, args.endpoint)
    races = retained(root, containers=containers)
    worktrees = git.list_worktrees(root)
    unlisted = [w for w in worktrees if not w.get("race_id")]
    if args.json:
        print(
            json.dumps(
                {
                    "repository": str(root),
                    "worktrees": worktrees,
                    "races": [r.to_json() for r in races],
                    "containers": containers,
                    "container_engine_error": engine_error,
                },
                indent=2,
            )
        )
        return 0
    if not races and not unlisted:
        print(f"no retained worktrees or archives in {root}")
    for race in races:
        print(f"race {race.id}{' (' + race.name + ')' if race.name else ''}: {race.status}")
        for row in race.attempts:
            where = (
                row.path
                if row.present
                else (
                    f"archived at {row.archive[:12]}"
                    if row.archive
                    else "only its branch is kept"
                    if not row.path
                    else "missing"
                )
            )
            stat = row.diff_stat
            changes = (
                f"{stat['files']} files +{stat['insertions']} -{stat['deletions']}" if stat else "no diff"
            )
            print(f"  {row.key}#{row.attempt} {row.outcome}{': ' + row.reason if row.reason else ''}")
            print(f"      {where}")
            details = [
                changes,
                f"size {human_bytes(row.size_bytes)}" if row.size_bytes is not None else "",
                f"age {human_age(row.age_seconds)}",
                row.holds.describe() if row.holds else "",
            ]
            if row.verdict:
                details.append("verdict " + ", ".join(f"{k} {v}" for k, v in row.verdict.items()))
            if row.container:
                details.append(f"container {row.container.get('name')} ({row.container.get('status')})")
            if row.occupants:
                details.append("in use by " + "; ".join(o.describe() for o in row.occupants))
            if row.problem:
                details.append(f"not inspected: {row.problem}")
            print("      " + ", ".join(d for d in details if d))
    for w in unlisted:
        print(f"{w['path']}\n    {w['branch'] or 'detached'}: not a race's worktree")
    if engine_error:
        print(f"(containers not listed: {engine_error})", file=sys.stderr)
    return 0


def race_containers(root, endpoint: str | None) -> tuple[list[dict], str | None]:
    from ...engine.sandbox import SandboxError
    from ...engine.sandbox.container_engine import list_containers

    try:
        return list_containers(repository=str(root), endpoint=endpoint), None
    except SandboxError as error:
        return [], str(error)


def find_attempt(root, ident: str):
    from ...engine.kept.retained import find, retained

    return find(retained(root, detail=False, processes=False), ident)
