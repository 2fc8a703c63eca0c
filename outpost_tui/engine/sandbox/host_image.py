"""The default sandbox image: this machine's own python3 and git, imported without any registry.

Their binaries, shared libraries and the Python standard library (and a few basic tools) are copied
into a root filesystem archive, which the engine imports (images.py). A few megabytes, a few
seconds, no download; enough to run the sample project's tests and git inside.
"""

from __future__ import annotations

import filecmp
import json
import os
import platform
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING

from .. import git as git_runner
from ..core.spec import DEFAULT_IMAGE
from .images import ImageError, Progress, import_rootfs

if TYPE_CHECKING:
    from collections.abc import Iterable

    from docker import DockerClient

# Programs the sandbox and common agent scripts expect beside python3 and git. Required ones fail the
# build when missing; the rest are copied when the host has them.
REQUIRED_PROGRAMS = ("sh", "sleep", "kill", "cat")
OPTIONAL_PROGRAMS = (
    "bash",
    "env",
    "ls",
    "mkdir",
    "rm",
    "cp",
    "mv",
    "ln",
    "touch",
    "chmod",
    "echo",
    "true",
    "false",
    "id",
    "pwd",
    "head",
    "tail",
    "wc",
    "sort",
    "uniq",
    "tr",
    "cut",
    "tee",
    "dirname",
    "basename",
    "grep",
    "sed",
    "find",
    "xargs",
    "diff",
    "timeout",
    "setsid",
    "stat",
    "date",
    "printf",
    "test",
    "readlink",
    "realpath",
    "mktemp",
    "uname",
)
# Parts of the standard library no agent or test run needs; skipping them halves the image.
STDLIB_SKIP = {
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "site-packages",
    "dist-packages",
    "lib2to3",
    "pydoc_data",
    "__phello__",
}

# git's network helpers (and their curl/TLS libraries) are a third of the image; sandboxes have no
# network unless the race file asks, and an image for networked agents is better built from a distro.
GIT_SKIP = re.compile(r"git-(remote-(http|ftp)s?|http-\w+|imap-send|daemon)|scalar")


@dataclass
class Rootfs:
    """What went into a root filesystem archive."""

    archive: Path
    files: int = 0
    bytes: int = 0
    python: str | None = None
    git: str | None = None
    programs: list[str] = field(default_factory=list)


# -- copying the host's programs ---------------------------------------------------------------

_DYNAMIC = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")
_MERGED = ("/bin/", "/sbin/", "/lib/", "/lib32/", "/lib64/", "/libx32/")


def _in_image(path: str) -> str:
    """Where a host file goes in the image: merged /usr, whatever layout the host has."""
    for prefix in _MERGED:
        if path.startswith(prefix):
            return "usr" + path
    return path.lstrip("/")


def _is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


def shared_libraries(binaries: Iterable[Path]) -> set[str]:
    """Every shared library (and the loader) the given ELF files need, as host paths."""
    files = [str(path) for path in binaries if _is_elf(path)]
    found: set[str] = set()
    for start in range(0, len(files), 200):
        result = subprocess.run(
            ["ldd", *files[start : start + 200]], capture_output=True, text=True, check=False
        )
        for match in _DYNAMIC.finditer(result.stdout):
            found.add(match.group(1))
    return found


def _python_layout(python: str) -> dict[str, str]:
    probe = (
        "import json, os, sys, sysconfig, _json\n"
        "print(json.dumps({'executable': os.path.realpath(sys.executable),"
        " 'stdlib': sysconfig.get_path('stdlib'),"
        " 'dynload': os.path.dirname(_json.__file__) if hasattr(_json, '__file__') else '',"
        " 'version': '%d.%d' % sys.version_info[:2]}))"
    )
    result = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ImageError(f"{python} could not describe itself: {result.stderr.strip()[-200:]}")
    described: dict[str, str] = json.loads(result.stdout)
    return described


def _host_python() -> str:
    # The distribution's interpreter first: a virtualenv or pyenv shim is not a self-contained program
    for candidate in ("/usr/bin/python3", shutil.which("python3")):
        if candidate and os.path.exists(candidate) and _is_elf(Path(os.path.realpath(candidate))):
            return candidate
    raise ImageError(
        "no python3 program on this machine to copy into the image; use --from-rootfs or --dockerfile instead"
    )


