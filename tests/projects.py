"""Real projects for setup tests: a Python package with a dependency installed into a venv, offline.

The dependency is a real wheel written here (pip installs it from a local directory, with no index),
so the setup step is the one users run: create a venv, `pip install -r requirements.txt`.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import textwrap
import zipfile
from pathlib import Path

from tests.conftest import git, make_repo

# What every candidate's worktree runs before its agent: a venv without pip (fast), and the host's
# pip installing into it from the repository's own wheel directory, never from the network.
SETUP_SCRIPT = textwrap.dedent(f"""\
    set -e
    {sys.executable} -m venv --without-pip .venv
    {sys.executable} -m pip --python .venv/bin/python install --quiet --no-index \\
        --disable-pip-version-check --find-links wheels -r requirements.txt
    echo "setup done in $PWD"
    """)

# The project's own test: the dependency comes from the worktree's venv, the secret from .env.
CHECK = textwrap.dedent("""\
    import os, sys
    import demo_lib
    assert sys.prefix == os.path.abspath(".venv"), (sys.prefix, os.getcwd())
    assert demo_lib.VALUE == int(open("expected.txt").read()), demo_lib.VALUE
    assert open(".env").read().strip() == "API_TOKEN=from-the-user", "no .env"
    print("check passed with demo_lib", demo_lib.VERSION)
    """)


def make_wheel(directory: Path, name: str, version: str, source: str) -> Path:
    """A pure-Python wheel (PEP 427) holding one module, `name` with '-' as '_'."""
    module = name.replace("-", "_")
    dist_info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": source,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: outpost-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = "\n".join(record) + "\n"
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def python_project(path: Path, *, version: str = "1.0", value: int = 42) -> Path:
    """A git repository whose tests need a venv with demo-lib, and a .env the user keeps untracked."""
    repo = make_repo(path)
    make_wheel(repo / "wheels", "demo-lib", version, f"VALUE = {value}\nVERSION = {version!r}\n")
    (repo / "requirements.txt").write_text(f"demo-lib=={version}\n")
    (repo / "expected.txt").write_text(f"{value}\n")
    (repo / "setup.sh").write_text(SETUP_SCRIPT)
    (repo / "check.py").write_text(CHECK)
    (repo / ".gitignore").write_text(".venv/\n.env\n*.key\n")
    (repo / ".worktreeinclude").write_text(".env\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a project with a venv")
    # the user's own untracked files: one the race copies, one it must never copy
    (repo / ".env").write_text("API_TOKEN=from-the-user\n")
    (repo / "private.key").write_text("never copied\n")
    return repo


def bump_dependency(repo: Path, version: str, value: int) -> None:
    """Commit a new demo-lib version: the cache key files change."""
    make_wheel(repo / "wheels", "demo-lib", version, f"VALUE = {value}\nVERSION = {version!r}\n")
    (repo / "requirements.txt").write_text(f"demo-lib=={version}\n")
    (repo / "expected.txt").write_text(f"{value}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"demo-lib {version}")
