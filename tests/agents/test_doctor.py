"""`outpost-tui doctor`: run as a real process with a controlled PATH and HOME."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from outpost_tui import exitcodes
from outpost_tui.engine.machine.doctor import command_checks, host_agents_needed, image_programs
from outpost_tui.engine.racefile import load_race
from outpost_tui.engine.sandbox.engines import engine_name
from tests.agents.real.model_server import ModelServer
from tests.agents.replay import path_with
from tests.conftest import make_repo

RACE = """\
[race]
repository = "repo"
{extra}
[validate]
command = ["python3", "-m", "unittest", "-q"]

[[candidates]]
key = "claude"
agent = "claude"
brief = "Fix add()."

[[candidates]]
key = "codex"
agent = "codex"
brief = "Fix add()."
"""


def version_program(bin_dir: Path, name: str, version: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\necho '{version}'\n")
    path.chmod(0o755)


@pytest.fixture
def api():
    """A stand-in model API on 127.0.0.1: doctor checks that each agent's API answers."""
    server = ModelServer().start()
    yield server
    server.stop()


@pytest.fixture
def machine(tmp_path, api):
    """A race file, an empty HOME and a bin directory put first on PATH; the agents' APIs are the
    stand-in server (Claude by ANTHROPIC_BASE_URL, Codex by a provider in its config)."""
    make_repo(tmp_path / "repo")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text(
        f'model_provider = "local"\n[model_providers.local]\nbase_url = "{api.url}/v1"\n'
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.endswith("_API_KEY")
        and key not in ("CODEX_HOME", "CLAUDE_CONFIG_DIR", "CLAUDE_CODE_OAUTH_TOKEN", "DOCKER_HOST")
    }
    env.update(
        HOME=str(home),
        PATH=path_with(bin_dir),
        DOCKER_HOST="unix:///nonexistent/docker.sock",
        ANTHROPIC_BASE_URL=api.url,
    )
    return tmp_path, home, bin_dir, env


