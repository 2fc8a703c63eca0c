"""[setup] in container races, and the engine as users have it: a Docker context, the uid mapping
doctor checks, and a network the engine does not have. Runs against whatever engine the tests use
(CI runs this directory once on Podman and once on Docker Engine)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from outpost_tui.engine import CandidateSpec, CandidateStatus, RaceStatus, build_spec, run_race
from outpost_tui.engine.core.events import EventKind
from outpost_tui.engine.core.spec import SandboxSpec, SetupSpec, ValidateSpec
from outpost_tui.engine.sandbox.container_engine import list_containers
from tests.conftest import git
from tests.engine.test_engines import write_context
from tests.projects import python_project

from .conftest import IMAGE

pytestmark = pytest.mark.container

# The image has python3 (with venv) but no pip: the wheel is installed the way pip lays out a
# pure-Python wheel, by extracting it into the venv's site-packages. Offline, inside the container.
CONTAINER_SETUP = textwrap.dedent("""\
    set -e
    python3 -m venv --without-pip .venv
    site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    for wheel in wheels/*.whl; do .venv/bin/python -m zipfile -e "$wheel" "$site"; done
    python3 -c 'import socket; print(socket.gethostname())' > .setup-host
    echo "setup done"
    """)

SERVE = textwrap.dedent("""\
    import os, socket, subprocess
    port = int(os.environ["OUTPOST_PORT"])
    server = socket.socket()
    server.bind(("127.0.0.1", port))
    server.listen()
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
    open("served.txt", "w").write(f"{port}\\n")
    subprocess.run(["git", "add", "served.txt"], check=True)
    subprocess.run(["git", "commit", "-qm", "serve"], check=True)
    """)


def sandboxed(**options) -> SandboxSpec:
    return SandboxSpec(provider="podman", image=IMAGE, **options)


def container_project(tmp_path: Path) -> Path:
    repo = python_project(tmp_path / "project")
    (repo / "setup.sh").write_text(CONTAINER_SETUP)
    (repo / "serve.py").write_text(SERVE)
    (repo / ".gitignore").write_text(".venv/\n.env\n*.key\n.setup-host\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "setup for containers")
    return repo


def test_setup_runs_in_each_container_with_its_cache_copied_env_and_own_ports(engine, tmp_path):
    repo = container_project(tmp_path)
    candidates = [
        CandidateSpec(key, "command", "serve", command=("python3", "serve.py")) for key in ("a", "b")
    ]
    setup = SetupSpec(command=("sh", "setup.sh"), cache=(".venv",), cache_key=("requirements.txt",), ports=2)
    spec = build_spec(
        repository=repo,
        candidates=candidates,
        score=["echo", "1"],
        validate=ValidateSpec(command=(".venv/bin/python", "check.py"), timeout=120),
        sandbox=sandboxed(),
        setup=setup,
    )
    events = []
    result = run_race(spec, on_event=events.append)
    assert result.status is RaceStatus.WINNER, [(c.key, c.error) for c in result.candidates]
    a, b = result.candidates
    # the venv built in one container (a candidate's or the baseline's grading checkout's) was
    # copied into the others; the project's check (demo_lib from the worktree's venv, .env from
    # the user's checkout) passed in both containers
    built = [e for e in events if e.kind is EventKind.SETUP_FINISHED and e.cache == "built"]
    assert len(built) == 1
    assert sorted([a.setup["cache"], b.setup["cache"]]) in (["built", "hit"], ["hit", "hit"])
    assert a.validation.status == b.validation.status == "passed"
    assert a.setup["copied"] == b.setup["copied"] == [".env"]
    # each container's ports are its own: both served on the same port number at once
    assert a.setup["ports"] == b.setup["ports"] == [8000, 8001]
    for candidate in (a, b):
        assert git(repo, "show", f"{candidate.commit}:served.txt") == "8000"


def test_setup_failure_in_a_container_fails_the_candidate_and_files_it_wrote_are_the_users(engine, tmp_path):
    repo = container_project(tmp_path)
    setup = SetupSpec(command=("sh", "-c", "sh setup.sh && echo 'compiler missing' >&2 && exit 4"))
    spec = build_spec(
        repository=repo,
        candidates=[CandidateSpec("a", "command", "go", command=("true",))],
        validate=["true"],
        sandbox=sandboxed(),
        setup=setup,
    )
    candidate = run_race(spec).candidates[0]
    assert candidate.status is CandidateStatus.FAILED
    assert candidate.error == "setup failed (exit 4): setup done | compiler missing"
    kept = Path(candidate.retained_directory)
    # it ran in the container (its hostname is not this machine's), and what it wrote is ours
    assert (kept / ".setup-host").read_text().strip() != socket.gethostname()
    for path in (kept / ".venv", kept / ".venv" / "pyvenv.cfg", kept / ".setup-host"):
        info = path.stat()
        assert (info.st_uid, info.st_gid) == (os.getuid(), os.getgid()), path


def test_a_race_ending_during_the_baselines_setup_leaves_no_container(engine, tmp_path):
    # The baseline's grading checkout, cancelled during its setup, was never exited: its container
    # ran on after the race (found under load, one race in three). Containers share no writable
    # path: the baseline's setup says it runs in its own checkout, and this test tells the
    # candidate's setup, in its worktree, to fail then.
    repo = container_project(tmp_path)
    script = (
        'if [ "$OUTPOST_BASELINE" = 1 ]; then : > setting-up; exec sleep 120; fi; '
        "while [ ! -e go ]; do sleep 0.05; done; exit 4"
    )
    workspaces = repo / ".outpost" / "workspaces"
    seen: list[Path] = []
    done = threading.Event()

    def relay() -> None:
        while not done.is_set():
            if not seen:
                seen.extend(workspaces.glob("baseline-*.grading/setting-up"))
            worktrees = [path for path in workspaces.glob("a-*") if path.is_dir()] if seen else []
            for worktree in worktrees:
                (worktree / "go").touch()
            if worktrees:
                return
            done.wait(0.02)

    relaying = threading.Thread(target=relay, daemon=True)
    relaying.start()
    spec = build_spec(
        repository=repo,
        candidates=[CandidateSpec("a", "command", "go", command=("true",))],
        validate=["true"],
        sandbox=sandboxed(),
        setup=SetupSpec(command=("sh", "-c", script)),
    )
    try:
        result = run_race(spec)
    finally:
        done.set()
        relaying.join()
    assert seen  # the baseline's setup was running in its container when the race ended
    assert result.candidates[0].error.startswith("setup failed (exit 4)")
    assert list_containers(result.id) == []


def test_a_network_the_engine_does_not_have_is_refused_clearly(engine, tmp_path):
    repo = container_project(tmp_path)
    spec = build_spec(
        repository=repo,
        candidates=[CandidateSpec("a", "command", "go", command=("true",))],
        validate=["true"],
        sandbox=sandboxed(network="outpost-no-such-network"),
    )
    candidate = run_race(spec).candidates[0]
    assert candidate.status is CandidateStatus.FAILED
    assert candidate.error.startswith(
        "[sandbox] network = 'outpost-no-such-network': the engine has no such network (it has: "
    )
    assert "a container would start without any network" in candidate.error


def doctor(race_file: Path, env: dict[str, str]) -> tuple[int, dict[str, dict]]:
    done = subprocess.run(
        [sys.executable, "-m", "outpost_tui.cli", "doctor", str(race_file), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return done.returncode, {check["name"]: check for check in json.loads(done.stdout)["checks"]}


def test_doctor_follows_the_current_docker_context_and_checks_file_ownership(engine, tmp_path):
    _, endpoint = engine
    repo = container_project(tmp_path)
    config = tmp_path / "docker-config"
    write_context(config, "outpost-ci", endpoint)
    race_file = tmp_path / "race.toml"
    race_file.write_text(
        textwrap.dedent(f"""\
        [race]
        repository = "{repo}"
        [sandbox]
        provider = "docker"
        image = "{IMAGE}"
        network = "bridge"
        [[candidates]]
        key = "a"
        agent = "command"
        command = ["true"]
        brief = "go"
        """)
    )
    env = {name: value for name, value in os.environ.items() if name != "DOCKER_HOST"}
    env["DOCKER_CONFIG"] = str(config)
    code, checks = doctor(race_file, env)
    engine_check = checks["container engine"]
    assert engine_check["ok"] is True, checks
    assert (
        f"at {endpoint}, chosen by Docker context 'outpost-ci', from the current Docker "
        f"context in {config / 'config.json'}" in engine_check["detail"]
    )
    files = checks["container files"]
    assert files["ok"] is True, files
    assert f"a file written in a container belongs to you ({os.getuid()}:{os.getgid()})" in files["detail"]
    assert checks["container network"]["ok"] is True
    assert "'bridge' exists" in checks["container network"]["detail"]
    assert code == 0, checks


def test_doctor_says_when_the_network_is_missing(engine, tmp_path):
    repo = container_project(tmp_path)
    race_file = tmp_path / "race.toml"
    race_file.write_text(
        textwrap.dedent(f"""\
        [race]
        repository = "{repo}"
        [sandbox]
        provider = "docker"
        image = "{IMAGE}"
        network = "outpost-no-such-network"
        [[candidates]]
        key = "a"
        agent = "command"
        command = ["true"]
        brief = "go"
        """)
    )
    code, checks = doctor(race_file, dict(os.environ))
    network = checks["container network"]
    assert network["ok"] is False and "has no such network" in network["detail"]
    assert code == 9, checks


def test_the_engine_is_named_and_its_rootfulness_read_without_slow_calls(engine):
    from outpost_tui.engine.sandbox.container_engine import engine_kind
    from outpost_tui.engine.sandbox.engines import engine_name

    client, endpoint = engine
    kind = engine_kind(client, endpoint)
    assert kind["name"] == engine_name(client.version())
    # the tests' engines run as root: containers run as the user's uid:gid there
    assert kind["rootless"] is False
