"""Git for the race: baseline, candidate branches and worktrees, commits, integration check, retention.

Every function is synchronous and spawns `git` through one runner (the coordinator calls them in a
worker thread). Each runs as few git processes as it can: a race's overhead is measured against the
raw git work it wraps. Nothing here merges, pushes, deletes a branch or removes a worktree that holds
any file git would not recreate.

One module per concept: `runner` (the one way git runs), `layout` (the repository and `.outpost/`),
`host` (the user's repository as the race found it), `listing` (files `[setup]` copies),
`commits`, `worktrees`, `private` (a candidate's own repository, its result brought in),
`grading` (checkouts of a graded commit), `integration` (merge-tree and review), `guard` (the
user's refs and settings, compared after each attempt) and `merge` (the operator's own merge);
the environment every started program gets is `engine/gitenv.py`.

The names below are the package's public face, and the only way in: code outside this package
writes `git.run(...)`, `git.output(...)`, `git.GitError` (after `from .. import git`) or imports
those names from the package, never a submodule and never a name starting with "_"
(tests/test_one_way.py checks it).
"""

from __future__ import annotations

from .commits import (
    BOT_EMAIL,
    BOT_NAME,
    Commit,
    blob_id,
    commit_all,
    commits_since,
    has_changes,
    head,
    head_and_commits,
    hidden_edits,
    identity,
    is_clean,
)
from .grading import (
    GRADING_SUFFIX,
    VALIDATED_REFS,
    add_grading_checkout,
    branch_tip,
    branch_tips,
    grading_directory,
    make_grading_directory,
    pin_validated,
    remove_grading_checkout,
    reset_grading_checkout,
)
from .guard import GuardChange, GuardRecord, guard_changes, guard_record, listed_refs
from .host import HostSnapshot, host_snapshot, resolve_commit
from .integration import (
    MERGE_TREE_MAX_OUTPUT,
    MERGE_TREE_MIN_VERSION,
    MERGE_TREE_TIMEOUT,
    Change,
    Integration,
    changes,
    diff,
    integration_check,
)
from .layout import (
    EXCLUDE_LINE,
    OUTPOST_DIR,
    RECOVERY,
    WORKSPACES,
    check_worktree_link,
    ensure_outpost_dir,
    git_common_dir,
    is_inside,
    repository_root,
    workspaces_directory,
)
from .listing import included_files, tree_files, untracked_entries, untracked_files
from .merge import CHERRY_PICK, MERGE, MergeOutcome, cherry_pick_candidate, merge_candidate
from .objects import blob, tree
from .private import (
    REPOSITORIES,
    PrivateTemplate,
    candidate_view,
    import_result,
    make_private,
    make_view,
    private_git_dir,
    private_template,
    remove_view,
    wrote,
)
from .runner import GIT_TIMEOUT_STATUS, METADATA_RETRIES, PROGRAM_CONFIG, GitError, error_line, output, run
from .sessions import close_sessions
from .worktrees import (
    BRANCH_PREFIX,
    RACE_ID_PATTERN,
    SPECULATION_BRANCH,
    WorktreeLock,
    add_worktree,
    branch_name,
    list_worktrees,
    make_worktree_directory,
    remove_worktree,
    worktree_directory,
    worktree_git_dir,
    worktree_lock,
)

__all__ = [
    "BOT_EMAIL",
    "BOT_NAME",
    "BRANCH_PREFIX",
    "CHERRY_PICK",
    "EXCLUDE_LINE",
    "GIT_TIMEOUT_STATUS",
    "GRADING_SUFFIX",
    "MERGE",
    "MERGE_TREE_MAX_OUTPUT",
    "MERGE_TREE_MIN_VERSION",
    "MERGE_TREE_TIMEOUT",
    "METADATA_RETRIES",
    "OUTPOST_DIR",
    "PROGRAM_CONFIG",
    "RACE_ID_PATTERN",
    "RECOVERY",
    "REPOSITORIES",
    "SPECULATION_BRANCH",
    "VALIDATED_REFS",
    "WORKSPACES",
    "Change",
    "Commit",
    "GitError",
    "GuardChange",
    "GuardRecord",
    "HostSnapshot",
    "Integration",
    "MergeOutcome",
    "PrivateTemplate",
    "WorktreeLock",
    "add_grading_checkout",
    "add_worktree",
    "blob",
    "blob_id",
    "branch_name",
    "branch_tip",
    "branch_tips",
    "candidate_view",
    "changes",
    "check_worktree_link",
    "cherry_pick_candidate",
    "close_sessions",
    "commit_all",
    "commits_since",
    "diff",
    "ensure_outpost_dir",
    "error_line",
    "git_common_dir",
    "grading_directory",
    "guard_changes",
    "guard_record",
    "has_changes",
    "head",
    "head_and_commits",
    "hidden_edits",
    "host_snapshot",
    "identity",
    "import_result",
    "included_files",
    "integration_check",
    "is_clean",
    "is_inside",
    "list_worktrees",
    "listed_refs",
    "make_grading_directory",
    "make_private",
    "make_view",
    "make_worktree_directory",
    "merge_candidate",
    "output",
    "pin_validated",
    "private_git_dir",
    "private_template",
    "remove_grading_checkout",
    "remove_view",
    "remove_worktree",
    "repository_root",
    "reset_grading_checkout",
    "resolve_commit",
    "run",
    "tree",
    "tree_files",
    "untracked_entries",
    "untracked_files",
    "workspaces_directory",
    "worktree_directory",
    "worktree_git_dir",
    "worktree_lock",
    "wrote",
]