def _host_git() -> tuple[str, str]:
    git = shutil.which("git")
    if not git:
        raise ImageError(
            "no git on this machine to copy into the image; use --from-rootfs or --dockerfile instead"
        )
    # the engine's runner: a GIT_EXEC_PATH inherited from a hook would name some other git's programs
    status, out, err = git_runner.run("/", "--exec-path", timeout=30)
    if status != 0 or not out.strip():
        raise ImageError(f"`git --exec-path` failed: {err.strip() or f'exit {status}'}")
    return os.path.realpath(git), out.strip()


class _Archive:
    """A tar being written: root-owned entries, directories created once, hard links kept."""

    def __init__(self, path: Path) -> None:
        self.tar = tarfile.open(path, "w")  # noqa: SIM115 - open for the builder's life; close() ends it
        self.names: set[str] = set()
        self.files = 0
        self.bytes = 0

    def _info(self, name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime = kind, mode, int(time.time())
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    def directory(self, name: str, mode: int = 0o755) -> None:
        name = name.strip("/")
        if not name or name in self.names:
            return
        self.directory(os.path.dirname(name))
        self.names.add(name)
        self.tar.addfile(self._info(name, tarfile.DIRTYPE, mode))

    def symlink(self, name: str, target: str) -> None:
        if name in self.names:
            return
        self.directory(os.path.dirname(name))
        self.names.add(name)
        info = self._info(name, tarfile.SYMTYPE, 0o777)
        info.linkname = target
        self.tar.addfile(info)

    def data(self, name: str, content: bytes, mode: int = 0o644) -> None:
        self.directory(os.path.dirname(name))
        self.names.add(name)
        info = self._info(name, tarfile.REGTYPE, mode)
        info.size = len(content)
        self.tar.addfile(info, BytesIO(content))

    def host_file(self, host: str) -> None:
        """Copy a host file, keeping a symbolic link as a link and following it to its target."""
        name = _in_image(host)
        if name in self.names or not os.path.lexists(host):
            return
        if os.path.islink(host):
            target = os.readlink(host)
            self.symlink(name, target)
            resolved = os.path.normpath(os.path.join(os.path.dirname(host), target))
            self.host_file(resolved)
            return
        if os.path.isdir(host):
            self.directory(name)
            return
        self.directory(os.path.dirname(name))
        self.names.add(name)
        info = self.tar.gettarinfo(host, arcname=name)
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        if info.isreg():
            with open(host, "rb") as handle:
                self.tar.addfile(info, handle)
            self.files += 1
            self.bytes += info.size
        else:
            self.tar.addfile(info)

    def host_tree(
        self,
        top: str,
        skip: frozenset[str] | set[str] = frozenset(),
        skip_file: re.Pattern[str] | None = None,
        same_as: dict[str, str] | None = None,
    ) -> list[Path]:
        """Copy a directory tree; returns its ELF candidates (regular files) for ldd.

        `same_as` maps a file name to a host file already copied with identical content, which
        becomes a symbolic link instead of a second copy.
        """
        regular: list[Path] = []
        for root, dirs, files in os.walk(top):
            # config-3.X-<platform> holds the static library for embedding: tens of megabytes
            dirs[:] = sorted(d for d in dirs if d not in skip and not d.startswith("config-"))
            self.directory(_in_image(root))
            for directory in dirs:
                full = os.path.join(root, directory)
                if os.path.islink(full):
                    self.host_file(full)
            for name in sorted(files):
                full = os.path.join(root, name)
                if skip_file and skip_file.fullmatch(name):
                    continue
                twin = (same_as or {}).get(name)
                if twin and not os.path.islink(full) and filecmp.cmp(full, twin, shallow=False):
                    self.symlink(_in_image(full), "/" + _in_image(twin))
                    continue
                self.host_file(full)
                if not os.path.islink(full) and (
                    name.endswith(".so") or ".so." in name or os.access(full, os.X_OK)
                ):
                    regular.append(Path(full))
        return regular

    def close(self) -> None:
        self.tar.close()


def host_rootfs(
    archive: Path,
    *,
    progress: Progress | None = None,
    python: str | None = None,
    with_python: bool = True,
    with_git: bool = True,
    with_tools: bool = True,
) -> Rootfs:
    """Write a root filesystem archive holding this machine's python3, git and basic tools.

    Without python, git and tools it is a shell and `sleep` only: a tiny image for tests.
    """
    say = progress or (lambda text: None)
    out = _Archive(archive)
    report = Rootfs(archive)
    try:
        for top in ("usr/bin", "usr/lib", "usr/lib64", "etc", "tmp", "dev", "proc", "sys", "work", "root"):
            out.directory(top, 0o1777 if top == "tmp" else 0o755)
        for link in ("bin", "sbin", "lib", "lib64"):
            out.symlink(link, f"usr/{link}")
        out.directory("usr/sbin")
        elf: list[Path] = []

        programs: list[str] = []
        for name in (*REQUIRED_PROGRAMS, *(OPTIONAL_PROGRAMS if with_tools else ())):
            found = shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")
            if not found:
                if name in REQUIRED_PROGRAMS:
                    raise ImageError(f"this machine has no {name!r} program to copy into the image")
                continue
            real = os.path.realpath(found)
            out.host_file(real)
            if _in_image(real) != f"usr/bin/{name}":
                out.symlink(f"usr/bin/{name}", "/" + _in_image(real))
            elf.append(Path(real))
            programs.append(name)
        report.programs = programs

        if with_python:
            layout = _python_layout(python or _host_python())
            say(f"python {layout['version']} from {layout['executable']}")
            out.host_file(layout["executable"])
            elf.append(Path(layout["executable"]))
            for alias in ("python3", f"python{layout['version']}"):
                if f"usr/bin/{alias}" != _in_image(layout["executable"]):
                    out.symlink(f"usr/bin/{alias}", "/" + _in_image(layout["executable"]))
            elf += out.host_tree(layout["stdlib"], STDLIB_SKIP)
            if layout["dynload"] and not layout["dynload"].startswith(layout["stdlib"]):
                elf += out.host_tree(layout["dynload"])
            report.python = layout["version"]

        if with_git:
            git, exec_path = _host_git()
            say(f"git from {git}")
            out.host_file(git)
            elf.append(Path(git))
            if _in_image(git) != "usr/bin/git":
                out.symlink("usr/bin/git", "/" + _in_image(git))
            elf += out.host_tree(exec_path, skip_file=GIT_SKIP, same_as={"git": git})
            if os.path.isdir("/usr/share/git-core/templates"):
                out.host_tree("/usr/share/git-core/templates")
            report.git = git
            # Worktrees are mounted from the host: files may belong to another uid than the one
            # the container runs as, which git would otherwise refuse as "dubious ownership".
            out.data("etc/gitconfig", b"[safe]\n\tdirectory = *\n")

        libraries = shared_libraries(elf)
        say(f"{len(libraries)} shared libraries")
        for library in sorted(libraries):
            out.host_file(library)

        uid, gid = os.getuid(), os.getgid()
        passwd = "root:x:0:0:root:/root:/bin/sh\n"
        group = "root:x:0:\n"
        if uid != 0:
            passwd += f"outpost:x:{uid}:{gid}:outpost:/tmp:/bin/sh\n"
            group += f"outpost:x:{gid}:\n"
        passwd += "nobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n"
        group += "nogroup:x:65534:\n"
        out.data("etc/passwd", passwd.encode())
        out.data("etc/group", group.encode())
        out.data("etc/nsswitch.conf", b"passwd: files\ngroup: files\nhosts: files dns\n")
    finally:
        out.close()
    report.files, report.bytes = out.files, out.bytes
    return report


# -- the image --------------------------------------------------------------------------------


def _check_architecture(client: DockerClient, endpoint: str) -> None:
    engine = str(client.version().get("Arch", "")).lower()
    machine = platform.machine().lower()
    aliases = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm"}
    if engine and aliases.get(machine, machine) != engine:
        raise ImageError(
            f"the engine at {endpoint} runs {engine} but this machine is {machine}: "
            "its programs cannot be copied; use --from-rootfs or --dockerfile"
        )


def build_sample_image(
    client: DockerClient, endpoint: str, tag: str = DEFAULT_IMAGE, progress: Progress | None = None
) -> tuple[str, Rootfs]:
    """The default image: this machine's python3 + git, imported without any registry."""
    _check_architecture(client, endpoint)
    with tempfile.TemporaryDirectory(prefix="outpost-image-") as scratch:
        rootfs = host_rootfs(Path(scratch) / "rootfs.tar", progress=progress)
        if progress:
            progress(f"root filesystem: {rootfs.files} files, {rootfs.bytes / 1e6:.1f} MB")
        return import_rootfs(client, rootfs.archive, tag), rootfs
