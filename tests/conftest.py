import contextlib
import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from outpost_tui.engine import CandidateSpec
from tests.fixtures import host_pids

FAKE_AGENT = Path(__file__).parent / "fixtures" / "agents" / "fake_agent.py"
# `$(python3 HOST_PID)` in a candidate's shell: the shell's pid as the tests see it (`$$` is its
# pid namespace's)
HOST_PID = Path(__file__).parent / "fixtures" / "host_pids.py"

os.environ.setdefault("OUTPOST_DEMO_PACE", "0")


# ------------------------------------------------------------------ tests that run alone
#
# The suite runs on pytest-xdist workers (addopts in pyproject.toml). A test marked `alone` (the
# benchmarks, which measure ratios; tests that time the machine) runs while no other test of this
# run does: every test holds a lock for its whole run (setup, call, teardown), shared by ordinary
# tests and exclusive for `alone` ones. A turnstile in front keeps a waiting `alone` test from being
# overtaken forever by the other workers' shared holds. The lock files live in the run's own
# temporary directory, so parallel runs (another checkout, another engineer) never wait on each other.


def _lock_directory(config: pytest.Config) -> Path | None:
    if not hasattr(config, "workerinput") or not config.option.basetemp:
        return None  # not an xdist worker: the tests run one after another anyway
    # xdist gives each worker <the run's base temp>/<worker id>: the parent is this run's alone
    return Path(config.option.basetemp).parent


@contextlib.contextmanager
def _turn(directory: Path, alone: bool) -> Iterator[None]:
    with open(directory / "turnstile.lock", "a") as turnstile, open(directory / "tests.lock", "a") as tests:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if alone:
            fcntl.flock(tests, fcntl.LOCK_EX)  # keeps the turnstile: no new test starts meanwhile
        else:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            fcntl.flock(tests, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(tests, fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    # tryfirst: outside pytest-timeout's timer, so waiting for a turn is not counted as the test's time
    directory = _lock_directory(item.config)
    if directory is None:
        yield
        return
    with _turn(directory, alone=item.get_closest_marker("alone") is not None):
        yield


@pytest.fixture(autouse=True, scope="session")
def candidates_write_where_tests_look(tmp_path_factory):
    """Isolated candidates may write this run's temporary directories (the markers, pid files and
    signals tests give them), as an operator lets a shared cache through; the repository and
    `.outpost/` inside them stay out of reach (tests/engine/test_isolation.py)."""
    base = tmp_path_factory.getbasetemp()
    os.environ.setdefault("OUTPOST_WRITABLE", str(base))
    # the engine's state (the seal key, flight logs' seals, the bug log) in this run's own
    # directory, not the machine's: hidden from candidates all the same (the fence hides it)
    os.environ["XDG_STATE_HOME"] = str(base / "state")
    if host_pids.VARIABLE not in os.environ:
        socket_path = base / "pids.sock"
        host_pids.serve(socket_path)
        os.environ[host_pids.VARIABLE] = str(socket_path)


def git(cwd, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Test")
    git(path, "config", "user.email", "test@example.invalid")
    (path / "base.txt").write_text("base\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "initial")
    return path


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_repo(tmp_path / "repo")


def fake(*flags: str) -> tuple[str, ...]:
    """argv of the fake agent with these flags."""
    return (sys.executable, str(FAKE_AGENT), *flags)


def flags(**options: object) -> list[str]:
    """The fake agent's flags from keywords: `wait_file=go` is `--wait-file go`, `commit=True` `--commit`."""
    argv: list[str] = []
    for name, value in options.items():
        argv.append("--" + name.replace("_", "-"))
        if value is not True:
            argv.append(str(value))
    return argv


def cmd(key: str, *flags: str, brief: str = "do the task", **options) -> CandidateSpec:
    """A command candidate running the fake agent with these flags."""
    return CandidateSpec(key, "command", brief, command=fake(*flags), **options)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def pids(path: Path) -> list[int]:
    """The pids a fake agent wrote to its --pidfile."""
    return [int(p) for p in path.read_text().split()]


@pytest.fixture
def step_clock(monkeypatch):
    """Steps the wall clock forward as psutil sees it (NTP setting a fresh machine's clock): psutil
    takes the boot time from it, so every process's epoch start time moves by the step."""
    from psutil import _pslinux

    def step(seconds: float) -> None:
        booted = _pslinux.boot_time()
        monkeypatch.setattr(_pslinux, "boot_time", lambda: booted + seconds)

    return step
