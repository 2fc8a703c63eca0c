"""Processes that leave the candidate, through the real CLI: a daemon that double-forks into its own
session, closes its output and keeps committing to the candidate's branch ends when its attempt
ends: won, lost, cancelled, timed out, aborted, and when a replay cleans up after a crashed
coordinator. Counted by pid: zero left. Run with each containment mechanism this machine has
(cgroup v2 when writable, the process-tree fallback always)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from outpost_tui.engine.sandbox.containment import cgroup_root
from tests.cli.support import CLI, run_cli, write_race
from tests.conftest import git

# MODE PIDFILE [READY]: starts a daemon (double fork, own session, stdio on /dev/null, the
# environment emptied) that commits to the worktree's branch every few milliseconds, then
# commits once itself and exits (or hangs with --hang).
DAEMON_AGENT = textwrap.dedent("""\
    import os, socket, subprocess, sys, time
    def host_pid():  # the pid the tests see (tests/fixtures/host_pids.py), in a pid namespace too
        path = os.environ.get("OUTPOST_TEST_PIDS")
        if not path:
            return os.getpid()
        with socket.socket(socket.AF_UNIX) as connection:
            connection.connect(path)
            connection.sendall(b"self")
            connection.shutdown(socket.SHUT_WR)
            return int(connection.recv(64))
    pidfile = sys.argv[1]
    hang = "--hang" in sys.argv and os.environ.get("OUTPOST_ATTEMPT") == "1"  # a replay finishes
    ready = sys.argv[sys.argv.index("--ready") + 1] if "--ready" in sys.argv else None
    git = ["git", "-c", "user.name=d", "-c", "user.email=d@example.invalid"]
    mine = f"agent-{os.getpid()}.txt"
    def said():  # the pids daemons have written whole (the file is there before its line is)
        try:
            with open(pidfile) as handle:
                return handle.read().count("\\n")
        except FileNotFoundError:
            return 0
    before = said()  # a replay's daemon adds its line to the first one's
    if "--validating" not in sys.argv:  # (a killed daemon's git may have left an index.lock)
        with open(mine, "w") as handle:
            handle.write("agent\\n")
        subprocess.run([*git, "add", mine], check=True)
        subprocess.run([*git, "commit", "-qm", "agent"], check=True)
    if os.fork() == 0:
        os.setsid()
        if os.fork():
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        env = {"PATH": os.environ["PATH"]}  # no marker survives in the environment
        n = 0
        while True:
            n += 1
            with open(f"daemon-{n % 50}.txt", "w") as handle:
                handle.write(str(n))
            subprocess.run([*git, "add", "-A"], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            subprocess.run([*git, "commit", "-qm", f"daemon {n}"], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if n == 1:  # committing: say so
                with open(pidfile, "a") as handle:
                    handle.write(f"{host_pid()}\\n")
    os.wait()
    while said() == before:
        time.sleep(0.01)
    if ready:
        open(ready, "w").close()
    if hang:
        while True:
            time.sleep(1)
    """)

MECHANISMS = ["cgroup", "tree"]


def mechanism_env(mechanism: str) -> dict[str, str]:
    if mechanism == "cgroup" and cgroup_root() is None:
        pytest.skip("no writable cgroup v2 hierarchy on this machine")
    return {"OUTPOST_PROCESS_TRACKING": "auto" if mechanism == "cgroup" else "tree"}


def agent(tmp_path: Path, key: str, *flags: str) -> str:
    script = tmp_path / "daemon_agent.py"
    script.write_text(DAEMON_AGENT)
    argv = json.dumps([sys.executable, str(script), str(tmp_path / f"{key}.pids"), *flags])
    return f'\n[[candidates]]\nkey = "{key}"\nagent = "command"\nbrief = "b"\ncommand = {argv}\n'


def daemons(tmp_path: Path, *keys: str) -> list[int]:
    found = []
    for key in keys:
        path = tmp_path / f"{key}.pids"
        found += [int(pid) for pid in path.read_text().split()] if path.exists() else []
    return found


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def left_in(directory: Path) -> list[int]:
    """Processes running in the repository or its worktrees (their working directory)."""
    pids = []
    for process in psutil.process_iter(["cwd"]):
        cwd = process.info.get("cwd")
        if cwd and Path(cwd).is_relative_to(directory) and process.pid != os.getpid():
            try:
                if process.status() != psutil.STATUS_ZOMBIE:
                    pids.append(process.pid)
            except psutil.Error:
                continue
    return pids


def assert_none_left(tmp_path: Path, repo: Path, *keys: str) -> None:
    pids = daemons(tmp_path, *keys)
    assert len(pids) == len(keys), f"every daemon started and said so: {pids}"
    assert [pid for pid in pids if alive(pid)] == []
    assert left_in(repo) == []


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_the_winners_daemon_ends_with_its_attempt_and_never_commits_after_the_verdict(
    repo, tmp_path, mechanism
):
    before = left_in(repo)
    race = write_race(tmp_path / "race.toml", repo, agent(tmp_path, "a"))
    done = run_cli("run", race, "--json", env=mechanism_env(mechanism))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["winner"]["key"] == "a"
    assert before == []
    assert_none_left(tmp_path, repo, "a")
    # the branch holds what was there at the verdict, and nothing arrives afterwards
    branch = result["winner"]["branch"]
    assert git(repo, "rev-parse", branch) == result["winner"]["commit"]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_losers_daemons_end_with_their_attempts(repo, tmp_path, mechanism):
    """b is cancelled when a wins, c's validation fails: none of their daemons stays."""
    validate = tmp_path / "validate.sh"
    validate.write_text('#!/bin/sh\n[ "$OUTPOST_CANDIDATE" != c ]\n')
    validate.chmod(0o755)
    ready = tmp_path / "b-ready"
    candidates = (
        agent(tmp_path, "b", "--hang")
        + agent(tmp_path, "c")
        # a wins only once b's daemon is running
        + agent(tmp_path, "a", "--ready", str(tmp_path / "a-ready")).replace(
            "command = [",
            f'command = ["sh", "-c", "while [ ! -e {ready} ] || '
            f'[ ! -e {tmp_path}/c.pids ]; do sleep 0.02; done; exec \\"$0\\" \\"$@\\"", ',
            1,
        )
    )
    candidates = candidates.replace(
        f'"{tmp_path / "b.pids"}", "--hang"', f'"{tmp_path / "b.pids"}", "--hang", "--ready", "{ready}"'
    )
    race = write_race(
        tmp_path / "race.toml",
        repo,
        candidates,
        extra="concurrency = 4",
        sections=f'[validate]\ncommand = ["{validate}"]\n',
    )
    done = run_cli("run", race, "--json", env=mechanism_env(mechanism))
    result = json.loads(done.stdout)
    statuses = {c["key"]: c["status"] for c in result["candidates"]}
    assert statuses["a"] == "winner", done.stderr
    assert statuses["b"] == "cancelled" and statuses["c"] == "rejected", statuses
    assert_none_left(tmp_path, repo, "a", "b", "c")


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_timed_out_candidates_daemon_ends(repo, tmp_path, mechanism):
    race = write_race(tmp_path / "race.toml", repo, agent(tmp_path, "d", "--hang") + "timeout = 2\n")
    done = run_cli("run", race, "--json", env=mechanism_env(mechanism))
    result = json.loads(done.stdout)
    assert "timed out" in (result["candidates"][0]["error"] or ""), done.stderr
    assert_none_left(tmp_path, repo, "d")


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_validation_commands_daemon_ends(repo, tmp_path, mechanism):
    script = tmp_path / "daemon_agent.py"
    script.write_text(DAEMON_AGENT)
    race = write_race(
        tmp_path / "race.toml",
        repo,
        agent(tmp_path, "a"),
        sections="[validate]\ncommand = "
        + json.dumps([sys.executable, str(script), str(tmp_path / "v.pids"), "--validating"])
        + "\n",
    )
    done = run_cli("run", race, "--json", env=mechanism_env(mechanism))
    assert done.returncode == 0, done.stderr
    # the agent's daemon, and the validation's on a's commit; the baseline's validation runs beside
    # it and may be stopped, once the race is decided, before its own daemon starts
    assert len(daemons(tmp_path, "a")) == 1, "the agent's daemon started and said so"
    assert len(daemons(tmp_path, "v")) in (1, 2), "the validation's daemon started and said so"
    pids = daemons(tmp_path, "a", "v")
    assert [pid for pid in pids if alive(pid)] == []
    assert left_in(repo) == []


def wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_an_aborted_races_daemon_ends(repo, tmp_path, mechanism):
    ready = tmp_path / "ready"
    race = write_race(tmp_path / "race.toml", repo, agent(tmp_path, "a", "--hang", "--ready", str(ready)))
    process = subprocess.Popen(
        [*CLI, "run", str(race), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **mechanism_env(mechanism)},
    )
    wait_for(ready)
    process.send_signal(signal.SIGINT)  # the operator's Ctrl-C aborts the race
    out, err = process.communicate(timeout=60)
    assert json.loads(out)["status"] == "aborted", err
    assert_none_left(tmp_path, repo, "a")


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_replay_after_a_crashed_coordinator_ends_the_daemon(repo, tmp_path, mechanism):
    ready = tmp_path / "ready"
    race = write_race(
        tmp_path / "race.toml",
        repo,
        agent(tmp_path, "a", "--hang", "--ready", str(ready)),
        extra='run_id = "crash"',
        sections="[durability]\nenabled = true\n",
    )
    env = mechanism_env(mechanism)
    process = subprocess.Popen(
        [*CLI, "run", str(race), "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **env},
    )
    wait_for(ready)
    process.kill()  # the coordinator crashes; its agent and the daemon live on
    process.wait()
    [daemon] = daemons(tmp_path, "a")
    assert alive(daemon)
    (tmp_path / "a.pids").unlink()
    ready.unlink()
    # release the dead coordinator's run, then replay: it stops the leftovers and runs attempt 2,
    # which does not hang
    view = json.loads(run_cli("recover", "crash", "--repo", repo, "--inspect", "--json").stdout)
    released = run_cli("recover", "crash", "--repo", repo, "--release", "--revision", view["revision"])
    assert released.returncode == 0, released.stderr
    assert alive(daemon)
    done = run_cli("recover", "crash", "--repo", repo, "--replay", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert not alive(daemon)
    assert_none_left(tmp_path, repo, "a")


def test_doctor_says_which_containment_is_in_force():
    done = run_cli("doctor", "--json")
    [check] = [c for c in json.loads(done.stdout)["checks"] if c["name"] == "process containment"]
    if cgroup_root() is not None:
        assert check["detail"].startswith("cgroup v2 per attempt under "), check
    else:
        assert check["detail"].startswith("process tree"), check
    forced = run_cli("doctor", "--json", env={"OUTPOST_PROCESS_TRACKING": "tree"})
    [check] = [c for c in json.loads(forced.stdout)["checks"] if c["name"] == "process containment"]
    assert check["detail"].startswith("process tree") and "OUTPOST_PROCESS_TRACKING=tree" in check["detail"]
