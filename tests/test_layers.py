"""The layers hold (docs/architecture.md): import-linter's contracts in pyproject.toml pass, and no
module reaches itself through its imports, counting imports inside functions and under
TYPE_CHECKING, so none of those can be hiding a circle.

Figures for notes: `python -m tests.test_layers` prints the circles, the contracts' verdict and the
largest modules."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def circles(package: str = "outpost_tui") -> list[list[str]]:
    """Each set of modules that import one another in a circle (Tarjan's strongly connected
    components of the import graph, every import counted), sorted; [] when there are none."""
    graph = grimp.build_graph(package, cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # iterative: the graph is deep enough to make recursion a risk
        work = [(start, iter(edges.get(start, ())))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges.get(node, ()):
                    found.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return sorted(found)


def lint_imports(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=directory,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(directory)},
        timeout=300,
    )


def largest_modules(count: int = 5) -> list[tuple[int, str]]:
    sizes = [
        (len(path.read_text().splitlines()), str(path.relative_to(ROOT)))
        for path in (ROOT / "outpost_tui").rglob("*.py")
    ]
    return sorted(sizes, reverse=True)[:count]


def test_no_module_imports_itself_through_others():
    assert circles() == []


def test_the_circle_count_finds_a_circle(tmp_path, monkeypatch):
    package = tmp_path / "circled"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    # an import inside a function still closes the circle
    (package / "b.py").write_text("def later():\n    from . import c\n")
    (package / "c.py").write_text("from .a import *\n")
    (package / "d.py").write_text("from . import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert circles("circled") == [["circled.a", "circled.b", "circled.c"]]


def test_the_import_contracts_hold():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout or "broken" not in done.stdout.split("Contracts:")[-1]


def test_an_arrow_back_up_breaks_the_layers_contract(tmp_path):
    # The contracts are not vacuous: git importing the coordinator's package is refused.
    shutil.copytree(
        ROOT / "outpost_tui", tmp_path / "outpost_tui", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    git = tmp_path / "outpost_tui" / "engine" / "git" / "__init__.py"
    git.write_text(git.read_text() + "\nfrom ..racing import attempt as _upward  # noqa\n")
    done = lint_imports(tmp_path)
    assert done.returncode != 0
    assert "outpost_tui.engine.git is not allowed to import outpost_tui.engine.racing" in done.stdout


if __name__ == "__main__":
    print("import circles:", len(circles()))
    for circle in circles():
        print("  {" + ", ".join(circle) + "}")
    verdict = lint_imports(ROOT)
    print(verdict.stdout.split("Contracts\n---------")[-1].strip())
    print("largest modules:")
    for lines, path in largest_modules():
        print(f"  {lines:5d} {path}")
