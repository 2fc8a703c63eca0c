"""Git for the race: baseline, candidate branches and worktrees, commits, integration check, retention.

Every function is synchronous and spawns `git` through one runner (the coordinator calls them in a
worker thread). Each runs as few git processes as it can: a race's overhead is measured against the
raw git work it wraps. Nothing here merges, pushes, deletes a branch or removes a worktree that holds
any file git would not recreate.

One module per concept: `runner` (the one way git runs), `layout` (the repository and `.outpost/`),
`host` (the user's repository as the race found it), `listing` (files `[setup]` copies),
`commits`, `worktrees`, `grading` (checkouts of a graded commit), `integration` (merge-tree and
review); `gitenv` (the environment every started program gets), `guard` (the user's refs and
settings, compared after each attempt) and `merge` (the operator's own merge). The names below
are the package's public face: callers write `git.run(...)`, `git.GitError`.
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
    blob,
    branch_tip,
    branch_tips,
    grading_directory,
    make_grading_directory,
    pin_validated,
    remove_grading_checkout,
    reset_grading_checkout,
    tree,
)
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
    repository_root,
)
from .listing import included_files, tree_files, untracked_entries, untracked_files
from .runner import GIT_TIMEOUT_STATUS, METADATA_RETRIES, PROGRAM_CONFIG, GitError, run
from .worktrees import (
    BRANCH_PREFIX,
    RACE_ID_PATTERN,
    SPECULATION_BRANCH,
    add_worktree,
    branch_name,
    list_worktrees,
    make_worktree_directory,
    remove_worktree,
    worktree_directory,
    worktree_git_dir,
)

__all__ = [
    "BOT_EMAIL",
    "BOT_NAME",
    "BRANCH_PREFIX",
    "EXCLUDE_LINE",
    "GIT_TIMEOUT_STATUS",
    "GRADING_SUFFIX",
    "MERGE_TREE_MAX_OUTPUT",
    "MERGE_TREE_MIN_VERSION",
    "MERGE_TREE_TIMEOUT",
    "METADATA_RETRIES",
    "OUTPOST_DIR",
    "PROGRAM_CONFIG",
    "RACE_ID_PATTERN",
    "RECOVERY",
    "SPECULATION_BRANCH",
    "VALIDATED_REFS",
    "WORKSPACES",
    "Change",
    "Commit",
    "GitError",
    "HostSnapshot",
    "Integration",
    "add_grading_checkout",
    "add_worktree",
    "blob",
    "blob_id",
    "branch_name",
    "branch_tip",
    "branch_tips",
    "changes",
    "check_worktree_link",
    "commit_all",
    "commits_since",
    "diff",
    "ensure_outpost_dir",
    "git_common_dir",
    "grading_directory",
    "has_changes",
    "head",
    "head_and_commits",
    "hidden_edits",
    "host_snapshot",
    "identity",
    "included_files",
    "integration_check",
    "is_clean",
    "list_worktrees",
    "make_grading_directory",
    "make_worktree_directory",
    "pin_validated",
    "remove_grading_checkout",
    "remove_worktree",
    "repository_root",
    "reset_grading_checkout",
    "resolve_commit",
    "run",
    "tree",
    "tree_files",
    "untracked_entries",
    "untracked_files",
    "worktree_directory",
    "worktree_git_dir",
]
