"""`outpost-tui worktrees [REPO]`: the worktrees races kept, and containers that belong to runs."""

from __future__ import annotations

import argparse
import json
import sys

from .. import exitcodes

EPILOG = """\
examples:
  outpost-tui worktrees                 retained worktrees of the repository here
  outpost-tui worktrees ../project --json

A worktree is kept when it holds uncommitted, untracked or ignored files, when its candidate failed,
or when the race was durable; its branch (outpost/speculation/<race>/<key>/<attempt>) always stays.
A worktree whose .git link was changed (by its agent, say) is listed as "git link changed: not
inspected": git is never run in it.

exit codes: 0 listed, 2 not a git repository (or git cannot list its worktrees)
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser("worktrees", help="list retained worktrees", epilog=EPILOG,
                                   description="List the candidate worktrees kept under .outpost/workspaces.",
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("repository", nargs="?", default=".", metavar="REPO",
                        help="the repository (default: the current directory)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--endpoint", metavar="URL",
                        help="the container engine to list candidate containers from (default: "
                             "DOCKER_HOST, then the usual Docker and Podman sockets)")
    parser.set_defaults(handler=_handle)


def _handle(args) -> int:
    from ..engine import git

    try:
        root = git.repository_root(args.repository)
        worktrees = git.list_worktrees(root)
    except git.GitError as error:
        print(f"outpost-tui: {error}", file=sys.stderr)
        return exitcodes.BAD_INPUT
    containers, engine_error = _containers(root, args.endpoint)
    if args.json:
        print(json.dumps({"repository": str(root), "worktrees": worktrees, "containers": containers,
                          "container_engine_error": engine_error}, indent=2))
        return 0
    if not worktrees:
        print(f"no retained worktrees in {root}")
    for w in worktrees:
        state = _state(w)
        who = f"{w['key']}#{w['attempt']} of race {w['race_id']}" if w["key"] else (w["branch"] or "detached")
        print(f"{w['path']}\n    {who}, {state}, HEAD {str(w['head'])[:12]}")
    for c in containers:
        print(f"container {c.get('name')} ({c.get('status')}) for {c.get('key')}#{c.get('attempt')} "
              f"of race {c.get('race')}")
    if engine_error:
        print(f"(containers not listed: {engine_error})", file=sys.stderr)
    return 0


def _state(worktree: dict) -> str:
    if worktree["missing"]:
        return "missing"
    if worktree.get("link_changed"):
        return "git link changed: not inspected"
    if worktree.get("problem"):
        return f"not inspected: {worktree['problem']}"
    return "clean" if worktree["clean"] else "has changes"


def _containers(root, endpoint: str | None) -> tuple[list[dict], str | None]:
    from ..engine.sandbox import SandboxError
    from ..engine.sandbox.container import list_containers

    try:
        return list_containers(repository=str(root), endpoint=endpoint), None
    except SandboxError as error:
        return [], str(error)
