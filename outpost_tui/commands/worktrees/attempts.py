"""`outpost-tui worktrees --archive ID` and `--restore ID`: one attempt's worktree archived then
removed (its branch kept), or recreated from its archive, byte for byte."""

from __future__ import annotations

import json

from ...engine.errors import OutpostError
from ...exitcodes import REFUSED
from .listing import find_attempt


def archive_attempt(root, args) -> int:
    from ...engine.kept import archive
    from ...engine.kept.processes import occupants
    from ...engine.kept.removal import Occupied, archive_and_remove
    from ...engine.kept.retained import human_bytes

    row = find_attempt(root, args.archive)
    if not row.present:
        raise OutpostError(
            f"{row.id} has no worktree to archive"
            + (f" (archived at {row.archive[:12]})" if row.archive else ""),
            exit_code=REFUSED,
        )
    attempt = archive.Attempt(row.race_id, row.key, row.attempt)
    if args.dry_run:
        entries, _, left = archive.scan(row.path, args.include_ignored)
        busy = occupants(row.path)
        plan = {
            "id": row.id,
            "path": row.path,
            "ref": attempt.ref,
            "files": len(entries),
            "ignored_left_out": {"files": len(left), "bytes": sum(e.size for e in left)},
            "occupants": [o.to_json() for o in busy],
            "dry_run": True,
        }
        if args.json:
            print(json.dumps(plan, indent=2))
        else:
            print(f"would archive {len(entries)} files of {row.path} to {attempt.ref}, then remove it")
            if left:
                print(
                    f"ignored files not archived (removed with it): {len(left)}, "
                    f"{human_bytes(plan['ignored_left_out']['bytes'])} (--include-ignored keeps them)"
                )
            if busy:
                print("refused now: in use by " + "; ".join(o.describe() for o in busy))
        return REFUSED if busy else 0
    try:
        removal = archive_and_remove(root, row.path, attempt, include_ignored=args.include_ignored)
    except Occupied as error:
        if args.json:
            print(
                json.dumps(
                    {
                        "id": row.id,
                        "done": False,
                        "reason": str(error),
                        "occupants": [o.to_json() for o in error.occupants],
                    },
                    indent=2,
                )
            )
        raise
    if args.json:
        print(json.dumps({"id": row.id, "done": True, **removal.to_json()}, indent=2))
    else:
        done = removal.archive
        print(
            f"archived {done.files} files of {row.path} to {done.ref} ({done.commit[:12]}) and removed it; "
            f"{human_bytes(removal.freed_bytes)} freed; its branch {row.branch} is kept"
        )
        if done.ignored_files:
            print(f"ignored files not archived: {done.ignored_files}, {human_bytes(done.ignored_bytes)}")
        print(f"restore with: outpost-tui worktrees --restore {row.id}")
    return 0


def restore_attempt(root, args) -> int:
    from ...engine.kept import archive
    from ...engine.kept.restore import restore

    attempt = _parse_attempt(args.restore)
    if attempt is None:
        row = find_attempt(root, args.restore)
        attempt = archive.Attempt(row.race_id, row.key, row.attempt)
    commit = archive.archived_commit(root, attempt)
    if commit is None:
        raise OutpostError(f"no archive of {attempt.label} ({attempt.ref} does not exist)")
    if args.dry_run:
        manifest = archive.manifest_of(root, commit)
        plan = {
            "id": attempt.label,
            "archive": commit,
            "directory": manifest.get("directory"),
            "head": manifest.get("head"),
            "dry_run": True,
        }
        print(
            json.dumps(plan, indent=2)
            if args.json
            else f"would restore {attempt.label} from {commit[:12]} into {manifest.get('directory')}"
        )
        return 0
    target = restore(root, attempt)
    if args.json:
        print(
            json.dumps(
                {"id": attempt.label, "done": True, "archive": commit, "directory": str(target)}, indent=2
            )
        )
    else:
        print(f"restored {attempt.label} from {commit[:12]} into {target}")
    return 0


def _parse_attempt(ident: str):
    from ...engine import git
    from ...engine.kept import archive

    parts = ident.removeprefix(git.BRANCH_PREFIX + "/").split("/")
    if len(parts) == 3 and parts[2].isdigit():
        try:
            git.branch_name(parts[0], parts[1], int(parts[2]))
        except ValueError:
            return None
        return archive.Attempt(parts[0], parts[1], int(parts[2]))
    return None
