"""One way to do each thing, checked in the source: git runs through the engine's runner, files are
replaced through one atomic-write helper, and the candidate-key pattern lives in the spec alone."""

from __future__ import annotations

import ast
from pathlib import Path

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
