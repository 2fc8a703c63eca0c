"""docs/architecture.md names every module where it says which concept lives where: a module added
without a line there is a concept a newcomer cannot find."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def unnamed_modules(doc: str, package: Path) -> list[str]:
    return [
        str(module.relative_to(ROOT))
        for module in sorted(package.rglob("*.py"))
        if module.name != "__init__.py"
        and not re.search(r"`(?:[\w/.]*/)?" + re.escape(module.stem) + r"(?:\.py)?[`.(]", doc)
    ]


def test_every_module_is_named_in_the_architecture():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert unnamed_modules(doc, ROOT / "outpost_tui") == []


def test_a_module_left_out_is_found(tmp_path):
    package = ROOT / "outpost_tui" / "engine" / "racing"
    doc = "`racing/coordinator.py` `state` `settling.py`"
    assert "outpost_tui/engine/racing/coordinator.py" not in unnamed_modules(doc, package)
    assert "outpost_tui/engine/racing/running.py" in unnamed_modules(doc, package)