def doctor(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "outpost_tui.cli", "doctor", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def checks_of(done: subprocess.CompletedProcess) -> dict[str, dict]:
    return {check["name"]: check for check in json.loads(done.stdout)["checks"]}


def test_a_race_needing_codex_fails_until_codex_is_installed_and_logged_in(machine):
    tmp_path, home, bin_dir, env = machine
    race = tmp_path / "race.toml"
    race.write_text(RACE.format(extra=""))
    version_program(bin_dir, "claude", "2.1.3 (Claude Code)")
    (home / ".claude").mkdir()
    (home / ".claude" / ".credentials.json").write_text("{}")

    done = doctor(env, str(race), "--json")
    assert done.returncode == exitcodes.MISSING_REQUIREMENT, done.stderr
    checks = checks_of(done)
    assert json.loads(done.stdout)["missing"] == ["agent codex"]
    assert checks["agent claude"]["ok"] is True and checks["agent claude"]["required"] is True
    assert checks["agent claude"]["detail"].startswith("2.1.3 (Claude Code) (")
    assert checks["login claude"] == {
        "name": "login claude",
        "ok": True,
        "required": True,
        "detail": f"credentials in {home / '.claude' / '.credentials.json'}",
    }
    assert (
        checks["agent codex"]["detail"] == "`codex` not found on PATH (install: npm install -g @openai/codex)"
    )
    # Not needed by this race: reported, never required.
    assert checks["agent gemini"]["required"] is False
    assert checks["container engine"]["ok"] is False and checks["container engine"]["required"] is False
    assert checks["git merge-tree"] == {
        "name": "git merge-tree",
        "ok": True,
        "required": True,
        "detail": "--write-tree supported",
    }

    version_program(bin_dir, "codex", "codex-cli 0.144.4")
    done = doctor(env, str(race))
    assert done.returncode == exitcodes.MISSING_REQUIREMENT
    assert "MISSING  login codex" in done.stdout
    assert done.stdout.strip().endswith("race.toml: missing login codex")

    env_with_key = {**env, "OPENAI_API_KEY": "sk-test"}
    done = doctor(env_with_key, str(race))
    assert done.returncode == 0, done.stdout
    assert "ok       login codex" in done.stdout and "OPENAI_API_KEY is set" in done.stdout
    assert done.stdout.strip().endswith("race.toml: everything it needs is here")


def test_codex_auth_file_and_claude_without_credentials(machine):
    tmp_path, home, bin_dir, env = machine
    race = tmp_path / "race.toml"
    race.write_text(RACE.format(extra=""))
    version_program(bin_dir, "claude", "2.1.3 (Claude Code)")
    version_program(bin_dir, "codex", "codex-cli 0.144.4")
    (home / ".codex" / "auth.json").write_text("{}")
    done = doctor(env, str(race), "--json")
    assert done.returncode == exitcodes.MISSING_REQUIREMENT
    checks = checks_of(done)
    assert checks["login codex"]["ok"] is True
    assert checks["login claude"]["ok"] is False
    assert "run `claude login`" in checks["login claude"]["detail"]


def test_without_a_race_nothing_is_required(machine):
    _, _, _, env = machine
    done = doctor(env)
    assert done.returncode == 0
    assert "no       agent claude" in done.stdout
    assert "give a race file" in done.stdout


def test_a_container_race_needs_a_reachable_engine(machine):
    tmp_path, _home, _bin_dir, env = machine
    race = tmp_path / "race.toml"
    sandbox = '[sandbox]\nprovider = "podman"\nimage = "local/debian-dev:bookworm"\n'
    race.write_text(RACE.format(extra=sandbox))
    done = doctor({**env, "OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"}, str(race), "--json")
    assert done.returncode == exitcodes.MISSING_REQUIREMENT
    checks = checks_of(done)
    assert checks["container engine"]["required"] is True
    assert "/nonexistent/docker.sock" in checks["container engine"]["detail"]


CONTAINER_RACE = (
    RACE
    + """
[[candidates]]
key = "tool"
agent = "command"
command = ["my-agent", "--fast"]
brief = "Fix add()."

[[candidates]]
key = "script"
agent = "command"
command = ["./agents/fix.sh"]
brief = "Fix add()."
"""
)


@pytest.mark.parametrize("provider", ["docker", "podman"])
def test_a_container_race_needs_its_agents_in_the_image_not_on_the_host(machine, provider):
    tmp_path, _home, _bin_dir, env = machine
    race = tmp_path / "race.toml"
    sandbox = f'[sandbox]\nprovider = "{provider}"\nimage = "local/dev:1"\n'
    race.write_text(CONTAINER_RACE.format(extra=sandbox))
    spec = load_race(race)
    assert host_agents_needed(spec) == set()
    assert image_programs(spec) == {
        "agent claude in image": "claude",
        "agent codex in image": "codex",
        "command tool in image": "my-agent",
    }
    # A bare command name runs in the image; a path into the repository is checked on the host.
    required = {check.name: check.required for check in command_checks(spec, env, contained=True)}
    assert required == {"command tool": False, "command script": True}


def test_a_local_race_needs_its_agents_on_the_host(machine):
    tmp_path, _home, _bin_dir, env = machine
    race = tmp_path / "race.toml"
    race.write_text(CONTAINER_RACE.format(extra=""))
    spec = load_race(race)
    assert host_agents_needed(spec) == {"claude", "codex", "command"}
    required = {check.name: check.required for check in command_checks(spec, env)}
    assert required == {"command tool": True, "command script": True}


def test_a_container_race_without_an_engine_does_not_check_the_image(machine):
    tmp_path, _home, _bin_dir, env = machine
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "fix.sh").write_text("#!/bin/sh\n")
    (tmp_path / "agents" / "fix.sh").chmod(0o755)
    race = tmp_path / "race.toml"
    race.write_text(CONTAINER_RACE.format(extra='[sandbox]\nprovider = "podman"\nimage = "local/dev:1"\n'))
    done = doctor(env, str(race), "--json")  # neither claude nor codex on this PATH
    assert done.returncode == exitcodes.MISSING_REQUIREMENT
    assert json.loads(done.stdout)["missing"] == ["container engine"]
    checks = checks_of(done)
    assert checks["agent claude"]["ok"] is False and checks["agent claude"]["required"] is False
    assert checks["command tool"]["required"] is False
    for name in ("agent claude in image", "agent codex in image", "command tool in image"):
        assert checks[name]["ok"] is None and checks[name]["required"] is True
        assert checks[name]["detail"] == "not checked: no container engine to ask"
    text = doctor(env, str(race))
    assert "?        agent claude in image  needed  not checked: no container engine to ask" in text.stdout


