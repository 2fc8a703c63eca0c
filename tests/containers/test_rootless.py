"""Rootless engines for real: outpost-tui run by an unprivileged user against that user's own rootless
Podman (`podman system service` on $XDG_RUNTIME_DIR/podman/podman.sock) and rootless Docker
(rootlesskit's dockerd on $XDG_RUNTIME_DIR/docker.sock), with subordinate id ranges, set up by
.ci/rootless-podman-setup.sh. Discovery finds each socket without DOCKER_HOST, doctor names it and
why, and every file a container race writes belongs to the user on the host.

The tests run outpost-tui as that user through runuser, so they need root; without root, the user
or a live engine they skip with the reason (a failure under CI=true, like every container test).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import site
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.stubborn import calc_repo

from .conftest import IMAGE, unavailable

pytestmark = pytest.mark.container

ROOT = Path(__file__).resolve().parents[2]
USER = os.environ.get("OUTPOST_ROOTLESS_USER", "outpost-rootless")
SETUP = ".ci/rootless-podman-setup.sh"
IMPORTS = "import outpost_tui, docker, anyio, psutil"


# the race's provider -> (its socket under $XDG_RUNTIME_DIR, what discovery calls it)
ENGINES = {
    "podman": ("podman/podman.sock", "rootless Podman's socket"),
    "docker": ("docker.sock", "rootless Docker's socket"),
}


class Rootless:
    def __init__(self, account: pwd.struct_passwd, python: str, pythonpath: str | None) -> None:
        self.account = account
        self.runtime = f"/run/user/{account.pw_uid}"
        self.python = python
        self.env = {
            "HOME": account.pw_dir,
            "XDG_RUNTIME_DIR": self.runtime,
            "LANG": "C.UTF-8",
            "PATH": "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        }
        if pythonpath:
            self.env["PYTHONPATH"] = pythonpath

    @property
    def ids(self) -> tuple[int, int]:
        return self.account.pw_uid, self.account.pw_gid

    def run(self, *argv: str, cwd: Path | str = "/", timeout: float = 300) -> subprocess.CompletedProcess:
        """argv as the user, with nothing of root's environment (no DOCKER_HOST in particular)."""
        return subprocess.run(
            [
                "runuser",
                "-u",
                self.account.pw_name,
                "--",
                "env",
                "-i",
                *(f"{k}={v}" for k, v in self.env.items()),
                *argv,
            ],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def outpost(self, *args: str, cwd: Path | str = "/", timeout: float = 300) -> subprocess.CompletedProcess:
        return self.run(self.python, "-m", "outpost_tui.cli", *args, cwd=cwd, timeout=timeout)

    def socket(self, provider: str) -> str:
        return f"{self.runtime}/{ENGINES[provider][0]}"

    def engine(self, provider: str) -> str:
        """The engine's socket, once it answers the user and holds the test image."""
        socket = self.socket(provider)
        cli = (
            ["podman", "--url", f"unix://{socket}"]
            if provider == "podman"
            else ["docker", "-H", f"unix://{socket}"]
        )
        answer = self.run(*cli, "version")
        if answer.returncode != 0:
            unavailable(
                f"no rootless {provider} answers at {socket} for {USER!r} "
                f"({(answer.stderr or answer.stdout).strip()[-300:]}): source {SETUP} (as root)"
            )
        if self.run(*cli, "image", "inspect", IMAGE).returncode != 0:
            unavailable(f"the rootless {provider} of {USER!r} has no image {IMAGE}: source {SETUP} (as root)")
        return socket


@pytest.fixture(scope="module")
def rootless() -> Iterator[Rootless]:
    if os.geteuid() != 0:
        unavailable("the rootless-engine tests run outpost-tui as another user (runuser): they need root")
    try:
        account = pwd.getpwnam(USER)
    except KeyError:
        unavailable(f"no user {USER!r} with a rootless Podman: source {SETUP} (as root) first")
    # the user cannot run an interpreter under root's home (a pyenv, say): the system's, with this
    # checkout and this environment's packages on its path, when that one cannot
    python, pythonpath, staged = sys.executable, None, None
    probe = Rootless(account, python, None).run(python, "-c", IMPORTS)
    if probe.returncode != 0:
        python = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
        pythonpath = os.pathsep.join([str(ROOT), *site.getsitepackages()])
        probe = Rootless(account, python, pythonpath).run(python, "-c", IMPORTS)
    if probe.returncode != 0:
        # a checkout under a home the user may not enter (CI's clone under /root, say): a readable
        # copy of the package and this environment's packages, for this module's tests
        staged = staged_copy()
        pythonpath = staged.pythonpath
        probe = Rootless(account, python, pythonpath).run(python, "-c", IMPORTS)
        if probe.returncode != 0:
            unavailable(
                f"user {USER!r} cannot import outpost_tui ({probe.stderr.strip()[-300:]}): "
                "the checkout and its environment must be readable by it"
            )
    yield Rootless(account, python, pythonpath)
    if staged is not None:
        shutil.rmtree(staged.directory, ignore_errors=True)


class Staged(NamedTuple):
    directory: Path
    pythonpath: str


def staged_copy() -> Staged:
    """A copy of outpost_tui and this environment's site-packages that every user may read.

    pytest's own temporary directories are closed to other users, so the copy goes to a directory
    of its own under the system's temporary directory."""
    staged = Path(tempfile.mkdtemp(prefix="outpost-rootless-python-"))
    staged.chmod(0o755)
    shutil.copytree(ROOT / "outpost_tui", staged / "outpost_tui")
    paths = [str(staged)]
    for index, packages in enumerate(site.getsitepackages()):
        if Path(packages).is_dir():
            shutil.copytree(packages, staged / f"site-{index}", symlinks=True)
            paths.append(str(staged / f"site-{index}"))
    for directory, _, _ in os.walk(staged):
        os.chmod(directory, 0o755)
    return Staged(staged, os.pathsep.join(paths))


@pytest.fixture
def home(rootless):
    """A directory of the user's own (pytest's tmp_path is root's and closed to it)."""
    directory = Path(tempfile.mkdtemp(prefix="outpost-rootless-"))
    os.chown(directory, *rootless.ids)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def race_file(directory: Path, repo: Path, provider: str) -> Path:
    path = directory / "race.toml"
    path.write_text(
        textwrap.dedent(f"""\
        [race]
        name = "rootless"
        repository = "{repo}"
        brief = "fix add"

        [budget]
        candidate_timeout = 120

        [validate]
        command = ["python3", "-B", "-m", "unittest", "-q"]
        timeout = 120

        [sandbox]
        provider = "{provider}"
        image = "{IMAGE}"

        [[candidates]]
        key = "fixer"
        agent = "command"
        command = ["python3", "agents/fix.py"]
        """)
    )
    return path


def owned_otherwise(top: Path, ids: tuple[int, int]) -> list[str]:
    """Every path under top (itself included) that does not belong to ids on the host."""
    wrong = []
    for path in [top, *top.rglob("*")]:
        info = os.lstat(path)
        if (info.st_uid, info.st_gid) != ids:
            wrong.append(f"{path.relative_to(top)} {info.st_uid}:{info.st_gid}")
    return wrong


@pytest.mark.parametrize("provider", sorted(ENGINES))
def test_discovery_finds_the_users_rootless_engine_and_doctor_says_so(rootless, home, provider):
    socket = rootless.engine(provider)
    race = race_file(home, calc_repo(home), provider)
    subprocess.run(["chown", "-R", f"{rootless.ids[0]}:{rootless.ids[1]}", str(home)], check=True)
    done = rootless.outpost("doctor", str(race), cwd=home)

    lines = done.stdout.splitlines()
    engine = next((line for line in lines if " container engine " in line), "")
    assert engine.startswith("ok") and f"at unix://{socket}, chosen by {ENGINES[provider][1]}" in engine, (
        done.stdout + done.stderr
    )
    files = next((line for line in lines if " container files " in line), "")
    uid, gid = rootless.ids
    name = "Podman" if provider == "podman" else "Docker"
    assert (
        files.startswith("ok")
        and f"rootless {name}: containers run as their root" in files
        and f"a file written in a container belongs to you ({uid}:{gid})" in files
    ), done.stdout


@pytest.mark.parametrize("provider", sorted(ENGINES))
def test_a_container_race_as_the_user_leaves_only_files_of_the_user(rootless, home, provider):
    rootless.engine(provider)
    repo = calc_repo(home)  # (the fixer commits in its container, from agents/fix.py)
    (repo / "gate").touch()  # the fixer goes at once: it is alone
    subprocess.run(["git", "-C", str(repo), "add", "gate"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "gate"], check=True)
    race = race_file(home, repo, provider)
    subprocess.run(["chown", "-R", f"{rootless.ids[0]}:{rootless.ids[1]}", str(home)], check=True)

    done = rootless.outpost("run", str(race), "--headless", "--json", cwd=home)

    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    fixer = result["candidates"][0]
    assert fixer["status"] == "winner" and fixer["validation"]["status"] == "passed", fixer
    assert fixer["resources"] and fixer["resources"][0].startswith("container:")
    # the commit (objects, refs, index) and the worktree were written in containers; the user's
    # engine runs them as its root, which is the user on the host
    assert owned_otherwise(home, rootless.ids) == []


def test_doctor_says_files_would_not_be_yours_on_another_users_rootless_engine(rootless, tmp_path):
    """Root pointed at the user's rootless Podman: its containers' root is that user on the host,
    not the one running outpost-tui. doctor says so from a real file (a race's first container
    checks the same and refuses the engine)."""
    socket = rootless.engine("podman")
    race = race_file(tmp_path, calc_repo(tmp_path), "podman")
    env = {**os.environ, "DOCKER_HOST": f"unix://{socket}"}
    done = subprocess.run(
        [sys.executable, "-m", "outpost_tui.cli", "doctor", str(race)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    files = next((line for line in done.stdout.splitlines() if " container files " in line), "")
    uid, gid = rootless.ids
    assert (
        files.startswith("MISSING")
        and "rootless Podman: containers run as their root" in files
        and f"a file written in a container belongs to {uid}:{gid} on the host, not to you "
        f"({os.getuid()}:{os.getgid()})"
        in files
    ), done.stdout + done.stderr
    assert done.returncode == 9
