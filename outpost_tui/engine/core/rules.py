"""The rules a race-file value must follow beyond its kind (a run id, a base, a junit path, protected
globs, a memory size, [setup] paths, a candidate's environment), each raising `Refused` naming the
value and, for a list or a table, where in it.

Separate from `spec` so the specification reads as its fields; each rule is attached to its field
there (`check=`), and the reader applies it with the file, line and key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from ..gitenv import is_scrubbed
from .declaration import Refused

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MEMORY_PATTERN = re.compile(r"^[0-9]+(\.[0-9]+)?[bkmgBKMG]?$")


def run_id_rule(run_id: str) -> None:
    if not RUN_ID_PATTERN.fullmatch(run_id):
        raise Refused(
            f"invalid run id {json.dumps(run_id)}: use letters, digits, '.', '_' and '-', "
            "starting with a letter or digit (at most 128 characters)"
        )


def base_rule(base: str) -> None:
    if base.startswith("-"):
        raise Refused(f"invalid base {json.dumps(base)}: must not start with '-'")


def attempts_rule(attempts: int) -> None:
    # 0 attempts is allowed by the API (a race that starts nothing) but useless in a file.
    if attempts < 1:
        raise Refused(
            f"must be at least 1, found {attempts}"
            + (": no candidate would ever start" if attempts == 0 else "")
        )


def junit_rule(junit: str) -> None:
    if Path(junit).is_absolute() or ".." in Path(junit).parts:
        raise Refused(f'{json.dumps(junit)} must be a path inside the checkout, e.g. "reports/junit.xml"')


def protect_rule(globs: tuple[str, ...]) -> None:
    for index, glob in enumerate(globs):
        if not glob.strip() or glob.startswith("/") or ".." in glob.split("/"):
            raise Refused(f"{json.dumps(glob)} must be a glob relative to the repository", (index,))


def memory_rule(memory: str) -> None:
    if not MEMORY_PATTERN.fullmatch(memory):
        raise Refused(
            f"invalid memory size {json.dumps(memory)}: use a number with an optional unit "
            'b, k, m or g, e.g. "2g"'
        )


def setup_path_problem(path: str, *, glob: bool) -> str | None:
    """Why a [setup] path cannot be used, or None: it must stay inside the repository."""
    if not path.strip():
        return "must not be empty"
    parts = path.replace("\\", "/").split("/")
    if path.startswith(("/", "~")):
        return f"{json.dumps(path)} must be relative to the repository root"
    if ".." in parts:
        return f"{json.dumps(path)} must not leave the repository (no '..')"
    if parts[0] in (".git", ".outpost") or ".git" in parts:
        return f"{json.dumps(path)} names git's or outpost-tui's own files"
    if not glob and any(char in path for char in "*?["):
        return f"{json.dumps(path)} must be a path, not a glob (it names what the setup builds)"
    return None


def setup_paths_rule(*, glob: bool) -> Callable[[tuple[str, ...]], None]:
    def rule(paths: tuple[str, ...]) -> None:
        for index, path in enumerate(paths):
            problem = setup_path_problem(path, glob=glob)
            if problem:
                raise Refused(problem, (index,))

    return rule


def absolute_paths_rule(paths: tuple[str, ...]) -> None:
    for index, path in enumerate(paths):
        if not path.startswith("/") or ".." in path.split("/"):
            raise Refused(f"{json.dumps(path)} must be an absolute path without '..'", (index,))


def env_rule(env: Mapping[str, str]) -> None:
    for name in env:
        if is_scrubbed(name):
            # removed from every environment a candidate gets: saying so beats a silent drop
            raise Refused(
                "git's own variables are not passed to candidates (they would point its git "
                "at another repository or configuration); only GIT_AUTHOR_NAME, "
                "GIT_AUTHOR_EMAIL, GIT_COMMITTER_NAME and GIT_COMMITTER_EMAIL are",
                (name,),
            )
