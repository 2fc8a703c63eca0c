"""Protected paths: what a candidate may not change for grading, and modules that shadow the runner.

By default the protected paths are the test files and directories, the runners' configuration and
every file of the repository the validation command names. Before grading, a change to one of them
is restored from the baseline into the grading checkout (`restore`), fails the candidate
(`reject`) or is graded as written and flagged (`flag`). Test files the candidate added stay; a
runner configuration it added (a new conftest.py or pytest.ini) is a change like any other. Two
files mix test settings with everything else: only their test sections are protected (setup.cfg's
[tool:pytest], pyproject.toml's [tool.pytest...], package.json's "scripts.test" and "jest").
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import re
import shlex
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

TEST_GLOBS = (
    "tests/**",
    "test/**",
    "spec/**",
    "**/tests/**",
    "**/test/**",
    "**/__tests__/**",
    "**/test_*.py",
    "**/*_test.py",
    "**/*_test.go",
    "**/*.test.*",
    "**/*.spec.*",
    "**/*_spec.rb",
)
CONFIG_GLOBS = (
    "**/conftest.py",
    "pytest.ini",
    ".pytest.ini",
    "tox.ini",
    "noxfile.py",
    ".coveragerc",
    "jest.config.*",
    "vitest.config.*",
    "vitest.workspace.*",
    ".mocharc.*",
    "karma.conf.*",
    "phpunit.xml",
    "phpunit.xml.dist",
    "sitecustomize.py",
    "usercustomize.py",
)
# file -> the sections (INI/TOML table headers) that configure tests
SECTIONED = {
    "setup.cfg": ("tool:pytest", "pytest", "coverage:*"),
    "pyproject.toml": (
        "tool.pytest",
        "tool.pytest.*",
        "tool.coverage",
        "tool.coverage.*",
        "tool.tox",
        "tool.tox.*",
    ),
}
KEYED = {"package.json": (("scripts", "test"), ("jest",), ("vitest",))}
# Names a new module may not take where the tests import from: the runners and the stdlib.
RUNNER_MODULES = frozenset(
    {
        "pytest",
        "_pytest",
        "py",
        "pluggy",
        "iniconfig",
        "nose",
        "nose2",
        "hypothesis",
        "coverage",
        "xdist",
        "pytest_cov",
        "sitecustomize",
        "usercustomize",
    }
)
SHOWN = 5

ReadBlob = Callable[[str], bytes]  # object id -> content


@dataclass(frozen=True)
class Entry:
    mode: str  # 100644, 100755, 120000 (symlink), 160000 (submodule)
    oid: str


Tree = dict[str, Entry]  # path -> Entry


@dataclass(frozen=True)
class ProtectedChange:
    path: str
    change: str  # modified | deleted | added | sections

    def shown(self) -> str:
        return f"{self.path} ({self.change})"


@cache
def _glob(pattern: str) -> re.Pattern[str]:
    out = ""
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out += "(?:.*/)?"
            index += 3
        elif pattern.startswith("**", index):
            out += ".*"
            index += 2
        elif pattern[index] == "*":
            out += "[^/]*"
            index += 1
        elif pattern[index] == "?":
            out += "[^/]"
            index += 1
        else:
            out += re.escape(pattern[index])
            index += 1
    return re.compile(out + r"\Z")


def matches(path: str, globs: Iterable[str]) -> bool:
    return any(_glob(glob.rstrip("/") + ("/**" if glob.endswith("/") else "")).match(path) for glob in globs)


def command_files(argv: Sequence[str], baseline: Tree) -> list[str]:
    """Files of the repository that the validation command runs or reads by name."""
    words: list[str] = []
    for word in argv:
        words.append(word)
        if " " in word:  # `sh -c "./check.sh && make"`
            with contextlib.suppress(ValueError):
                words.extend(shlex.split(word))
    named: list[str] = []
    for index, word in enumerate(words):
        candidates = [word.split("=", 1)[-1]]
        if index > 0 and words[index - 1] == "-m":
            module = word.replace(".", "/")
            candidates += [f"{module}.py", f"{module}/__main__.py", f"{module}/__init__.py"]
        for text in candidates:
            path = posixpath.normpath(text.removeprefix("./")) if text else ""
            if path in baseline and path not in named:
                named.append(path)
    program = Path(argv[0]).name if argv else ""
    if program in ("make", "gmake"):
        named += [name for name in ("Makefile", "makefile", "GNUmakefile") if name in baseline]
    return named


@dataclass
class Plan:
    """What grading does about protected paths (computed from the two trees, applied to a checkout)."""

    changes: list[ProtectedChange]
    command_files: list[str]

    @property
    def paths(self) -> list[str]:
        return [change.shown() for change in self.changes]


def plan(
    baseline: Tree, candidate: Tree, globs: Sequence[str] | None, validate_argv: Sequence[str] | None
) -> Plan:
    """The protected paths the candidate changed. `globs` None: the defaults."""
    named = command_files(validate_argv or (), baseline)
    default = globs is None
    effective = tuple(TEST_GLOBS + CONFIG_GLOBS) if globs is None else tuple(globs)
    config = CONFIG_GLOBS if globs is None else tuple(g for g in globs if matches_any_config(g))
    changes: list[ProtectedChange] = []
    for path in sorted(set(baseline) | set(candidate)):
        before, after = baseline.get(path), candidate.get(path)
        if before == after:
            continue
        if default and (path in SECTIONED or path in KEYED):
            changes.append(ProtectedChange(path, "sections"))  # decided on content, see _splice
            continue
        if path in named or matches(path, effective):
            if after is None:
                changes.append(ProtectedChange(path, "deleted"))
            elif before is None:
                # new tests stay; a new runner configuration or named script is a change
                if path in named or matches(path, config):
                    changes.append(ProtectedChange(path, "added"))
            else:
                changes.append(ProtectedChange(path, "modified"))
    return Plan(changes, named)


def matches_any_config(glob: str) -> bool:
    """A user's glob that names a runner configuration (so that a new such file is a change)."""
    return any(
        _glob(glob).match(example)
        for example in (
            "conftest.py",
            "pytest.ini",
            "tox.ini",
            "noxfile.py",
            "setup.cfg",
            "pyproject.toml",
            "tests/conftest.py",
            "jest.config.js",
            "vitest.config.ts",
            "package.json",
        )
    )