def test_durable_race_needs_private_storage(machine):
    tmp_path, _home, bin_dir, env = machine
    for name in ("claude", "codex"):
        version_program(bin_dir, name, f"{name} 1.0")
    env = {**env, "OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"}
    race = tmp_path / "race.toml"
    race.write_text(RACE.format(extra="[durability]\nenabled = true\n"))
    storage = tmp_path / "repo" / ".outpost" / "storage"
    storage.mkdir(parents=True)
    storage.chmod(0o755)
    done = doctor(env, str(race), "--json")
    assert done.returncode == exitcodes.MISSING_REQUIREMENT
    assert (
        checks_of(done)["storage"]["detail"]
        == f"{storage} has mode 0755; expected 0700 (chmod 700 {storage})"
    )
    storage.chmod(0o700)
    done = doctor(env, str(race), "--json")
    assert done.returncode == 0, done.stdout
    assert checks_of(done)["storage"] == {
        "name": "storage",
        "ok": True,
        "required": True,
        "detail": f"{storage} (mode 0700)",
    }


def test_a_git_without_merge_tree_write_tree_is_reported(machine):
    tmp_path, _home, bin_dir, env = machine
    real_git = shutil.which("git")
    (bin_dir / "git").write_text(
        "#!/bin/sh\n"
        # an old git refuses the option wherever merge-tree comes among its arguments (-C DIR first)
        'for word in "$@"; do if [ "$word" = merge-tree ]; then\n'
        '  echo "error: unknown option write-tree" >&2; exit 129; fi; done\n'
        f'exec {real_git} "$@"\n'
    )
    (bin_dir / "git").chmod(0o755)
    race = tmp_path / "race.toml"
    race.write_text(RACE.format(extra=""))
    done = doctor(env, str(race), "--json")
    check = checks_of(done)["git merge-tree"]
    assert check["ok"] is False and "needs git 2.38 or later" in check["detail"]
    assert "git merge-tree" in json.loads(done.stdout)["missing"]


def test_a_missing_command_agent_is_required(machine):
    tmp_path, _home, _bin_dir, env = machine
    race = tmp_path / "race.toml"
    race.write_text(
        '[race]\nrepository = "repo"\n[validate]\ncommand = ["true"]\n'
        '[[candidates]]\nkey = "tool"\nagent = "command"\ncommand = ["no-such-agent-42"]\n'
        'brief = "x"\n'
    )
    done = doctor(env, str(race), "--json")
    assert done.returncode == exitcodes.MISSING_REQUIREMENT
    assert checks_of(done)["command tool"]["detail"] == "`no-such-agent-42` not found on PATH"


