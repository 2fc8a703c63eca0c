"""One way to do each thing, checked in the source: git runs through the engine's runner, files are
replaced through one atomic-write helper, the candidate-key pattern lives in the spec alone, the git
package is reached through its face, and no package imports another's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import outpost_tui

PACKAGE = Path(outpost_tui.__file__).parent
# The demo agent is a candidate, not outpost-tui: it runs git as an agent would (the user's hooks
# and settings included), never through the engine's runner, which switches those off.
DEMO_AGENT = "engine/agents/demo_program.py"


def _modules() -> dict[str, ast.Module]:
    return {
        path.relative_to(PACKAGE).as_posix(): ast.parse(path.read_text(), str(path))
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def _call_name(node: ast.Call) -> str:
    function = node.func
    parts = []
    while isinstance(function, ast.Attribute):
        parts.append(function.attr)
        function = function.value
    if isinstance(function, ast.Name):
        parts.append(function.id)
    return ".".join(reversed(parts))


def _starts_with_git(node: ast.expr) -> bool:
    return (
        isinstance(node, (ast.List, ast.Tuple))
        and bool(node.elts)
        and isinstance(node.elts[0], ast.Constant)
        and node.elts[0].value == "git"
    )


def test_only_the_engines_runner_starts_git():
    starters = {
        "subprocess.run",
        "subprocess.Popen",
        "subprocess.call",
        "subprocess.check_call",
        "subprocess.check_output",
        "os.execvp",
        "os.execv",
        "os.spawnvp",
        "asyncio.create_subprocess_exec",
        "anyio.run_process",
        "anyio.open_process",
    }
    found = []
    for name, tree in _modules().items():
        if name == DEMO_AGENT:
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and _call_name(node) in starters
                and node.args
                and (_starts_with_git(node.args[0]) or name == "engine/git/runner.py")
            ):
                found.append(f"{name}:{node.lineno}")
    # the one place: git._execute (the runner every git call goes through)
    assert len(found) == 1 and found[0].startswith("engine/git/runner.py:"), found
    # and nothing spells a git argv to hand to a starter later (a command line shown to the
    # operator, through shlex.join, is text)
    modules = _modules()
    shown = {
        id(node.args[0])
        for tree in modules.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _call_name(node) == "shlex.join" and node.args
    }
    spelled = [
        f"{name}:{node.lineno}"
        for name, tree in modules.items()
        if name != DEMO_AGENT
        for node in ast.walk(tree)
        if _starts_with_git(node) and name != "engine/git/runner.py" and id(node) not in shown
    ]
    assert spelled == []


def test_only_the_helper_replaces_a_file():
    writers = {"os.replace", "tempfile.mkstemp", "tempfile.NamedTemporaryFile"}
    found = [
        f"{name}:{node.lineno}"
        for name, tree in _modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _call_name(node) in writers and name != "engine/files.py"
    ]
    assert found == []


def test_the_candidate_key_pattern_lives_in_the_spec_alone():
    users = sorted(
        name
        for name, tree in _modules().items()
        for node in ast.walk(tree)
        if isinstance(node, (ast.Name, ast.alias))
        and (getattr(node, "id", None) or getattr(node, "name", None)) == "KEY_PATTERN"
        and name != "engine/core/spec.py"
        and name != "engine/durable/transport.py"
    )
    assert users == []  # transport's KEY_PATTERN is its own: storage keys, not candidate keys


# --- the git package's face, and private names ---------------------------------------------------

GIT = "outpost_tui.engine.git"
TESTS = Path(__file__).parent
# The git package's own white-box tests: they wrap the runner's internals to count or break git calls.
REACHES_INTO_GIT = {
    "tests/engine/test_git.py",
    "tests/benchmarks/bench_engine.py",
    # times the waits for the worktree lock and the sessions' locks from inside
    "tests/benchmarks/lock_waits.py",
    # runs the engine's own driver lookup as a raw git call
    "tests/benchmarks/raw_work.py",
    # the index read, the sessions and the commit walk held to git's own answers, part by part
    "tests/engine/test_index_flags.py",
    "tests/engine/test_git_sessions.py",
    "tests/engine/test_commit_walk.py",
}


def _module_name(path: str) -> str:
    """`engine/kept/archive.py` -> `outpost_tui.engine.kept.archive` (a package: its __init__)."""
    parts = path.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["outpost_tui", *parts])


MODULES = {_module_name(path.relative_to(PACKAGE).as_posix()) for path in PACKAGE.rglob("*.py")}


def _imported(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name of the module an ImportFrom reads from."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _area(module: str) -> str:
    """Whose a module is: an engine package (`outpost_tui.engine.kept`), the app, the commands, tests."""
    parts = module.split(".")
    return ".".join(parts[:3] if parts[:2] == ["outpost_tui", "engine"] else parts[:2])


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def face_violations(sources: list[tuple[str, str, bool, ast.Module]]) -> list[str]:
    """Each (shown path, module name, is a package, tree): where code outside engine/git reaches past
    its face (a submodule, or a name starting with "_"), and where outpost-tui's own code uses
    another package's private name (by import or through a module it imported)."""
    found = []
    for shown, module, is_package, tree in sources:
        outside_git = module != GIT and not module.startswith(GIT + ".")
        # A test may reach into the module it tests; it still reaches git through the face.
        privates_checked = module.startswith("outpost_tui.")
        bound: dict[str, str] = {}  # a local name -> the module it names
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if outside_git and alias.name.startswith(GIT + "."):
                        found.append(f"{shown}:{node.lineno}: imports the submodule {alias.name}")
            elif isinstance(node, ast.ImportFrom):
                source = _imported(module, is_package, node)
                for alias in node.names:
                    full = f"{source}.{alias.name}"
                    if full in MODULES:
                        bound[alias.asname or alias.name] = full
                    if outside_git and (
                        source.startswith(GIT + ".")
                        or (source == GIT and (full in MODULES or _private(alias.name)))
                    ):
                        found.append(f"{shown}:{node.lineno}: imports {alias.name} from {source}")
                    elif (
                        privates_checked
                        and _private(alias.name)
                        and source.startswith("outpost_tui.")
                        and full not in MODULES
                        and _area(source) != _area(module)
                    ):
                        found.append(f"{shown}:{node.lineno}: imports the private {alias.name} from {source}")
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
            ):
                continue
            target = bound[node.value.id]
            if target == GIT and outside_git and (f"{GIT}.{node.attr}" in MODULES or _private(node.attr)):
                found.append(f"{shown}:{node.lineno}: reaches git.{node.attr}")
            elif privates_checked and _private(node.attr) and _area(target) != _area(module):
                found.append(f"{shown}:{node.lineno}: reaches the private {target}.{node.attr}")
    return found


