"""The engine never imports Textual: it must run headless and stay testable without a terminal."""

import pkgutil
import subprocess
import sys

import outpost_tui.engine


def test_engine_imports_no_textual():
    modules = [
        m.name
        for m in pkgutil.walk_packages(outpost_tui.engine.__path__, "outpost_tui.engine.")
        if not m.name.endswith("demo_program")
    ]
    assert "outpost_tui.engine.racing.coordinator" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "print(bad)\nsys.exit(1 if bad else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
