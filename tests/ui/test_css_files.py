"""The app's Textual CSS lives in .tcss files beside the screens and widgets it styles (never inline),
every file a screen names exists and parses, and the package data ships them in the wheel."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import tomllib
from pathlib import Path

from textual.css.stylesheet import Stylesheet
from textual.dom import DOMNode
from textual.screen import Screen

import outpost_tui.ui
from outpost_tui.ui.app import OutpostApp

UI = Path(outpost_tui.ui.__file__).parent
ROOT = UI.parent.parent


def _our_nodes() -> list[type[DOMNode]]:
    found = []
    for info in pkgutil.walk_packages(outpost_tui.ui.__path__, "outpost_tui.ui."):
        if info.name == "outpost_tui.ui.served":
            continue  # a program: it runs the app when imported
        module = importlib.import_module(info.name)
        found += [
            value
            for value in vars(module).values()
            if inspect.isclass(value) and issubclass(value, DOMNode) and value.__module__ == info.name
        ]
    return found


def test_no_css_is_written_inline():
    nodes = _our_nodes()
    assert any(node.__name__ == "RaceScreen" for node in nodes)
    for node in nodes:
        source = inspect.getsource(node)
        assert 'DEFAULT_CSS = "' not in source and 'CSS = "' not in source, node.__name__


def test_each_screens_css_file_is_beside_it_and_parses():
    screens = [node for node in _our_nodes() if issubclass(node, Screen) and "CSS_PATH" in vars(node)]
    assert {"RaceScreen", "HomeScreen", "ConfirmScreen", "ResultScreen"} <= {s.__name__ for s in screens}
    for screen in screens:
        css = Path(inspect.getfile(screen)).parent / screen.CSS_PATH
        assert css.is_file() and css.name == Path(inspect.getfile(screen)).with_suffix(".tcss").name
        sheet = Stylesheet(variables=OutpostApp().get_css_variables())  # the theme's $variables
        sheet.add_source(css.read_text(), read_from=(str(css), ""))
        sheet.parse()  # raises on a rule Textual cannot read
        # the file styles its module's screens: every rule starts with one's type (or a widget of
        # the module's own), so that once loaded it cannot restyle another screen
        own = {node.__name__ for node in _our_nodes() if node.__module__ == screen.__module__}
        for rule in sheet.rules:
            first = rule.selector_set[0].selectors[0].name
            assert first in own, (css.name, first)


def test_the_wheel_ships_the_css_files():
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "*.tcss" in package_data["*"]
    assert sorted(p.name for p in UI.rglob("*.tcss")) == sorted(
        {
            "app.tcss",
            "candidate_panel.tcss",
            *(
                Path(inspect.getfile(n)).with_suffix(".tcss").name
                for n in _our_nodes()
                if "CSS_PATH" in vars(n) and issubclass(n, Screen)
            ),
        }
    )
