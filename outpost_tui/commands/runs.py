"""`outpost-tui runs [REPO]`: durable runs saved in a repository."""

from __future__ import annotations

import argparse
import json
import time

from . import add_repository_argument

EPILOG = """\
examples:
  outpost-tui runs                 durable runs of the repository in the current directory
  outpost-tui runs ../project --json

exit codes: 0 listed (a run whose saved state cannot be read is listed as corrupt), 2 not a git
repository, 8 the storage directory cannot be read
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "runs",
        help="list durable runs",
        epilog=EPILOG,
        description="List the durable runs saved under <repo>/.outpost/storage.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_repository_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the runs as JSON")
    parser.set_defaults(handler=_handle)


def _handle(args) -> int:
    from ..engine.durable.recovery import runs

    found = runs(args.repository)
    containers = _containers()
    race_ids = {r.run_id: r.race_id for r in found if r.run_id}

    def race_of(run_id: str | None) -> str | None:
        return race_ids.get(run_id) if run_id else None

    def containers_of(run_id: str | None) -> list[str]:
        race = race_of(run_id)
        return containers.get(race, []) if race else []

    if args.json:
        print(
            json.dumps(
                [
                    {
                        "run_id": r.run_id,
                        "race_id": race_of(r.run_id),
                        "status": r.status,
                        "revision": r.revision,
                        "owner": r.owner.to_json() if r.owner else None,
                        "updated_at": r.updated_at,
                        "problem": r.problem,
                        "containers": containers_of(r.run_id),
                    }
                    for r in found
                ],
                indent=2,
            )
        )
        return 0
    if not found:
        print("no durable runs here")
        return 0
    for r in found:
        owner = f"owned by pid {r.owner.pid}@{r.owner.host}" if r.owner else "not owned"
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.updated_at))
        line = f"{r.run_id or '?':24} {r.status:16} {owner:28} {when}"
        if r.problem:
            line += f"  ({r.problem})"
        print(line)
        for name in containers_of(r.run_id):
            print(f"    container {name}")
    return 0


def _containers() -> dict[str, list[str]]:
    """Containers that belong to runs, by run id, when a container engine is reachable."""
    from ..engine.sandbox import SandboxError
    from ..engine.sandbox.container_engine import list_containers

    try:
        found = list_containers()
    except SandboxError:  # no engine reachable: nothing to show, not an error for this listing
        return {}
    by_race: dict[str, list[str]] = {}
    for container in found:
        by_race.setdefault(container.get("race") or "?", []).append(container.get("name", "?"))
    return by_race
