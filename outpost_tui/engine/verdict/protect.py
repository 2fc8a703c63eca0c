"""Protected paths: what a candidate may not change for grading, and modules that shadow the runner.

By default the protected paths are the test files and directories, the runners' configuration and
every file of the repository the validation command names. Before grading, a change to one of them
is restored from the baseline into the grading checkout (`restore`), fails the candidate
(`reject`) or is graded as written and flagged (`flag`). Test files the candidate added stay; a
runner configuration it added (a new conftest.py or pytest.ini) is a change like any other. Two
files mix test settings with everything else: only their test sections are protected (setup.cfg's
[tool:pytest], pyproject.toml's [tool.pytest...], package.json's "scripts.test" and "jest").

pytest is configured by more than the files the command names, and a candidate that wants to win
reaches for every one of them, so the sealed set follows how pytest finds its configuration rather
than a list of the files projects usually have: every file name pytest's search reads
(`PYTEST_CONFIG_NAMES`, pytest 9's included), at any depth (pytest searches upwards from the paths
it is given, which may be any directory); the test settings of the TOML and INI files read as
pytest and setuptools read them (a text check misses dotted keys, inline and quoted tables); the
packaging metadata that autoloads plugins (`*.dist-info`, `*.egg-info`, `.pth`, `pytest11` entry
points, `sitecustomize`); and the files the `[score]` command names.

What lies above the checkout is not the commit's to seal, and pytest reads it: its search for a
configuration file climbs from its arguments to `/` when the checkout has none, and it loads every
conftest.py up to the directory that file is in. So a pytest command is pinned (`pinned`): the
engine finds the configuration file and root pytest would find in the checkout itself and names
them (`-c`, `--rootdir`, `--confcutdir`), and pytest reads nothing above. What a pin cannot cover
(a command that runs pytest some other way) `outside_configuration` names, and the run is refused.
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
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from .reports import runner_of

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
# Every file name pytest's configuration search reads in each directory, in its order
# (`_pytest/config/findpaths.py`, `locate_config`; pytest 9 put pytest.toml and .pytest.toml first).
PYTEST_CONFIG_NAMES = (
    "pytest.toml",
    ".pytest.toml",
    "pytest.ini",
    ".pytest.ini",
    "pyproject.toml",
    "tox.ini",
    "setup.cfg",
)
# Read whole by pytest, or only their test sections (SECTIONED below).
PYTEST_WHOLE = tuple(name for name in PYTEST_CONFIG_NAMES if name not in ("pyproject.toml", "setup.cfg"))
# What makes Python or pytest load code before any test is collected: an installed
# distribution's entry points (pytest autoloads `pytest11`), path files, the site hooks.
PLUGIN_GLOBS = (
    "**/*.dist-info/**",
    "**/*.egg-info/**",
    "**/*.egg-link",
    "**/*.pth",
    "**/sitecustomize.py",
    "**/usercustomize.py",
)
CONFIG_GLOBS = (
    "**/conftest.py",
    *(f"**/{name}" for name in PYTEST_WHOLE),
    "noxfile.py",
    ".coveragerc",
    "jest.config.*",
    "vitest.config.*",
    "vitest.workspace.*",
    ".mocharc.*",
    "karma.conf.*",
    "phpunit.xml",
    "phpunit.xml.dist",
    *PLUGIN_GLOBS,
)
# file name (at any depth) -> the sections (INI/TOML table headers) that configure tests, or
# register a pytest plugin for an install to autoload
SECTIONED = {
    "setup.cfg": ("tool:pytest", "pytest", "coverage:*", "options.entry_points"),
    "pyproject.toml": (
        "tool.pytest",
        "tool.pytest.*",
        "tool.coverage",
        "tool.coverage.*",
        "tool.tox",
        "tool.tox.*",
        "project.entry-points.pytest11",
        "tool.poetry.plugins.pytest11",
    ),
}
# The same settings as TOML reads them (key paths into the parsed document): whatever way the file
# spells them, these are what pytest, coverage, tox and an install see.
TOML_KEYS = (
    ("tool", "pytest"),
    ("tool", "coverage"),
    ("tool", "tox"),
    ("project", "entry-points", "pytest11"),
    ("tool", "poetry", "plugins", "pytest11"),
)
KEYED = {"package.json": (("scripts", "test"), ("jest",), ("vitest",))}
# Names a new module may not take where the tests import from: the runners, what they import
# (some only when it is there: a module that raises ImportError still ran), the standard
# library, and what it imports only where it can (`copy` tries org.python.core, for Jython).
RUNNER_MODULES = frozenset(
    {
        "pytest",
        "_pytest",
        "py",
        "pluggy",
        "iniconfig",
        "packaging",
        "exceptiongroup",
        "tomli",
        "colorama",
        "pygments",
        "argcomplete",
        "_argcomplete",
        "pexpect",
        "pkg_resources",
        "setuptools",
        "typing_extensions",
        "numpy",
        "twisted",
        "zope",
        "nose",
        "nose2",
        "hypothesis",
        "attr",
        "attrs",
        "sortedcontainers",
        "coverage",
        "xdist",
        "execnet",
        "pytest_cov",
        "sitecustomize",
        "usercustomize",
        "org",
        "java",
        "_winreg",
        "vms_lib",
        "annotationlib",
    }
)
SHOWN = 5

ReadBlob = Callable[[str], bytes]  # object id -> content


@dataclass(frozen=True)
class Entry:
    mode: str  # 100644, 100755, 120000 (symlink), 160000 (submodule)
    oid: str


Tree = dict[str, Entry]  # path -> Entry

SYMLINK = "120000"


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
    baseline: Tree,
    candidate: Tree,
    globs: Sequence[str] | None,
    validate_argv: Sequence[str] | None,
    score_argv: Sequence[str] | None = None,
) -> Plan:
    """The protected paths the candidate changed. `globs` None: the defaults."""
    named = command_files(validate_argv or (), baseline)
    named += [path for path in command_files(score_argv or (), baseline) if path not in named]
    default = globs is None
    effective = tuple(TEST_GLOBS + CONFIG_GLOBS) if globs is None else tuple(globs)
    config = CONFIG_GLOBS if globs is None else tuple(g for g in globs if matches_any_config(g))
    changes: list[ProtectedChange] = []
    for path in sorted(set(baseline) | set(candidate)):
        before, after = baseline.get(path), candidate.get(path)
        if before == after:
            continue
        if default and _sectioned(path):
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


def _sectioned(path: str) -> bool:
    return posixpath.basename(path) in SECTIONED or posixpath.basename(path) in KEYED


def matches_any_config(glob: str) -> bool:
    """A user's glob that names a runner configuration (so that a new such file is a change)."""
    return any(
        _glob(glob).match(example)
        for example in (
            "conftest.py",
            *PYTEST_CONFIG_NAMES,
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
            if _same_settings(change.path, before, after):
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
            if text is not None:  # None: the baseline has no such file
                target.write_text(text, encoding="utf-8")
            continue
        _put(target, baseline.get(change.path), read)  # none: added by the candidate, graded without it


def put(paths: Iterable[str], checkout: Path, tree: Tree, read: ReadBlob) -> None:
    """Each of `paths` in the checkout as `tree` has it (gone where the tree has none), whatever a
    run in the checkout did to it since."""
    for path in paths:
        _make_parents(checkout, path)
        _put(checkout / path, tree.get(path), read)


def _put(target: Path, entry: Entry | None, read: ReadBlob) -> None:
    _remove(target)
    if entry is None:
        return
    content = read(entry.oid)
    if entry.mode == SYMLINK:
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


def _graded_text(path: str, before: str | None, after: str | None) -> str | None:
    """`after` with its test settings taken from `before`."""
    name = posixpath.basename(path)
    if name in KEYED:
        return _keyed(KEYED[name], before, after)
    spliced = _sections(SECTIONED[name], before, after)
    # The splice works on header lines; the file is read as its parser reads it. When the two
    # disagree (the settings spelled as dotted keys, an inline or quoted table), the splice
    # cannot separate them: graded with the baseline's file whole.
    if _same_settings(path, before, spliced):
        return spliced
    return before


def _same_settings(path: str, before: str | None, after: str | None) -> bool:
    """Whether the two versions give pytest (and the tools beside it) the same settings."""
    name = posixpath.basename(path)
    if name in KEYED:
        return _keyed(KEYED[name], before, after) == (after or "")
    settings = _toml_settings if name.endswith(".toml") else _ini_settings
    # a file that is not there configures nothing, as an empty one does
    return settings(before or "") == settings(after or "")


_UNREADABLE = "unreadable"  # a file pytest fails on: it steers a run as surely as a setting does


def _toml_settings(text: str | None) -> object:
    if text is None:
        return None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return _UNREADABLE
    return [_get(document, key) for key in TOML_KEYS]


def _ini_settings(text: str | None) -> object:
    if text is None:
        return None
    sections = ini_sections(text)
    patterns = SECTIONED["setup.cfg"]
    return sorted(
        (name, body) for name, body in sections.items() if any(_glob(p).match(name.strip()) for p in patterns)
    )


def ini_sections(text: str) -> dict[str, tuple[str, ...]]:
    """Each section's lines as iniconfig (pytest's INI reader) splits them: a header is a line that
    starts with `[` and ends with `]` once cut at its first `#` and `;`; anything else, not blank
    and not a comment, belongs to the section above it. A name appears twice (a duplicate, which
    iniconfig refuses) as two entries."""
    sections: dict[str, tuple[str, ...]] = {}
    current: str | None = None
    lines: list[str] = []

    def close() -> None:
        if current is not None:
            name = current
            while name in sections:
                name += " (again)"
            sections[name] = tuple(lines)

    for line in text.removeprefix("\N{BYTE ORDER MARK}").splitlines():
        if line.lstrip()[:1] in ("#", ";"):
            continue
        line = line.rstrip()
        if not line:
            continue
        cut = line.split("#")[0].rstrip().split(";")[0].rstrip()
        if line[0] == "[" and cut.endswith("]"):
            close()
            current, lines = cut[1:-1], []
        else:
            lines.append(line)
    close()
    return sections


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


# --- pytest's search, kept inside the checkout -------------------------------------------------

# The way to ask pytest for no configuration file at all (pytest documents `-c /dev/null`).
NO_CONFIG = os.devnull
# Options by which the command itself chooses pytest's configuration or root: its choice stands.
_OWN_CHOICE = ("--config-file", "--inifile", "--rootdir", "--confcutdir")


def _pytest_start(argv: Sequence[str]) -> int | None:
    """Where pytest's own arguments start in argv, when argv runs pytest directly."""
    if runner_of(argv) != "pytest":
        return None
    if Path(argv[0]).name in ("pytest", "py.test"):
        return 1
    return list(argv).index("-m") + 2  # runner_of found `python ... -m pytest`


def _chooses(word: str) -> bool:
    if word.startswith("--"):
        return any(word == option or word.startswith(f"{option}=") for option in _OWN_CHOICE)
    return word.startswith("-c")  # `-c FILE`, `-cFILE`


def accepts(path: Path) -> bool:
    """Whether pytest takes `path` (one of PYTEST_CONFIG_NAMES) as its configuration file and
    stops searching: the dedicated files always, the shared ones when they hold a pytest section
    (`_pytest/config/findpaths.py`, each loader). One pytest cannot read stops it as well (an error)."""
    name = path.name
    if name not in PYTEST_CONFIG_NAMES or not path.is_file():
        return False
    if name in ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini"):
        return True
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return True
    if name == "pyproject.toml":
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            return True
        table = _get(document, ("tool", "pytest"))
        return table is not _ABSENT and (not isinstance(table, dict) or bool(table))
    sections = ini_sections(text)
    # setup.cfg's plain [pytest] is an error in pytest: it stops the search as well
    return "pytest" in sections or (name == "setup.cfg" and "tool:pytest" in sections)


def _first_config(directory: Path) -> Path | None:
    for name in PYTEST_CONFIG_NAMES:
        if accepts(directory / name):
            return directory / name
    return None


def _climb(start: Path, top: Path) -> Iterable[Path]:
    """start and its parents up to top (both included); start must lie in top."""
    yield start
    for parent in start.parents:
        if not parent.is_relative_to(top):
            return
        yield parent


def natural_config(checkout: Path, words: Sequence[str]) -> tuple[Path, Path | None]:
    """The root and configuration file pytest, given `words` in `checkout`, would find if nothing
    lay above the checkout: `determine_setup` in `_pytest/config/findpaths.py`, step by step, each
    climb stopped at the checkout."""
    top = Path(os.path.realpath(checkout))  # pytest's invocation directory is the real cwd
    dirs = []
    for word in words:
        if word.startswith("-"):
            continue
        path = Path(os.path.abspath(top / word.split("::", 1)[0]))
        if os.path.exists(path):
            dirs.append(path if path.is_dir() else path.parent)
    inside = [path for path in dirs if path.is_relative_to(top)]
    ancestor = Path(os.path.commonpath(inside)) if inside else top
    pyproject: Path | None = None
    for base in _climb(ancestor, top):
        found = _first_config(base)
        if found is not None:
            return base, found
        if pyproject is None and (base / "pyproject.toml").is_file():
            pyproject = base / "pyproject.toml"
    if pyproject is not None:
        return pyproject.parent, None  # pytest roots at the first pyproject.toml, configured by nothing
    for base in _climb(ancestor, top):
        if (base / "setup.py").is_file():
            return base, None
    if inside != [ancestor]:
        for start in inside:
            for base in _climb(start, top):
                found = _first_config(base)
                if found is not None:
                    return base, found
                if pyproject is None and (base / "pyproject.toml").is_file():
                    pyproject = base / "pyproject.toml"
        if pyproject is not None:
            return pyproject.parent, None
    return top, None


def pinned(argv: Sequence[str], checkout: Path) -> tuple[tuple[str, ...], bool]:
    """`argv` with pytest's configuration and root named, and whether pytest will read nothing above
    the checkout (the pin, or the command's own `-c`).

    Rather than deciding whether pytest's search would leave the checkout (it does whenever the
    checkout has no configuration file, and where it stops depends on the pytest version), the
    engine makes that search itself, over the checkout only, and hands pytest its answer: the same
    file and root pytest finds when nothing lies above, so an honest run is unchanged, and nothing a
    candidate put above the checkout (`.outpost/pytest.ini`, a conftest.py beside it) is ever read.
    Paths are relative to the checkout, where the command runs, in any sandbox."""
    start = _pytest_start(argv)
    if start is None:
        return tuple(argv), False
    words = list(argv[start:])
    if any(_chooses(word) for word in words):
        own = any(word.startswith(("-c", "--config-file", "--inifile")) for word in words)
        return tuple(argv), own
    top = Path(os.path.realpath(checkout))
    root, config = natural_config(checkout, words)
    where = os.path.relpath(root, top)
    pins = [f"--rootdir={where}", f"--confcutdir={where}", "-c"]
    pins.append(os.path.relpath(config, top) if config is not None else NO_CONFIG)
    return (*argv[:start], *pins, *words), True


def outside_configuration(
    checkout: Path, repository: Path, *, contained: bool, python: bool = True
) -> list[str]:
    """Files above the checkout that would steer its pytest run (absolute paths): none when pytest
    is `contained` (pinned, or told its configuration file by the command), as it then reads nothing
    above.

    The directories between the checkout and the repository (`.outpost/workspaces`, `.outpost`) are
    the engine's: a configuration file, conftest.py or setup.py (which roots pytest) there is nobody's
    project, so a candidate put it there (possible with `isolation = "none"`). Above the repository
    is the user's, and counts when pytest's search would reach it: the first configuration file
    there and the conftest.py files up to it. A test's package is no way up: pytest stops walking
    `__init__.py` files at a directory whose name is not an identifier, and a grading checkout's
    never is (`<name>.grading`). `python`: whether the commit has Python files (without them no
    pytest runs)."""
    if contained or not python:
        return []
    top = Path(os.path.realpath(checkout))
    home = Path(os.path.realpath(repository))
    found: list[str] = []
    for directory in top.parents:
        if not directory.is_relative_to(home) or directory == home:
            break
        names = (*PYTEST_CONFIG_NAMES, "conftest.py", "setup.py")
        found += [str(directory / name) for name in names if os.path.lexists(directory / name)]
    if _first_config(top) is not None:
        return found  # pytest's search, from the checkout's top, stops there
    for base in top.parents:
        config = _first_config(base)
        if config is None:
            continue
        if str(config) not in found:
            found.append(str(config))
        for directory in _climb(top.parent, base):
            conftest = directory / "conftest.py"
            if os.path.lexists(conftest) and str(conftest) not in found:
                found.append(str(conftest))
        break
    return found


# --- shadowing ---------------------------------------------------------------------------------

_TEST_FILE = re.compile(r"(^|/)(test_[^/]*\.py|[^/]*_test\.py|conftest\.py)$")


def shadows(baseline: Tree, candidate: Tree, checkout: Path | None = None) -> list[str]:
    """New modules where tests import from that take a runner's or the standard library's name.

    A link is imported as a package when it leads to a directory: in `checkout` (the candidate's
    tree checked out), one that does not is no module; without it, every link counts."""
    found = []
    for root in sorted(_import_roots(candidate)):
        new = _modules(candidate, root, checkout) - _modules(baseline, root, checkout)
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


def _modules(tree: Tree, root: str, checkout: Path | None = None) -> set[str]:
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
        elif first.endswith((".py", ".pyc", ".so", ".pyd")) or (
            tree[path].mode == SYMLINK and (checkout is None or os.path.isdir(checkout / path))
        ):
            # a link is imported as what it leads to: a package directory, under its own name
            names.add(first.split(".", 1)[0])
    return names


def names(paths: list[str]) -> str:
    shown = ", ".join(paths[:SHOWN])
    return shown + (f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else "")