def _sources() -> list[tuple[str, str, bool, ast.Module]]:
    sources = [
        (f"outpost_tui/{name}", _module_name(name), name.endswith("__init__.py"), tree)
        for name, tree in _modules().items()
    ]
    for path in sorted(TESTS.rglob("*.py")):
        shown = path.relative_to(TESTS.parent).as_posix()
        if shown not in REACHES_INTO_GIT:
            module = shown.removesuffix(".py").replace("/", ".")
            sources.append((shown, module, path.name == "__init__.py", ast.parse(path.read_text(), shown)))
    return sources


def test_code_outside_the_git_package_goes_through_its_face():
    assert face_violations(_sources()) == []


@pytest.mark.parametrize(
    "planted",
    [
        "from ..git.runner import GitError",
        "from ..git import runner",
        "from ..git import _run",
        "from .. import git\ngit._run('.')",
        "from .. import git\ngit.merge.merge_candidate('.', 'HEAD')",
        "from outpost_tui.engine import git as g\ng.guard.guard_record",
        "import outpost_tui.engine.git.layout",
        "from ..records.history import _race_summary",
        "from ..records import history\nhistory._race_summary",
    ],
)
def test_the_face_check_catches_a_planted_violation(planted):
    tree = ast.parse(planted)
    found = face_violations([("engine/kept/planted.py", "outpost_tui.engine.kept.planted", False, tree)])
    assert len(found) == 1 and found[0].startswith("engine/kept/planted.py:"), found


@pytest.mark.parametrize(
    ("module", "allowed"),
    [
        ("outpost_tui.engine.kept.planted", "from .. import git\ngit.run('.')\ngit.output('x', '.')"),
        ("outpost_tui.engine.kept.planted", "from ..git import GitError, run, worktree_lock"),
        ("outpost_tui.engine.kept.planted", "from .archive import _private_of_this_package"),
        ("outpost_tui.engine.git.planted", "from .runner import _run\nfrom . import runner\nrunner._execute"),
    ],
)
def test_the_face_check_lets_the_face_and_a_packages_own_privates_through(module, allowed):
    tree = ast.parse(allowed)
    assert face_violations([("planted.py", module, False, tree)]) == []


def test_a_test_reaches_git_through_its_face_too():
    planted = ast.parse(
        "from outpost_tui.engine.git import worktrees\nfrom outpost_tui.engine.kept import removal"
    )
    found = face_violations([("tests/engine/planted.py", "tests.engine.planted", False, planted)])
    assert found == ["tests/engine/planted.py:1: imports worktrees from outpost_tui.engine.git"]