def settle_sections(plan_: Plan, baseline: Tree, candidate: Tree, read: ReadBlob) -> None:
    """Keep a sectioned or keyed file in the plan only when its test settings changed."""
    kept = []
    for change in plan_.changes:
        if change.change == "sections":
            before = _text(baseline.get(change.path), read)
            after = _text(candidate.get(change.path), read)
            if _graded_text(change.path, before, after) == (after or ""):
                continue
        kept.append(change)
    plan_.changes = kept


def restore(plan_: Plan, checkout: Path, baseline: Tree, candidate: Tree, read: ReadBlob) -> None:
    """Put the baseline's version of every protected change into the grading checkout."""
    for change in plan_.changes:
        target = checkout / change.path
        _make_parents(checkout, change.path)
        if change.change == "sections":
            text = _graded_text(
                change.path, _text(baseline.get(change.path), read), _text(candidate.get(change.path), read)
            )
            _remove(target)
            target.write_text(text, encoding="utf-8")
            continue
        _remove(target)
        entry = baseline.get(change.path)
        if entry is None:
            continue  # added by the candidate: graded without it
        content = read(entry.oid)
        if entry.mode == "120000":
            os.symlink(os.fsdecode(content), target)
        else:
            target.write_bytes(content)
            os.chmod(target, 0o755 if entry.mode == "100755" else 0o644)


def _make_parents(root: Path, path: str) -> None:
    """Make `path`'s directories real directories inside root (a symlink there could lead out)."""
    current = root
    for part in Path(path).parts[:-1]:
        current = current / part
        if current.is_symlink() or (current.exists() and not current.is_dir()):
            current.unlink()
        current.mkdir(exist_ok=True)


def _remove(target: Path) -> None:
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.is_dir():
        shutil.rmtree(target)