def test_a_bad_race_file_is_one_line():
    done = subprocess.run(
        [sys.executable, "-m", "outpost_tui.cli", "doctor", "/nonexistent/race.toml"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == exitcodes.BAD_INPUT
    assert done.stderr.strip().count("\n") == 0 and "no such file" in done.stderr


@pytest.mark.parametrize(
    "version, name",
    [
        ({"Components": [{"Name": "Podman Engine", "Version": "4.3.1"}], "Version": "4.3.1"}, "podman"),
        (
            {
                "Platform": {"Name": "Docker Engine - Community"},
                "Components": [{"Name": "Engine", "Version": "27.1.1"}],
                "Version": "27.1.1",
            },
            "docker",
        ),
    ],
)
def test_engine_name(version, name):
    assert engine_name(version) == name


def _engine_host() -> str | None:
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    for path in ("/tmp/podman.sock", "/run/podman/podman.sock", "/var/run/docker.sock"):
        if Path(path).is_socket():
            return f"unix://{path}"
    return None


@pytest.mark.container
def test_a_reachable_engine_is_named_and_a_missing_image_is_required(machine):
    tmp_path, _home, _bin_dir, env = machine
    host = _engine_host()
    if host is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("CI=true and no container engine to check doctor against", pytrace=False)
        pytest.skip("no container engine")
    env = {**env, "DOCKER_HOST": host}
    race = tmp_path / "race.toml"
    race.write_text(
        '[race]\nrepository = "repo"\n[sandbox]\nprovider = "podman"\n'
        'image = "local/outpost-doctor-absent:1"\n[validate]\ncommand = ["true"]\n'
        '[[candidates]]\nkey = "tool"\nagent = "command"\ncommand = ["true"]\nbrief = "x"\n'
    )
    done = doctor(env, str(race), "--json")
    check = checks_of(done)["container engine"]
    assert check["required"] is True and check["ok"] is False
    assert f"at {host}" in check["detail"] and check["detail"].split()[0] in ("podman", "docker")
    assert "image local/outpost-doctor-absent:1 not found" in check["detail"]
    assert done.returncode == exitcodes.MISSING_REQUIREMENT
    plain = doctor(env, "--json")
    assert checks_of(plain)["container engine"]["ok"] is True


def test_each_needed_model_api_is_asked_whether_it_answers_spending_nothing(machine, api):
    tmp_path, _home, bin_dir, env = machine
    race = tmp_path / "race.toml"
    race.write_text(RACE.format(extra=""))
    version_program(bin_dir, "claude", "2.1.328 (Claude Code)")
    version_program(bin_dir, "codex", "codex-cli 0.169.0")
    keys = {"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"}
    done = doctor({**env, **keys}, str(race), "--json")
    assert done.returncode == 0, done.stdout
    checks = checks_of(done)
    assert checks["api claude"] == {
        "name": "api claude",
        "ok": True,
        "required": True,
        "detail": f"{api.url} answers (HTTP 200)",
    }
    assert checks["api codex"]["ok"] is True and checks["api codex"]["detail"].startswith(f"{api.url}/v1 ")
    # A HEAD each, never a model request: no tokens spent.
    assert sorted(api.requests) == [("HEAD", "/"), ("HEAD", "/v1")] and api.served == []

    with socket.socket() as probe:  # a port where nothing listens
        probe.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{probe.getsockname()[1]}"
    done = doctor({**env, **keys, "ANTHROPIC_BASE_URL": nowhere}, str(race))
    assert done.returncode == exitcodes.MISSING_REQUIREMENT
    assert "MISSING  api claude" in done.stdout and f"cannot reach {nowhere}: " in done.stdout
    assert done.stdout.strip().endswith("race.toml: missing api claude")


GEMINI_RACE = """\
[race]
repository = "repo"

[validate]
command = ["python3", "-m", "unittest", "-q"]

[[candidates]]
key = "gemini"
agent = "gemini"
brief = "Fix add()."
"""


def test_gemini_auth_type_it_refuses_its_api_and_the_git_identity_are_checked(machine, api):
    tmp_path, home, bin_dir, env = machine
    race = tmp_path / "race.toml"
    race.write_text(GEMINI_RACE)
    version_program(bin_dir, "gemini", "0.61.0")
    (home / ".gemini").mkdir()
    (home / ".gemini" / "settings.json").write_text('{"security": {"auth": {"selectedType": "bogus"}}}')
    env = {**env, "GEMINI_API_KEY": "k", "GOOGLE_GEMINI_BASE_URL": api.url}
    git_repo_config = tmp_path / "repo" / ".git" / "config"
    kept = git_repo_config.read_text()
    git_repo_config.write_text(
        "\n".join(
            line
            for line in kept.splitlines()
            if "name =" not in line and "email =" not in line and line.strip() != "[user]"
        )
        + "\n"
    )

    checks = checks_of(doctor(env, str(race), "--json"))
    # "Invalid auth method selected." (exit 41) is what gemini would say, whatever key is set
    assert checks["login gemini"]["ok"] is False and "'bogus'" in checks["login gemini"]["detail"]
    assert checks["api gemini"] == {
        "name": "api gemini",
        "ok": True,
        "required": True,
        "detail": f"{api.url} answers (HTTP 200)",
    }
    # reported, never blocking: the engine can commit a candidate's edits under its own name
    assert checks["git identity"]["ok"] is False and checks["git identity"]["required"] is False
    assert checks["git identity"]["detail"].startswith(
        "no user.name and user.email: agents cannot commit themselves"
    )
    assert not any(s.path.startswith("/v1beta") for s in api.served)  # a HEAD, no tokens

    (home / ".gemini" / "settings.json").write_text(
        '{"security": {"auth": {"selectedType": "gemini-api-key"}}}'
    )
    (home / ".gitconfig").write_text("[user]\n\tname = Ada\n\temail = ada@example.com\n")
    checks = checks_of(doctor(env, str(race), "--json"))
    assert checks["login gemini"] == {
        "name": "login gemini",
        "ok": True,
        "required": True,
        "detail": "GEMINI_API_KEY is set",
    }
    assert (
        checks["git identity"]["ok"] is True and checks["git identity"]["detail"] == "Ada <ada@example.com>"
    )


def test_isolation_is_shown_and_an_unisolated_race_is_loud(machine):
    tmp_path, _home, _bin_dir, env = machine
    race = tmp_path / "race.toml"
    race.write_text(RACE.format(extra=""))
    checks = checks_of(doctor(env, str(race), "--json"))
    assert checks["isolation"]["ok"] is True and "bubblewrap" in checks["isolation"]["detail"]

    race.write_text(RACE.format(extra='[sandbox]\nisolation = "none"\n'))
    unisolated = checks_of(doctor(env, str(race), "--json"))["isolation"]
    assert unisolated["ok"] is False and unisolated["required"] is False
    assert "candidates run unisolated" in unisolated["detail"]
    assert 'isolation = "none"' in unisolated["detail"]


def test_a_machine_refusing_user_namespaces_is_reported_and_fails_a_race_demanding_bubblewrap(machine):
    tmp_path, _home, bin_dir, env = machine
    # a bwrap that cannot make a sandbox, as on a kernel with unprivileged user namespaces off
    refusing = bin_dir / "bwrap"
    refusing.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    refusing.chmod(0o755)
    race = tmp_path / "race.toml"
    race.write_text(RACE.format(extra=""))
    done = doctor(env, str(race), "--json")
    auto = checks_of(done)["isolation"]
    assert auto["ok"] is False and auto["required"] is False
    assert "setting up uid map: Permission denied" in auto["detail"]
    assert "install bubblewrap" in auto["detail"]

    race.write_text(RACE.format(extra='[sandbox]\nisolation = "bubblewrap"\n'))
    done = doctor({**env, "OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"}, str(race), "--json")
    demanded = checks_of(done)["isolation"]
    assert demanded["ok"] is False and demanded["required"] is True
    assert done.returncode == exitcodes.MISSING_REQUIREMENT
