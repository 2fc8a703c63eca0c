"""The operator's own merge of a candidate into the current branch: checked, confirmed, never pushed.

Every call first runs a fresh integration check (git.integration_check: the host clean and attached,
the candidate's commit the expected one, merge-tree clean) and refuses when it is blocked or
conflicting, so nothing half-merged is ever left in the user's checkout by this module. The merge is
the user's own act: their hooks and their identity apply, as for a `git merge` they typed; filter,
diff and merge drivers named in the repository's own config do not (a candidate of the fallback
sandbox can write that file), those of the user's global config do. Should git
stop half-way anyway (a hook refuses, the host moved since the check), the merge or cherry-pick is
aborted so the checkout is back where it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .integration import Integration, integration_check
from .runner import _revision, _run, error_line

MERGE = "merge"
CHERRY_PICK = "cherry-pick"


@dataclass(frozen=True)
class MergeOutcome:
    done: bool
    how: str  # "merge" | "cherry-pick"
    message: str  # one line: what happened, or why nothing did
    integration: Integration
    head_before: str | None = None
    head_after: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "done": self.done,
            "how": self.how,
            "message": self.message,
            "integration": self.integration.to_json(),
            "head_before": self.head_before,
            "head_after": self.head_after,
        }


def _refusal(how: str, integration: Integration) -> MergeOutcome | None:
    if integration.status == "blocked":
        return MergeOutcome(
            False, how, f"not merged: {integration.reason}", integration, integration.host_head
        )
    if integration.status == "conflict":
        files = ", ".join(integration.conflicts[:5]) or "unknown files"
        more = f" and {len(integration.conflicts) - 5} more" if len(integration.conflicts) > 5 else ""
        return MergeOutcome(
            False, how, f"not merged: it would conflict in {files}{more}", integration, integration.host_head
        )
    return None


def merge_candidate(
    repo_root: Path | str, commit: str, *, expected_commit: str | None = None, message: str | None = None
) -> MergeOutcome:
    """Merge `commit` (a branch or an object id) into the checkout's current branch.

    `expected_commit`: refuse when `commit` no longer resolves to it (the branch moved since the
    operator looked at it)."""
    root = Path(repo_root)
    integration = integration_check(root, commit, expected_commit)
    refused = _refusal(MERGE, integration)
    if refused is not None:
        return refused
    target = integration.candidate_commit or commit
    args = ["merge", "--no-edit", "--no-stat"]
    if message:
        args += ["-m", message]
    status, _, err = _run(root, *args, target, "--", users_own=True)
    after = _head(root)
    if status != 0:
        _abort(root, "merge")
        return MergeOutcome(
            False,
            MERGE,
            f"not merged: git merge stopped: {error_line(str(err))}; the merge was aborted",
            integration,
            integration.host_head,
            _head(root),
        )
    return MergeOutcome(
        True,
        MERGE,
        f"merged {target[:12]} into {_branch(root)} (now at {str(after)[:12]}); nothing was pushed",
        integration,
        integration.host_head,
        after,
    )


def cherry_pick_candidate(
    repo_root: Path | str, commit: str, baseline: str, *, expected_commit: str | None = None
) -> MergeOutcome:
    """Apply the commits between `baseline` and `commit` (oldest first) onto the current branch."""
    root = Path(repo_root)
    _revision(baseline, "baseline")
    integration = integration_check(root, commit, expected_commit)
    refused = _refusal(CHERRY_PICK, integration)
    if refused is not None:
        return refused
    target = integration.candidate_commit or commit
    status, out, err = _run(root, "rev-list", "--reverse", "--no-merges", f"{baseline}..{target}")
    picks = str(out).split() if status == 0 else []
    if status != 0:
        return MergeOutcome(
            False,
            CHERRY_PICK,
            f"not cherry-picked: {error_line(str(err))}",
            integration,
            integration.host_head,
        )
    if not picks:
        return MergeOutcome(
            False,
            CHERRY_PICK,
            f"not cherry-picked: {target[:12]} has no commits since the baseline",
            integration,
            integration.host_head,
        )
    status, _, err = _run(root, "cherry-pick", "--allow-empty", *picks, users_own=True)
    if status != 0:
        _abort(root, "cherry-pick")
        return MergeOutcome(
            False,
            CHERRY_PICK,
            f"not cherry-picked: git cherry-pick stopped: {error_line(str(err))}; it was aborted",
            integration,
            integration.host_head,
            _head(root),
        )
    after = _head(root)
    return MergeOutcome(
        True,
        CHERRY_PICK,
        f"cherry-picked {len(picks)} commit(s) of {target[:12]} onto "
        f"{_branch(root)} (now at {str(after)[:12]}); nothing was pushed",
        integration,
        integration.host_head,
        after,
    )


def _abort(root: Path, operation: str) -> None:
    # Only when git left one in progress: --abort with nothing to abort fails harmlessly.
    marker = "MERGE_HEAD" if operation == "merge" else "CHERRY_PICK_HEAD"
    status, out, _ = _run(root, "rev-parse", "--git-path", marker)
    if status == 0 and (root / str(out)).exists():
        _run(root, operation, "--abort")


def _head(root: Path) -> str | None:
    status, out, _ = _run(root, "rev-parse", "--verify", "--quiet", "HEAD")
    return str(out) if status == 0 else None


def _branch(root: Path) -> str:
    status, out, _ = _run(root, "symbolic-ref", "--short", "-q", "HEAD")
    return str(out) if status == 0 and out else "HEAD"