def _text(entry: Entry | None, read: ReadBlob) -> str | None:
    if entry is None:
        return None
    return read(entry.oid).decode("utf-8", errors="surrogateescape")


def _graded_text(path: str, before: str | None, after: str | None) -> str:
    """`after` with its test settings taken from `before`."""
    if path in KEYED:
        return _keyed(KEYED[path], before, after)
    return _sections(SECTIONED[path], before, after)


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:[#;].*)?$")


def _split(text: str) -> list[tuple[str | None, str]]:
    """(section name or None for the preamble, its text including the header line)."""
    chunks: list[tuple[str | None, list[str]]] = [(None, [])]
    for line in text.splitlines(keepends=True):
        match = _HEADER.match(line)
        if match:
            chunks.append((match.group(1).strip().strip('"'), [line]))
        else:
            chunks[-1][1].append(line)
    return [(name, "".join(lines)) for name, lines in chunks]


def _sections(patterns: Sequence[str], before: str | None, after: str | None) -> str:
    def protected(name: str | None) -> bool:
        return name is not None and any(_glob(p).match(name) for p in patterns)

    kept = [text for name, text in _split(after or "") if not protected(name)]
    restored = [text for name, text in _split(before or "") if protected(name)]
    if kept and restored and not kept[-1].endswith("\n"):
        kept[-1] += "\n"
    return "".join(kept + restored)


def _keyed(keys: Sequence[tuple[str, ...]], before: str | None, after: str | None) -> str:
    try:
        old = json.loads(before) if before else {}
        new = json.loads(after) if after else {}
    except ValueError:
        return before or ""  # unreadable: grade with the baseline's file whole
    if not isinstance(new, dict) or not isinstance(old, dict):
        return before or ""
    changed = False
    for key in keys:
        old_value, new_value = _get(old, key), _get(new, key)
        if old_value != new_value:
            changed = True
            _set(new, key, old_value)
    return json.dumps(new, indent=2) + "\n" if changed else (after or "")


_ABSENT = object()


def _get(data: dict[str, Any], key: tuple[str, ...]) -> Any:
    for part in key:
        if not isinstance(data, dict) or part not in data:
            return _ABSENT
        data = data[part]
    return data


def _set(data: dict[str, Any], key: tuple[str, ...], value: object) -> None:
    for part in key[:-1]:
        if not isinstance(data.get(part), dict):
            if value is _ABSENT:
                return
            data[part] = {}
        data = data[part]
    if value is _ABSENT:
        data.pop(key[-1], None)
    else:
        data[key[-1]] = value


# --- shadowing ---------------------------------------------------------------------------------

_TEST_FILE = re.compile(r"(^|/)(test_[^/]*\.py|[^/]*_test\.py|conftest\.py)$")


def shadows(baseline: Tree, candidate: Tree) -> list[str]:
    """New modules where tests import from that take a runner's or the standard library's name."""
    found = []
    for root in sorted(_import_roots(candidate)):
        new = _modules(candidate, root) - _modules(baseline, root)
        for name in sorted(new):
            if name in RUNNER_MODULES or name in sys.stdlib_module_names:
                found.append(posixpath.join(root, name) if root else name)
    return found


def _import_roots(tree: Tree) -> set[str]:
    # the checkout's top (the runner's working directory), src/, and every directory holding
    # tests (pytest puts a test file's directory on sys.path)
    roots = {"", "src"}
    roots |= {posixpath.dirname(path) for path in tree if _TEST_FILE.search(path)}
    return roots


def _modules(tree: Tree, root: str) -> set[str]:
    prefix = f"{root}/" if root else ""
    names = set()
    for path in tree:
        if not path.startswith(prefix):
            continue
        rest = path[len(prefix) :]
        first, slash, _ = rest.partition("/")
        if slash:
            if rest.endswith(".py") or "/" not in rest[len(first) + 1 :]:
                names.add(first)
        elif first.endswith((".py", ".pyc", ".so", ".pyd")):
            names.add(first.split(".", 1)[0])
    return names


def names(paths: list[str]) -> str:
    shown = ", ".join(paths[:SHOWN])
    return shown + (f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else "")
